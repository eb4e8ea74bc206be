"""The Hugging Face checkpoints of OPT, Qwen2, Qwen3 and the mixture-of-experts models as GGUF
tensors (convert_hf.py handles llama and bamboo itself, hf_gpt_oss.py gpt-oss): which tensors a
checkpoint must hold, and the plan that writes them.

OPT (OPTForCausalLM; facts from HF's modeling_opt and the original PowerInfer's OPT files):
  model.decoder.embed_tokens / embed_positions ([max_position_embeddings + 2, hidden]: position p
  is row p + 2) -> token_embd / position_embd; decoder.final_layer_norm -> output_norm;
  layers.N.self_attn_layer_norm -> attn_norm, self_attn.{q,k,v,out}_proj -> attn_{q,k,v,output},
  final_layer_norm -> ffn_norm, fc1 -> ffn_up, fc2 -> ffn_down (PowerInfer: ffn_down_t, its bias
  named ffn_down_t.bias as the original's converter does); all with weight and bias. lm_head is
  written as output.weight only when it differs from the embedding (OPT ties them). Older
  checkpoints name the tensors without the "model." prefix. Only the pre-LN layout is supported:
  OPT-350m (do_layer_norm_before false, word_embed_proj_dim != hidden_size: project_in/out)
  is refused.
Qwen2 (Qwen2ForCausalLM, also Qwen1.5 and Qwen2.5): llama's tensors plus q/k/v biases; the q/k
  rows stay in HF order (GGUF qwen2 files use NeoX RoPE, not llama's permuted rows).
Qwen3 (Qwen3ForCausalLM -> qwen3, as llama.cpp writes it): qwen2's layout without the biases
  (attention_bias true is refused), head_dim from config.json (it may differ from
  hidden_size / num_attention_heads), and a per-head RMSNorm of q and of k before RoPE:
  self_attn.{q,k}_norm.weight [head_dim] -> attn_{q,k}_norm.weight.
Mixture of experts (FFN replaced by a router and n_expert experts; Qwen3-MoE and Mixtral: SwiGLU
  experts, each token runs the top-k experts of softmax(router logits), weights renormalised to
  sum to 1):
  Qwen3-MoE (Qwen3MoeForCausalLM -> qwen3moe): qwen3's attention; mlp.gate -> ffn_gate_inp,
    mlp.experts.E.{gate,up,down}_proj -> ffn_{gate,up,down}_exps. Only the layout where every
    layer is sparse and the top-k weights are renormalised is supported.
  Mixtral (MixtralForCausalLM -> llama with llama.expert_count, as llama.cpp writes it):
    llama's attention (q/k rows permuted); block_sparse_moe.gate -> ffn_gate_inp,
    block_sparse_moe.experts.E.{w1,w3,w2} -> ffn_{gate,up,down}_exps.
  SmallThinker (SmallThinkerForCausalLM -> smallthinker, PowerInfer's SmallThinker-21BA3B and
    -4BA0.6B; the file as llama.cpp writes it): qwen3's attention without the q/k norms (no
    biases, q/k rows in HF order: NeoX RoPE, head_dim from config.json);
    block_sparse_moe.primary_router -> ffn_gate_inp, block_sparse_moe.experts.E.{gate,up,down}
    -> ffn_{gate,up,down}_exps. Unlike the others, the router reads the raw layer input (before
    input_layernorm), the experts are ReGLU (down(up(y) * relu(gate(y)))), and the top-k router
    logits are weighted by their softmax (moe_primary_router_apply_softmax true:
    expert_gating_func 1) or by their sigmoids normalised to sum 1 (false or absent:
    expert_gating_func 2); feed_forward_length = expert_feed_forward_length = moe_ffn_hidden_size.
    Only llama.cpp's layer pattern is supported: with sliding-window layers
    (sliding_window_layout), exactly the layers il % 4 != 0 slide (attention.sliding_window =
    sliding_window_size) and use RoPE, and the layers il % 4 == 0 attend globally without RoPE
    (rope_layout 0: NoPE); without them every layer uses RoPE. Every layer must be sparse (a
    layer without primary_router, i.e. dense, is refused). With convert_hf.py --transpose-down,
    each expert's down projection is written transposed, blk.N.ffn_down_exps_t.weight
    [n_expert, n_ff_exp, n_embd] (one contiguous row per expert neuron: PowerInfer's ffn_down_t
    convention, for the sparse ReGLU expert kernel), instead of ffn_down_exps.
  The experts are stacked into 3-D tensors, outermost first: ffn_gate_exps / ffn_up_exps
  [n_expert, n_ff_exp, n_embd], ffn_down_exps [n_expert, n_embd, n_ff_exp]; the router
  ffn_gate_inp [n_expert, n_embd] stays F32 in every output type (as llama.cpp keeps it).
"""
from __future__ import annotations

