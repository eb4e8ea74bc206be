"""The Hugging Face checkpoints of OPT and Qwen2 as GGUF tensors (convert_hf.py handles llama
and bamboo itself): which tensors a checkpoint must hold, and the plan that writes them.

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
