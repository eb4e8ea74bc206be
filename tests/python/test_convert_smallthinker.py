"""convert_hf.py on SmallThinker checkpoints (SmallThinkerForCausalLM -> smallthinker; tiny,
random, safetensors): tensor names and values, metadata, --transpose-down, q4_0, refusals, and
the converted files' float64 logits against a direct NumPy transcription of the HF remote code's
forward pass (router on the raw layer input, softmax or sigmoid gating, ReGLU experts, NoPE and
sliding-window layers). Not against transformers: its modeling code needs trust_remote_code.
The checkpoint writers and checks shared with the other architectures are
test_convert_hf_archs.py's."""
import json
import os

import numpy as np
import pytest

import bpe_vocab
import convert_hf
import quants
from conftest import CONVERT_DIR, PYTHON  # noqa: F401  (import paths)
from gguf_io import GGUFReader
from test_convert_hf_archs import (TOKENS, add_moe_layers, assert_close, assert_experts, causal_attention,
                                   convert, make_qwen3, make_tokenizer, save, softmax)


def make_smallthinker(d, *, layers=5, embd=64, heads=4, kv_heads=2, head_dim=32, moe_ff=96, experts=6,
                      top_k=3, vocab=420, tied=False, lm_head_copy=False, apply_softmax=True, window=3,
                      config_extra=None):
    """A random SmallThinker checkpoint (head_dim != embd / heads on purpose) and its config. With
    window, llama.cpp's layer pattern: layers il % 4 != 0 slide with RoPE, layers il % 4 == 0 are
    global NoPE; without, every layer global with RoPE. apply_softmax None: the key is absent
    (sigmoid gating). tied with lm_head_copy: lm_head is saved as a copy of the embedding."""
    tok = make_tokenizer(d, regex=bpe_vocab.QWEN2_REGEX, specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>"))
    pattern = [0 if il % 4 == 0 else 1 for il in range(layers)]
    cfg = {"architectures": ["SmallThinkerForCausalLM"], "model_type": "smallthinker", "vocab_size": vocab,
           "hidden_size": embd, "num_hidden_layers": layers, "num_attention_heads": heads,
           "num_key_value_heads": kv_heads, "head_dim": head_dim, "max_position_embeddings": 256,
           "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": None, "tie_word_embeddings": tied,
           "moe_num_primary_experts": experts, "moe_num_active_primary_experts": top_k,
           "moe_ffn_hidden_size": moe_ff, "rope_layout": pattern if window else [1] * layers,
           "sliding_window_layout": pattern if window else [0] * layers, "sliding_window_size": window or 4096,
           "bos_token_id": 0, "eos_token_id": 2}
    if apply_softmax is not None:
        cfg["moe_primary_router_apply_softmax"] = apply_softmax
    cfg.update(config_extra or {})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, f)
    rng = np.random.default_rng(6)
    v = {"model.embed_tokens.weight": rng.standard_normal((vocab, embd)),
         "model.norm.weight": 1 + 0.1 * rng.standard_normal(embd)}
    if not tied:
        v["lm_head.weight"] = rng.standard_normal((vocab, embd)) / 4
    add_moe_layers(v, rng, layers, embd, heads * head_dim, kv_heads * head_dim, experts, moe_ff,
                   "block_sparse_moe.primary_router", ("gate", "up", "down"))
    v = {k: x.astype(np.float32) for k, x in v.items()}
    if tied and lm_head_copy:
        v["lm_head.weight"] = v["model.embed_tokens.weight"].copy()
    save(d, v)
    return v, cfg