import numpy as np


class ArchError(Exception):
    pass


def opt_hparams(cfg: dict, path: str) -> dict:
    """HParams fields of an OPT config.json, or an error naming what is not supported."""
    try:
        n_embd, n_head = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        out = dict(n_vocab=int(cfg["vocab_size"]), n_embd=n_embd, n_ff=int(cfg["ffn_dim"]),
                   n_layer=int(cfg["num_hidden_layers"]), n_head=n_head, n_head_kv=n_head,
                   head_dim=n_embd // n_head, n_ctx=int(cfg.get("max_position_embeddings", 2048)),
                   eps=1e-5, rope_base=10000.0, act=cfg.get("activation_function", "relu"),
                   tied=bool(cfg.get("tie_word_embeddings", True)))
    except KeyError as e:
        raise ArchError(f"{path}: missing key {e.args[0]}") from None
    if not cfg.get("do_layer_norm_before", True) or cfg.get("word_embed_proj_dim", n_embd) != n_embd:
        raise ArchError(f"{path}: OPT with do_layer_norm_before false or word_embed_proj_dim != hidden_size "
                        "(the OPT-350m layout: post-LN with project_in/out) is not supported")
    if not cfg.get("enable_bias", True) or not cfg.get("layer_norm_elementwise_affine", True):
        raise ArchError(f"{path}: OPT without biases or without layer norm weights is not supported")
    if cfg.get("_remove_final_layer_norm", False):
        raise ArchError(f"{path}: OPT without the final layer norm is not supported")
    if n_embd % n_head:
        raise ArchError(f"{path}: hidden_size {n_embd} is not a multiple of num_attention_heads {n_head}")
    return out


def opt_prefix(src: dict) -> str:
    """'model.decoder.' or, in older checkpoints, 'decoder.'."""
    return "model.decoder." if any(k.startswith("model.decoder.") for k in src) else "decoder."


def opt_expected_shapes(hp, src: dict) -> dict:
    d = opt_prefix(src)
    e, f = hp.n_embd, hp.n_ff
    shapes = {d + "embed_tokens.weight": (hp.n_vocab, e), d + "embed_positions.weight": (hp.n_ctx + 2, e),
              d + "final_layer_norm.weight": (e,), d + "final_layer_norm.bias": (e,)}
    if "lm_head.weight" in src:
        shapes["lm_head.weight"] = (hp.n_vocab, e)
    for i in range(hp.n_layer):
        p = f"{d}layers.{i}."
        for name, rows, cols in (("self_attn.q_proj", e, e), ("self_attn.k_proj", e, e),
                                 ("self_attn.v_proj", e, e), ("self_attn.out_proj", e, e),
                                 ("fc1", f, e), ("fc2", e, f)):
            shapes[p + name + ".weight"] = (rows, cols)
            shapes[p + name + ".bias"] = (rows,)
        for norm in ("self_attn_layer_norm", "final_layer_norm"):
            shapes[p + norm + ".weight"] = (e,)
            shapes[p + norm + ".bias"] = (e,)
    return shapes


def opt_plan(src: dict, hp, add, predictors):
    """Calls add(gguf_name, shape, produce) for every tensor of the GGUF/PWRI file."""
    d = opt_prefix(src)

    def copy(name):
        return lambda: src[name].load()

    emb = d + "embed_tokens.weight"
    add("token_embd.weight", src[emb].shape, copy(emb))
    add("position_embd.weight", src[d + "embed_positions.weight"].shape, copy(d + "embed_positions.weight"))
    add("output_norm.weight", (hp.n_embd,), copy(d + "final_layer_norm.weight"))
    add("output_norm.bias", (hp.n_embd,), copy(d + "final_layer_norm.bias"))
    if "lm_head.weight" in src and not np.array_equal(src["lm_head.weight"].load(), src[emb].load()):
        add("output.weight", src["lm_head.weight"].shape, copy("lm_head.weight"))
    for i in range(hp.n_layer):
        p, b = f"{d}layers.{i}.", f"blk.{i}."
        for hf, gg in (("self_attn_layer_norm", "attn_norm"), ("self_attn.q_proj", "attn_q"),
                       ("self_attn.k_proj", "attn_k"), ("self_attn.v_proj", "attn_v"),
                       ("self_attn.out_proj", "attn_output"), ("final_layer_norm", "ffn_norm"),
                       ("fc1", "ffn_up")):
            for part in ("weight", "bias"):
                add(f"{b}{gg}.{part}", src[f"{p}{hf}.{part}"].shape, copy(f"{p}{hf}.{part}"))
        down = src[p + "fc2.weight"]
        if predictors is None:
            add(b + "ffn_down.weight", down.shape, copy(p + "fc2.weight"))
            add(b + "ffn_down.bias", (hp.n_embd,), copy(p + "fc2.bias"))
        else:
            add(b + "ffn_down_t.weight", (hp.n_ff, hp.n_embd), lambda d=down: np.ascontiguousarray(d.load().T))
            add(b + "ffn_down_t.bias", (hp.n_embd,), copy(p + "fc2.bias"))
            fc1, fc2 = predictors[i]
            add(b + "fc1.weight", fc1.shape, fc1.load)
            add(b + "fc2.weight", fc2.shape, fc2.load)


