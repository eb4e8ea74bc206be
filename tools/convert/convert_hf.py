#!/usr/bin/env python3
"""Converts a Hugging Face checkpoint (llama, bamboo, OPT, Qwen2, Qwen3, Qwen3-MoE, Mixtral,
SmallThinker, gpt-oss) to GGUF, or with --predictors to a PowerInfer GGUF (magic PWRI) that
carries the per-layer activation predictors.

    convert_hf.py MODEL_DIR --outfile model.gguf [--outtype f16]
    convert_hf.py MODEL_DIR --predictors PRED_DIR --outfile model.powerinfer.gguf --outtype q4_0
    convert_hf.py SMALLTHINKER_DIR --outfile model.gguf --outtype q4_0 [--transpose-down]

MODEL_DIR: config.json, the tokenizer (tokenizer.model, SentencePiece; else tokenizer.json, a
byte-level BPE as OPT, Qwen2 and Llama 3 have, with tokenizer_config.json when present), and
model.safetensors | model-0000K-of-0000N.safetensors (+ model.safetensors.index.json) |
pytorch_model*.bin. Architectures: LlamaForCausalLM / MistralForCausalLM (llama), bamboo,
OPTForCausalLM (opt: see hf_archs.py; the OPT-350m layout is refused), Qwen2ForCausalLM (qwen2),
Qwen3ForCausalLM (qwen3), Qwen3MoeForCausalLM (qwen3moe), MixtralForCausalLM (llama with
llama.expert_count), SmallThinkerForCausalLM (smallthinker: PowerInfer's SmallThinker-21BA3B and
-4BA0.6B; only llama.cpp's sliding-window / NoPE layer pattern), GptOssForCausalLM (gpt-oss:
OpenAI's gpt-oss-20b and -120b, MXFP4 experts copied bit for bit; see hf_gpt_oss.py); see
hf_archs.py for the other mixture-of-experts tensors. The tokenizer's chat template is read from
tokenizer_config.json, else from chat_template.jinja.
--transpose-down (SmallThinker only): writes each layer's experts' down projections transposed,
as blk.N.ffn_down_exps_t.weight [n_expert, n_ff_exp, n_embd] (expert e's down.weight.T: one
contiguous row per expert neuron, PowerInfer's ffn_down_t convention for the sparse ReGLU
expert kernel) instead of blk.N.ffn_down_exps.weight [n_expert, n_embd, n_ff_exp].
PRED_DIR: model_0.pt, model_1.pt, ... (one state dict per layer with fc1.weight [r, n_embd]
and fc2.weight [n_ff, r]; .npz or .safetensors files with the same keys also work) and an
optional config.json with "sparse_threshold". PyTorch is not needed: torch zip files are
read directly (see checkpoints.py).

Output types: norms, biases and other 1-D tensors are always F32. f32/f16: all matrices in that
type. q8_0: matrices Q8_0. q4_0: matrices Q4_0 except output.weight, which is Q8_0 (the
output head is the most quantization-sensitive matrix). Predictors follow the matrices
(Q4_0 for q4_0). A matrix whose rows are not a multiple of 32 elements falls back to F16, and
so does OPT's position table in quantized files. The MoE router (ffn_gate_inp) is always F32;
the 3-D expert tensors are quantized row by row like the matrices. mxfp4 (mixture-of-experts
models only; general.file_type 38, llama.cpp's MOSTLY_MXFP4_MOE): the 3-D expert tensors MXFP4
(F32 where a row is not a multiple of 32), everything else F32. gpt-oss's MXFP4 experts are
always written as MXFP4, unchanged, whatever the output type.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe_vocab  # noqa: E402
import checkpoints  # noqa: E402
import gguf_io  # noqa: E402
import hf_archs  # noqa: E402
import hf_gpt_oss  # noqa: E402
import quants  # noqa: E402
import spm_vocab  # noqa: E402
from gguf_io import VT  # noqa: E402
from quants import GGMLType, quantize  # noqa: E402


class ConvertError(Exception):
    pass


# llama.cpp's `general.file_type` values (enum llama_ftype)
FILE_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7, "mxfp4": 38}
ACTIVATIONS = ("silu", "relu", "gelu")
HF_ARCHS = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "OPTForCausalLM": "opt",
            "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3", "Qwen3MoeForCausalLM": "qwen3moe",
            "MixtralForCausalLM": "llama", "SmallThinkerForCausalLM": "smallthinker",
            "GptOssForCausalLM": "gpt-oss"}
MODEL_TYPES = {"llama": "llama", "mistral": "llama", "opt": "opt", "qwen2": "qwen2", "qwen3": "qwen3",
               "qwen3_moe": "qwen3moe", "mixtral": "llama", "smallthinker": "smallthinker", "gpt_oss": "gpt-oss"}
# Mixture-of-experts checkpoints (by architecture class or model_type): their HF layout, see hf_archs.
MOE_KINDS = {"MixtralForCausalLM": "mixtral", "mixtral": "mixtral",
             "Qwen3MoeForCausalLM": "qwen3moe", "qwen3_moe": "qwen3moe",
             "SmallThinkerForCausalLM": "smallthinker", "smallthinker": "smallthinker",
             "GptOssForCausalLM": "gpt-oss", "gpt_oss": "gpt-oss"}
# GGUF architectures that keep HF's q/k rows (NeoX RoPE) instead of llama's permuted rows.
NEOX_ARCHS = ("qwen2", "qwen3", "qwen3moe", "smallthinker", "gpt-oss")
# GGUF architectures that write attention.key_length / value_length (head_dim may differ from
# n_embd / n_head).
HEAD_DIM_ARCHS = ("qwen3", "qwen3moe", "smallthinker", "gpt-oss")
QK_NORM_ARCHS = ("qwen3", "qwen3moe")


@dataclass
class HParams:
    arch: str           # GGUF architecture: llama | bamboo | opt | qwen2 | qwen3 | qwen3moe | smallthinker | gpt-oss
    n_vocab: int
    n_embd: int
    n_ff: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ctx: int
    eps: float
    rope_base: float
    act: str
    tied: bool
    rope_linear_factor: float = 1.0   # HF rope_scaling {"type": "linear", "factor": f}; 1 = none
    # HF rope_scaling {"rope_type": "yarn", ...}: the GGUF keys rope.scaling.* (factor above
    # read from it too); empty = not YaRN.
    rope_yarn: dict = field(default_factory=dict)
    moe: str = ""           # "" (dense FFN) | "mixtral" | "qwen3moe" | "smallthinker" | "gpt-oss": the HF expert layout
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0       # rows of one expert's gate/up matrix
    expert_gating: int = 0  # smallthinker's expert_gating_func: 1 softmax, 2 sigmoid
    sliding_window: int = 0  # attention.sliding_window (smallthinker, gpt-oss; 0: no sliding layers)



def yarn_keys(path, scaling, factor, cfg):
    """HF's YaRN settings as the GGUF keys llama.cpp reads: the original context, beta_fast,
    beta_slow, and an explicit attention_factor as yarn_attn_factor relative to the
    0.1 ln(factor) + 1 both apply by default; `truncate: false` (un-rounded ramp ends, as
    gpt-oss's config says) as yarn_truncate false, which the engine reads (llama.cpp does not:
    it rounds them). DeepSeek's mscale variant is refused rather than converted to something
    else."""
    for k in ("mscale", "mscale_all_dim"):
        if scaling.get(k):
            raise ConvertError(f"{path}: rope_scaling {k} (DeepSeek's YaRN variant) is not supported")
    orig = scaling.get("original_max_position_embeddings") or cfg.get("max_position_embeddings")
    if not orig:
        raise ConvertError(f"{path}: rope_scaling yarn needs original_max_position_embeddings")
    keys = {"original_context_length": int(orig)}
    for hf, key in (("beta_fast", "yarn_beta_fast"), ("beta_slow", "yarn_beta_slow")):
        if scaling.get(hf) is not None:
            keys[key] = float(scaling[hf])
    if scaling.get("attention_factor") is not None:
        keys["yarn_attn_factor"] = float(scaling["attention_factor"]) / (0.1 * math.log(factor) + 1.0)
    if scaling.get("truncate") is False:
        keys["yarn_truncate"] = False
    return keys

def load_config(model_dir: str, arch_override: str | None) -> HParams:
    path = os.path.join(model_dir, "config.json")
    if not os.path.isfile(path):
        raise ConvertError(f"{path}: not found (a Hugging Face model directory needs config.json)")
    with open(path) as f:
        cfg = json.load(f)
    names = cfg.get("architectures") or []
    model_type = cfg.get("model_type", "")
    hf_name = next((a for a in names if a in HF_ARCHS), None)
    arch = HF_ARCHS[hf_name] if hf_name else MODEL_TYPES.get(model_type)
    moe = MOE_KINDS.get(hf_name if hf_name else model_type, "")
    if arch is None and (model_type == "bamboo" or any("bamboo" in a.lower() for a in names)):
        arch = "bamboo"
    if arch_override and arch_override != arch and (moe or arch in QK_NORM_ARCHS):
        raise ConvertError(f"{path}: --arch {arch_override} cannot override a {hf_name or model_type} model")
    if arch_override:
        arch = arch_override
    if arch is None:
        raise ConvertError(f"{path}: unsupported architecture {names or model_type!r}: this converter "
                           "handles LlamaForCausalLM (model_type llama), bamboo, OPTForCausalLM, "
                           "Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, MixtralForCausalLM, "
                           "SmallThinkerForCausalLM and GptOssForCausalLM")
    try:
        if arch == "opt":
            hp = HParams(arch=arch, **hf_archs.opt_hparams(cfg, path))
            if hp.act not in ACTIVATIONS:
                raise ConvertError(f"{path}: activation_function {hp.act!r} is not one of {', '.join(ACTIVATIONS)}")
            return hp
        if arch == "qwen2":
            hf_archs.check_qwen2_config(cfg, path)
        if arch in QK_NORM_ARCHS:
            hf_archs.check_qwen3_config(cfg, path)
        if moe == "smallthinker":
            moe_fields = hf_archs.smallthinker_hparams(cfg, path)
        elif moe == "gpt-oss":
            moe_fields = hf_gpt_oss.gpt_oss_hparams(cfg, path)
        else:
            moe_fields = hf_archs.moe_hparams(cfg, path, moe) if moe else {}
    except hf_archs.ArchError as e:
        raise ConvertError(str(e)) from None
    except KeyError as e:
        raise ConvertError(f"{path}: missing key {e.args[0]}") from None
    # transformers 5 writes rope_parameters {"rope_type", "rope_theta", ...} instead of
    # rope_theta / rope_scaling.
    rope_params = cfg.get("rope_parameters") or {}
    scaling, factor = cfg.get("rope_scaling") or rope_params, 1.0
    if scaling and (scaling.get("type") or scaling.get("rope_type")) == "default":
        scaling = None
    yarn = {}
    if scaling:
        kind = scaling.get("type") or scaling.get("rope_type")
        if kind not in ("linear", "yarn"):
            raise ConvertError(f"{path}: rope_scaling {scaling!r} is not supported (only linear and yarn)")
        factor = float(scaling["factor"])
        if kind == "yarn":
            yarn = yarn_keys(path, scaling, factor, cfg)
            if arch == "gpt-oss":   # (the engine's default there is unrounded: say which)
                yarn["yarn_truncate"] = scaling.get("truncate", True) is not False
    # SmallThinker's experts are always ReGLU, gpt-oss's the clamped SwiGLU (neither GGUF has an
    # activation key; gpt-oss's hidden_act names the SiLU inside it).
    act = {"smallthinker": "relu", "gpt-oss": "silu"}.get(moe, cfg.get("hidden_act", "silu"))
    if act == "gelu_new" or act == "gelu_pytorch_tanh":
        act = "gelu"
    if act not in ACTIVATIONS:
        raise ConvertError(f"{path}: hidden_act {act!r} is not one of {', '.join(ACTIVATIONS)}")
    try:
        n_embd, n_head = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        hp = HParams(arch=arch, n_vocab=int(cfg["vocab_size"]), n_embd=n_embd,
                     # SmallThinker has no dense FFN: llama.cpp writes the expert width here.
                     n_ff=int(cfg["moe_ffn_hidden_size" if moe == "smallthinker" else "intermediate_size"]),
                     n_layer=int(cfg["num_hidden_layers"]),
                     n_head=n_head, n_head_kv=int(cfg.get("num_key_value_heads") or n_head),
                     head_dim=int(cfg.get("head_dim") or n_embd // n_head),
                     n_ctx=int(cfg.get("max_position_embeddings", 2048)),
                     # transformers' defaults: 1e-6 (llama, Qwen) / 1e-5 (Mixtral, gpt-oss); theta
                     # 1e4 / 1e6 (Mixtral) / 150000 (gpt-oss)
                     eps=float(cfg.get("rms_norm_eps", 1e-5 if moe in ("mixtral", "gpt-oss") else 1e-6)),
                     rope_base=float(cfg.get("rope_theta") or rope_params.get("rope_theta")
                                     or {"mixtral": 1e6, "gpt-oss": 150000.0}.get(moe, 10000.0)), act=act,
                     tied=bool(cfg.get("tie_word_embeddings", False)), rope_linear_factor=factor, rope_yarn=yarn,
                     moe=moe, **moe_fields)
    except KeyError as e:
        raise ConvertError(f"{path}: missing key {e.args[0]}") from None
    if hp.n_head % hp.n_head_kv or hp.head_dim % 2:
        raise ConvertError(f"{path}: {hp.n_head} heads / {hp.n_head_kv} kv heads / head_dim "
                           f"{hp.head_dim} is not a valid attention layout")
    return hp


def rope_to_gguf(w: np.ndarray, n_heads: int) -> np.ndarray:
    """HF q/k rows: within each head, rotation pairs are (i, i + d/2) (rotate_half). GGUF
    llama rows: pairs are adjacent, (2i, 2i + 1). Row h*d + s*d/2 + i moves to h*d + 2i + s."""
    rows = w.shape[0]
    d = rows // n_heads
    return w.reshape(n_heads, 2, d // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def rope_from_gguf(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Inverse of rope_to_gguf."""
    rows = w.shape[0]
    d = rows // n_heads
    return w.reshape(n_heads, d // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# ----------------------------------------------------------------------------- plan

@dataclass
class Item:
    name: str           # GGUF tensor name
    shape: tuple        # output shape, outermost first
    dtype: GGMLType
    produce: object     # () -> float32 array of `shape`, or with `encoded` its bytes in dtype
    encoded: bool = False   # produce() returns the tensor's bytes (uint8 [..., row_bytes]) as they are


def pick_type(name: str, shape: tuple, outtype: str) -> GGMLType:
    if len(shape) == 1 or outtype == "f32" or name.endswith(("ffn_gate_inp.weight", ".bias")):
        return GGMLType.F32
    if outtype == "mxfp4":   # the expert stacks (3-D) MXFP4, everything else F32
        return GGMLType.MXFP4 if len(shape) == 3 and shape[-1] % 32 == 0 else GGMLType.F32
    if outtype == "f16" or shape[-1] % 32 or name == "position_embd.weight":
        return GGMLType.F16
    if outtype == "q4_0" and name != "output.weight":
        return GGMLType.Q4_0
    return GGMLType.Q8_0


def expected_shapes(hp: HParams) -> dict:
    q_rows, kv_rows = hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim
    shapes = {"model.embed_tokens.weight": (hp.n_vocab, hp.n_embd), "model.norm.weight": (hp.n_embd,)}
    if not hp.tied:
        shapes["lm_head.weight"] = (hp.n_vocab, hp.n_embd)
    for i in range(hp.n_layer):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (hp.n_embd,), p + "post_attention_layernorm.weight": (hp.n_embd,),
            p + "self_attn.q_proj.weight": (q_rows, hp.n_embd), p + "self_attn.k_proj.weight": (kv_rows, hp.n_embd),
            p + "self_attn.v_proj.weight": (kv_rows, hp.n_embd), p + "self_attn.o_proj.weight": (hp.n_embd, q_rows)})
        if hp.moe:
            shapes.update(hf_archs.moe_shapes(hp, i))
        else:
            shapes.update({
                p + "mlp.gate_proj.weight": (hp.n_ff, hp.n_embd), p + "mlp.up_proj.weight": (hp.n_ff, hp.n_embd),
                p + "mlp.down_proj.weight": (hp.n_embd, hp.n_ff)})
    if hp.arch in QK_NORM_ARCHS:
        shapes.update(hf_archs.qk_norm_shapes(hp))
    return shapes


