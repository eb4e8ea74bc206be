"""convert_hf.py: tiny random HF llama checkpoints -> GGUF / PWRI -> read back and compare
with the source tensors; metadata and vocabulary; predictors; error messages."""
import json
import math
import os
import subprocess

import numpy as np
import pytest

import convert_hf
import quants
from conftest import CONVERT_DIR, PYTHON, make_hf_checkpoint
from gguf_io import VT, GGUFReader
from quants import GGMLType

SCRIPT = os.path.join(CONVERT_DIR, "convert_hf.py")
GGUF_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
              "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down"}


def convert(*args):
    assert convert_hf.main([str(a) for a in args] + ["--quiet"]) == 0


def run_cli(*args):
    return subprocess.run([PYTHON, SCRIPT, *map(str, args), "--quiet"], capture_output=True, text=True)


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    _, _, i, rest = hf.split(".", 3)
    return f"blk.{i}.{GGUF_NAMES[rest.rsplit('.', 1)[0]]}.weight"


def read_back(r: GGUFReader, name, heads, kv_heads):
    """A GGUF tensor in HF layout (q/k un-permuted, ffn_down_t transposed back)."""
    if name.endswith("ffn_down.weight") and name not in r.tensors:
        return r.dequantize(name.replace("ffn_down", "ffn_down_t")).T
    x = r.dequantize(name)
    if name.endswith("attn_q.weight"):
        x = convert_hf.rope_from_gguf(x, heads)
    elif name.endswith("attn_k.weight"):
        x = convert_hf.rope_from_gguf(x, kv_heads)
    return x


def test_rope_permutation_pairs():
    # one head of dim 8: HF rows [a0 a1 a2 a3 | b0 b1 b2 b3] rotate pairs (ai, bi);
    # GGUF rows must be [a0 b0 a1 b1 a2 b2 a3 b3]
    w = np.arange(8)[:, None] * np.ones((1, 2))
    out = convert_hf.rope_to_gguf(w, 1)
    assert list(out[:, 0]) == [0, 4, 1, 5, 2, 6, 3, 7]
    w2 = np.random.default_rng(0).standard_normal((3 * 8, 5))
    assert np.array_equal(convert_hf.rope_from_gguf(convert_hf.rope_to_gguf(w2, 3), 3), w2)


@pytest.mark.parametrize("dtype,outtype,shards", [("f32", "f32", 1), ("f16", "f16", 2), ("bf16", "f32", 3)])
def test_dense_round_trip(tmp_path, spm_model, dtype, outtype, shards):
    src = make_hf_checkpoint(tmp_path / "hf", spm_model, dtype=dtype, shards=shards)
    out = tmp_path / "m.gguf"
    convert(tmp_path / "hf", "--outfile", out, "--outtype", outtype)
    r = GGUFReader(out)
    assert r.magic == b"GGUF"
    assert set(r.tensors) == {gguf_name(k) for k in src}
    for hf, x in src.items():
        name = gguf_name(hf)
        info = r.tensors[name]
        want_type = GGMLType.F32 if x.ndim == 1 or outtype == "f32" else GGMLType.F16
        assert info.dtype == want_type, name
        expect = x if want_type == GGMLType.F32 else x.astype(np.float16).astype(np.float32)
        assert np.array_equal(read_back(r, name, 4, 2), expect), name


