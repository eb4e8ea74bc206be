"""OpenAI's gpt-oss checkpoints (GptOssForCausalLM, model_type gpt_oss: gpt-oss-20b, -120b) as
llama.cpp's gpt-oss GGUF: the config checks, the tensors a checkpoint must hold, the MXFP4
repacking and the plan that writes the file (convert_hf.py drives it).

Hugging Face layout (facts from transformers' GptOss modeling and mxfp4 integration code):
  model.embed_tokens, model.norm, lm_head; per layer model.layers.N.: input_layernorm,
  self_attn.{q,k,v,o}_proj.{weight,bias}, self_attn.sinks [n_head] (a learned logit per head),
  post_attention_layernorm (the FFN's input norm), mlp.router.{weight [N, n_embd], bias [N]},
  and the N experts stacked, in one of two layouts:
  * MXFP4 (quantization_config.quant_method "mxfp4", as released):
      mlp.experts.gate_up_proj_blocks uint8 [N, 2F, n_embd/32, 16], gate_up_proj_scales uint8
      [N, 2F, n_embd/32], gate_up_proj_bias [N, 2F], down_proj_blocks [N, n_embd, F/32, 16],
      down_proj_scales [N, n_embd, F/32], down_proj_bias [N, n_embd]. Rows are output neurons.
      A block is 32 values of one row: the scale byte s means 2^(s - 127), byte i of the 16
      holds the E2M1 codes of elements 2i (low nibble) and 2i + 1 (high nibble); E2M1 is
      0, .5, 1, 1.5, 2, 3, 4, 6 and, with bit 3 set, the same negated.
  * dequantized (bf16 re-uploads): mlp.experts.gate_up_proj [N, n_embd, 2F] and down_proj
      [N, F, n_embd] (x @ W: columns are output neurons), with the same biases.
  In gate_up, row (column) 2j is gate neuron j and 2j + 1 is up neuron j, and so for its bias.
GGUF (llama.cpp's names; shapes outermost first): token_embd, output_norm, output; per layer
  attn_norm, attn_{q,k,v,output}.{weight,bias}, attn_sinks.weight [n_head], post_attention_norm,
  ffn_gate_inp.{weight,bias}, ffn_{gate,up}_exps.weight [N, F, n_embd] and .bias [N, F],
  ffn_down_exps.weight [N, n_embd, F] and .bias [N, n_embd]. q/k rows stay in HF order (NeoX
  RoPE). ggml's MXFP4 block (type 39, 17 bytes) is the same exponent byte followed by qs[16]
  with element j in the low nibble of qs[j] and element j + 16 in its high nibble (values
  are E2M1 doubled times 2^(e - 128): the same numbers). MXFP4 experts are therefore written
  bit for bit, only the nibbles reordered and gate/up split; dequantized experts follow the
  output type like any other matrix (MXFP4 with --outtype mxfp4, quantized by ggml's rule).
  Biases and sinks are always F32.
Refused with an error naming the key: swiglu_limit other than 7 (the engine hard-codes the
clamp at 7 and alpha 1.702), layer_types other than sliding on even layers and full attention on
odd ones (the only pattern the GGUF can express), attention_bias false, and other quantization
methods.
"""
from __future__ import annotations

import numpy as np

from hf_archs import ArchError
from quants import GGMLType

SWIGLU_LIMIT = 7.0