def check_model_tensors(src: dict, hp: HParams, model_dir: str):
    if hp.arch == "opt":
        exp = hf_archs.opt_expected_shapes(hp, src)
    elif hp.arch == "gpt-oss":
        try:
            exp = hf_gpt_oss.gpt_oss_expected_shapes(hp, src)
        except hf_archs.ArchError as e:
            raise ConvertError(f"{model_dir}: {e}") from None
    else:
        exp = expected_shapes(hp)
        if hp.arch == "qwen2":
            exp.update(hf_archs.qwen2_bias_shapes(hp))
    if hp.tied and "lm_head.weight" in src:
        exp["lm_head.weight"] = (hp.n_vocab, hp.n_embd)
    try:
        hf_archs.check_moe_routers(src, hp, model_dir)
    except hf_archs.ArchError as e:
        raise ConvertError(str(e)) from None
    unknown = [k for k in src if k not in exp and not k.endswith("rotary_emb.inv_freq")]
    if unknown:
        raise ConvertError(f"{model_dir}: unexpected tensor(s) for a {hp.arch} model: "
                           f"{', '.join(sorted(unknown)[:5])}{' ...' if len(unknown) > 5 else ''}")
    missing = [k for k in exp if k not in src]
    if missing:
        raise ConvertError(f"{model_dir}: missing tensor(s): {', '.join(missing[:5])}"
                           f"{' ...' if len(missing) > 5 else ''}")
    for k, shape in exp.items():
        if src[k].shape != shape:
            raise ConvertError(f"{src[k].origin}: shape {list(src[k].shape)} does not match config.json "
                               f"(expected {list(shape)})")


