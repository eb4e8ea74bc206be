"""Shared helpers for the Python tests: import paths and a tiny Hugging Face llama
checkpoint factory (random weights, safetensors, a SentencePiece tokenizer trained on a
few KB of generated text)."""
import json
import os
import random
import shutil
import struct
import sys

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CONVERT_DIR = os.path.join(ROOT, "tools", "convert")
REFERENCE_DIR = os.path.join(ROOT, "tests", "reference")
for p in (CONVERT_DIR, REFERENCE_DIR):
    if p not in sys.path:
        sys.path.insert(0, p)

PYTHON = sys.executable
WORDS = ("the of and to in is was that for it with as his on be at by this had not are but from or "
         "have an they which one you were her all she there would their we him been has when who will "
         "more no if out so said what up its about into than them can only other new some could time "
         "these two may then do first any my now such like our over man me even most made after also "
         "did many before must through back years where much your way well down should because each").split()


@pytest.fixture(scope="session")
def spm_model(tmp_path_factory):
    """Path of a 320-piece BPE SentencePiece model with byte fallback and one
    user-defined piece, trained on generated text."""
    import sentencepiece as spm
    d = tmp_path_factory.mktemp("spm")
    rng = random.Random(0)
    text = "\n".join(" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(400))
    (d / "corpus.txt").write_text(text)
    spm.SentencePieceTrainer.train(input=str(d / "corpus.txt"), model_prefix=str(d / "tok"), vocab_size=320,
                                   model_type="bpe", byte_fallback=True, user_defined_symbols=["<tool>"],
                                   minloglevel=2)
    return str(d / "tok.model")


def write_safetensors_manual(path, tensors):
    """Minimal safetensors writer for dtypes NumPy lacks: tensors maps name -> (dtype string,
    shape, raw bytes)."""
    header, offset, blobs = {}, 0, []
    for name, (dt, shape, raw) in tensors.items():
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def hf_tensor_shapes(c):
    d = c["embd"] // c["heads"]
    shapes = {"model.embed_tokens.weight": (c["vocab"], c["embd"]), "model.norm.weight": (c["embd"],)}
    if not c["tied"]:
        shapes["lm_head.weight"] = (c["vocab"], c["embd"])
    for i in range(c["layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (c["embd"],), p + "post_attention_layernorm.weight": (c["embd"],),
            p + "self_attn.q_proj.weight": (c["heads"] * d, c["embd"]),
            p + "self_attn.k_proj.weight": (c["kv_heads"] * d, c["embd"]),
            p + "self_attn.v_proj.weight": (c["kv_heads"] * d, c["embd"]),
            p + "self_attn.o_proj.weight": (c["embd"], c["heads"] * d),
            p + "mlp.gate_proj.weight": (c["ff"], c["embd"]), p + "mlp.up_proj.weight": (c["ff"], c["embd"]),
            p + "mlp.down_proj.weight": (c["embd"], c["ff"])})
    return shapes


def make_hf_checkpoint(d, spm_path, *, layers=2, embd=64, ff=96, heads=4, kv_heads=2, vocab=320,
                       act="silu", dtype="f32", shards=1, tied=False, seed=0, arch="LlamaForCausalLM",
                       config_extra=None):
    """Writes a random HF llama checkpoint into directory d; returns {name: float32 array}
    (the values as stored, i.e. already rounded to dtype)."""
    os.makedirs(d, exist_ok=True)
    c = dict(layers=layers, embd=embd, ff=ff, heads=heads, kv_heads=kv_heads, vocab=vocab, tied=tied)
    config = {"architectures": [arch], "model_type": "llama", "vocab_size": vocab, "hidden_size": embd,
              "intermediate_size": ff, "num_hidden_layers": layers, "num_attention_heads": heads,
              "num_key_value_heads": kv_heads, "max_position_embeddings": 128, "rms_norm_eps": 1e-5,
              "rope_theta": 10000.0, "hidden_act": act, "tie_word_embeddings": tied,
              "bos_token_id": 1, "eos_token_id": 2, **(config_extra or {})}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f)
    shutil.copy(spm_path, os.path.join(d, "tokenizer.model"))
    rng = np.random.default_rng(seed)
    values = {}
    for name, shape in hf_tensor_shapes(c).items():
        if "norm" in name:
            values[name] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            values[name] = (rng.standard_normal(shape) * 0.15).astype(np.float32)
    names = list(values)
    groups = [names[i::shards] for i in range(shards)]
    weight_map = {}
    for k, group in enumerate(groups):
        fname = "model.safetensors" if shards == 1 else f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        path = os.path.join(d, fname)
        if dtype == "bf16":
            import quants
            blobs = {}
            for n in group:
                bits = quants.f32_to_bf16_bits(values[n])
                values[n] = quants.bf16_bits_to_f32(bits)
                blobs[n] = ("BF16", values[n].shape, bits.astype("<u2").tobytes())
            write_safetensors_manual(path, blobs)
        else:
            from safetensors.numpy import save_file
            np_dt = np.float16 if dtype == "f16" else np.float32
            arrays = {n: values[n].astype(np_dt) for n in group}
            for n in group:
                values[n] = arrays[n].astype(np.float32)
            save_file(arrays, path)
        weight_map.update({n: fname for n in group})
    if shards > 1:
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return values