def gpt_oss_hparams(cfg: dict, path: str) -> dict:
    """The mixture-of-experts and sliding-window HParams fields of a gpt-oss config.json (absent
    keys take transformers' defaults: 4 experts per token, a window of 128), or an error naming
    the key whose value the gpt-oss GGUF (or the engine) cannot express."""
    n_layer = int(cfg["num_hidden_layers"])
    n_expert = int(cfg["num_local_experts"])
    n_used = int(cfg.get("num_experts_per_tok", cfg.get("experts_per_token", 4)))
    if not 1 <= n_used <= n_expert:
        raise ArchError(f"{path}: num_experts_per_tok {n_used} is not between 1 and num_local_experts {n_expert}")
    limit = cfg.get("swiglu_limit", SWIGLU_LIMIT)
    if limit is None or float(limit) != SWIGLU_LIMIT:
        raise ArchError(f"{path}: swiglu_limit {limit!r} is not supported (the engine clamps at {SWIGLU_LIMIT})")
    if cfg.get("attention_bias", True) is not True:
        raise ArchError(f"{path}: attention_bias {cfg['attention_bias']!r}: gpt-oss without q/k/v/o biases "
                        "is not supported")
    quant = cfg.get("quantization_config") or {}
    if quant and quant.get("quant_method") != "mxfp4":
        raise ArchError(f"{path}: quantization_config quant_method {quant.get('quant_method')!r} is not "
                        "supported (only the released mxfp4 experts, or unquantized checkpoints)")
    # llama.cpp's gpt-oss: layers 0, 2, 4, ... slide, the odd layers attend globally.
    pattern = ["sliding_attention" if il % 2 == 0 else "full_attention" for il in range(n_layer)]
    layer_types = cfg.get("layer_types")
    if layer_types is not None and list(layer_types) != pattern:
        raise ArchError(f"{path}: layer_types {layer_types!r} is not supported: the gpt-oss GGUF has sliding "
                        "attention exactly in the even layers and full attention in the odd ones")
    window = cfg.get("sliding_window", 128)
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise ArchError(f"{path}: sliding_window {window!r} is not a positive window size "
                        "(the even layers slide)")
    return dict(n_expert=n_expert, n_expert_used=n_used, n_ff_exp=int(cfg["intermediate_size"]),
                sliding_window=window)


def has_mxfp4_experts(src: dict) -> bool:
    return "model.layers.0.mlp.experts.gate_up_proj_blocks" in src