def load_predictors(pred_dir: str, hp: HParams):
    """Returns ([(fc1, fc2) LazyTensors per layer], threshold from config.json or None)."""
    if not os.path.isdir(pred_dir):
        raise ConvertError(f"{pred_dir}: predictor directory not found")
    layers = []
    for i in range(hp.n_layer):
        cands = [os.path.join(pred_dir, f"model_{i}{ext}") for ext in (".pt", ".npz", ".safetensors")]
        path = next((c for c in cands if os.path.exists(c)), None)
        if path is None:
            raise ConvertError(f"{pred_dir}: no predictor for layer {i} (model_{i}.pt, .npz or .safetensors)")
        sd = checkpoints.load_any(path)
        fc1 = next((v for k, v in sd.items() if k == "fc1.weight" or k.endswith(".fc1.weight")), None)
        fc2 = next((v for k, v in sd.items() if k == "fc2.weight" or k.endswith(".fc2.weight")), None)
        if fc1 is None or fc2 is None:
            raise ConvertError(f"{path}: needs fc1.weight and fc2.weight, has {', '.join(sd) or 'nothing'}")
        if len(fc1.shape) != 2 or len(fc2.shape) != 2:
            raise ConvertError(f"{path}: fc1/fc2 must be matrices, got {list(fc1.shape)} and {list(fc2.shape)}")
        if fc1.shape[1] != hp.n_embd or fc2.shape[0] != hp.n_ff or fc2.shape[1] != fc1.shape[0]:
            raise ConvertError(f"{path}: predictor dimensions fc1 {list(fc1.shape)}, fc2 {list(fc2.shape)} "
                               f"do not match the model (expected fc1 [r, {hp.n_embd}], fc2 [{hp.n_ff}, r])")
        layers.append((fc1, fc2))
    extra = os.path.join(pred_dir, f"model_{hp.n_layer}.pt")
    if os.path.exists(extra):
        raise ConvertError(f"{extra}: predictor for layer {hp.n_layer}, but the model has {hp.n_layer} layers")
    threshold = None
    cfg = os.path.join(pred_dir, "config.json")
    if os.path.exists(cfg):
        with open(cfg) as f:
            threshold = json.load(f).get("sparse_threshold")
    return layers, threshold