def test_metadata_and_vocab(tmp_path, spm_model):
    import sentencepiece as spm
    make_hf_checkpoint(tmp_path / "hf", spm_model, act="relu", vocab=336)   # vocab padded past the tokenizer
    out = tmp_path / "m.gguf"
    convert(tmp_path / "hf", "--outfile", out, "--outtype", "f16", "--name", "tiny")
    r = GGUFReader(out)
    md = r.metadata
    expect = {"general.architecture": "llama", "general.name": "tiny", "general.file_type": 1,
              "llama.context_length": 128, "llama.embedding_length": 64, "llama.block_count": 2,
              "llama.feed_forward_length": 96, "llama.rope.dimension_count": 16,
              "llama.attention.head_count": 4, "llama.attention.head_count_kv": 2,
              "llama.feed_forward_activation": "relu", "tokenizer.ggml.model": "llama",
              "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_eos_token": False}
    for k, v in expect.items():
        assert md[k] == v, k
    assert r.types["llama.block_count"] == VT.UINT32
    assert md["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)
    assert md["llama.rope.freq_base"] == 10000.0
    sp = spm.SentencePieceProcessor(model_file=spm_model)
    n = sp.get_piece_size()
    toks, scores, types = md["tokenizer.ggml.tokens"], md["tokenizer.ggml.scores"], md["tokenizer.ggml.token_type"]
    assert len(toks) == len(scores) == len(types) == 336
    assert toks[:n] == [sp.id_to_piece(i) for i in range(n)]
    assert np.array_equal(scores[:n], np.array([sp.get_score(i) for i in range(n)], np.float32))
    assert toks[n:] == [f"<pad_{i}>" for i in range(n, 336)] and set(types[n:]) == {5}
    for i in range(n):
        want = 2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else \
            4 if toks[i] == "<tool>" else 1
        assert types[i] == want, (i, toks[i])
    assert (md["tokenizer.ggml.bos_token_id"], md["tokenizer.ggml.eos_token_id"],
            md["tokenizer.ggml.unknown_token_id"]) == (sp.bos_id(), sp.eos_id(), sp.unk_id())


@pytest.mark.parametrize("outtype", ["q8_0", "q4_0"])
def test_quantized_types(tmp_path, spm_model, outtype):
    src = make_hf_checkpoint(tmp_path / "hf", spm_model, ff=128)
    out = tmp_path / "m.gguf"
    convert(tmp_path / "hf", "--outfile", out, "--outtype", outtype)
    r = GGUFReader(out)
    assert r.metadata["general.file_type"] == convert_hf.FILE_TYPES[outtype]
    q = GGMLType.Q8_0 if outtype == "q8_0" else GGMLType.Q4_0
    for hf, x in src.items():
        name = gguf_name(hf)
        want = GGMLType.F32 if x.ndim == 1 else GGMLType.Q8_0 if name == "output.weight" else q
        assert r.tensors[name].dtype == want, name
        if x.ndim == 2:   # the bytes equal quantizing the (permuted) source directly
            got = r.raw(name).reshape(-1)
            gx = x if "attn_q" not in name and "attn_k" not in name else \
                convert_hf.rope_to_gguf(x, 4 if "attn_q" in name else 2)
            assert np.array_equal(got, quants.quantize(gx, want).reshape(-1)), name


def write_predictors(d, src, layers, n_embd, n_ff, ranks, fmt, threshold=None):
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(7)
    preds = []
    for i in range(layers):
        fc1 = rng.standard_normal((ranks[i], n_embd)).astype(np.float32)
        fc2 = rng.standard_normal((n_ff, ranks[i])).astype(np.float32)
        preds.append((fc1, fc2))
        if fmt == "npz":
            np.savez(os.path.join(d, f"model_{i}.npz"), **{"fc1.weight": fc1, "fc2.weight": fc2})
        else:
            import torch
            torch.save({"fc1.weight": torch.from_numpy(fc1), "fc2.weight": torch.from_numpy(fc2)},
                       os.path.join(d, f"model_{i}.pt"))
    if threshold is not None:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({"sparse_threshold": threshold}, f)
    return preds


@pytest.mark.parametrize("fmt", ["npz", "pt"])
def test_pwri_round_trip(tmp_path, spm_model, fmt):
    if fmt == "pt":
        pytest.importorskip("torch", reason="PyTorch not installed: .pt predictors are covered by "
                            "test_checkpoints' committed torch fixture, the npz case covers the converter")
    src = make_hf_checkpoint(tmp_path / "hf", spm_model, act="relu", ff=96)
    preds = write_predictors(tmp_path / "pred", src, 2, 64, 96, [32, 48], fmt, threshold=0.25)
    out = tmp_path / "m.gguf"
    convert(tmp_path / "hf", "--predictors", tmp_path / "pred", "--outfile", out, "--outtype", "f32")
    r = GGUFReader(out)
    assert r.magic == b"PWRI" and r.is_pwri
    assert r.metadata["powerinfer.sparse_threshold"] == 0.25
    assert "blk.0.ffn_down.weight" not in r.tensors
    for i, (fc1, fc2) in enumerate(preds):
        assert np.array_equal(r.dequantize(f"blk.{i}.fc1.weight"), fc1)
        assert np.array_equal(r.dequantize(f"blk.{i}.fc2.weight"), fc2)
        down = src[f"model.layers.{i}.mlp.down_proj.weight"]
        assert r.tensors[f"blk.{i}.ffn_down_t.weight"].shape == (96, 64)
        assert np.array_equal(r.dequantize(f"blk.{i}.ffn_down_t.weight"), down.T)
    # --threshold overrides config.json; q4_0 puts predictors in Q4_0 (ranks are multiples of 32 here)
    preds = write_predictors(tmp_path / "pred2", src, 2, 64, 96, [32, 64], "npz", threshold=0.25)
    convert(tmp_path / "hf", "--predictors", tmp_path / "pred2", "--outfile", out, "--outtype", "q4_0",
            "--threshold", "-1.5")
    r = GGUFReader(out)
    assert r.metadata["powerinfer.sparse_threshold"] == -1.5
    assert r.tensors["blk.1.fc2.weight"].dtype == GGMLType.Q4_0
    assert r.tensors["blk.0.ffn_down_t.weight"].dtype == GGMLType.Q4_0


def test_pytorch_bin_checkpoint(tmp_path, spm_model):
    torch = pytest.importorskip("torch", reason="PyTorch not installed: needed to write the .bin file")
    src = make_hf_checkpoint(tmp_path / "hf", spm_model)
    os.remove(tmp_path / "hf" / "model.safetensors")
    torch.save({k: torch.from_numpy(v) for k, v in src.items()}, tmp_path / "hf" / "pytorch_model.bin")
    convert(tmp_path / "hf", "--outfile", tmp_path / "m.gguf", "--outtype", "f32")
    r = GGUFReader(tmp_path / "m.gguf")
    for hf, x in src.items():
        assert np.array_equal(read_back(r, gguf_name(hf), 4, 2), x), hf


def test_linear_rope_scaling(tmp_path, spm_model):
    make_hf_checkpoint(tmp_path / "hf", spm_model, config_extra={"rope_scaling": {"type": "linear", "factor": 4.0}})
    convert(tmp_path / "hf", "--outfile", tmp_path / "m.gguf", "--outtype", "f32")
    md = GGUFReader(tmp_path / "m.gguf").metadata
    assert md["llama.rope.scaling.type"] == "linear" and md["llama.rope.scaling.factor"] == 4.0
    make_hf_checkpoint(tmp_path / "hf2", spm_model, config_extra={"rope_scaling": {"type": "longrope", "factor": 4.0}})
    p = run_cli(tmp_path / "hf2", "--outfile", tmp_path / "m2.gguf")
    assert p.returncode != 0 and "only linear and yarn" in p.stderr


def test_yarn_rope_scaling(tmp_path, spm_model):
    # Qwen's long-context setting: the keys llama.cpp reads, an explicit attention_factor
    # relative to the default 0.1 ln(factor) + 1.
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "beta_fast": 16.0,
            "attention_factor": 1.5}
    make_hf_checkpoint(tmp_path / "hf", spm_model, config_extra={"rope_scaling": yarn})
    convert(tmp_path / "hf", "--outfile", tmp_path / "m.gguf", "--outtype", "f32")
    md = GGUFReader(tmp_path / "m.gguf").metadata
    assert md["llama.rope.scaling.type"] == "yarn" and md["llama.rope.scaling.factor"] == 4.0
    assert md["llama.rope.scaling.original_context_length"] == 32768
    assert md["llama.rope.scaling.yarn_beta_fast"] == 16.0 and "llama.rope.scaling.yarn_beta_slow" not in md
    assert abs(md["llama.rope.scaling.yarn_attn_factor"] * (0.1 * math.log(4.0) + 1.0) - 1.5) < 1e-6
    assert "llama.rope.scaling.yarn_truncate" not in md  # rounded ramp ends: the default
    # DeepSeek's variant: refused, naming the setting.
    make_hf_checkpoint(tmp_path / "hf3", spm_model, config_extra={"rope_scaling": {**yarn, "mscale": 0.707}})
    p = run_cli(tmp_path / "hf3", "--outfile", tmp_path / "m3.gguf")
    assert p.returncode != 0 and "mscale" in p.stderr, p.stderr
    # Un-rounded ramp ends (truncate false): yarn_truncate false.
    make_hf_checkpoint(tmp_path / "hf4", spm_model, config_extra={"rope_scaling": {**yarn, "truncate": False}})
    convert(tmp_path / "hf4", "--outfile", tmp_path / "m4.gguf", "--outtype", "f32")
    assert bool(GGUFReader(tmp_path / "m4.gguf").metadata["llama.rope.scaling.yarn_truncate"]) is False


