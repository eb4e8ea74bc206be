"""convert_hf.py on gpt-oss checkpoints (GptOssForCausalLM -> gpt-oss; tiny, random, safetensors
with uint8 MXFP4 blocks and bf16 tensors as released, or dequantized experts) with an o200k-split
byte-level BPE tokenizer.json carrying the harmony special tokens at gapped ids: tensor names,
types and metadata, the vocabulary, EOS and chat template, the expert codes bit for bit after
repacking, refusals; and the reference forward pass on the converted file against a direct
float64 transcription of Hugging Face's gpt-oss forward on the checkpoint's own tensors
(interleaved gate/up, HF's nibble order, sinks concatenated to the scores, YaRN)."""
import json
import math
import os

import numpy as np
import pytest

import bpe_vocab
import convert_hf
import quants
import reference_forward as ref
from conftest import write_safetensors_manual
from gguf_io import GGUFReader
from quants import GGMLType
from test_convert_hf_archs import make_tokenizer

TOKENS = [5, 80, 200, 33, 7, 150, 64, 9]
# The harmony tokens at gpt-oss's ids less 199998 (<|startoftext|>), here from id 400 on.
HARMONY = {0: "<|startoftext|>", 1: "<|endoftext|>", 4: "<|return|>", 5: "<|constrain|>", 7: "<|channel|>",
           8: "<|start|>", 9: "<|end|>", 10: "<|message|>", 14: "<|call|>", 20: "<|endofprompt|>"}
SPECIAL_BASE = 400
TEMPLATE = "{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}"
FP4 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6])


def make_harmony_tokenizer(d, eos="<|return|>"):
    """An o200k-split byte-level BPE tokenizer.json with the harmony special tokens (and reserved
    ones in the gaps) at ids 400..420, gpt-oss's tokenizer_config.json and chat_template.jinja."""
    make_tokenizer(d, regex=bpe_vocab.O200K_REGEX, specials=())
    path = os.path.join(d, "tokenizer.json")
    with open(path) as f:
        tj = json.load(f)
    assert max(tj["model"]["vocab"].values()) < SPECIAL_BASE
    for off in range(21):
        name = HARMONY.get(off, f"<|reserved_{199998 + off}|>")
        tj["added_tokens"].append({"id": SPECIAL_BASE + off, "content": name, "single_word": False, "lstrip": False,
                                   "rstrip": False, "normalized": False, "special": True})
    with open(path, "w") as f:
        json.dump(tj, f)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|startoftext|>", "eos_token": eos, "pad_token": "<|endoftext|>"}, f)
    with open(os.path.join(d, "chat_template.jinja"), "w") as f:
        f.write(TEMPLATE)


def bf16(x):
    """float32 values rounded to bfloat16, and their bits."""
    bits = quants.f32_to_bf16_bits(np.asarray(x, np.float32))
    return quants.bf16_bits_to_f32(bits), bits