def build_plan(src: dict, hp: HParams, outtype: str, predictors, transpose_down: bool = False) -> list:
    items = []

    def add(name, shape, produce, encoded: GGMLType | None = None):
        """encoded: produce() returns the tensor's bytes in that type (written unchanged)."""
        dtype = encoded if encoded is not None else pick_type(name, tuple(shape), outtype)
        items.append(Item(name, tuple(shape), dtype, produce, encoded is not None))

    def copy(hf_name):
        return lambda: src[hf_name].load()

    if hp.arch == "opt":
        hf_archs.opt_plan(src, hp, add, predictors)
        return items
    if hp.arch == "gpt-oss":
        hf_gpt_oss.gpt_oss_plan(src, hp, add)
        return items
    # Qwen's GGUF files keep HF's q/k rows (NeoX RoPE); llama's are permuted for pairs (2i, 2i+1).
    permute = rope_to_gguf if hp.arch not in NEOX_ARCHS else (lambda w, n_heads: w)

    add("token_embd.weight", src["model.embed_tokens.weight"].shape, copy("model.embed_tokens.weight"))
    add("output_norm.weight", (hp.n_embd,), copy("model.norm.weight"))
    head = "lm_head.weight" in src
    if head and hp.arch == "smallthinker" and hp.tied:
        # A tied SmallThinker checkpoint may carry lm_head as a copy of the embedding: then the
        # head is token_embd (no output.weight), as llama.cpp writes it.
        head = not np.array_equal(src["lm_head.weight"].load(), src["model.embed_tokens.weight"].load())
    if head:
        add("output.weight", src["lm_head.weight"].shape, copy("lm_head.weight"))
    for i in range(hp.n_layer):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        q, k = src[p + "self_attn.q_proj.weight"], src[p + "self_attn.k_proj.weight"]
        add(b + "attn_norm.weight", (hp.n_embd,), copy(p + "input_layernorm.weight"))
        add(b + "attn_q.weight", q.shape, lambda q=q: permute(q.load(), hp.n_head))
        if hp.arch in QK_NORM_ARCHS:
            add(b + "attn_q_norm.weight", (hp.head_dim,), copy(p + "self_attn.q_norm.weight"))
        add(b + "attn_k.weight", k.shape, lambda k=k: permute(k.load(), hp.n_head_kv))
        if hp.arch in QK_NORM_ARCHS:
            add(b + "attn_k_norm.weight", (hp.head_dim,), copy(p + "self_attn.k_norm.weight"))
        add(b + "attn_v.weight", src[p + "self_attn.v_proj.weight"].shape, copy(p + "self_attn.v_proj.weight"))
        if hp.arch == "qwen2":
            for x in ("q", "k", "v"):
                hf = f"{p}self_attn.{x}_proj.bias"
                add(f"{b}attn_{x}.bias", src[hf].shape, copy(hf))
        add(b + "attn_output.weight", src[p + "self_attn.o_proj.weight"].shape, copy(p + "self_attn.o_proj.weight"))
        add(b + "ffn_norm.weight", (hp.n_embd,), copy(p + "post_attention_layernorm.weight"))
        if hp.moe:
            hf_archs.moe_plan(src, hp, add, i, transpose_down)
            continue
        add(b + "ffn_gate.weight", (hp.n_ff, hp.n_embd), copy(p + "mlp.gate_proj.weight"))
        add(b + "ffn_up.weight", (hp.n_ff, hp.n_embd), copy(p + "mlp.up_proj.weight"))
        down = src[p + "mlp.down_proj.weight"]
        if predictors is None:
            add(b + "ffn_down.weight", (hp.n_embd, hp.n_ff), copy(p + "mlp.down_proj.weight"))
        else:
            add(b + "ffn_down_t.weight", (hp.n_ff, hp.n_embd), lambda d=down: np.ascontiguousarray(d.load().T))
            fc1, fc2 = predictors[i]
            add(b + "fc1.weight", fc1.shape, fc1.load)
            add(b + "fc2.weight", fc2.shape, fc2.load)
    return items