def test_tied_embeddings(tmp_path, spm_model):
    make_hf_checkpoint(tmp_path / "hf", spm_model, tied=True)
    convert(tmp_path / "hf", "--outfile", tmp_path / "m.gguf", "--outtype", "f32")
    assert "output.weight" not in GGUFReader(tmp_path / "m.gguf").tensors


def test_matches_transformers(tmp_path, spm_model):
    """End to end against Hugging Face's own llama: convert + reference forward = HF logits."""
    torch = pytest.importorskip("torch", reason="needs PyTorch")
    transformers = pytest.importorskip("transformers", reason="needs transformers")
    import reference_forward as ref
    src = make_hf_checkpoint(tmp_path / "hf", spm_model)
    cfg = transformers.LlamaConfig(vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   rms_norm_eps=1e-5, rope_theta=10000.0, hidden_act="silu")
    model = transformers.LlamaForCausalLM(cfg).eval()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in src.items()}, strict=False)
    tokens = [1, 5, 77, 200, 13, 9, 300, 42]
    with torch.no_grad():
        want = model(torch.tensor([tokens])).logits[0].double().numpy()
    convert(tmp_path / "hf", "--outfile", tmp_path / "m.gguf", "--outtype", "f32")
    got = ref.forward(ref.load_model(tmp_path / "m.gguf"), tokens)
    assert np.abs(got - want).max() < 1e-4


