#!/usr/bin/env python3
"""Writes a small random model (GGUF, or PowerInfer PWRI with predictors) for tests.

    make_tiny_model.py --arch llama|bamboo|falcon|qwen2|opt|qwen3|qwen3moe|smallthinker|gpt-oss
        --outtype f32|f16|q8_0|q4_0|mxfp4 [--pwri]
        [--layers 2 --embd 64 --ff 256 --heads 4 --kv-heads 2 --vocab 300] [--tied]
        [--act silu|relu|gelu] [--threshold 0.0] --seed S --out FILE
        [--head-dim D]                                  (qwen3, qwen3moe, smallthinker, gpt-oss)
        [--experts 8 --experts-used 2 --expert-ff 64]   (qwen3moe, smallthinker, gpt-oss)
        [--gating softmax|sigmoid] [--transpose-down]   (smallthinker)
        [--swa W]                                       (smallthinker, gpt-oss)
        [--yarn F]                                      (every RoPE architecture)

The file carries a minimal llama SentencePiece vocabulary (<unk>, <s>, </s>, the 256 byte
pieces <0x00>..<0xFF>, then word pieces with scores) so the engine can tokenize text.
For falcon, --kv-heads 1 gives the 7B layout (one attn_norm), more gives the 40B layout
(attn_norm_2 for the FFN). qwen2 is llama with q/k/v biases, NeoX RoPE and rope.freq_base 1e6.
opt has layer norms with bias, no RoPE but a learned position table of ctx + 2 rows (row p + 2
holds position p; context_length is the row count, as the original writes it), biases on
q/k/v/out and on the FFN (ffn_up.bias; ffn_down.bias, or ffn_down_t.bias in PWRI files) and
always multi-head attention (--kv-heads is ignored). Same seed and shapes give the same
weights with and without --pwri, so a dense ReLU GGUF and the PWRI file of one seed compute
the same dense function.

qwen3 is llama without biases, with NeoX RoPE, rope.freq_base 1e6, eps 1e-6 and per-head q/k
RMSNorm weights attn_q_norm/attn_k_norm [head_dim]; --head-dim D (default embd / heads; qwen3
and qwen3moe only) sets attention.key_length = value_length = rope.dimension_count = D, so
attn_q is [heads * D, embd], attn_k/attn_v [kv_heads * D, embd], attn_output [embd, heads * D].
qwen3moe has qwen3's attention and, for the FFN, --experts N experts of which each token uses
--experts-used K (expert_count, expert_used_count): the router ffn_gate_inp [N, embd] (always
f32, as llama.cpp keeps it), ffn_gate_exps and ffn_up_exps [N, F, embd], ffn_down_exps
[N, embd, F] with F = --expert-ff (written as expert_feed_forward_length and as
feed_forward_length; --ff is unused). --pwri is not supported for qwen3 and qwen3moe.

smallthinker (PowerInfer's MoE family) has qwen3moe's shapes and options without the q/k
norms, and ReGLU experts (relu(gate) * up; no feed_forward_activation key, --act is refused).
Its router reads the raw layer input (before attn_norm). --gating softmax|sigmoid writes
expert_gating_func 1 | 2 (default sigmoid, as the released SmallThinker models); --swa W writes
attention.sliding_window = W (layers il % 4 == 0 global without RoPE, the others a window of W
with RoPE; without --swa no key: every layer global with RoPE); --transpose-down writes the
down projections as ffn_down_exps_t [N, F, embd] (each expert's ffn_down_exps transposed: the
same function) instead of ffn_down_exps. --pwri is not supported for smallthinker either.

gpt-oss (as llama.cpp writes OpenAI's gpt-oss) has qwen3moe's options and shapes without the q/k
norms, plus: biases on attn_q/k/v/output, a random attention sink per head (attn_sinks.weight,
N(0.5, 1): the size of the attention scores, so the sinks change the output), the FFN norm
named post_attention_norm, a router bias ffn_gate_inp.bias and expert biases
ffn_{gate,up}_exps.bias [N, F], ffn_down_exps.bias [N, embd]; eps 1e-5, rope.freq_base 150000,
no feed_forward_activation key (the gated unit is fixed: min(g, 7) sigmoid(1.702 g)
(clip(u, -7, 7) + 1)). --swa W (default 3, so short sequences cross the window; 0: no key,
every layer global) writes attention.sliding_window: layers il % 2 == 0 slide, odd layers are
global. Expert gate/up matrices are N(0, 9/n_in) with biases N(0, 0.25), so some pre-activations
pass the clamp at +-7. --outtype mxfp4 (mixture-of-experts architectures only) writes the 3-D
expert stacks as MXFP4 and every other tensor as F32 (general.file_type 38, llama.cpp's
MOSTLY_MXFP4_MOE), as the released gpt-oss files are; the expert rows (embd and --expert-ff) must
then be multiples of 32.

How the weights keep activations sane and the FFN sparse (biases where the architecture has
them play no part in it):
  * Matrices are N(0, 1/n_in), so each projection roughly preserves the scale of its input;
    norm weights are near 1.
  * Residual channel 0 is a constant "bias channel": every token embedding has the value
    3.0 there, and the rows of attn_output and ffn_down (and the columns of ffn_down_t)
    that write channel 0 are zero, so the residual keeps exactly 3.0 in channel 0 through
    every layer and the normalized FFN input has a positive channel 0 (like the "massive
    activation" channels of real LLMs). The biases that write the residual (attn_output,
    ffn_down) and the position rows (opt) are zero in channel 0 too.
  * qwen3moe, gpt-oss: router rows are N(0, 4/n_embd), so router logits have a spread of ~2 across
    tokens and the top-K choice has visible margins. Column 0 of the router (the bias
    channel) is a per-expert bias, set layer by layer on random token sequences to cancel
    each expert's mean logit (the bias channel also leaks a token-independent part into
    every projection), so that all experts are used; gpt-oss sets its router's own bias
    (ffn_gate_inp.bias) that way instead. Expert matrices are N(0, 1/n_in) with
    the rows of ffn_down_exps that write channel 0 zero. There is no sparsity calibration
    (experts are SiLU). smallthinker's router reads the raw residual, so its bias is set on
    that (channel 0 is exactly 3.0 there).
  * smallthinker: the ReGLU experts are sparse inside. Column 0 of each expert's ffn_gate_exps
    is calibrated as a dense ReLU FFN's ffn_gate (below), right after the router of its layer
    is balanced, on the FFN inputs of the tokens routed to that expert (all the layer's tokens
    if fewer than 16 were): neuron i of an expert fires on a fraction p_i ~ Beta(0.6, 3.4)
    (mean 15%) of the tokens the expert gets. The rows of ffn_down_exps (columns of
    ffn_down_exps_t) that write channel 0 are zero.
  * Column 0 of the gated matrix (ffn_gate; ffn_up for falcon) then acts as a per-neuron
    bias. It is calibrated layer by layer on random token sequences with the reference
    forward pass so that neuron i fires on a fraction p_i of tokens, p_i ~ Beta(0.6, 3.4)
    (mean 15%: ~85% sparsity, with a skewed hot/cold spread; bamboo's gate uses mean 25%,
    and ReLU on up halves it again).
  * Predictors: the gated pre-activation is an exactly linear function of the predictor
    input up to a positive factor (llama: gate . (h / rms(h) * w) has the sign of
    (gate * w) . h), so G = gate * w (falcon: (up * w) with the mean removed) predicts the
    true ReLU mask; opt's up bias is set to -(up . ffn_norm bias), which cancels the norm's
    bias term, so the same G = (up * w) with the mean removed predicts its mask exactly.
    Its rank-k truncated SVD Q P is written as fc1 = [P; -P] [2k, n_embd],
    fc2 = [Q, -Q] [n_ff, 2k], because Q ReLU(P h) - Q ReLU(-P h) = Q P h. Layers alternate
    k = n_embd (exact up to quantization) and k = 3/4 n_embd (a good but imperfect
    predictor, like trained ones), so ranks differ per layer as in published files.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "convert"))
sys.path.insert(0, HERE)
import gguf_io  # noqa: E402
import reference_forward as ref  # noqa: E402
from convert_hf import FILE_TYPES, pick_type  # noqa: E402
from gguf_io import VT  # noqa: E402
from quants import GGMLType, quantize  # noqa: E402

BIAS_CHANNEL_VALUE = 3.0
WORD_PIECES = ["▁", "e", "t", "a", "o", "i", "n", "s", "h", "r", "d", "l", "u", "c", "m", "w", "f",
               "g", "y", "p", "b", "v", "k", "x", "j", "q", "z", ",", ".", "▁t", "he", "▁the", "in",
               "er", "an", "▁a", "re", "on", "▁s", "en", "nd", "▁and", "▁o", "▁of", "ing", "▁to",
               "▁w", "at", "ou", "is", "▁i", "▁h", "or", "ed", "▁in", "es", "▁b", "▁c", "ll",
               "▁f", "▁m", "▁p", "it", "ar", "al", "▁that", "▁th", "▁he", "▁is", "ion", "ly"]


def build_vocab(n_vocab: int):
    """(tokens, scores, types) of a llama-style SPM vocabulary with n_vocab pieces."""
    if n_vocab < 262:
        raise SystemExit("--vocab must be at least 262 (3 special + 256 byte + a few word pieces)")
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0] * len(tokens)
    pieces = list(WORD_PIECES)
    letters = "etaoinshrdlucmwfgypbvkxjqz"
    extra = (a + b for a in letters for b in letters)
    while len(pieces) < n_vocab - len(tokens):
        p = next(extra)
        if p not in pieces:
            pieces.append(p)
    for i, p in enumerate(pieces[:n_vocab - len(tokens)]):
        tokens.append(p)
        scores.append(-float(i))
        types.append(1)
    return tokens, scores, types


def layer_norm_arch(arch):
    return arch in ("falcon", "opt")


def make_weights(a, rng):
    """float64 weights in GGUF layout (outermost dim first), before bias calibration."""
    n_embd, n_ff, n_vocab, d = a.embd, a.ff, a.vocab, head_dim(a)
    kv_heads = a.heads if a.arch == "opt" else a.kv_heads

    def mat(rows, cols):
        return rng.standard_normal((rows, cols)) / np.sqrt(cols)

    def norm_w(n=n_embd):
        return np.clip(1.0 + 0.1 * rng.standard_normal(n), 0.5, 1.5)

    def norm_b():
        b = 0.05 * rng.standard_normal(n_embd)
        b[0] = 0.0
        return b

    def bias(n, scale=0.2):
        return scale * rng.standard_normal(n)

    w = {"token_embd.weight": rng.standard_normal((n_vocab, n_embd))}
    w["token_embd.weight"][:, 0] = BIAS_CHANNEL_VALUE
    if a.arch == "opt":
        w["position_embd.weight"] = 0.5 * rng.standard_normal((a.ctx + 2, n_embd))
        w["position_embd.weight"][:, 0] = 0.0
    w["output_norm.weight"] = norm_w()
    if layer_norm_arch(a.arch):
        w["output_norm.bias"] = norm_b()
    out = 4.0 * mat(n_vocab, n_embd)  # a peaked next-token distribution: clear greedy choices
    if not a.tied:
        w["output.weight"] = out
    for il in range(a.layers):
        p = f"blk.{il}."
        w[p + "attn_norm.weight"] = norm_w()
        if a.arch == "falcon":
            w[p + "attn_norm.bias"] = norm_b()
            if a.kv_heads > 1:
                w[p + "attn_norm_2.weight"], w[p + "attn_norm_2.bias"] = norm_w(), norm_b()
            w[p + "attn_qkv.weight"] = mat((a.heads + 2 * a.kv_heads) * d, n_embd)
        else:
            if a.arch == "opt":
                w[p + "attn_norm.bias"] = norm_b()
            for name, rows in (("attn_q", a.heads * d), ("attn_k", kv_heads * d), ("attn_v", kv_heads * d)):
                w[p + name + ".weight"] = mat(rows, n_embd)
                if a.arch in ("qwen2", "opt", GPT_OSS):
                    w[p + name + ".bias"] = bias(rows)
            if a.arch in QWEN3_ARCHS:   # (not smallthinker: no q/k norms)
                w[p + "attn_q_norm.weight"], w[p + "attn_k_norm.weight"] = norm_w(d), norm_w(d)
        w[p + "attn_output.weight"] = mat(n_embd, a.heads * d)
        w[p + "attn_output.weight"][0, :] = 0.0
        if a.arch in ("opt", GPT_OSS):
            w[p + "attn_output.bias"] = bias(n_embd)
            w[p + "attn_output.bias"][0] = 0.0
        if a.arch == GPT_OSS:
            w[p + "attn_sinks.weight"] = rng.normal(0.5, 1.0, a.heads)
            w[p + "post_attention_norm.weight"] = norm_w()
        elif a.arch != "falcon":
            w[p + "ffn_norm.weight"] = norm_w()
        if a.moe:
            n_exp, n_eff = a.experts, a.expert_ff
            w[p + "ffn_gate_inp.weight"] = 2.0 * mat(n_exp, n_embd)   # column 0: balance_router
            w[p + "ffn_gate_exps.weight"] = np.stack([mat(n_eff, n_embd) for _ in range(n_exp)])
            w[p + "ffn_up_exps.weight"] = np.stack([mat(n_eff, n_embd) for _ in range(n_exp)])
            w[p + "ffn_down_exps.weight"] = np.stack([mat(n_embd, n_eff) for _ in range(n_exp)])
            w[p + "ffn_down_exps.weight"][:, 0, :] = 0.0
            if a.arch == GPT_OSS:   # (the router bias is set by balance_router)
                w[p + "ffn_gate_exps.weight"] *= GPT_OSS_EXPERT_SCALE
                w[p + "ffn_up_exps.weight"] *= GPT_OSS_EXPERT_SCALE
                w[p + "ffn_gate_inp.bias"] = np.zeros(n_exp)
                w[p + "ffn_gate_exps.bias"] = bias((n_exp, n_eff), 0.5)
                w[p + "ffn_up_exps.bias"] = bias((n_exp, n_eff), 0.5)
                w[p + "ffn_down_exps.bias"] = bias((n_exp, n_embd))
                w[p + "ffn_down_exps.bias"][:, 0] = 0.0
            continue
        if a.arch == "opt":
            w[p + "ffn_norm.bias"] = norm_b()
        elif a.arch != "falcon":
            w[p + "ffn_gate.weight"] = mat(n_ff, n_embd)
        w[p + "ffn_up.weight"] = mat(n_ff, n_embd)
        w[p + "ffn_down.weight"] = mat(n_embd, n_ff)
        w[p + "ffn_down.weight"][0, :] = 0.0
        if a.arch == "opt":
            # Cancels the ffn_norm bias in up . ffn_norm(x) (see the module docstring); its
            # channel 0 is zero, so column 0 of ffn_up (calibrated later) plays no part.
            w[p + "ffn_up.bias"] = -(w[p + "ffn_up.weight"] @ w[p + "ffn_norm.bias"])
            w[p + "ffn_down.bias"] = bias(n_embd)
            w[p + "ffn_down.bias"][0] = 0.0
    return w


def ffn_inputs(m: ref.Model, il: int, seqs, name="ffn_in"):
    """Layer il's normalized FFN inputs (or another value the reference's hook shows, e.g.
    'router_in', 'routes') over the token sequences `seqs`, concatenated: [n_tok, ...]."""
    captured = []

    class Captured(Exception):
        pass

    def hook(layer, key, value):
        if layer == il and key == name:
            captured.append(value)
            raise Captured   # the later layers play no part
    for s in seqs:
        try:
            ref.hidden(m, s, hook=hook)
        except Captured:
            pass
    return np.concatenate(captured)


def calibrate(m: ref.Model, a, rng):
    """Sets column 0 of each layer's gated matrix so neuron i fires on a fraction p_i of
    random tokens (see the module docstring)."""
    seqs = rng.integers(3, a.vocab, size=(4, 32))
    mean_p = 0.25 if a.arch == "bamboo" else 0.15
    gated = "ffn_up" if a.arch in ("falcon", "opt") else "ffn_gate"
    for il in range(a.layers):
        g = m.w[f"blk.{il}.{gated}.weight"]
        g_bias = m.w.get(f"blk.{il}.{gated}.bias", 0.0)
        g[:, 0] = 0.0
        x = ffn_inputs(m, il, seqs)                      # [n_tok, n_embd]
        ratio = (x @ g.T + g_bias) / x[:, 0:1]           # z_i / x0 per token, [n_tok, n_ff]
        p = np.clip(rng.beta(0.6 * mean_p / 0.15, 3.4, size=g.shape[0]), 0.01, 0.9)
        # neuron i fires when z_i + b_i x0 > 0, i.e. ratio > -b_i: pick -b_i at quantile 1 - p_i
        g[:, 0] = -np.array([np.quantile(ratio[:, i], 1.0 - p[i]) for i in range(g.shape[0])])


def balance_router(m: ref.Model, a, rng):
    """Sets column 0 of each layer's router (gpt-oss: its bias) so every expert's logit has
    mean 0 over random tokens (see the module docstring); for ReGLU experts (smallthinker)
    then calibrates the layer's experts (calibrate_experts) before the next layer's router."""
    seqs = rng.integers(3, a.vocab, size=(8, 32))
    for il in range(a.layers):
        r = m.w[f"blk.{il}.ffn_gate_inp.weight"]
        if a.arch == GPT_OSS:
            x = ffn_inputs(m, il, seqs, "router_in")
            m.w[f"blk.{il}.ffn_gate_inp.bias"][:] = -np.mean(x @ r.T, axis=0)
            continue
        r[:, 0] = 0.0
        x = ffn_inputs(m, il, seqs, "router_in")         # [n_tok, n_embd]: what the router reads
        r[:, 0] = -np.mean(x @ r.T, axis=0) / np.mean(x[:, 0])
        if a.arch == "smallthinker":
            calibrate_experts(m, il, seqs, rng)


MIN_EXPERT_TOKENS = 16


def calibrate_experts(m: ref.Model, il: int, seqs, rng, mean_p=0.15):
    """Sets column 0 of each layer-il expert's gate matrix so neuron i of expert e fires on a
    fraction p_i ~ Beta(0.6, 3.4) of the tokens routed to e (see the module docstring)."""
    g = m.w[f"blk.{il}.ffn_gate_exps.weight"]           # [N, F, n_embd]
    g[:, :, 0] = 0.0
    x = ffn_inputs(m, il, seqs)                          # [n_tok, n_embd]
    ids = ffn_inputs(m, il, seqs, "routes")              # [n_tok, K]
    p = np.clip(rng.beta(0.6 * mean_p / 0.15, 3.4, size=g.shape[:2]), 0.01, 0.9)
    for e in range(g.shape[0]):
        routed = np.any(ids == e, axis=1)
        xe = x[routed] if routed.sum() >= MIN_EXPERT_TOKENS else x
        ratio = (xe @ g[e].T) / xe[:, 0:1]               # z_i / x0 per token, [n_tok_e, F]
        g[e, :, 0] = -np.array([np.quantile(ratio[:, i], 1.0 - p[e, i]) for i in range(g.shape[1])])


def make_predictors(m: ref.Model, a):
    """{name: array} fc1/fc2 per layer (see the module docstring)."""
    out = {}
    n = a.embd
    for il in range(a.layers):
        p = f"blk.{il}."
        if a.arch in ("falcon", "opt"):
            norm_name = "ffn_norm.weight" if a.arch == "opt" else "attn_norm_2.weight"
            norm = m.w.get(p + norm_name, m.w[p + "attn_norm.weight"])
            G = (m.w[p + "ffn_up.weight"] * norm) @ (np.eye(n) - 1.0 / n)
        else:
            G = m.w[p + "ffn_gate.weight"] * m.w[p + "ffn_norm.weight"]
        k = n if il % 2 == 0 else (3 * n) // 4
        k = max(16, k - k % 16)
        U, S, Vt = np.linalg.svd(G, full_matrices=False)
        k = min(k, len(S))
        P = np.sqrt(S[:k])[:, None] * Vt[:k]             # [k, n_embd]
        Q = U[:, :k] * np.sqrt(S[:k])                     # [n_ff, k]
        out[p + "fc1.weight"] = np.concatenate([P, -P], axis=0)
        out[p + "fc2.weight"] = np.concatenate([Q, -Q], axis=1)
    return out


def build(a):
    if a.head_dim is not None:
        if a.heads % a.kv_heads or a.head_dim % 2:
            raise SystemExit("--head-dim must be even, --heads a multiple of --kv-heads")
    elif a.embd % a.heads or a.heads % a.kv_heads or (a.embd // a.heads) % 2:
        raise SystemExit("--embd must split into --heads heads of even size, --heads a multiple of --kv-heads")
    act = DEFAULT_ACT[a.arch]
    if a.pwri:
        act = "relu"
    elif a.act:
        act = a.act
    rng = np.random.default_rng(a.seed)
    w = make_weights(a, rng)
    m = ref.Model(arch=a.arch, n_layer=a.layers, n_head=a.heads, n_head_kv=kv_heads(a),
                  n_rot=head_dim(a), eps=eps(a), rope_base=rope_base(a), act=act, pwri=False, w=w,
                  head_dim=head_dim(a))
    if a.yarn is not None:
        m.rope_scale, m.yarn = 1.0 / a.yarn, (float(YARN_ORIG_CTX), 32.0, 1.0, a.arch != "gpt-oss")
    if a.moe:   # sparsity calibration only of ReGLU experts (see the module docstring)
        m.n_expert, m.n_expert_used = a.experts, a.experts_used
        if a.arch == "smallthinker":
            m.gating = a.gating
            if a.swa is not None:
                m.windows = [0 if il % 4 == 0 else a.swa for il in range(a.layers)]
                m.nope = [il % 4 == 0 for il in range(a.layers)]
        if a.arch == GPT_OSS and a.swa:
            m.windows = [a.swa if il % 2 == 0 else 0 for il in range(a.layers)]
        balance_router(m, a, rng)
    else:
        calibrate(m, a, rng)
    if a.transpose_down:
        for il in range(a.layers):
            down = w.pop(f"blk.{il}.ffn_down_exps.weight")
            w[f"blk.{il}.ffn_down_exps_t.weight"] = np.ascontiguousarray(np.swapaxes(down, 1, 2))
    if a.pwri:
        w.update(make_predictors(m, a))
        for il in range(a.layers):
            w[f"blk.{il}.ffn_down_t.weight"] = np.ascontiguousarray(w.pop(f"blk.{il}.ffn_down.weight").T)
            if f"blk.{il}.ffn_down.bias" in w:   # the original's name for the bias of ffn_down_t
                w[f"blk.{il}.ffn_down_t.bias"] = w.pop(f"blk.{il}.ffn_down.bias")
    return w, act


GPT_OSS = "gpt-oss"
DEFAULT_ACT = {"bamboo": "relu", "falcon": "gelu", "llama": "silu", "qwen2": "silu", "opt": "relu",
               "qwen3": "silu", "qwen3moe": "silu", "smallthinker": "relu", GPT_OSS: "swiglu_oai"}
QWEN3_ARCHS = ("qwen3", "qwen3moe")                 # q/k norms
HEAD_DIM_ARCHS = QWEN3_ARCHS + ("smallthinker", GPT_OSS)   # --head-dim, key_length, no --pwri
SWA_ARCHS = ("smallthinker", GPT_OSS)               # --swa
NO_ACT_KEY_ARCHS = ("smallthinker", GPT_OSS)        # fixed expert units: no feed_forward_activation
GPT_OSS_EXPERT_SCALE = 3.0   # gate/up N(0, 9/n_in): some pre-activations pass the clamp at +-7
MXFP4_FILE_TYPE = "mxfp4"    # --outtype: MXFP4 expert stacks, every other tensor F32


def kv_heads(a):
    return a.heads if a.arch == "opt" else a.kv_heads


def head_dim(a):
    return a.embd // a.heads if a.head_dim is None else a.head_dim


def eps(a):
    return 1e-6 if a.arch in ("qwen2", "qwen3", "qwen3moe", "smallthinker") else 1e-5


# YaRN's original context (--yarn): with n_rot 16 and base 1e4, pairs 0-1 keep their angle,
# 2-6 blend and 7 is interpolated.
YARN_ORIG_CTX = 4096


def rope_base(a):
    if a.arch == GPT_OSS:
        return 150000.0
    return 1e6 if a.arch in ("qwen2", "qwen3", "qwen3moe", "smallthinker") else 10000.0


LAYER_ORDER = ["attn_norm.weight", "attn_norm.bias", "attn_norm_2.weight", "attn_norm_2.bias",
               "attn_qkv.weight", "attn_q.weight", "attn_q.bias", "attn_q_norm.weight", "attn_k.weight",
               "attn_k.bias", "attn_k_norm.weight", "attn_v.weight", "attn_v.bias", "attn_output.weight",
               "attn_output.bias", "attn_sinks.weight", "ffn_norm.weight", "ffn_norm.bias",
               "post_attention_norm.weight", "ffn_gate_inp.weight", "ffn_gate_inp.bias",
               "ffn_gate_exps.weight", "ffn_gate_exps.bias", "ffn_up_exps.weight", "ffn_up_exps.bias",
               "ffn_down_exps.weight", "ffn_down_exps.bias", "ffn_down_exps_t.weight",
               "ffn_gate.weight", "ffn_up.weight", "ffn_up.bias",
               "ffn_down.weight", "ffn_down.bias", "ffn_down_t.weight", "ffn_down_t.bias",
               "fc1.weight", "fc2.weight"]


def tensor_order(name: str):
    """Global tensors first (in insertion order), then layer by layer in LAYER_ORDER."""
    if not name.startswith("blk."):
        return (0, 0, 0)
    _, il, rest = name.split(".", 2)
    return (1, int(il), LAYER_ORDER.index(rest))


def write(a, w, act):
    arch, prefix = a.arch, a.arch + "."
    tokens, scores, types = build_vocab(a.vocab)
    md = [
        ("general.architecture", arch, VT.STRING),
        ("general.name", f"tiny-{arch}{'-pwri' if a.pwri else ''}-seed{a.seed}", VT.STRING),
        ("general.file_type", FILE_TYPES[a.outtype], VT.UINT32),
        (prefix + "context_length", a.ctx + 2 if arch == "opt" else a.ctx, VT.UINT32),
        (prefix + "embedding_length", a.embd, VT.UINT32),
        (prefix + "block_count", a.layers, VT.UINT32),
        (prefix + "feed_forward_length", a.expert_ff if a.moe else a.ff, VT.UINT32),
        (prefix + "attention.head_count", a.heads, VT.UINT32),
    ]
    if arch not in NO_ACT_KEY_ARCHS:   # (fixed expert units: no key, as llama.cpp writes them)
        md.append((prefix + "feed_forward_activation", act, VT.STRING))
    if arch == "opt":   # the keys the original's OPT files have (no RoPE, no kv-head count)
        md.append((prefix + "attention.layer_norm_epsilon", eps(a), VT.FLOAT32))
    else:
        md += [(prefix + "attention.head_count_kv", a.kv_heads, VT.UINT32),
               (prefix + "rope.dimension_count", head_dim(a), VT.UINT32),
               (prefix + "rope.freq_base", rope_base(a), VT.FLOAT32)]
        if arch in HEAD_DIM_ARCHS:
            md += [(prefix + "attention.key_length", head_dim(a), VT.UINT32),
                   (prefix + "attention.value_length", head_dim(a), VT.UINT32)]
        if a.moe:
            md += [(prefix + "expert_count", a.experts, VT.UINT32),
                   (prefix + "expert_used_count", a.experts_used, VT.UINT32)]
            if arch != "llama":   # Mixtral's experts are feed_forward_length wide, with no key of their own
                md.append((prefix + "expert_feed_forward_length", a.expert_ff, VT.UINT32))
            if arch == "smallthinker":
                md.append((prefix + "expert_gating_func", GATING_FUNC[a.gating], VT.UINT32))
            if arch in SWA_ARCHS and a.swa:
                md.append((prefix + "attention.sliding_window", a.swa, VT.UINT32))
        if a.yarn is not None:
            md += [(prefix + "rope.scaling.type", "yarn", VT.STRING),
                   (prefix + "rope.scaling.factor", float(a.yarn), VT.FLOAT32),
                   (prefix + "rope.scaling.original_context_length", YARN_ORIG_CTX, VT.UINT32)]
        eps_key = "layer_norm_epsilon" if arch == "falcon" else "layer_norm_rms_epsilon"
        md.append((prefix + "attention." + eps_key, eps(a), VT.FLOAT32))
    if a.outtype in ("q8_0", "q4_0", MXFP4_FILE_TYPE):
        md.append(("general.quantization_version", 2, VT.UINT32))
    if a.pwri:
        md.append(("powerinfer.sparse_threshold", a.threshold, VT.FLOAT32))
    md += [
        ("tokenizer.ggml.model", "llama", VT.STRING),
        ("tokenizer.ggml.tokens", tokens, (VT.ARRAY, VT.STRING)),
        ("tokenizer.ggml.scores", np.asarray(scores, np.float32), (VT.ARRAY, VT.FLOAT32)),
        ("tokenizer.ggml.token_type", np.asarray(types, np.int32), (VT.ARRAY, VT.INT32)),
        ("tokenizer.ggml.bos_token_id", 1, VT.UINT32),
        ("tokenizer.ggml.eos_token_id", 2, VT.UINT32),
        ("tokenizer.ggml.unknown_token_id", 0, VT.UINT32),
        ("tokenizer.ggml.add_bos_token", True, VT.BOOL),
        ("tokenizer.ggml.add_eos_token", False, VT.BOOL),
    ]
    magic = gguf_io.MAGIC_PWRI if a.pwri else gguf_io.MAGIC_GGUF
    w = {name: w[name] for name in sorted(w, key=tensor_order)}
    with gguf_io.GGUFWriter(a.out, magic) as f:
        for key, value, vtype in md:
            f.add(key, value, vtype)
        types_ = {name: pick_type(name, arr.shape, a.outtype) for name, arr in w.items()}
        for name in types_:   # the MoE router stays f32 (llama.cpp never quantizes it)
            if name.endswith(".ffn_gate_inp.weight"):
                types_[name] = GGMLType.F32
        for name, arr in w.items():
            f.add_tensor_info(name, arr.shape, types_[name])
        f.write_header()
        for name, arr in w.items():
            f.write_tensor(name, quantize(arr.astype(np.float32), types_[name]))


GATING_FUNC = {"softmax": 1, "sigmoid": 2}   # smallthinker.expert_gating_func


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", choices=("llama", "bamboo", "falcon", "qwen2", "opt", "qwen3", "qwen3moe",
                                       "smallthinker", GPT_OSS), default="llama")
    ap.add_argument("--outtype", choices=sorted(FILE_TYPES), default="f32",
                    help="mxfp4 (mixture-of-experts architectures): MXFP4 expert stacks, all else F32")
    ap.add_argument("--pwri", action="store_true", help="PowerInfer file: predictors, ffn_down_t, ReLU")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--embd", type=int, default=64)
    ap.add_argument("--ff", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=300)
    ap.add_argument("--ctx", type=int, default=256, help="context_length metadata")
    ap.add_argument("--tied", action="store_true", help="no output.weight (the head is token_embd)")
    ap.add_argument("--act", choices=("silu", "relu", "gelu"), help="FFN activation of a dense file")
    ap.add_argument("--threshold", type=float, default=0.0, help="powerinfer.sparse_threshold")
    ap.add_argument("--head-dim", type=int, metavar="D",
                    help="qwen3/qwen3moe/smallthinker/gpt-oss: attention head size (key_length), default embd / heads")
    ap.add_argument("--experts", type=int, metavar="N",
                    help="qwen3moe/smallthinker/gpt-oss: number of experts (default 8)")
    ap.add_argument("--experts-used", type=int, metavar="K",
                    help="qwen3moe/smallthinker/gpt-oss: experts per token (default 2)")
    ap.add_argument("--expert-ff", type=int, metavar="F",
                    help="qwen3moe/smallthinker/gpt-oss: expert FFN size (default 64)")
    ap.add_argument("--gating", choices=sorted(GATING_FUNC),
                    help="smallthinker: router gating, expert_gating_func (default sigmoid)")
    ap.add_argument("--swa", type=int, metavar="W", help="smallthinker: attention.sliding_window = W "
                    "(layers il %% 4 != 0 use a window of W, layers il %% 4 == 0 are global NoPE); gpt-oss: "
                    "(default 3; 0: no key) layers il %% 2 == 0 use a window of W, odd layers are global")
    ap.add_argument("--transpose-down", action="store_true",
                    help="smallthinker: write ffn_down_exps_t [N, F, embd] instead of ffn_down_exps")
    ap.add_argument("--yarn", type=float, metavar="F", help="rope.scaling.type yarn with factor F "
                    f"over an original context of {YARN_ORIG_CTX} (every pair regime at head size 16)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    if a.pwri and a.arch in HEAD_DIM_ARCHS:
        ap.error(f"--pwri is not supported for {a.arch} (no PowerInfer layout for it)")
    if a.head_dim is not None and a.arch not in HEAD_DIM_ARCHS:
        ap.error(f"--head-dim is only for qwen3, qwen3moe, smallthinker and gpt-oss, not {a.arch} "
                 "(its head size is --embd / --heads)")
    if a.head_dim is not None and a.head_dim < 2:
        ap.error("--head-dim must be at least 2")
    # llama with --experts: Mixtral's layout (llama.expert_count, experts of width --expert-ff).
    a.moe = a.arch in ("qwen3moe", "smallthinker", GPT_OSS) or (a.arch == "llama" and a.experts is not None)
    if a.moe and a.pwri:
        ap.error("--pwri is not supported with experts")
    moe_opts = {"experts": 8, "experts_used": 2, "expert_ff": 64}
    for k, default in moe_opts.items():
        if getattr(a, k) is None:
            setattr(a, k, default)
        elif not a.moe:
            ap.error(f"--{k.replace('_', '-')} is only for qwen3moe, smallthinker, gpt-oss (and llama with "
                     f"--experts), not {a.arch}")
    if a.experts < 1 or a.expert_ff < 1:
        ap.error("--experts and --expert-ff must be at least 1")
    if not 1 <= a.experts_used <= a.experts:
        ap.error(f"--experts-used must be in [1, --experts] = [1, {a.experts}], got {a.experts_used}")
    if a.arch == "smallthinker":
        if a.act is not None:
            ap.error("--act is not supported for smallthinker (its experts are ReGLU)")
        if a.gating is None:
            a.gating = "sigmoid"
        if a.swa is not None and a.swa < 1:
            ap.error(f"--swa must be at least 1, got {a.swa}")
    if a.arch == GPT_OSS:
        if a.act is not None:
            ap.error("--act is not supported for gpt-oss (its experts' gated unit is fixed)")
        if a.swa is None:
            a.swa = 3
        if a.swa < 0 or a.swa > a.ctx:
            ap.error(f"--swa must be in [0, --ctx] = [0, {a.ctx}] for gpt-oss (0: every layer global), got {a.swa}")
    if a.outtype == MXFP4_FILE_TYPE:
        if not a.moe:
            ap.error(f"--outtype mxfp4 quantizes expert stacks: only for mixture-of-experts models, not {a.arch}")
        if a.embd % 32 or a.expert_ff % 32:
            ap.error(f"--outtype mxfp4 needs --embd and --expert-ff multiples of 32 (the MXFP4 block), "
                     f"got {a.embd} and {a.expert_ff}")
    if a.yarn is not None and (a.arch == "opt" or a.yarn < 1):
        ap.error("--yarn needs RoPE (not opt) and a factor of at least 1")
    for opt, given, archs in (("--gating", a.gating is not None, ("smallthinker",)),
                              ("--swa", a.swa is not None, SWA_ARCHS),
                              ("--transpose-down", a.transpose_down, ("smallthinker",))):
        if given and a.arch not in archs:
            ap.error(f"{opt} is only for {' and '.join(archs)}, not {a.arch}")
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    w, act = build(a)
    write(a, w, act)
    return 0


if __name__ == "__main__":
    sys.exit(main())