# ----------------------------------------------------------------------------- writing

class Progress:
    """A one-line progress bar on stderr (redrawn in place on a terminal, silent otherwise)."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.done, self.enabled = max(total, 1), 0, enabled and sys.stderr.isatty()
        self.start = time.time()

    def advance(self, n: int, label: str):
        self.done += n
        if not self.enabled:
            return
        frac = self.done / self.total
        bar = "#" * int(frac * 30)
        rate = self.done / max(time.time() - self.start, 1e-9) / 2**20
        sys.stderr.write(f"\r[{bar:<30}] {frac * 100:5.1f}% {rate:7.1f} MiB/s {label[:40]:<40}")
        sys.stderr.flush()

    def finish(self):
        if self.enabled:
            sys.stderr.write("\n")


def metadata(hp: HParams, vocab, outtype: str, name: str, threshold, quantized: bool = False):
    """The file's metadata; quantized: some tensor has a block type (general.quantization_version)."""
    a = hp.arch
    md = [
        ("general.architecture", a, VT.STRING),
        ("general.name", name, VT.STRING),
        ("general.file_type", FILE_TYPES[outtype], VT.UINT32),
        (f"{a}.vocab_size", hp.n_vocab, VT.UINT32),
        (f"{a}.context_length", hp.n_ctx, VT.UINT32),
        (f"{a}.embedding_length", hp.n_embd, VT.UINT32),
        (f"{a}.block_count", hp.n_layer, VT.UINT32),
        (f"{a}.feed_forward_length", hp.n_ff, VT.UINT32),
        (f"{a}.attention.head_count", hp.n_head, VT.UINT32),
        (f"{a}.attention.head_count_kv", hp.n_head_kv, VT.UINT32),
    ]
    if a != "gpt-oss":   # (its gated unit is fixed: llama.cpp writes no activation key)
        md.append((f"{a}.feed_forward_activation", hp.act, VT.STRING))
    if a in HEAD_DIM_ARCHS:
        md += [(f"{a}.attention.key_length", hp.head_dim, VT.UINT32),
               (f"{a}.attention.value_length", hp.head_dim, VT.UINT32)]
    if hp.moe:
        md += [(f"{a}.expert_count", hp.n_expert, VT.UINT32),
               (f"{a}.expert_used_count", hp.n_expert_used, VT.UINT32)]
        if hp.moe != "mixtral":   # Mixtral's experts are feed_forward_length wide (llama.cpp writes no key)
            md.append((f"{a}.expert_feed_forward_length", hp.n_ff_exp, VT.UINT32))
        if hp.moe == "smallthinker":
            md.append((f"{a}.expert_gating_func", hp.expert_gating, VT.UINT32))
    if hp.sliding_window:
        md.append((f"{a}.attention.sliding_window", hp.sliding_window, VT.UINT32))
    if a == "opt":   # layer norms, learned positions: no RoPE keys
        md.append((f"{a}.attention.layer_norm_epsilon", hp.eps, VT.FLOAT32))
    else:
        md += [(f"{a}.rope.dimension_count", hp.head_dim, VT.UINT32),
               (f"{a}.attention.layer_norm_rms_epsilon", hp.eps, VT.FLOAT32),
               (f"{a}.rope.freq_base", hp.rope_base, VT.FLOAT32)]
    if hp.rope_yarn:
        md += [(f"{a}.rope.scaling.type", "yarn", VT.STRING),
               (f"{a}.rope.scaling.factor", hp.rope_linear_factor, VT.FLOAT32),
               (f"{a}.rope.scaling.original_context_length", hp.rope_yarn["original_context_length"], VT.UINT32)]
        md += [(f"{a}.rope.scaling.{k}", hp.rope_yarn[k], VT.FLOAT32)
               for k in ("yarn_beta_fast", "yarn_beta_slow", "yarn_attn_factor") if k in hp.rope_yarn]
        if "yarn_truncate" in hp.rope_yarn:
            md.append((f"{a}.rope.scaling.yarn_truncate", bool(hp.rope_yarn["yarn_truncate"]), VT.BOOL))
    elif hp.rope_linear_factor != 1.0:
        md += [(f"{a}.rope.scaling.type", "linear", VT.STRING),
               (f"{a}.rope.scaling.factor", hp.rope_linear_factor, VT.FLOAT32)]
    if quantized or outtype in ("q8_0", "q4_0", "mxfp4"):
        md.append(("general.quantization_version", 2, VT.UINT32))
    if threshold is not None:
        md.append(("powerinfer.sparse_threshold", float(threshold), VT.FLOAT32))
    if isinstance(vocab, bpe_vocab.BpeVocab):
        return md + vocab.metadata()
    md += [
        ("tokenizer.ggml.model", "llama", VT.STRING),
        ("tokenizer.ggml.tokens", vocab.tokens, (VT.ARRAY, VT.STRING)),
        ("tokenizer.ggml.scores", np.asarray(vocab.scores, np.float32), (VT.ARRAY, VT.FLOAT32)),
        ("tokenizer.ggml.token_type", np.asarray(vocab.types, np.int32), (VT.ARRAY, VT.INT32)),
        ("tokenizer.ggml.bos_token_id", vocab.bos_id, VT.UINT32),
        ("tokenizer.ggml.eos_token_id", vocab.eos_id, VT.UINT32),
        ("tokenizer.ggml.unknown_token_id", vocab.unk_id, VT.UINT32),
        ("tokenizer.ggml.add_bos_token", True, VT.BOOL),
        ("tokenizer.ggml.add_eos_token", False, VT.BOOL),
    ]
    if vocab.pad_id >= 0:
        md.append(("tokenizer.ggml.padding_token_id", vocab.pad_id, VT.UINT32))
    return md