def qwen2_bias_shapes(hp) -> dict:
    """The q/k/v biases Qwen2 adds to llama's tensors."""
    q, kv = hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim
    shapes = {}
    for i in range(hp.n_layer):
        p = f"model.layers.{i}.self_attn."
        shapes.update({p + "q_proj.bias": (q,), p + "k_proj.bias": (kv,), p + "v_proj.bias": (kv,)})
    return shapes


def check_qwen2_config(cfg: dict, path: str):
    if cfg.get("use_sliding_window", False):
        raise ArchError(f"{path}: use_sliding_window is true: sliding-window attention is not supported")


def check_qwen3_config(cfg: dict, path: str):
    check_qwen2_config(cfg, path)
    if cfg.get("attention_bias", False):
        raise ArchError(f"{path}: attention_bias is true: Qwen3 attention with q/k/v/o biases is not supported")


# HF's MoE block per layer: (module prefix, router name, expert projection names for gate, up, down).
MOE_LAYOUTS = {"mixtral": ("block_sparse_moe.", "gate", ("w1", "w3", "w2")),
               "qwen3moe": ("mlp.", "gate", ("gate_proj", "up_proj", "down_proj")),
               "smallthinker": ("block_sparse_moe.", "primary_router", ("gate", "up", "down"))}


def moe_hparams(cfg: dict, path: str, kind: str) -> dict:
    """HParams fields of a Mixtral or Qwen3-MoE config.json (the defaults are transformers'),
    or an error naming the key this converter does not support."""
    # The expert count is num_local_experts (Mixtral; Qwen3-MoE as transformers 5 saves it) or
    # num_experts (Qwen3-MoE's own checkpoints).
    names = ("num_local_experts", "num_experts") if kind == "mixtral" else ("num_experts", "num_local_experts")
    n_expert = next((int(cfg[k]) for k in names if cfg.get(k) is not None), 8 if kind == "mixtral" else 128)
    if kind == "mixtral":
        n_used = int(cfg.get("num_experts_per_tok", 2))
        n_ff_exp = int(cfg["intermediate_size"])
    else:
        n_used = int(cfg.get("num_experts_per_tok", 8))
        n_ff_exp = int(cfg.get("moe_intermediate_size", 768))
        step = int(cfg.get("decoder_sparse_step", 1))
        if step != 1:
            raise ArchError(f"{path}: decoder_sparse_step is {step}: only every layer sparse (1) is supported")
        if cfg.get("mlp_only_layers"):
            raise ArchError(f"{path}: mlp_only_layers {cfg['mlp_only_layers']!r}: dense layers in a "
                            "Qwen3-MoE model are not supported (needs [])")
        if not cfg.get("norm_topk_prob", False):
            raise ArchError(f"{path}: norm_topk_prob is false or absent (transformers' default): only "
                            "renormalised top-k expert weights (norm_topk_prob true) are supported")
    if not 1 <= n_used <= n_expert:
        raise ArchError(f"{path}: num_experts_per_tok {n_used} is not between 1 and the expert count {n_expert}")
    return dict(n_expert=n_expert, n_expert_used=n_used, n_ff_exp=n_ff_exp)