def make_gpt_oss(d, *, layers=3, embd=64, heads=4, kv_heads=2, head_dim=16, ff=64, experts=4, top_k=2, vocab=448,
                 window=3, mxfp4=True, config_extra=None, drop=(), eos="<|return|>"):
    """A random gpt-oss checkpoint as released (MXFP4 experts: random codes and scales; every
    float tensor bf16), or with mxfp4 False its dequantized layout (gate_up_proj, down_proj).
    Returns ({name: stored values (float32, or uint8 for blocks and scales)}, config)."""
    make_harmony_tokenizer(d, eos)
    cfg = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "vocab_size": vocab,
           "hidden_size": embd, "intermediate_size": ff, "num_hidden_layers": layers,
           "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
           "num_local_experts": experts, "num_experts_per_tok": top_k, "experts_per_token": top_k,
           "sliding_window": window, "layer_types": ["sliding_attention" if il % 2 == 0 else "full_attention"
                                                     for il in range(layers)],
           "rope_theta": 150000.0, "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                                                    "beta_slow": 1.0, "original_max_position_embeddings": 4096,
                                                    "truncate": False},   # as the released configs
           "max_position_embeddings": 131072, "initial_context_length": 4096, "rms_norm_eps": 1e-5,
           "swiglu_limit": 7.0, "attention_bias": True, "hidden_act": "silu", "tie_word_embeddings": False,
           "eos_token_id": SPECIAL_BASE + 4, "pad_token_id": SPECIAL_BASE + 1}
    if mxfp4:
        cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}
    cfg.update(config_extra or {})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    rng = np.random.default_rng(9)
    mat = lambda rows, cols, scale=1.0: scale * rng.standard_normal((rows, cols)) / math.sqrt(cols)  # noqa: E731
    v = {"model.embed_tokens.weight": rng.standard_normal((vocab, embd)),
         "model.norm.weight": 1 + 0.1 * rng.standard_normal(embd), "lm_head.weight": mat(vocab, embd, 4.0)}
    q, kv = heads * head_dim, kv_heads * head_dim
    codes = {}
    for il in range(layers):
        p = f"model.layers.{il}."
        for name, rows, cols in (("q_proj", q, embd), ("k_proj", kv, embd), ("v_proj", kv, embd), ("o_proj", embd, q)):
            v[f"{p}self_attn.{name}.weight"] = mat(rows, cols)
            v[f"{p}self_attn.{name}.bias"] = 0.3 * rng.standard_normal(rows)
        v[p + "self_attn.sinks"] = rng.normal(0.5, 1.0, heads)
        v[p + "input_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(embd)
        v[p + "post_attention_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(embd)
        v[p + "mlp.router.weight"] = mat(experts, embd, 2.0)
        v[p + "mlp.router.bias"] = 0.5 * rng.standard_normal(experts)
        x = p + "mlp.experts."
        v[x + "gate_up_proj_bias"] = 1.5 * rng.standard_normal((experts, 2 * ff))
        v[x + "down_proj_bias"] = 0.3 * rng.standard_normal((experts, embd))
        if mxfp4:   # scales 2^-6 .. 2^-2, and every code
            codes[x + "gate_up_proj_blocks"] = rng.integers(0, 256, (experts, 2 * ff, embd // 32, 16), dtype=np.uint8)
            codes[x + "gate_up_proj_scales"] = rng.integers(121, 126, (experts, 2 * ff, embd // 32), dtype=np.uint8)
            codes[x + "down_proj_blocks"] = rng.integers(0, 256, (experts, embd, ff // 32, 16), dtype=np.uint8)
            codes[x + "down_proj_scales"] = rng.integers(121, 126, (experts, embd, ff // 32), dtype=np.uint8)
        else:
            v[x + "gate_up_proj"] = 3.0 * rng.standard_normal((experts, embd, 2 * ff)) / math.sqrt(embd)
            v[x + "down_proj"] = rng.standard_normal((experts, ff, embd)) / math.sqrt(ff)
    stored, blobs = {}, {}
    for name, x in v.items():
        if name in drop:
            continue
        stored[name], bits = bf16(x)
        blobs[name] = ("BF16", x.shape, bits.astype("<u2").tobytes())
    for name, c in codes.items():
        if name not in drop:
            stored[name] = c
            blobs[name] = ("U8", c.shape, c.tobytes())
    write_safetensors_manual(os.path.join(d, "model.safetensors"), blobs)
    return stored, cfg


def convert(*args):
    assert convert_hf.main([str(a) for a in args] + ["--quiet"]) == 0


# ------------------------------------------------------------------ Hugging Face's forward pass

def hf_mxfp4(blocks, scales):
    """HF's MXFP4 decode: [..., rows, G, 16] codes and [..., rows, G] scales -> [..., rows, G * 32];
    the low nibble of byte i is element 2i, the high nibble element 2i + 1, times 2^(scale - 127)."""
    vals = np.empty(blocks.shape[:-1] + (32,))
    vals[..., 0::2], vals[..., 1::2] = FP4[blocks & 15], FP4[blocks >> 4]
    vals *= 2.0 ** (scales.astype(np.int64) - 127)[..., None]
    return vals.reshape(*blocks.shape[:-2], -1)


def hf_experts(w, x):
    """The experts' parameters in HF's module layout (x @ W): gate_up [N, n_embd, 2F], down
    [N, F, n_embd], dequantizing MXFP4 checkpoints as HF does (decode, then transpose)."""
    if x + "gate_up_proj" in w:
        return w[x + "gate_up_proj"], w[x + "down_proj"]
    gate_up = hf_mxfp4(w[x + "gate_up_proj_blocks"], w[x + "gate_up_proj_scales"])
    down = hf_mxfp4(w[x + "down_proj_blocks"], w[x + "down_proj_scales"])
    return np.swapaxes(gate_up, 1, 2), np.swapaxes(down, 1, 2)


def hf_gpt_oss_logits(w, tokens, cfg, stats=None):
    """modeling_gpt_oss in float64 on the HF tensor names, driven by config.json: rotate_half
    RoPE with YaRN (inverse frequencies blended by a ramp, its ends floor/ceil-rounded unless the
    config's truncate is false, cos and sin times
    0.1 ln(factor) + 1), eager attention whose scores get the head's sink as one more column
    before the softmax (dropped after), sliding layers from layer_types, the router's top-k
    logits softmaxed, experts gate_up = y @ W + b split even/odd, min(gate, limit),
    clip(up, -limit, limit), (up + 1) gate sigmoid(alpha gate), @ down + b. stats (a dict)
    counts the clamped gate and up entries."""
    w = {k: x.astype(np.float64) if x.dtype != np.uint8 else x for k, x in w.items()}
    eps, d, n = cfg["rms_norm_eps"], cfg["head_dim"], len(tokens)
    heads, kv_heads, top_k = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_experts_per_tok"]
    limit, alpha = cfg["swiglu_limit"], 1.702
    rms = lambda x, g: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g  # noqa: E731
    sc, base = cfg["rope_scaling"], cfg["rope_theta"]
    pos_freqs = base ** (np.arange(0, d, 2) / d)
    factor, orig = sc["factor"], sc["original_max_position_embeddings"]
    corr = lambda rot: d * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))  # noqa: E731
    low, high = corr(sc["beta_fast"]), corr(sc["beta_slow"])
    if sc.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    ramp = np.clip((np.arange(d // 2) - low) / (high - low), 0, 1)
    extrapolation = 1 - ramp
    inv_freq = (1 / (factor * pos_freqs)) * (1 - extrapolation) + (1 / pos_freqs) * extrapolation
    ang = np.arange(n)[:, None] * inv_freq[None, :]
    cos, sin = (f(ang)[:, None] * (0.1 * math.log(factor) + 1) for f in (np.cos, np.sin))

    def rot(t):
        x1, x2 = t[..., :d // 2], t[..., d // 2:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
    x = w["model.embed_tokens.weight"][tokens]
    for il in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{il}."
        lin = lambda name, h, p=p: h @ w[p + name + ".weight"].T + w[p + name + ".bias"]  # noqa: E731
        h = rms(x, w[p + "input_layernorm.weight"])
        q = rot(lin("self_attn.q_proj", h).reshape(n, heads, d))
        k = rot(lin("self_attn.k_proj", h).reshape(n, kv_heads, d))
        v = lin("self_attn.v_proj", h).reshape(n, kv_heads, d)
        i, j = np.arange(n)[:, None], np.arange(n)[None, :]
        visible = j <= i
        if cfg["layer_types"][il] == "sliding_attention":
            visible &= j > i - cfg["sliding_window"]
        att = np.zeros((n, heads, d))
        for hh in range(heads):
            s = np.where(visible, q[:, hh] @ k[:, hh // (heads // kv_heads)].T / math.sqrt(d), -np.inf)
            combined = np.concatenate([s, np.full((n, 1), w[p + "self_attn.sinks"][hh])], 1)
            e = np.exp(combined - combined.max(1, keepdims=True))
            att[:, hh] = (e / e.sum(1, keepdims=True))[:, :-1] @ v[:, hh // (heads // kv_heads)]
        x = x + lin("self_attn.o_proj", att.reshape(n, heads * d))
        y = rms(x, w[p + "post_attention_layernorm.weight"])
        logits = lin("mlp.router", y)
        top = np.argsort(-logits, axis=1, kind="stable")[:, :top_k]
        top_w = np.take_along_axis(logits, top, 1)
        top_w = np.exp(top_w - top_w.max(1, keepdims=True))
        top_w /= top_w.sum(1, keepdims=True)
        gate_up_w, down_w = hf_experts(w, p + "mlp.experts.")
        out = np.zeros_like(x)
        for e in range(cfg["num_local_experts"]):
            routed = (top == e).any(1)
            gate_up = y @ gate_up_w[e] + w[p + "mlp.experts.gate_up_proj_bias"][e]
            gate, up = gate_up[..., ::2], gate_up[..., 1::2]
            if stats is not None:
                stats["gate"] = stats.get("gate", 0) + int((gate[routed] > limit).sum())
                stats["up"] = stats.get("up", 0) + int((np.abs(up[routed]) > limit).sum())
            gate, up = np.minimum(gate, limit), np.clip(up, -limit, limit)
            glu = gate / (1 + np.exp(-alpha * gate))
            o = ((up + 1) * glu) @ down_w[e] + w[p + "mlp.experts.down_proj_bias"][e]
            out += np.where(top == e, top_w, 0).sum(1, keepdims=True) * o
        x = x + out
    return rms(x, w["model.norm.weight"]) @ w["lm_head.weight"].T


# ------------------------------------------------------------------ tests

def tensor_names(layers):
    names = {"token_embd.weight", "output_norm.weight", "output.weight"}
    for i in range(layers):
        names |= {f"blk.{i}.{t}" for t in (
            "attn_norm.weight", "attn_q.weight", "attn_q.bias", "attn_k.weight", "attn_k.bias", "attn_v.weight",
            "attn_v.bias", "attn_output.weight", "attn_output.bias", "attn_sinks.weight", "post_attention_norm.weight",
            "ffn_gate_inp.weight", "ffn_gate_inp.bias", "ffn_gate_exps.weight", "ffn_gate_exps.bias",
            "ffn_up_exps.weight", "ffn_up_exps.bias", "ffn_down_exps.weight", "ffn_down_exps.bias")}
    return names


def test_gguf_tensors_metadata_and_vocab(tmp_path):
    hf = tmp_path / "hf"
    make_gpt_oss(hf)
    convert(hf, "--outfile", tmp_path / "m.gguf", "--outtype", "f16")
    r = GGUFReader(tmp_path / "m.gguf")
    md, t = r.metadata, r.tensors
    assert set(t) == tensor_names(3)
    for name, ti in t.items():
        if name.endswith("_exps.weight"):
            want = GGMLType.MXFP4      # copied as they are, whatever the output type
        elif len(ti.shape) == 1 or name.endswith((".bias", "ffn_gate_inp.weight")):
            want = GGMLType.F32
        else:
            want = GGMLType.F16
        assert ti.dtype == want, name
    assert t["blk.2.ffn_gate_exps.weight"].shape == t["blk.2.ffn_up_exps.weight"].shape == (4, 64, 64)
    assert t["blk.2.ffn_down_exps.weight"].shape == (4, 64, 64) and t["blk.2.ffn_up_exps.bias"].shape == (4, 64)
    assert t["blk.0.attn_q.weight"].shape == (64, 64) and t["blk.0.attn_k.bias"].shape == (32,)
    assert t["blk.0.attn_sinks.weight"].shape == (4,) and t["blk.0.ffn_down_exps.bias"].shape == (4, 64)
    a = "gpt-oss."
    for k, v in {"general.architecture": "gpt-oss", "general.file_type": 1, "general.quantization_version": 2,
                 a + "vocab_size": 448, a + "context_length": 131072, a + "embedding_length": 64,
                 a + "block_count": 3, a + "feed_forward_length": 64, a + "expert_feed_forward_length": 64,
                 a + "expert_count": 4, a + "expert_used_count": 2, a + "attention.head_count": 4,
                 a + "attention.head_count_kv": 2, a + "attention.key_length": 16, a + "attention.value_length": 16,
                 a + "attention.sliding_window": 3, a + "rope.dimension_count": 16, a + "rope.freq_base": 150000.0,
                 a + "rope.scaling.type": "yarn", a + "rope.scaling.factor": 32.0,
                 a + "rope.scaling.original_context_length": 4096, a + "rope.scaling.yarn_beta_fast": 32.0,
                 a + "rope.scaling.yarn_beta_slow": 1.0, "tokenizer.ggml.model": "gpt2",
                 "tokenizer.ggml.pre": "gpt-4o", "tokenizer.ggml.add_bos_token": False,
                 "tokenizer.ggml.bos_token_id": SPECIAL_BASE, "tokenizer.ggml.eos_token_id": SPECIAL_BASE + 4,
                 "tokenizer.ggml.padding_token_id": SPECIAL_BASE + 1, "tokenizer.chat_template": TEMPLATE}.items():
        assert md[k] == v, k
    assert abs(md[a + "attention.layer_norm_rms_epsilon"] - 1e-5) < 1e-12
    assert a + "feed_forward_activation" not in md
    tokens, types = md["tokenizer.ggml.tokens"], md["tokenizer.ggml.token_type"]
    assert len(tokens) == 448
    for off, name in HARMONY.items():
        assert tokens[SPECIAL_BASE + off] == name and types[SPECIAL_BASE + off] == bpe_vocab.CONTROL
    assert tokens[SPECIAL_BASE + 2] == "<|reserved_200000|>" and tokens[447] == "[PAD447]"
    # EOS is <|return|> even where tokenizer_config.json names another token
    make_harmony_tokenizer(hf, eos="<|endoftext|>")
    convert(hf, "--outfile", tmp_path / "e.gguf", "--outtype", "f16")
    assert GGUFReader(tmp_path / "e.gguf").metadata["tokenizer.ggml.eos_token_id"] == SPECIAL_BASE + 4


def test_expert_codes_are_copied_bit_for_bit(tmp_path):
    src, _ = make_gpt_oss(tmp_path / "hf")
    convert(tmp_path / "hf", "--outfile", tmp_path / "m.gguf", "--outtype", "q8_0")
    r = GGUFReader(tmp_path / "m.gguf")
    for il in range(3):
        x, b = f"model.layers.{il}.mlp.experts.", f"blk.{il}."
        for gg, blocks, scales, rows in (
                ("ffn_gate_exps", "gate_up_proj_blocks", "gate_up_proj_scales", slice(0, None, 2)),
                ("ffn_up_exps", "gate_up_proj_blocks", "gate_up_proj_scales", slice(1, None, 2)),
                ("ffn_down_exps", "down_proj_blocks", "down_proj_scales", slice(None))):
            ti = r.tensors[b + gg + ".weight"]
            assert ti.dtype == GGMLType.MXFP4
            raw = np.asarray(r.raw(b + gg + ".weight")).reshape(-1, 17)
            assert np.array_equal(raw[:, 0], src[x + scales][:, rows].reshape(-1))   # the exponent bytes
            want = hf_mxfp4(src[x + blocks][:, rows], src[x + scales][:, rows])      # HF's decode, rows as GGUF's
            assert np.array_equal(r.dequantize(b + gg + ".weight", np.float64), want)
        bias = src[x + "gate_up_proj_bias"]
        assert np.array_equal(r.dequantize(b + "ffn_gate_exps.bias"), bias[:, 0::2])
        assert np.array_equal(r.dequantize(b + "ffn_up_exps.bias"), bias[:, 1::2])
        assert np.array_equal(r.dequantize(b + "attn_sinks.weight"), src[f"model.layers.{il}.self_attn.sinks"])


@pytest.mark.parametrize("mxfp4", [True, False])
def test_reference_logits_match_hf_forward(tmp_path, mxfp4):
    src, cfg = make_gpt_oss(tmp_path / "hf", mxfp4=mxfp4)
    convert(tmp_path / "hf", "--outfile", tmp_path / "m.gguf", "--outtype", "f32")
    stats = {}
    want = hf_gpt_oss_logits(src, TOKENS, cfg, stats)
    assert stats["gate"] > 0 and stats["up"] > 0          # the clamp takes part
    m = ref.load_model(tmp_path / "m.gguf")
    assert m.windows == [3, 0, 3]
    got = ref.forward(m, TOKENS)
    assert np.abs(got - want).max() <= 1e-9 * np.abs(want).max()
    # the sinks take part: without them the logits change
    for il in range(3):
        m.w[f"blk.{il}.attn_sinks.weight"][:] = -np.inf
    assert np.abs(ref.forward(m, TOKENS) - want).max() > 1e-3 * np.abs(want).max()


def test_dequantized_experts_follow_the_output_type(tmp_path):
    src, _ = make_gpt_oss(tmp_path / "hf", mxfp4=False)
    convert(tmp_path / "hf", "--outfile", tmp_path / "m.gguf", "--outtype", "mxfp4")
    r = GGUFReader(tmp_path / "m.gguf")
    assert r.metadata["general.file_type"] == 38
    for name, ti in r.tensors.items():
        assert ti.dtype == (GGMLType.MXFP4 if name.endswith("_exps.weight") else GGMLType.F32), name
    x = "model.layers.1.mlp.experts."
    for gg, want in (("ffn_gate_exps", np.swapaxes(src[x + "gate_up_proj"][:, :, 0::2], 1, 2)),
                     ("ffn_up_exps", np.swapaxes(src[x + "gate_up_proj"][:, :, 1::2], 1, 2)),
                     ("ffn_down_exps", np.swapaxes(src[x + "down_proj"], 1, 2))):
        q = quants.quantize(np.ascontiguousarray(want), GGMLType.MXFP4)
        assert np.array_equal(np.asarray(r.raw(f"blk.1.{gg}.weight")).reshape(q.shape), q)


def test_untruncated_yarn_writes_yarn_truncate_false(tmp_path):
    rope = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
            "original_max_position_embeddings": 4096, "truncate": False}
    make_gpt_oss(tmp_path / "hf", layers=2, config_extra={"rope_scaling": rope})
    convert(tmp_path / "hf", "--outfile", tmp_path / "m.gguf", "--outtype", "f32")
    md = GGUFReader(tmp_path / "m.gguf").metadata
    assert md["gpt-oss.rope.scaling.type"] == "yarn" and md["gpt-oss.rope.scaling.factor"] == 32.0
    assert bool(md["gpt-oss.rope.scaling.yarn_truncate"]) is False
    # Without the key Hugging Face rounds (truncate defaults to true): so does the file.
    rope.pop("truncate")
    make_gpt_oss(tmp_path / "hf2", layers=2, config_extra={"rope_scaling": rope})
    convert(tmp_path / "hf2", "--outfile", tmp_path / "m2.gguf", "--outtype", "f32")
    assert bool(GGUFReader(tmp_path / "m2.gguf").metadata["gpt-oss.rope.scaling.yarn_truncate"]) is True


@pytest.mark.parametrize("extra,drop,message", [
    ({"swiglu_limit": 8.0}, (), "swiglu_limit 8.0 is not supported"),
    ({"layer_types": ["full_attention"] * 3}, (), "layer_types ['full_attention', 'full_attention', 'full_attention'] "
                                                  "is not supported"),
    ({"attention_bias": False}, (), "attention_bias False"),
    ({"quantization_config": {"quant_method": "bitsandbytes"}}, (), "quant_method 'bitsandbytes' is not supported"),
    ({"sliding_window": None}, (), "sliding_window None is not a positive window size"),
    ({"num_experts_per_tok": 5, "experts_per_token": 5}, (), "num_experts_per_tok 5 is not between 1 and"),
    ({}, ("model.layers.1.self_attn.sinks",), "missing tensor(s): model.layers.1.self_attn.sinks"),
    ({}, ("model.layers.0.mlp.experts.down_proj_scales",),
     "missing tensor(s): model.layers.0.mlp.experts.down_proj_scales")])
def test_refusals(tmp_path, capsys, extra, drop, message):
    make_gpt_oss(tmp_path / "hf", config_extra=extra, drop=drop)
    assert convert_hf.main([str(tmp_path / "hf"), "--outfile", str(tmp_path / "m.gguf"), "--quiet"]) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "m.gguf").exists()


def test_refusals_of_options(tmp_path, capsys):
    make_gpt_oss(tmp_path / "hf", layers=2)
    os.makedirs(tmp_path / "pred")
    args = [str(tmp_path / "hf"), "--outfile", str(tmp_path / "m.gguf"), "--quiet"]
    assert convert_hf.main(args + ["--predictors", str(tmp_path / "pred")]) == 1
    assert "mixture-of-experts model cannot be converted with --predictors" in capsys.readouterr().err
    assert convert_hf.main(args + ["--arch", "llama"]) == 1
    assert "--arch llama cannot override a GptOssForCausalLM model" in capsys.readouterr().err


def test_mxfp4_outtype_needs_experts(tmp_path, capsys):
    from test_convert_hf_archs import make_qwen2
    make_qwen2(tmp_path / "hf")
    assert convert_hf.main([str(tmp_path / "hf"), "--outfile", str(tmp_path / "m.gguf"), "--outtype", "mxfp4",
                            "--quiet"]) == 1
    assert "--outtype mxfp4 quantizes the experts of a mixture-of-experts model; qwen2 has none" in \
        capsys.readouterr().err