def quantize_rows(x: np.ndarray, t: GGMLType) -> np.ndarray:
    """quantize(), one outermost slice at a time for 3-D tensors (stacked experts), so the
    quantizer's temporaries stay the size of one expert."""
    if x.ndim < 3:
        return quantize(x, t)
    first = quantize(x[0], t)
    out = np.empty((x.shape[0],) + first.shape, first.dtype)
    out[0] = first
    for e in range(1, x.shape[0]):
        out[e] = quantize(x[e], t)
    return out


def write(outfile: str, magic: bytes, md, items, progress: bool):
    tmp = outfile + ".part"
    total = 0
    try:
        with gguf_io.GGUFWriter(tmp, magic) as w:
            for key, value, vtype in md:
                w.add(key, value, vtype)
            for it in items:
                w.add_tensor_info(it.name, it.shape, it.dtype)
            w.write_header()
            bar = Progress(sum(int(np.prod(it.shape)) for it in items), progress)
            for it in items:
                if it.encoded:
                    data = it.produce()
                    if data.dtype != np.uint8 or data.nbytes != quants.nbytes(it.dtype, it.shape):
                        raise ConvertError(f"tensor {it.name}: produced {data.nbytes} bytes of {data.dtype}, "
                                           f"declared {it.dtype.name} {list(it.shape)}")
                else:
                    x = np.asarray(it.produce(), dtype=np.float32)
                    if x.shape != it.shape:
                        raise ConvertError(f"tensor {it.name}: produced shape {list(x.shape)}, "
                                           f"declared {list(it.shape)}")
                    data = quantize_rows(x, it.dtype)
                total += data.nbytes
                w.write_tensor(it.name, data)
                bar.advance(int(np.prod(it.shape)), it.name)
            bar.finish()
        os.replace(tmp, outfile)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return total