# ----------------------------------------------------------------------------- errors

def test_error_missing_config(tmp_path):
    os.makedirs(tmp_path / "hf")
    p = run_cli(tmp_path / "hf", "--outfile", tmp_path / "m.gguf")
    assert p.returncode != 0 and "config.json: not found" in p.stderr
    assert not os.path.exists(tmp_path / "m.gguf")


def test_error_missing_dir_weights_tokenizer(tmp_path, spm_model):
    p = run_cli(tmp_path / "nope", "--outfile", tmp_path / "m.gguf")
    assert p.returncode != 0 and "model directory not found" in p.stderr
    make_hf_checkpoint(tmp_path / "hf", spm_model)
    os.remove(tmp_path / "hf" / "model.safetensors")
    p = run_cli(tmp_path / "hf", "--outfile", tmp_path / "m.gguf")
    assert p.returncode != 0 and "no model weights found" in p.stderr
    os.remove(tmp_path / "hf" / "tokenizer.model")
    p = run_cli(tmp_path / "hf", "--outfile", tmp_path / "m.gguf")
    assert p.returncode != 0 and "tokenizer.model: not found" in p.stderr


def test_error_unknown_architecture(tmp_path, spm_model):
    make_hf_checkpoint(tmp_path / "hf", spm_model, arch="GPT2LMHeadModel")
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    cfg["model_type"] = "gpt2"
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    p = run_cli(tmp_path / "hf", "--outfile", tmp_path / "m.gguf")
    assert p.returncode != 0 and "unsupported architecture" in p.stderr and "GPT2LMHeadModel" in p.stderr


def test_error_shape_mismatch(tmp_path, spm_model):
    make_hf_checkpoint(tmp_path / "hf", spm_model)
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    cfg["intermediate_size"] = 128
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    p = run_cli(tmp_path / "hf", "--outfile", tmp_path / "m.gguf")
    assert p.returncode != 0 and "mlp.gate_proj.weight" in p.stderr and "does not match config.json" in p.stderr


def test_error_predictor_mismatch(tmp_path, spm_model):
    src = make_hf_checkpoint(tmp_path / "hf", spm_model, act="relu")
    write_predictors(tmp_path / "pred", src, 2, 64, 80, [32, 32], "npz")   # n_ff 80 != 96
    p = run_cli(tmp_path / "hf", "--predictors", tmp_path / "pred", "--outfile", tmp_path / "m.gguf")
    assert p.returncode != 0 and "model_0.npz" in p.stderr and "do not match the model" in p.stderr
    write_predictors(tmp_path / "pred1", src, 1, 64, 96, [32], "npz")      # layer 1 missing
    p = run_cli(tmp_path / "hf", "--predictors", tmp_path / "pred1", "--outfile", tmp_path / "m.gguf")
    assert p.returncode != 0 and "no predictor for layer 1" in p.stderr
    p = run_cli(tmp_path / "hf", "--predictors", tmp_path / "absent", "--outfile", tmp_path / "m.gguf")
    assert p.returncode != 0 and "predictor directory not found" in p.stderr


def test_error_pwri_needs_relu_model(tmp_path, spm_model):
    src = make_hf_checkpoint(tmp_path / "hf", spm_model, act="silu")
    write_predictors(tmp_path / "pred", src, 2, 64, 96, [32, 32], "npz")
    p = run_cli(tmp_path / "hf", "--predictors", tmp_path / "pred", "--outfile", tmp_path / "m.gguf")
    assert p.returncode != 0 and "hidden_act is 'silu'" in p.stderr and "ReLU" in p.stderr
