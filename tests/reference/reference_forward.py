#!/usr/bin/env python3
"""Reference forward pass in float64 NumPy: the test oracle for the C++ engine.

Deliberately simple and slow: every weight is dequantized to float64, every token of the
sequence is recomputed from scratch, no cache, no batching. Reads GGUF and PowerInfer
(PWRI) files through tools/convert/gguf_io.py.

    reference_forward.py MODEL --tokens 1,5,9 [--sparse] [--threshold T] --out logits.bin
    reference_forward.py MODEL --tokens 1,5,9 --greedy 8 [--sparse]
    reference_forward.py MODEL --tokens 1,5,9 --hidden hidden.bin
    reference_forward.py MODEL --tokens 1,5,9 --routes routes.bin   (qwen3moe, smallthinker, Mixtral, gpt-oss)
    reference_forward.py MODEL --tokens 1,5,9 --force-routes routes.bin --route-probs probs.bin --out logits.bin

--out writes float32 logits [n_tokens, n_vocab], row-major, little-endian.
--hidden writes the final hidden states after the output norm (what embeddings pool,
llama.cpp's result_norm), float32 [n_tokens, n_embd], row-major, little-endian.
--greedy N prints the N greedy next-token ids, space-separated, on one line.
--routes writes the experts each mixture-of-experts layer chose: int32 [n_layer, n_tokens,
K] (K = expert_used_count), row-major, little-endian; per layer and token the K expert ids
in order of decreasing routing weight (equal weights: lower id first).
--force-routes FILE (same layout) computes with those experts instead of the router's choice
(weights: their gating probabilities renormalized to sum 1);
--route-probs FILE writes the router's gating probabilities float64 [n_layer, n_tokens,
expert_count] along the pass (forced or not): softmax over all experts of the router logits
(qwen3moe, Mixtral, smallthinker with softmax gating, gpt-oss with the router's bias in its
logits; each row sums to 1), or the sigmoid of
each logit on its own (smallthinker with sigmoid gating; rows do not sum to 1). Either way the
chosen experts are the K largest of them. With the engine's routes forced, the oracle checks
the rest of the maths exactly, and the probabilities show whether a token the engine routed
differently was a near-tie.

Architectures:
  llama   RMSNorm, RoPE on adjacent pairs (2i, 2i+1) (the GGUF q/k layout), GQA, FFN
          down(act(gate x) * (up x)); act from `llama.feed_forward_activation` (silu when
          absent), always ReLU in PWRI files.
  bamboo  as llama with FFN down(ReLU(gate x) * ReLU(up x)).
  falcon  LayerNorm, fused attn_qkv rows [Q; K; V], RoPE on NeoX pairs (i, i + n_rot/2),
          attention and FFN in parallel on the layer input: x + attn(n1(x)) + ffn(n2(x)),
          where n2 = attn_norm_2 if present (40B layout) else attn_norm (7B layout);
          FFN down(act(up x)), act GELU (tanh approximation, as ggml) or ReLU in PWRI files.
  qwen2   as llama with biases on q, k and v (attn_{q,k,v}.bias) and RoPE on NeoX pairs
          (the q/k rows are in Hugging Face order); default eps 1e-6.
  opt     LayerNorm with bias, no RoPE: learned positions, x = token_embd[t] +
          position_embd[p + 2] (HF's offset of 2), biased q/k/v/out projections, sequential
          residual as llama, FFN down(ReLU(up x + up_b)) + down_b (bias ffn_down.bias, or
          ffn_down_t.bias in PWRI files), act ReLU.
  qwen3   as qwen2 without the biases, plus a per-head RMSNorm of q and of k before RoPE:
          each head's head_dim values x -> x / sqrt(mean(x^2) + eps) * w (attn_q_norm.weight,
          attn_k_norm.weight, f32 [head_dim]; eps the layer norms' one).
  qwen3moe  qwen3's attention; the FFN is a mixture of experts on x = ffn_norm(residual):
          p = softmax(ffn_gate_inp x) over the N = `expert_count` experts, the
          K = `expert_used_count` largest p (ties: lower id first) renormalized to sum 1 as
          w_e, out = sum_e w_e down_e(act(gate_e x) * (up_e x)) with ffn_{gate,up}_exps
          [N, F, n_embd], ffn_down_exps [N, n_embd, F]; act silu when absent.
  llama with `llama.expert_count` (Mixtral): llama's attention and qwen3moe's mixture of experts.
  smallthinker  (PowerInfer's MoE family) qwen3moe without the q/k norms (NeoX RoPE, head_dim
          from key_length, default eps 1e-6), with three differences in the FFN:
          * the router reads the RAW layer input x (before attn_norm), not the FFN input:
            logits l = ffn_gate_inp x, top-K experts by l (ties: lower id first);
          * gating by `smallthinker.expert_gating_func`: 1 (or absent) softmax, w = softmax of
            the K chosen logits; 2 sigmoid, w_e = sigmoid(l_e) / sum over chosen sigmoid(l_j);
          * ReGLU experts: down_e(relu(gate_e y) * (up_e y)) on y = ffn_norm(h) (act from
            `feed_forward_activation`, relu when absent); the down projection is ffn_down_exps
            [N, n_embd, F] or, transposed, ffn_down_exps_t [N, F, n_embd] (one row per neuron).
          Layer pattern: with `smallthinker.attention.sliding_window` = W, layer il % 4 == 0
          attends globally without RoPE (NoPE), the other layers use a sliding window of W and
          RoPE; without the key every layer is global with RoPE.
  gpt-oss  (OpenAI's gpt-oss-20b/120b, as llama.cpp writes them) grouped-query attention with
          biases on q, k, v and attn_output, head_dim from key_length, NeoX RoPE on every layer
          (YaRN in the released files), and a learned sink per head: head h's softmax over its
          scores s_j gets one more logit, attn_sinks.weight[h] (f32 [n_head]), in its
          denominator only: p_j = exp(s_j - M) / (sum_i exp(s_i - M) + exp(sink_h - M)), M the
          maximum of the scores and the sink. With `gpt-oss.attention.sliding_window` = W, the
          layers il % 2 == 0 attend through a window of W, the odd layers globally (no key:
          every layer global). The FFN reads y = post_attention_norm(residual) and is a mixture
          of experts with biases everywhere: logits l = ffn_gate_inp y + ffn_gate_inp.bias, the
          K largest logits (ties: lower id first) weighted by the softmax over those K;
          expert e: g = gate_e y + b, u = up_e y + b, g = min(g, 7), u = clip(u, -7, 7),
          a = g sigmoid(1.702 g) (u + 1), out_e = down_e a + b (ffn_{gate,up,down}_exps.bias,
          [N, F] / [N, F] / [N, n_embd]); default eps 1e-5.
Sliding window: a per-layer property (Model.windows, 0 = global): with window W, the token at
position p attends positions q with p - W < q <= p. smallthinker and gpt-oss files set it.
head_dim is `attention.key_length` when present (qwen3 files may have head_dim != n_embd /
n_head: q is [n_head * head_dim, n_embd], attn_output [n_embd, n_head * head_dim]), else
n_embd / n_head; n_rot is `rope.dimension_count`, else head_dim.
Sparse mode (PWRI only): neuron i of layer L is computed only if
(fc2 . ReLU(fc1 . h))_i >= threshold, with h the residual before ffn_norm (llama, bamboo, opt)
or the layer input (falcon); PWRI files store the down projection as ffn_down_t [n_ff, n_embd].
The output head is output.weight, or token_embd.weight when absent (tied).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass, field

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "convert"))
import gguf_io  # noqa: E402


@dataclass
class Model:
    arch: str                 # llama | bamboo | falcon | qwen2 | opt | qwen3 | qwen3moe | smallthinker | gpt-oss
    n_layer: int
    n_head: int
    n_head_kv: int
    n_rot: int
    eps: float
    rope_base: float
    act: str                  # FFN activation: silu | relu | gelu | swiglu_oai (gpt-oss's gated unit)
    pwri: bool
    threshold: float = 0.0    # predictor threshold (PWRI)
    rope_scale: float = 1.0   # position multiplier: 1 / rope.scaling.factor (linear scaling)
    # YaRN (rope.scaling.type yarn): (original context, beta_fast, beta_slow, truncate: the ramp's
    # ends rounded); None: linear.
    yarn: tuple = None
    head_dim: int = 0         # attention.key_length; 0: n_embd // n_head
    n_expert: int = 0         # experts (qwen3moe, smallthinker, Mixtral), 0 for a dense FFN
    n_expert_used: int = 0    # experts each token uses
    gating: str = "softmax"   # MoE gating: softmax | sigmoid (smallthinker.expert_gating_func 1 | 2)
    # Per layer: the sliding-window size (0: global attention) and whether RoPE is skipped
    # (NoPE); empty lists: every layer global, with RoPE (none for opt).
    windows: list = field(default_factory=list)
    nope: list = field(default_factory=list)
    w: dict = field(default_factory=dict)   # name -> float64 array, outermost dim first
    # MoE: the experts to use instead of the router's choice, int [n_layer, n_tokens, K]
    # (--force-routes: the engine's routes, to compare the rest of the maths exactly).
    forced_routes: np.ndarray | None = None


def load_model(path) -> Model:
    r = gguf_io.GGUFReader(path)
    arch = r.get("general.architecture")
    if arch not in ("llama", "bamboo", "falcon", "qwen2", "opt", "qwen3", "qwen3moe", "smallthinker", GPT_OSS):
        raise ValueError(f"{path}: unsupported architecture {arch!r}")
    n_embd = int(r.get(f"{arch}.embedding_length"))
    n_head = int(r.get(f"{arch}.attention.head_count"))
    head_dim = int(r.get(f"{arch}.attention.key_length", n_embd // n_head))
    default_act = {"llama": "silu", "bamboo": "relu", "falcon": "gelu", "qwen2": "silu", "opt": "relu",
                   "qwen3": "silu", "qwen3moe": "silu", "smallthinker": "relu", GPT_OSS: "swiglu_oai"}[arch]
    eps_key = "layer_norm_epsilon" if arch in ("falcon", "opt") else "layer_norm_rms_epsilon"
    m = Model(
        arch=arch,
        n_layer=int(r.get(f"{arch}.block_count")),
        n_head=n_head,
        n_head_kv=int(r.get(f"{arch}.attention.head_count_kv", n_head)),
        n_rot=int(r.get(f"{arch}.rope.dimension_count", head_dim)),
        eps=float(r.get(f"{arch}.attention.{eps_key}", 1e-6 if arch in NEOX_ARCHS else 1e-5)),
        rope_base=float(r.get(f"{arch}.rope.freq_base", 10000.0)),
        act="relu" if r.is_pwri else default_act if arch == GPT_OSS
        else r.get(f"{arch}.feed_forward_activation", default_act),
        pwri=r.is_pwri,
        threshold=float(r.get("powerinfer.sparse_threshold", 0.0)),
        head_dim=head_dim,
    )
    if int(r.get(f"{arch}.attention.value_length", head_dim)) != head_dim:
        raise ValueError(f"{path}: attention.value_length != key_length is not supported")
    if arch in ("qwen3moe", "smallthinker", GPT_OSS) or (arch == "llama" and f"{arch}.expert_count" in r.metadata):
        if f"{arch}.expert_count" not in r.metadata or f"{arch}.expert_used_count" not in r.metadata:
            raise ValueError(f"{path}: {arch} needs {arch}.expert_count and {arch}.expert_used_count")
        m.n_expert, m.n_expert_used = int(r.get(f"{arch}.expert_count")), int(r.get(f"{arch}.expert_used_count"))
        if not 1 <= m.n_expert_used <= m.n_expert:
            raise ValueError(f"{path}: expert_used_count {m.n_expert_used} is not in [1, expert_count "
                             f"{m.n_expert}]")
    if arch == "smallthinker":
        gating = int(r.get(f"{arch}.expert_gating_func", 1))
        if gating not in (1, 2):
            raise ValueError(f"{path}: {arch}.expert_gating_func {gating} is not supported (1 softmax, 2 sigmoid)")
        m.gating = "softmax" if gating == 1 else "sigmoid"
        window = r.get(f"{arch}.attention.sliding_window")
        if window is not None:   # layer il % 4 == 0: global NoPE; the others: window and RoPE
            if int(window) < 1:
                raise ValueError(f"{path}: {arch}.attention.sliding_window must be at least 1, got {window}")
            m.windows = [0 if il % 4 == 0 else int(window) for il in range(m.n_layer)]
            m.nope = [il % 4 == 0 for il in range(m.n_layer)]
        need = ["ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight"]
        missing = [f"blk.{il}.{t}" for il in range(m.n_layer) for t in need if f"blk.{il}.{t}" not in r.tensors]
        missing += [f"blk.{il}.ffn_down_exps.weight" for il in range(m.n_layer)
                    if f"blk.{il}.ffn_down_exps.weight" not in r.tensors
                    and f"blk.{il}.ffn_down_exps_t.weight" not in r.tensors]
        if missing:
            raise ValueError(f"{path}: {arch} tensor(s) missing: {', '.join(missing[:4])}")
    if arch == GPT_OSS:
        load_gpt_oss(r, m, path)
    if r.get(f"{arch}.rope.scaling.type", "linear") == "linear":
        factor = r.get(f"{arch}.rope.scaling.factor", r.get(f"{arch}.rope.scale_linear", 1.0))
        m.rope_scale = 1.0 / float(factor)
    elif r.get(f"{arch}.rope.scaling.type") == "yarn":
        m.rope_scale = 1.0 / float(r.get(f"{arch}.rope.scaling.factor"))
        m.yarn = (float(r.get(f"{arch}.rope.scaling.original_context_length", r.get(f"{arch}.context_length"))),
                  float(r.get(f"{arch}.rope.scaling.yarn_beta_fast", 32.0)),
                  float(r.get(f"{arch}.rope.scaling.yarn_beta_slow", 1.0)),
                  # rounded ends unless yarn_truncate says false (gpt-oss: unrounded by default,
                  # as its config's truncate false and OpenAI's implementation)
                  bool(r.get(f"{arch}.rope.scaling.yarn_truncate", arch != GPT_OSS)))
    elif r.get(f"{arch}.rope.scaling.type") != "none":
        raise ValueError(f"{path}: rope scaling {r.get(f'{arch}.rope.scaling.type')!r} is not supported")
    if arch in QK_NORM_ARCHS:
        need = ["attn_q_norm.weight", "attn_k_norm.weight"]
        if arch == "qwen3moe":
            need += ["ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"]
        missing = [f"blk.{il}.{t}" for il in range(m.n_layer) for t in need if f"blk.{il}.{t}" not in r.tensors]
        if missing:
            raise ValueError(f"{path}: {arch} tensor(s) missing: {', '.join(missing[:4])}")
    m.w = {name: r.dequantize(name, np.float64) for name in r.tensors}
    return m


def load_gpt_oss(r, m: Model, path):
    """gpt-oss's layer pattern (the layers il % 2 == 0 slide) and the tensors it needs."""
    window = r.get(f"{GPT_OSS}.attention.sliding_window")
    if window is not None:
        if int(window) < 1:
            raise ValueError(f"{path}: {GPT_OSS}.attention.sliding_window must be at least 1, got {window}")
        m.windows = [int(window) if il % 2 == 0 else 0 for il in range(m.n_layer)]
    need = ["attn_norm.weight", "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias",
            "attn_sinks.weight", "post_attention_norm.weight", "ffn_gate_inp.weight", "ffn_gate_inp.bias"]
    need += [f"ffn_{x}_exps.{y}" for x in ("gate", "up", "down") for y in ("weight", "bias")]
    missing = [f"blk.{il}.{t}" for il in range(m.n_layer) for t in need if f"blk.{il}.{t}" not in r.tensors]
    if missing:
        raise ValueError(f"{path}: {GPT_OSS} tensor(s) missing: {', '.join(missing[:4])}")
    for il in range(m.n_layer):
        sinks, q = r.tensors[f"blk.{il}.attn_sinks.weight"], r.tensors[f"blk.{il}.attn_q.weight"]
        if tuple(sinks.shape) != (m.n_head,):
            raise ValueError(f"{path}: blk.{il}.attn_sinks.weight is {list(sinks.shape)}, expected [{m.n_head}] "
                             "(one sink per head)")
        if q.shape[0] != m.n_head * m.head_dim:
            raise ValueError(f"{path}: blk.{il}.attn_q.weight has {q.shape[0]} rows, expected head_count * "
                             f"key_length = {m.n_head * m.head_dim} ({GPT_OSS}.attention.key_length)")