def load_vocab(model_dir: str, hp: HParams):
    """SentencePiece from tokenizer.model, else byte-level BPE from tokenizer.json."""
    tok_path = os.path.join(model_dir, "tokenizer.model")
    if os.path.isfile(tok_path):
        return spm_vocab.pad_vocab(spm_vocab.read_spm_vocab(tok_path), hp.n_vocab, tok_path)
    if os.path.isfile(os.path.join(model_dir, "tokenizer.json")):
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        # OPT's tokenizer starts every text with </s> (its BOS) when the config does not say.
        v = bpe_vocab.read_bpe_vocab(model_dir, hp.n_vocab, cfg, default_add_bos=hp.arch == "opt")
        bpe_vocab.warn_notes(v)
        template = os.path.join(model_dir, "chat_template.jinja")
        if v.chat_template is None and os.path.isfile(template):
            with open(template, encoding="utf-8") as f:
                v.chat_template = f.read()
        if hp.arch == "gpt-oss" and "<|return|>" in v.tokens:
            # The harmony format ends a reply with <|return|> (<|call|> ends a tool call; the
            # engine, as llama.cpp, treats both as end of generation): EOS is <|return|>.
            v.eos_id = v.tokens.index("<|return|>")
        return v
    raise ConvertError(f"{tok_path}: not found, nor tokenizer.json (the model needs its tokenizer: "
                       "SentencePiece tokenizer.model or a byte-level BPE tokenizer.json)")