def hf_smallthinker_logits(w, tokens, cfg):
    """SmallThinker's modeling code in float64 on the HF tensor names, driven by config.json:
    router_logits = primary_router(x) on the raw layer input; h = x + attn(input_layernorm(x))
    (rotate_half RoPE where rope_layout[il] is 1, a sliding window of sliding_window_size where
    sliding_window_layout[il] is 1); y = post_attention_layernorm(h); top-k router logits weighted
    by their softmax (moe_primary_router_apply_softmax) or their sigmoids divided by their sum;
    out = h + sum_e w_e down_e(up_e(y) * relu(gate_e(y)))."""
    w = {k: x.astype(np.float64) for k, x in w.items()}
    eps, d = cfg["rms_norm_eps"], cfg["head_dim"]
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    k_used = cfg["moe_num_active_primary_experts"]
    rms = lambda x, g: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g  # noqa: E731
    n = len(tokens)
    x = w["model.embed_tokens.weight"][tokens]
    ang = np.arange(n)[:, None] * cfg["rope_theta"] ** (-np.arange(0, d, 2) / d)[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], 1))[:, None], np.sin(np.concatenate([ang, ang], 1))[:, None]

    def rot(t):
        return t * cos + np.concatenate([-t[..., d // 2:], t[..., :d // 2]], -1) * sin
    for il in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{il}."
        router_logits = x @ w[p + "block_sparse_moe.primary_router.weight"].T
        h = rms(x, w[p + "input_layernorm.weight"])
        q, k, v = ((h @ w[p + f"self_attn.{t}_proj.weight"].T).reshape(n, nh, d)
                   for t, nh in (("q", heads), ("k", kv_heads), ("v", kv_heads)))
        if cfg["rope_layout"][il]:
            q, k = rot(q), rot(k)
        window = cfg["sliding_window_size"] if cfg["sliding_window_layout"][il] else 0
        h = x + causal_attention(q, k, v, heads // kv_heads, window) @ w[p + "self_attn.o_proj.weight"].T
        y = rms(h, w[p + "post_attention_layernorm.weight"])
        top = np.argsort(-router_logits, axis=-1, kind="stable")[:, :k_used]
        top_logits = np.take_along_axis(router_logits, top, -1)
        if cfg.get("moe_primary_router_apply_softmax", False):
            top_w = softmax(top_logits)
        else:
            top_w = 1 / (1 + np.exp(-top_logits))
            top_w = top_w / top_w.sum(-1, keepdims=True)
        routing = np.zeros_like(router_logits)
        np.put_along_axis(routing, top, top_w, -1)
        out = h.copy()
        for e in range(cfg["moe_num_primary_experts"]):
            ex = lambda name, t: t @ w[f"{p}block_sparse_moe.experts.{e}.{name}.weight"].T  # noqa: E731
            out += routing[:, e:e + 1] * ex("down", ex("up", y) * np.maximum(ex("gate", y), 0))
        x = out
    x = rms(x, w["model.norm.weight"])
    return x @ w.get("lm_head.weight", w["model.embed_tokens.weight"]).T


def smallthinker_gguf_logits(path, tokens):
    """A converted smallthinker file read back with gguf_io and run as llama.cpp runs it, in
    float64: the router (ffn_gate_inp) on the layer input; with attention.sliding_window W,
    layers il % 4 != 0 slide (window W) with NeoX RoPE and layers il % 4 == 0 are global NoPE,
    without it every layer is global with RoPE; the top expert_used_count experts of the router
    logits, weighted by the renormalised softmax over all experts (expert_gating_func 1) or by
    sigmoids divided by their sum (2); ReGLU experts, with ffn_down_exps or the transposed
    ffn_down_exps_t."""
    r = GGUFReader(path)
    md, a = r.metadata, "smallthinker"
    assert md["general.architecture"] == a
    t = lambda name: r.dequantize(name, np.float64)  # noqa: E731
    n_head, n_kv = md[f"{a}.attention.head_count"], md[f"{a}.attention.head_count_kv"]
    d, window = md[f"{a}.attention.key_length"], md.get(f"{a}.attention.sliding_window", 0)
    eps, base = md[f"{a}.attention.layer_norm_rms_epsilon"], md[f"{a}.rope.freq_base"]
    gating, k_used = md[f"{a}.expert_gating_func"], md[f"{a}.expert_used_count"]
    rms = lambda x, g: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g  # noqa: E731
    n = len(tokens)
    ang = np.arange(n)[:, None, None] * base ** (-np.arange(0, d, 2) / d)[None, None, :]
    c, s = np.cos(ang), np.sin(ang)

    def rope(v):
        x0, x1 = v[..., :d // 2], v[..., d // 2:]
        return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], -1)
    x = t("token_embd.weight")[tokens]
    for il in range(md[f"{a}.block_count"]):
        b = f"blk.{il}."
        logits = x @ t(b + "ffn_gate_inp.weight").T
        h = rms(x, t(b + "attn_norm.weight"))
        q, k, v = ((h @ t(b + f"attn_{x_}.weight").T).reshape(n, nh, d)
                   for x_, nh in (("q", n_head), ("k", n_kv), ("v", n_kv)))
        nope = window and il % 4 == 0
        if not nope:
            q, k = rope(q), rope(k)
        att = causal_attention(q, k, v, n_head // n_kv, window if window and il % 4 else 0)
        x = x + att @ t(b + "attn_output.weight").T
        y = rms(x, t(b + "ffn_norm.weight"))
        gate, up = t(b + "ffn_gate_exps.weight"), t(b + "ffn_up_exps.weight")
        if b + "ffn_down_exps_t.weight" in r.tensors:
            down_t = t(b + "ffn_down_exps_t.weight")            # [n_expert, n_ff_exp, n_embd]
            down = lambda e, act: act @ down_t[e]  # noqa: E731
        else:
            down_w = t(b + "ffn_down_exps.weight")              # [n_expert, n_embd, n_ff_exp]
            down = lambda e, act: down_w[e] @ act  # noqa: E731
        probs = softmax(logits) if gating == 1 else 1 / (1 + np.exp(-logits))
        for j in range(n):
            top = np.argsort(-logits[j], kind="stable")[:k_used]
            wts = probs[j, top] / probs[j, top].sum()
            x[j] += sum(r_ * down(e, np.maximum(gate[e] @ y[j], 0) * (up[e] @ y[j])) for e, r_ in zip(top, wts))
    x = rms(x, t("output_norm.weight"))
    return x @ t("output.weight" if "output.weight" in r.tensors else "token_embd.weight").T


def smallthinker_tensor_names(layers, tied, transpose_down=False):
    names = {"token_embd.weight", "output_norm.weight"} | (set() if tied else {"output.weight"})
    down = "ffn_down_exps_t" if transpose_down else "ffn_down_exps"
    for i in range(layers):
        names |= {f"blk.{i}.{x}.weight" for x in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                                   "ffn_norm", "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", down)}
    return names


SMALLTHINKER_GGUF = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                     "self_attn.o_proj": "attn_output", "block_sparse_moe.primary_router": "ffn_gate_inp",
                     "gate": "ffn_gate_exps", "up": "ffn_up_exps", "down": "ffn_down_exps"}


def smallthinker_as_stored(src, r):
    """The checkpoint as a converted file holds it: each HF matrix quantized row by row to its
    GGUF tensor's type (an expert down.weight transposed, quantized and transposed back when the
    file has ffn_down_exps_t)."""
    out = {}
    for k, m in src.items():
        if m.ndim == 1:
            out[k] = m
            continue
        if k in ("model.embed_tokens.weight", "lm_head.weight"):
            gg = "token_embd.weight" if k.startswith("model.") else "output.weight"
        else:   # model.layers.N.<module>.weight, experts: block_sparse_moe.experts.E.<proj>
            parts = k.split(".")
            mod = parts[-2] if ".experts." in k else ".".join(parts[3:-1])
            gg = f"blk.{parts[2]}.{SMALLTHINKER_GGUF[mod]}.weight"
        transposed = gg.endswith("ffn_down_exps.weight") and gg not in r.tensors
        dtype = r.tensors[gg.replace("exps.", "exps_t.") if transposed else gg].dtype
        x = np.ascontiguousarray(m.T) if transposed else m
        x = quants.dequantize(quants.quantize(x, dtype), dtype, x.shape)
        out[k] = x.T if transposed else x
    return out


@pytest.mark.parametrize("window", [3, 0])
@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("apply_softmax", [True, False, None])
def test_smallthinker_gguf_tensors_metadata_and_logits(tmp_path, apply_softmax, tied, window):
    # tied with sigmoid gating: lm_head saved as a copy of the embedding (still no output.weight).
    src, cfg = make_smallthinker(tmp_path / "hf", tied=tied, lm_head_copy=apply_softmax is not True,
                                 apply_softmax=apply_softmax, window=window)
    out = tmp_path / "st.gguf"
    convert(tmp_path / "hf", "--outfile", out, "--outtype", "f32")
    r = GGUFReader(out)
    md, a = r.metadata, "smallthinker"
    assert md["general.architecture"] == a
    for k, want in {"context_length": 256, "embedding_length": 64, "block_count": 5, "feed_forward_length": 96,
                    "attention.head_count": 4, "attention.head_count_kv": 2, "attention.key_length": 32,
                    "attention.value_length": 32, "rope.dimension_count": 32, "expert_count": 6,
                    "expert_used_count": 3, "expert_feed_forward_length": 96,
                    "expert_gating_func": 1 if apply_softmax else 2}.items():
        assert md[f"{a}.{k}"] == want and r.types[f"{a}.{k}"] == convert_hf.VT.UINT32, k
    assert md[f"{a}.rope.freq_base"] == 10000.0
    assert md[f"{a}.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-6)
    assert md["tokenizer.ggml.model"] == "gpt2" and md["tokenizer.ggml.pre"] == "qwen2"
    if window:
        key = f"{a}.attention.sliding_window"
        assert md[key] == 3 and r.types[key] == convert_hf.VT.UINT32
    else:   # sliding_window_size 4096 is in config.json, but no layer slides
        assert f"{a}.attention.sliding_window" not in md
    assert set(r.tensors) == smallthinker_tensor_names(5, tied)
    for i in range(5):
        b, p = f"blk.{i}.", f"model.layers.{i}."
        assert r.tensors[b + "attn_q.weight"].shape == (128, 64) and r.tensors[b + "attn_k.weight"].shape == (64, 64)
        assert r.tensors[b + "attn_output.weight"].shape == (64, 128)
        assert r.tensors[b + "ffn_gate_inp.weight"].shape == (6, 64)
        assert r.tensors[b + "ffn_gate_exps.weight"].shape == (6, 96, 64)
        assert r.tensors[b + "ffn_down_exps.weight"].shape == (6, 64, 96)
        router = src[p + "block_sparse_moe.primary_router.weight"]
        assert np.array_equal(r.dequantize(b + "ffn_gate_inp.weight"), router)
        assert np.array_equal(r.dequantize(b + "attn_norm.weight"), src[p + "input_layernorm.weight"])
        assert np.array_equal(r.dequantize(b + "ffn_norm.weight"), src[p + "post_attention_layernorm.weight"])
        assert_experts(r, src, i, "block_sparse_moe.", ("gate", "up", "down"), 6, quants.GGMLType.F32)
    # q/k rows in HF order (NeoX RoPE).
    assert np.array_equal(r.dequantize("blk.1.attn_q.weight"), src["model.layers.1.self_attn.q_proj.weight"])
    assert np.array_equal(r.dequantize("blk.1.attn_k.weight"), src["model.layers.1.self_attn.k_proj.weight"])
    want = hf_smallthinker_logits(src, TOKENS, cfg)
    assert_close(smallthinker_gguf_logits(out, TOKENS), want, 1e-9)
    # The test sees the window (12 tokens > 3), the NoPE layers and the gating function.
    other = {"sliding_window_layout": [0] * 5, "rope_layout": [1] * 5} if window else \
        {"sliding_window_layout": [0, 1, 1, 1, 0], "rope_layout": [0, 1, 1, 1, 0], "sliding_window_size": 3}
    assert np.abs(hf_smallthinker_logits(src, TOKENS, {**cfg, **other}) - want).max() > 1e-2
    flipped = {**cfg, "moe_primary_router_apply_softmax": not apply_softmax}
    assert np.abs(hf_smallthinker_logits(src, TOKENS, flipped) - want).max() > 1e-2


def test_smallthinker_transpose_down(tmp_path):
    src, cfg = make_smallthinker(tmp_path / "hf")
    out = tmp_path / "st_t.gguf"
    convert(tmp_path / "hf", "--outfile", out, "--outtype", "f32", "--transpose-down")
    r = GGUFReader(out)
    assert set(r.tensors) == smallthinker_tensor_names(5, False, transpose_down=True)
    for i in range(5):
        info = r.tensors[f"blk.{i}.ffn_down_exps_t.weight"]
        assert info.shape == (6, 96, 64) and info.dtype == quants.GGMLType.F32
        got = r.dequantize(info.name)
        for e in range(6):
            assert np.array_equal(got[e], src[f"model.layers.{i}.block_sparse_moe.experts.{e}.down.weight"].T)
    assert_close(smallthinker_gguf_logits(out, TOKENS), hf_smallthinker_logits(src, TOKENS, cfg), 1e-9)


@pytest.mark.parametrize("transpose_down", [False, True])
def test_smallthinker_q4_0(tmp_path, transpose_down):
    src, cfg = make_smallthinker(tmp_path / "hf")
    out = tmp_path / "q4.gguf"
    convert(tmp_path / "hf", "--outfile", out, "--outtype", "q4_0", *(["--transpose-down"] if transpose_down else []))
    r = GGUFReader(out)
    T = quants.GGMLType
    assert r.metadata["general.file_type"] == 2
    assert set(r.tensors) == smallthinker_tensor_names(5, False, transpose_down)
    assert r.tensors["output.weight"].dtype == T.Q8_0 and r.tensors["token_embd.weight"].dtype == T.Q4_0
    for i in range(5):
        b = f"blk.{i}."
        assert r.tensors[b + "ffn_gate_inp.weight"].dtype == T.F32   # the router: never quantized
        assert np.array_equal(r.dequantize(b + "ffn_gate_inp.weight"),
                              src[f"model.layers.{i}.block_sparse_moe.primary_router.weight"])
        assert r.tensors[b + "attn_q.weight"].dtype == T.Q4_0 and r.tensors[b + "ffn_norm.weight"].dtype == T.F32
    if transpose_down:
        info = r.tensors["blk.2.ffn_down_exps_t.weight"]
        assert info.dtype == T.Q4_0 and info.shape == (6, 96, 64)
        m = src["model.layers.2.block_sparse_moe.experts.5.down.weight"].T
        want = quants.dequantize(quants.quantize(np.ascontiguousarray(m), T.Q4_0), T.Q4_0, m.shape)
        assert np.array_equal(r.dequantize(info.name)[5], want)
    else:
        assert_experts(r, src, 2, "block_sparse_moe.", ("gate", "up", "down"), 6, T.Q4_0)
    # The HF maths on the checkpoint as quantized (the routing is too sensitive to compare with
    # the float weights' logits: top-k choices flip).
    stored = smallthinker_as_stored(src, r)
    assert np.array_equal(stored["model.layers.2.block_sparse_moe.primary_router.weight"],
                          src["model.layers.2.block_sparse_moe.primary_router.weight"])
    assert_close(smallthinker_gguf_logits(out, TOKENS), hf_smallthinker_logits(stored, TOKENS, cfg), 1e-9)


@pytest.mark.parametrize("window,extra,message", [
    (3, {"sliding_window_layout": [0, 1, 0, 1, 0]}, "sliding_window_layout [0, 1, 0, 1, 0] is not supported"),
    (3, {"sliding_window_layout": [1, 1, 1, 1, 1]}, "sliding_window_layout [1, 1, 1, 1, 1] is not supported"),
    (3, {"rope_layout": [1, 1, 1, 1, 1]}, "rope_layout [1, 1, 1, 1, 1] is not supported"),
    (3, {"rope_layout": None}, "rope_layout None is not supported"),
    (3, {"sliding_window_size": None}, "sliding_window_size None is not a positive window size"),
    (0, {"rope_layout": [0, 1, 1, 1, 0]}, "rope_layout [0, 1, 1, 1, 0] is not supported: without sliding"),
    (0, {"sliding_window_layout": [0, 0]}, "sliding_window_layout [0, 0] is not a list of 0/1, one for each of the 5"),
    (0, {"rope_layout": [1, 1, 2, 1, 1]}, "rope_layout [1, 1, 2, 1, 1] is not a list of 0/1"),
    (0, {"moe_num_active_primary_experts": 7},
     "moe_num_active_primary_experts 7 is not between 1 and moe_num_primary_experts 6"),
    (0, {"moe_num_primary_experts": None}, "missing key moe_num_primary_experts"),
])
def test_smallthinker_refusals(tmp_path, capsys, window, extra, message):
    make_smallthinker(tmp_path / "hf", window=window, config_extra=extra)
    if extra == {"moe_num_primary_experts": None}:
        cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
        del cfg["moe_num_primary_experts"]
        (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    assert convert_hf.main([str(tmp_path / "hf"), "--outfile", str(tmp_path / "x.gguf"), "-q"]) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'hf' / 'config.json'}: {message}" in err and err.count("\n") == 1, err
    assert not os.path.exists(tmp_path / "x.gguf")


def test_smallthinker_dense_layer_and_transpose_down_elsewhere_refused(tmp_path, capsys):
    # A dense layer (mlp instead of the router and experts) is named by its missing router.
    src, _ = make_smallthinker(tmp_path / "hf", window=0)
    p = "model.layers.2."
    for k in [k for k in src if k.startswith(p + "block_sparse_moe.")]:
        del src[k]
    rng = np.random.default_rng(7)
    src.update({p + "mlp.gate_proj.weight": rng.standard_normal((96, 64)), p + "mlp.up_proj.weight":
                rng.standard_normal((96, 64)), p + "mlp.down_proj.weight": rng.standard_normal((64, 96))})
    save(tmp_path / "hf", src)
    assert convert_hf.main([str(tmp_path / "hf"), "--outfile", str(tmp_path / "x.gguf"), "-q"]) == 1
    err = capsys.readouterr().err
    assert (f"{tmp_path / 'hf'}: missing tensor model.layers.2.block_sparse_moe.primary_router.weight: "
            "layer 2 has no router (a dense layer)") in err and err.count("\n") == 1, err
    assert not os.path.exists(tmp_path / "x.gguf")
    # --transpose-down is SmallThinker's alone; --arch cannot override it.
    make_qwen3(tmp_path / "q", moe=True, layers=1)
    assert convert_hf.main([str(tmp_path / "q"), "--outfile", str(tmp_path / "x.gguf"), "-q", "--transpose-down"]) == 1
    assert "--transpose-down only applies to SmallThinker models, not qwen3moe" in capsys.readouterr().err
    make_smallthinker(tmp_path / "st", layers=1, window=0)
    assert convert_hf.main([str(tmp_path / "st"), "--outfile", str(tmp_path / "x.gguf"), "-q", "--arch", "llama"]) == 1
    assert "--arch llama cannot override a SmallThinkerForCausalLM model" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "x.gguf")