def smallthinker_hparams(cfg: dict, path: str) -> dict:
    """The mixture-of-experts HParams fields of a SmallThinker config.json plus expert_gating
    (1 softmax, 2 sigmoid) and sliding_window (0: none), or an error naming the key whose
    value the smallthinker GGUF cannot express."""
    n_expert = int(cfg["moe_num_primary_experts"])
    n_used = int(cfg["moe_num_active_primary_experts"])
    if not 1 <= n_used <= n_expert:
        raise ArchError(f"{path}: moe_num_active_primary_experts {n_used} is not between 1 and "
                        f"moe_num_primary_experts {n_expert}")
    n_layer = int(cfg["num_hidden_layers"])
    layouts = {k: cfg.get(k) for k in ("sliding_window_layout", "rope_layout")}
    for key, lay in layouts.items():
        if lay is not None and (not isinstance(lay, list) or len(lay) != n_layer
                                or any(v not in (0, 1) for v in lay)):
            raise ArchError(f"{path}: {key} {lay!r} is not a list of 0/1, one for each of the {n_layer} layers")
    sliding, rope = layouts["sliding_window_layout"] or [], layouts["rope_layout"]
    # llama.cpp's smallthinker: with a sliding window, layers il % 4 != 0 slide with RoPE and
    # layers il % 4 == 0 are global without RoPE; without one, every layer is global with RoPE.
    pattern = [0 if il % 4 == 0 else 1 for il in range(n_layer)]
    window = 0
    if any(sliding):
        if list(sliding) != pattern:
            raise ArchError(f"{path}: sliding_window_layout {sliding!r} is not supported: the smallthinker "
                            f"GGUF can only express sliding windows in the layers il % 4 != 0 ({pattern!r})")
        if rope is None or list(rope) != pattern:
            raise ArchError(f"{path}: rope_layout {rope!r} is not supported: with sliding windows the "
                            f"smallthinker GGUF has RoPE exactly in the sliding layers il % 4 != 0 ({pattern!r})")
        window = cfg.get("sliding_window_size")
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise ArchError(f"{path}: sliding_window_size {window!r} is not a positive window size "
                            "(sliding_window_layout has sliding layers)")
    elif rope is not None and not all(rope):
        raise ArchError(f"{path}: rope_layout {rope!r} is not supported: without sliding-window layers "
                        "the smallthinker GGUF has RoPE in every layer (needs all 1)")
    return dict(n_expert=n_expert, n_expert_used=n_used, n_ff_exp=int(cfg["moe_ffn_hidden_size"]),
                expert_gating=1 if cfg.get("moe_primary_router_apply_softmax", False) else 2,
                sliding_window=window)


def check_moe_routers(src: dict, hp, where: str):
    """A SmallThinker layer without primary_router is dense, which llama.cpp's smallthinker
    cannot load: refuse it naming the missing tensor (before the tensor list is compared)."""
    if hp.moe != "smallthinker":
        return
    pre, router, _ = MOE_LAYOUTS[hp.moe]
    for i in range(hp.n_layer):
        name = f"model.layers.{i}.{pre}{router}.weight"
        if name not in src:
            raise ArchError(f"{where}: missing tensor {name}: layer {i} has no router (a dense layer), "
                            "which the smallthinker GGUF cannot express (every layer must be sparse)")


def qk_norm_shapes(hp) -> dict:
    """Qwen3's per-head RMSNorm weights of q and k."""
    shapes = {}
    for i in range(hp.n_layer):
        p = f"model.layers.{i}.self_attn."
        shapes.update({p + "q_norm.weight": (hp.head_dim,), p + "k_norm.weight": (hp.head_dim,)})
    return shapes


def moe_shapes(hp, i: int) -> dict:
    """The router and expert tensors of layer i (they replace mlp.{gate,up,down}_proj)."""
    pre, router, (g, u, d) = MOE_LAYOUTS[hp.moe]
    p = f"model.layers.{i}.{pre}"
    e, f = hp.n_embd, hp.n_ff_exp
    shapes = {f"{p}{router}.weight": (hp.n_expert, e)}
    for x in range(hp.n_expert):
        q = f"{p}experts.{x}."
        shapes.update({q + g + ".weight": (f, e), q + u + ".weight": (f, e), q + d + ".weight": (e, f)})
    return shapes


def stack_experts(tensors: list, transpose: bool = False) -> np.ndarray:
    """Loads the experts' matrices one at a time into one float32 array [n_expert, rows, cols]
    ([n_expert, cols, rows] with transpose: each matrix transposed; only that array is held:
    one of a layer's three expert tensors)."""
    shape = tuple(tensors[0].shape)
    out = np.empty((len(tensors),) + (shape[::-1] if transpose else shape), np.float32)
    for x, t in enumerate(tensors):
        out[x] = t.load().T if transpose else t.load()
    return out


def moe_plan(src: dict, hp, add, i: int, transpose_down: bool = False):
    """Calls add(gguf_name, shape, produce) for layer i's router and stacked experts (with
    transpose_down, ffn_down_exps_t [n_expert, n_ff_exp, n_embd] instead of ffn_down_exps)."""
    pre, router_name, names = MOE_LAYOUTS[hp.moe]
    p, b = f"model.layers.{i}.{pre}", f"blk.{i}."
    router = src[f"{p}{router_name}.weight"]
    add(b + "ffn_gate_inp.weight", router.shape, router.load)
    for gg, hf in zip(("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"), names):
        ts = [src[f"{p}experts.{x}.{hf}.weight"] for x in range(hp.n_expert)]
        if gg == "ffn_down_exps" and transpose_down:
            add(f"{b}ffn_down_exps_t.weight", (hp.n_expert,) + ts[0].shape[::-1],
                lambda ts=ts: stack_experts(ts, transpose=True))
        else:
            add(f"{b}{gg}.weight", (hp.n_expert,) + ts[0].shape, lambda ts=ts: stack_experts(ts))