GPT_OSS = "gpt-oss"
QWEN_ARCHS = ("qwen2", "qwen3", "qwen3moe")
NEOX_ARCHS = QWEN_ARCHS + ("smallthinker",)     # NeoX RoPE, default eps 1e-6
QK_NORM_ARCHS = ("qwen3", "qwen3moe")         # per-head RMSNorm of q and k before RoPE
SWIGLU_LIMIT, SWIGLU_ALPHA = 7.0, 1.702       # gpt-oss's gated unit


# ----------------------------------------------------------------------------- maths

def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def layer_norm(x, w, b, eps):
    mu = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def silu(x):
    return x / (1.0 + np.exp(-x))


def relu(x):
    return np.maximum(x, 0.0)


def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


ACT = {"silu": silu, "relu": relu, "gelu": gelu}


def swiglu_oai(g, u):
    """gpt-oss's gated unit: g = min(g, 7), u = clip(u, -7, 7), g sigmoid(1.702 g) (u + 1)."""
    g = np.minimum(g, SWIGLU_LIMIT)
    u = np.clip(u, -SWIGLU_LIMIT, SWIGLU_LIMIT)
    with np.errstate(over="ignore"):
        return g / (1.0 + np.exp(-SWIGLU_ALPHA * g)) * (u + 1.0)