def convert(args) -> str:
    model_dir = args.model_dir
    if not os.path.isdir(model_dir):
        raise ConvertError(f"{model_dir}: model directory not found")
    hp = load_config(model_dir, args.arch)
    vocab = load_vocab(model_dir, hp)
    src = checkpoints.load_model_dir(model_dir)
    check_model_tensors(src, hp, model_dir)

    predictors, threshold, magic = None, None, gguf_io.MAGIC_GGUF
    if args.predictors:
        if hp.moe:
            raise ConvertError(f"{model_dir}: a mixture-of-experts model cannot be converted with --predictors")
        magic = gguf_io.MAGIC_PWRI
        predictors, threshold = load_predictors(args.predictors, hp)
        if hp.act != "relu":
            raise ConvertError(f"{model_dir}/config.json: hidden_act is {hp.act!r}, but PowerInfer files "
                               "always run ReLU: only ReLU models can be converted with --predictors")
        threshold = args.threshold if args.threshold is not None else (threshold if threshold is not None else 0.0)
    elif args.threshold is not None:
        raise ConvertError("--threshold only applies with --predictors")
    if args.outtype == "mxfp4" and not hp.moe:
        raise ConvertError(f"{model_dir}: --outtype mxfp4 quantizes the experts of a mixture-of-experts model; "
                           f"{hp.arch} has none")
    transpose_down = getattr(args, "transpose_down", False)
    if transpose_down and hp.moe != "smallthinker":
        raise ConvertError(f"{model_dir}: --transpose-down only applies to SmallThinker models, not {hp.arch}")

    name = args.name or os.path.basename(os.path.normpath(model_dir))
    items = build_plan(src, hp, args.outtype, predictors, transpose_down)
    plain = (GGMLType.F32, GGMLType.F16, GGMLType.BF16)
    md = metadata(hp, vocab, args.outtype, name, threshold, quantized=any(it.dtype not in plain for it in items))
    nbytes = write(args.outfile, magic, md, items, not args.quiet)
    if not args.quiet:
        print(f"wrote {args.outfile}: {magic.decode()} {hp.arch}, {len(items)} tensors, "
              f"{nbytes / 2**20:.1f} MiB of tensor data, outtype {args.outtype}", file=sys.stderr)
    return args.outfile


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", help="Hugging Face model directory")
    ap.add_argument("--outfile", "-o", required=True, help="output .gguf file")
    ap.add_argument("--outtype", choices=sorted(FILE_TYPES), default="f16")
    ap.add_argument("--predictors", metavar="DIR", help="predictor directory: writes a PowerInfer (PWRI) file")
    ap.add_argument("--threshold", type=float, help="powerinfer.sparse_threshold (default: predictor "
                    "config.json, else 0.0)")
    ap.add_argument("--arch", choices=("llama", "bamboo"), help="override the GGUF architecture")
    ap.add_argument("--transpose-down", action="store_true", help="SmallThinker: write the experts' "
                    "down projections transposed, blk.N.ffn_down_exps_t.weight [n_expert, n_ff_exp, n_embd], "
                    "instead of ffn_down_exps")
    ap.add_argument("--name", help="general.name (default: the directory name)")
    ap.add_argument("--quiet", "-q", action="store_true", help="no progress bar or summary")
    args = ap.parse_args(argv)
    try:
        convert(args)
    except (ConvertError, checkpoints.CheckpointError, spm_vocab.VocabError, bpe_vocab.BpeVocabError,
            gguf_io.GGUFError) as e:
        print(f"convert_hf: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"convert_hf: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