def gpt_oss_expected_shapes(hp, src: dict) -> dict:
    """Every tensor of the checkpoint and its shape; the expert layout (MXFP4 or dequantized)
    is the one layer 0 has."""
    e, f, n = hp.n_embd, hp.n_ff_exp, hp.n_expert
    q, kv = hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim
    mxfp4 = has_mxfp4_experts(src)
    if mxfp4 and (e % 32 or f % 32):
        raise ArchError(f"hidden_size {e} and intermediate_size {f} must be multiples of 32 for MXFP4 experts")
    shapes = {"model.embed_tokens.weight": (hp.n_vocab, e), "model.norm.weight": (e,)}
    if not hp.tied or "lm_head.weight" in src:
        shapes["lm_head.weight"] = (hp.n_vocab, e)
    for i in range(hp.n_layer):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (e,), p + "post_attention_layernorm.weight": (e,),
                       p + "self_attn.sinks": (hp.n_head,),
                       p + "mlp.router.weight": (n, e), p + "mlp.router.bias": (n,)})
        for name, rows, cols in (("q_proj", q, e), ("k_proj", kv, e), ("v_proj", kv, e), ("o_proj", e, q)):
            shapes[f"{p}self_attn.{name}.weight"] = (rows, cols)
            shapes[f"{p}self_attn.{name}.bias"] = (rows,)
        x = p + "mlp.experts."
        shapes.update({x + "gate_up_proj_bias": (n, 2 * f), x + "down_proj_bias": (n, e)})
        if mxfp4:
            shapes.update({x + "gate_up_proj_blocks": (n, 2 * f, e // 32, 16),
                           x + "gate_up_proj_scales": (n, 2 * f, e // 32),
                           x + "down_proj_blocks": (n, e, f // 32, 16), x + "down_proj_scales": (n, e, f // 32)})
        else:
            shapes.update({x + "gate_up_proj": (n, e, 2 * f), x + "down_proj": (n, f, e)})
    return shapes


def load_codes(t) -> np.ndarray:
    """A uint8 checkpoint tensor (MXFP4 blocks or scales) as uint8, refusing other contents."""
    a = t.load()   # (float32 holds every byte value exactly)
    if not np.array_equal(a, np.clip(np.round(a), 0, 255)):
        raise ArchError(f"{t.origin}: not uint8 MXFP4 data")
    return a.astype(np.uint8)


def mxfp4_hf_to_ggml(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """HF MXFP4 rows (uint8 blocks [..., G, 16], scales [..., G]) -> ggml MXFP4 rows, uint8
    [..., G * 17]: per block the same exponent byte, then the 32 codes renibbled from
    (2i low, 2i + 1 high) to (j low, j + 16 high)."""
    codes = np.stack([blocks & 0x0F, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], 32)
    qs = codes[..., :16] | (codes[..., 16:] << 4)
    out = np.concatenate([scales[..., None], qs], axis=-1)
    return np.ascontiguousarray(out.reshape(*blocks.shape[:-2], blocks.shape[-2] * 17))


def gpt_oss_plan(src: dict, hp, add):
    """Calls add(gguf_name, shape, produce[, encoded]) for every tensor of the GGUF file;
    `encoded` = GGMLType.MXFP4 marks produce() as returning the tensor's MXFP4 bytes."""
    def copy(name):
        return lambda: src[name].load()

    e, f, n = hp.n_embd, hp.n_ff_exp, hp.n_expert
    add("token_embd.weight", src["model.embed_tokens.weight"].shape, copy("model.embed_tokens.weight"))
    add("output_norm.weight", (e,), copy("model.norm.weight"))
    if "lm_head.weight" in src:
        add("output.weight", src["lm_head.weight"].shape, copy("lm_head.weight"))
    mxfp4 = has_mxfp4_experts(src)
    for i in range(hp.n_layer):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        add(b + "attn_norm.weight", (e,), copy(p + "input_layernorm.weight"))
        for hf, gg in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_output")):
            for part in ("weight", "bias"):
                name = f"{p}self_attn.{hf}.{part}"
                add(f"{b}{gg}.{part}", src[name].shape, copy(name))
        add(b + "attn_sinks.weight", (hp.n_head,), copy(p + "self_attn.sinks"))
        add(b + "post_attention_norm.weight", (e,), copy(p + "post_attention_layernorm.weight"))
        add(b + "ffn_gate_inp.weight", (n, e), copy(p + "mlp.router.weight"))
        add(b + "ffn_gate_inp.bias", (n,), copy(p + "mlp.router.bias"))
        x = p + "mlp.experts."
        gate_up_b = src[x + "gate_up_proj_bias"]
        for gg, half in (("ffn_gate_exps", 0), ("ffn_up_exps", 1)):
            if mxfp4:
                add(f"{b}{gg}.weight", (n, f, e), lambda x=x, half=half: mxfp4_hf_to_ggml(
                    load_codes(src[x + "gate_up_proj_blocks"])[:, half::2],
                    load_codes(src[x + "gate_up_proj_scales"])[:, half::2]), GGMLType.MXFP4)
            else:   # [N, n_embd, 2F]: the columns of one half, as rows
                add(f"{b}{gg}.weight", (n, f, e), lambda x=x, half=half: np.ascontiguousarray(
                    np.swapaxes(src[x + "gate_up_proj"].load()[:, :, half::2], 1, 2)))
            add(f"{b}{gg}.bias", (n, f), lambda t=gate_up_b, half=half: np.ascontiguousarray(t.load()[:, half::2]))
        if mxfp4:
            add(b + "ffn_down_exps.weight", (n, e, f), lambda x=x: mxfp4_hf_to_ggml(
                load_codes(src[x + "down_proj_blocks"]), load_codes(src[x + "down_proj_scales"])), GGMLType.MXFP4)
        else:   # [N, F, n_embd] -> [N, n_embd, F]
            add(b + "ffn_down_exps.weight", (n, e, f),
                lambda x=x: np.ascontiguousarray(np.swapaxes(src[x + "down_proj"].load(), 1, 2)))
        add(b + "ffn_down_exps.bias", (n, e), copy(x + "down_proj_bias"))