def gated(act: str, g, u):
    """The gated unit of an FFN or expert on its gate and up projections."""
    return swiglu_oai(g, u) if act == "swiglu_oai" else ACT[act](g) * u


def yarn_inv_freq(n_rot, base, scale, yarn):
    """YaRN as the YaRN paper and Hugging Face's rope utilities state it: per pair, the
    inverse frequency blends the interpolated one (scale * base^(-2i/n_rot)) and the original
    by a ramp over the pair index between the pairs that turn beta_fast and beta_slow times
    over the original context (floor / ceil when truncating, else as they are; clamped to
    [0, n_rot - 1]); the attention factor 0.1 ln(1 / scale) + 1 multiplies cos and sin."""
    orig, beta_fast, beta_slow, truncate = yarn if len(yarn) == 4 else (*yarn, True)

    def pair_turning(turns):
        return n_rot * math.log(orig / (turns * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_turning(beta_fast), pair_turning(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, n_rot - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(n_rot // 2) - low) / (high - low), 0, 1)
    extrapolate = 1 - ramp
    original = base ** (-2.0 * np.arange(n_rot // 2) / n_rot)
    return original * scale * (1 - extrapolate) + original * extrapolate, 0.1 * math.log(1 / scale) + 1


def rope(x, n_rot, base, neox, scale=1.0, yarn=None):
    """x [n_tok, n_heads, head_dim]; rotates the first n_rot dims of each head by
    angle (scale * pos) * base^(-2i/n_rot) for pair i: (2i, 2i+1), or (i, i + n_rot/2) if neox
    (YaRN: pos * yarn_inv_freq, cos and sin times its attention factor)."""
    out = x.copy()
    inv, mscale = yarn_inv_freq(n_rot, base, scale, yarn) if yarn else (None, 1.0)
    for i in range(n_rot // 2):
        a, b = (i, i + n_rot // 2) if neox else (2 * i, 2 * i + 1)
        if yarn:
            theta = np.arange(x.shape[0]) * inv[i]
        else:
            theta = scale * np.arange(x.shape[0]) * base ** (-2.0 * i / n_rot)
        c, s = mscale * np.cos(theta)[:, None], mscale * np.sin(theta)[:, None]
        out[:, :, a] = x[:, :, a] * c - x[:, :, b] * s
        out[:, :, b] = x[:, :, a] * s + x[:, :, b] * c
    return out


def attention(q, k, v, window=0, sinks=None):
    """Causal multi-head attention. q [n, n_head, d], k and v [n, n_head_kv, d];
    query head h reads kv head h // (n_head / n_head_kv). window W > 0: the query at position
    p sees only the keys at p - W < q <= p (sliding window). sinks [n_head] (gpt-oss): head
    h's softmax has the extra logit sinks[h] in its denominator, without a value.
    Returns [n, n_head * d]."""
    n, n_head, d = q.shape
    group = n_head // k.shape[1]
    out = np.zeros_like(q)
    causal = np.triu(np.ones((n, n), dtype=bool), k=1)
    if window:
        causal |= np.tril(np.ones((n, n), dtype=bool), k=-window)
    for h in range(n_head):
        scores = q[:, h] @ k[:, h // group].T / math.sqrt(d)
        scores[causal] = -np.inf
        top = scores.max(axis=1, keepdims=True)
        if sinks is not None:
            top = np.maximum(top, sinks[h])
        p = np.exp(scores - top)
        denominator = p.sum(axis=1, keepdims=True)
        if sinks is not None:
            denominator += np.exp(sinks[h] - top)
        out[:, h] = p / denominator @ v[:, h // group]
    return out.reshape(n, n_head * d)


def predictor_mask(m: Model, il: int, h, threshold):
    """True where the layer-il predictor says the neuron fires: [n_tok, n_ff]."""
    w = m.w
    logits = relu(h @ w[f"blk.{il}.fc1.weight"].T) @ w[f"blk.{il}.fc2.weight"].T
    return logits >= threshold


def linear(w, p, x):
    """x @ W.T (+ b) for the weight p + 'weight' and its bias p + 'bias' when present."""
    y = x @ w[p + "weight"].T
    return y + w[p + "bias"] if p + "bias" in w else y


def ffn(m: Model, il: int, x, mask=None):
    """x [n_tok, n_embd], the normalized FFN input; mask [n_tok, n_ff] or None (dense)."""
    w, p = m.w, f"blk.{il}."
    up = linear(w, p + "ffn_up.", x)
    if m.arch in ("falcon", "opt"):
        a = ACT[m.act](up)
    elif m.arch == "bamboo":
        a = relu(x @ w[p + "ffn_gate.weight"].T) * relu(up)
    else:
        a = gated(m.act, x @ w[p + "ffn_gate.weight"].T, up)
    if mask is not None:
        a = np.where(mask, a, 0.0)
    if p + "ffn_down_t.weight" in w:
        out = a @ w[p + "ffn_down_t.weight"]
        bias = w.get(p + "ffn_down_t.bias")
    else:
        out = a @ w[p + "ffn_down.weight"].T
        bias = w.get(p + "ffn_down.bias")
    return out if bias is None else out + bias


def router_logits(m: Model, il: int, x):
    """ffn_gate_inp x (+ ffn_gate_inp.bias, gpt-oss), [n_tok, N]."""
    return linear(m.w, f"blk.{il}.ffn_gate_inp.", x)


def moe_probs(m: Model, il: int, x):
    """The router's gating probabilities [n_tok, N] of the router input x: softmax of the
    router logits over all experts, or (m.gating == "sigmoid") the sigmoid of each."""
    logits = router_logits(m, il, x)                                # [n_tok, N]
    if m.gating == "sigmoid":
        return 1.0 / (1.0 + np.exp(-logits))
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def moe_route(m: Model, il: int, x):
    """(ids, weights), both [n_tok, K]: per token the K experts of largest gating probability
    (see moe_probs; smallthinker, gpt-oss: of largest router logit, the same order without
    rounding ties), in order of decreasing probability (ties: lower id first), and their
    probabilities renormalized to sum 1 (softmax: the softmax of the chosen logits; sigmoid: sigmoid(l_e) /
    sum of the chosen sigmoid(l_j)). With m.forced_routes, those experts instead (weights:
    their probabilities renormalized)."""
    p = moe_probs(m, il, x)
    if m.forced_routes is not None:
        ids = np.asarray(m.forced_routes[il][: len(x)], dtype=np.int64)
    else:
        key = router_logits(m, il, x) if m.arch in ("smallthinker", GPT_OSS) else p
        ids = np.argsort(-key, axis=1, kind="stable")[:, :m.n_expert_used]
    chosen = np.take_along_axis(p, ids, axis=1)
    return ids, chosen / chosen.sum(axis=1, keepdims=True)


def moe(m: Model, il: int, x, hook=None, router_in=None):
    """Mixture-of-experts FFN of x [n_tok, n_embd], the normalized FFN input; the router reads
    router_in (smallthinker: the raw layer input), x when None. Expert biases (gpt-oss:
    ffn_{gate,up,down}_exps.bias) are added where present."""
    w, p = m.w, f"blk.{il}."
    router_in = x if router_in is None else router_in
    ids, weights = moe_route(m, il, router_in)
    if hook:
        hook(il, "routes", ids)
        hook(il, "route_probs", moe_probs(m, il, router_in))
    gate, up = w[p + "ffn_gate_exps.weight"], w[p + "ffn_up_exps.weight"]
    if p + "ffn_down_exps_t.weight" in w:   # [N, F, n_embd]: one row per expert neuron
        down_t = w[p + "ffn_down_exps_t.weight"]
    else:                                   # [N, n_embd, F]
        down_t = np.swapaxes(w[p + "ffn_down_exps.weight"], 1, 2)
    zero = np.zeros((m.n_expert, 1))
    gate_b, up_b, down_b = (w.get(f"{p}ffn_{x}_exps.bias", zero) for x in ("gate", "up", "down"))
    out = np.zeros_like(x)
    for e in range(m.n_expert):
        tok, slot = np.nonzero(ids == e)
        if len(tok):
            xe = x[tok]
            a = gated(m.act, xe @ gate[e].T + gate_b[e], xe @ up[e].T + up_b[e])
            out[tok] += weights[tok, slot][:, None] * (a @ down_t[e] + down_b[e])
    return out


def forward(m: Model, tokens, sparse=False, threshold=None, hook=None):
    """Logits [n_tokens, n_vocab] (float64) for positions 0..n-1. `hook(layer, name, array)`
    if given sees 'ffn_in' (normalized FFN input) and 'pred_in' (predictor input) per layer,
    and per mixture-of-experts layer 'router_in' (what the router reads: ffn_in, or the raw
    layer input for smallthinker), 'routes' (the chosen expert ids [n_tok, K], see moe_route)
    and 'route_probs' (the gating probabilities [n_tok, N], see moe_probs)."""
    head = m.w.get("output.weight", m.w["token_embd.weight"])
    return hidden(m, tokens, sparse, threshold, hook) @ head.T


def hidden(m: Model, tokens, sparse=False, threshold=None, hook=None):
    """Final hidden states after the output norm [n_tokens, n_embd] (float64)."""
    if sparse and not m.pwri:
        raise ValueError("sparse mode needs a PowerInfer (PWRI) file with predictors")
    thr = m.threshold if threshold is None else threshold
    w = m.w
    tokens = np.asarray(tokens, dtype=np.int64)
    x = w["token_embd.weight"][tokens]
    n, n_embd = x.shape
    if m.arch == "opt":   # learned positions; row p + 2 holds position p
        x = x + w["position_embd.weight"][np.arange(n) + 2]
    d = m.head_dim or n_embd // m.n_head
    for il in range(m.n_layer):
        p = f"blk.{il}."
        if m.arch == "falcon":
            h1 = layer_norm(x, w[p + "attn_norm.weight"], w[p + "attn_norm.bias"], m.eps)
            qkv = h1 @ w[p + "attn_qkv.weight"].T
            nq, nkv = m.n_head * d, m.n_head_kv * d
            q = qkv[:, :nq].reshape(n, m.n_head, d)
            k = qkv[:, nq:nq + nkv].reshape(n, m.n_head_kv, d)
            v = qkv[:, nq + nkv:].reshape(n, m.n_head_kv, d)
            q = rope(q, m.n_rot, m.rope_base, True, m.rope_scale, m.yarn)
            k = rope(k, m.n_rot, m.rope_base, True, m.rope_scale, m.yarn)
            attn = attention(q, k, v) @ w[p + "attn_output.weight"].T
            if p + "attn_norm_2.weight" in w:
                h2 = layer_norm(x, w[p + "attn_norm_2.weight"], w[p + "attn_norm_2.bias"], m.eps)
            else:
                h2 = h1
            pred_in, ffn_in = x, h2
            mask = predictor_mask(m, il, pred_in, thr) if sparse else None
            if hook:
                hook(il, "pred_in", pred_in)
                hook(il, "ffn_in", ffn_in)
            x = x + attn + ffn(m, il, ffn_in, mask)
        else:
            if m.arch == "opt":
                h1 = layer_norm(x, w[p + "attn_norm.weight"], w[p + "attn_norm.bias"], m.eps)
            else:
                h1 = rms_norm(x, w[p + "attn_norm.weight"], m.eps)
            q = linear(w, p + "attn_q.", h1).reshape(n, m.n_head, d)
            k = linear(w, p + "attn_k.", h1).reshape(n, m.n_head_kv, d)
            v = linear(w, p + "attn_v.", h1).reshape(n, m.n_head_kv, d)
            if m.arch in QK_NORM_ARCHS:   # per head, over its head_dim values
                q = rms_norm(q, w[p + "attn_q_norm.weight"], m.eps)
                k = rms_norm(k, w[p + "attn_k_norm.weight"], m.eps)
            if m.arch != "opt" and not (m.nope and m.nope[il]):
                neox = m.arch in NEOX_ARCHS + (GPT_OSS,)
                q = rope(q, m.n_rot, m.rope_base, neox, m.rope_scale, m.yarn)
                k = rope(k, m.n_rot, m.rope_base, neox, m.rope_scale, m.yarn)
            # Only the arguments in use, so that replacements of attention(q, k, v) such as
            # tests/model/reference_f16kv.py keep working.
            extra = {}
            if m.windows and m.windows[il]:
                extra["window"] = m.windows[il]
            if p + "attn_sinks.weight" in w:
                extra["sinks"] = w[p + "attn_sinks.weight"]
            layer_in = x
            x = x + linear(w, p + "attn_output.", attention(q, k, v, **extra))
            if m.arch == "opt":
                ffn_in = layer_norm(x, w[p + "ffn_norm.weight"], w[p + "ffn_norm.bias"], m.eps)
            else:
                norm = "post_attention_norm" if m.arch == GPT_OSS else "ffn_norm"
                ffn_in = rms_norm(x, w[p + norm + ".weight"], m.eps)
            mask = predictor_mask(m, il, x, thr) if sparse else None
            if hook:
                hook(il, "pred_in", x)
                hook(il, "ffn_in", ffn_in)
            if m.n_expert:
                router_in = layer_in if m.arch == "smallthinker" else ffn_in
                if hook:
                    hook(il, "router_in", router_in)
                x = x + moe(m, il, ffn_in, hook, router_in)
            else:
                x = x + ffn(m, il, ffn_in, mask)
    if m.arch in ("falcon", "opt"):
        x = layer_norm(x, w["output_norm.weight"], w["output_norm.bias"], m.eps)
    else:
        x = rms_norm(x, w["output_norm.weight"], m.eps)
    return x


def routes(m: Model, tokens) -> np.ndarray:
    """The experts each layer chose, int32 [n_layer, n_tokens, K] (see moe_route)."""
    if m.n_expert == 0:
        raise ValueError(f"{m.arch} has no mixture-of-experts layers")
    out = np.zeros((m.n_layer, len(tokens), m.n_expert_used), dtype=np.int32)

    def hook(il, name, value):
        if name == "routes":
            out[il] = value
    hidden(m, tokens, hook=hook)
    return out


def greedy(m: Model, tokens, n_new: int, sparse=False, threshold=None) -> list:
    seq = list(tokens)
    for _ in range(n_new):
        seq.append(int(np.argmax(forward(m, seq, sparse, threshold)[-1])))
    return seq[len(tokens):]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids, e.g. 1,5,9")
    ap.add_argument("--sparse", action="store_true", help="apply the predictor mask (PWRI files)")
    ap.add_argument("--threshold", type=float, help="override powerinfer.sparse_threshold (e.g. -inf)")
    ap.add_argument("--out", help="write float32 logits [n_tokens, n_vocab] here")
    ap.add_argument("--greedy", type=int, metavar="N", help="print N greedy next-token ids")
    ap.add_argument("--hidden", help="write float32 normalized hidden states [n_tokens, n_embd] here")
    ap.add_argument("--routes", help="write the chosen experts int32 [n_layer, n_tokens, K] here "
                    "(qwen3moe, smallthinker, Mixtral, gpt-oss)")
    ap.add_argument("--force-routes", help="use these experts, int32 [n_layer, n_tokens, K], instead of the "
                    "router's choice (qwen3moe, smallthinker, Mixtral, gpt-oss)")
    ap.add_argument("--route-probs", help="write the router's gating probabilities float64 [n_layer, n_tokens, "
                    "expert_count] here: softmax over all experts, or each logit's sigmoid for sigmoid gating")
    args = ap.parse_args(argv)
    if not args.out and not args.greedy and not args.hidden and not args.routes and not args.route_probs:
        ap.error("give --out, --greedy, --hidden, --routes and/or --route-probs")
    tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    if not tokens:
        ap.error("--tokens is empty")
    try:
        m = load_model(args.model)
    except (ValueError, OSError, gguf_io.GGUFError) as e:
        print(f"reference_forward: error: {e}", file=sys.stderr)
        return 1
    n_vocab = m.w["token_embd.weight"].shape[0]
    if any(t < 0 or t >= n_vocab for t in tokens):
        ap.error(f"token ids must be in [0, {n_vocab})")
    if args.sparse and not m.pwri:
        ap.error("--sparse needs a PowerInfer (PWRI) file")
    if (args.routes or args.force_routes or args.route_probs) and m.n_expert == 0:
        ap.error(f"--routes, --force-routes and --route-probs need a mixture-of-experts model (qwen3moe, "
                 f"smallthinker, gpt-oss, llama with experts), "
                 f"not {m.arch}")
    if args.force_routes:
        forced = np.fromfile(args.force_routes, dtype="<i4")
        if forced.size != m.n_layer * len(tokens) * m.n_expert_used:
            ap.error(f"--force-routes: {forced.size} ids, expected n_layer * n_tokens * K = "
                     f"{m.n_layer * len(tokens) * m.n_expert_used}")
        forced = forced.reshape(m.n_layer, len(tokens), m.n_expert_used)
        if forced.min() < 0 or forced.max() >= m.n_expert:
            ap.error(f"--force-routes: expert ids must be in [0, {m.n_expert})")
        m.forced_routes = forced
    if args.out:
        logits = forward(m, tokens, args.sparse, args.threshold)
        logits.astype("<f4").tofile(args.out)
    if args.hidden:
        hidden(m, tokens, args.sparse, args.threshold).astype("<f4").tofile(args.hidden)
    if args.greedy:
        print(" ".join(str(t) for t in greedy(m, tokens, args.greedy, args.sparse, args.threshold)))
    if args.routes:
        routes(m, tokens).astype("<i4").tofile(args.routes)
    if args.route_probs:
        probs = []
        hidden(m, tokens, hook=lambda il, name, v: probs.append(v) if name == "route_probs" else None)
        np.stack(probs).astype("<f8").tofile(args.route_probs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
