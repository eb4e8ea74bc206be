"""A small LLaMA (gated FFN) in plain PyTorch, numerically matching Hugging Face
LlamaForCausalLM with hidden_act="relu" (ReGLU, the bundled kjv-relu) or "silu" (SwiGLU,
the ordinary Llama FFN: the kjv-silu twin); or, with Config.model_type "smallthinker", a
SmallThinker-style mixture of experts matching SmallThinkerForCausalLM (PowerInfer's own MoE
family, the bundled kjv-moe): per layer

    router_logits = primary_router(x)                  x = the RAW layer input (before any norm)
    h   = x + attn(input_layernorm(x))                 (GQA, NeoX/HF RoPE in every layer, no SWA)
    y   = post_attention_layernorm(h)
    top-k experts by router logit; w = sigmoid(top-k logits) / their sum
    out = h + sum_e w_e * down_e(up_e(y) * relu(gate_e(y)))          (ReGLU experts)

(moe_primary_router_apply_softmax false). The experts run grouped: the tokens routed to one
expert are gathered and go through it as one matrix, so only the chosen experts are computed.
After each forward pass `model.aux_losses` holds one Switch-Transformer load-balancing loss
per layer, n_expert * sum_i f_i * P_i (f_i: share of the token-expert assignments that went to
expert i; P_i: mean over tokens of expert i's normalised sigmoid gate sigmoid(l_i) / sum_j
sigmoid(l_j) over all experts); 1.0 when perfectly balanced.

Module names are chosen so that `state_dict()` keys equal the HF tensor names
(model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight, ..., lm_head.weight)
and all weights have HF shapes ([out_features, in_features]). RoPE uses the HF
convention (rotate_half over the two halves of each head), so q/k are in HF layout.

Hooks for sparsity work:
  * `taps`: a list; each layer appends (h, active) where h is the residual stream after
    attention, before post_attention_layernorm (the predictor input), and active is the
    bool mask act(gate(norm(h))) != 0 (which FFN neurons fire; for SiLU almost all).
  * `ffn_masks`: a list with one callable per layer (or None); it receives h and returns
    a 0/1 mask [.., n_ff] multiplied into the act(gate) activations (predicted sparsity).
  * smallthinker: `taps` receives per layer a dict {"experts": [B, T, k] int64 chosen expert
    ids (descending logit), "logits": [B, T, n_expert] router logits, "inactive": [B, T, k]
    number of the chosen expert's neurons with gate(y) <= 0}.
"""
import json
import math
import os
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 1024
    num_hidden_layers: int = 6
    num_attention_heads: int = 8
    num_key_value_heads: int = 8
    max_position_embeddings: int = 256
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    bos_token_id: int = 1
    eos_token_id: int = 2
    hidden_act: str = "relu"  # "relu" (ReGLU) or "silu" (SwiGLU)
    # smallthinker (mixture of experts) only; "llama" ignores these
    model_type: str = "llama"  # "llama" or "smallthinker"
    moe_num_primary_experts: int = 8
    moe_num_active_primary_experts: int = 2
    moe_ffn_hidden_size: int = 384

    @property
    def head_dim(self):
        return self.hidden_size // self.num_attention_heads

    @property
    def is_moe(self):
        return self.model_type == "smallthinker"

    def to_hf(self):
        if self.is_moe:
            return self._to_hf_smallthinker()
        d = asdict(self)
        for k in ("model_type", "moe_num_primary_experts", "moe_num_active_primary_experts", "moe_ffn_hidden_size"):
            del d[k]
        d.update({
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "head_dim": self.head_dim,
            "attention_bias": False,
            "mlp_bias": False,
            "tie_word_embeddings": False,
            "torch_dtype": "float32",
            "initializer_range": 0.02,
            "pretraining_tp": 1,
            "rope_scaling": None,
            "use_cache": True,
        })
        return d

    def _to_hf_smallthinker(self):
        L = self.num_hidden_layers
        return {
            "architectures": ["SmallThinkerForCausalLM"],
            "model_type": "smallthinker",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": L,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_layout": [1] * L,
            "sliding_window_layout": [0] * L,
            "sliding_window_size": 4096,
            "moe_num_primary_experts": self.moe_num_primary_experts,
            "moe_num_active_primary_experts": self.moe_num_active_primary_experts,
            "moe_ffn_hidden_size": self.moe_ffn_hidden_size,
            "moe_primary_router_apply_softmax": False,
            "hidden_act": "relu",
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "tie_word_embeddings": False,
            "torch_dtype": "float32",
            "initializer_range": 0.02,
            "use_cache": True,
        }

    @classmethod
    def from_hf(cls, d):
        cfg = cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})
        if cfg.is_moe:
            L = cfg.num_hidden_layers
            if d.get("moe_primary_router_apply_softmax", False):
                raise ValueError("smallthinker: only sigmoid routing (moe_primary_router_apply_softmax false)")
            if any(d.get("sliding_window_layout", [0] * L)) or not all(d.get("rope_layout", [1] * L)):
                raise ValueError("smallthinker: only RoPE in every layer and no sliding window")
            if d.get("head_dim", cfg.head_dim) != cfg.head_dim:
                raise ValueError("smallthinker: head_dim must be hidden_size / num_attention_heads")
        elif cfg.model_type != "llama":
            raise ValueError(f"model_type {cfg.model_type!r} is not llama or smallthinker")
        return cfg


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope_cos_sin(cfg, n, device):
    """cos/sin tables [n, head_dim] in the HF layout (frequencies repeated over both halves)."""
    d = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float().to(device) / d))
    pos = torch.arange(n, device=device, dtype=torch.float32)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin):
    # x: [B, H, T, D]; cos/sin: [T, D]
    return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d, hd = cfg.hidden_size, cfg.head_dim
        self.q_proj = nn.Linear(d, cfg.num_attention_heads * hd, bias=False)
        self.k_proj = nn.Linear(d, cfg.num_key_value_heads * hd, bias=False)
        self.v_proj = nn.Linear(d, cfg.num_key_value_heads * hd, bias=False)
        self.o_proj = nn.Linear(cfg.num_attention_heads * hd, d, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        c = self.cfg
        q = self.q_proj(x).view(B, T, c.num_attention_heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = c.num_attention_heads // c.num_key_value_heads
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))


ACTIVATIONS = {"relu": F.relu, "silu": F.silu}


class MLP(nn.Module):
    """Gated FFN: down(act(gate(x)) * up(x)); act = ReLU (ReGLU) or SiLU (SwiGLU)."""

    def __init__(self, cfg):
        super().__init__()
        if cfg.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act {cfg.hidden_act!r} is not one of {', '.join(ACTIVATIONS)}")
        self.act = ACTIVATIONS[cfg.hidden_act]
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, tap=None, ffn_mask=None):
        h = x + self.self_attn(self.input_layernorm(x), cos, sin)
        xn = self.post_attention_layernorm(h)
        a = self.mlp.act(self.mlp.gate_proj(xn))
        if tap is not None:
            tap.append((h.detach(), (a != 0).detach()))
        if ffn_mask is not None:
            a = a * ffn_mask(h).to(a.dtype)
        return h + self.mlp.down_proj(a * self.mlp.up_proj(xn))


class Expert(nn.Module):
    """One SmallThinker expert: down(up(y) * relu(gate(y))) (HF names gate/up/down)."""

    def __init__(self, cfg):
        super().__init__()
        d, f = cfg.hidden_size, cfg.moe_ffn_hidden_size
        self.gate = nn.Linear(d, f, bias=False)
        self.up = nn.Linear(d, f, bias=False)
        self.down = nn.Linear(f, d, bias=False)


class MoeBlock(nn.Module):
    """block_sparse_moe: primary_router [n_expert, hidden] + experts (sigmoid top-k routing)."""

    def __init__(self, cfg):
        super().__init__()
        self.n_expert, self.k = cfg.moe_num_primary_experts, cfg.moe_num_active_primary_experts
        self.primary_router = nn.Linear(cfg.hidden_size, self.n_expert, bias=False)
        self.experts = nn.ModuleList(Expert(cfg) for _ in range(self.n_expert))
        self.impl = "grouped"  # or "dense": every expert on every token (for timing/checking only)

    def forward(self, router_input, y, tap=None):
        """router_input: the raw layer input; y: post_attention_layernorm(h).
        Returns (moe output [B, T, d], load-balancing loss (scalar))."""
        B, T, d = y.shape
        E, k = self.n_expert, self.k
        yf = y.reshape(-1, d)
        logits = self.primary_router(router_input.reshape(-1, d))  # [N, E]
        top_l, top_i = torch.topk(logits, k, dim=-1)
        w = torch.sigmoid(top_l)
        w = w / w.sum(-1, keepdim=True)  # [N, k]

        # Switch-Transformer balance loss with the normalised sigmoid gates as probabilities
        probs = torch.sigmoid(logits)
        probs = probs / probs.sum(-1, keepdim=True)
        flat = top_i.reshape(-1)
        counts = torch.bincount(flat, minlength=E)
        f = counts.to(probs.dtype) / flat.numel()
        aux = E * (f * probs.mean(0)).sum()

        want_inactive = tap is not None
        if self.impl == "dense":
            out = yf.new_zeros(yf.shape)
            inactive = torch.zeros_like(top_i)
            for e, ex in enumerate(self.experts):
                g = ex.gate(yf)
                ye = ex.down(ex.up(yf) * F.relu(g))
                we = (w * (top_i == e)).sum(-1, keepdim=True)
                out = out + we * ye
                if want_inactive:
                    inactive += (top_i == e) * (g <= 0).sum(-1, keepdim=True)
        else:
            order = torch.argsort(flat, stable=True)  # assignments grouped by expert, tokens in order
            tok = order // k
            ys = yf.index_select(0, tok)
            parts, dead, start = [], [], 0
            for e, c in enumerate(counts.tolist()):
                if c == 0:
                    continue
                ex = self.experts[e]
                ye = ys[start:start + c]
                g = ex.gate(ye)
                parts.append(ex.down(ex.up(ye) * F.relu(g)))
                if want_inactive:
                    dead.append((g <= 0).sum(-1))
                start += c
            contrib = torch.cat(parts) * w.reshape(-1).index_select(0, order)[:, None]
            out = yf.new_zeros(yf.shape).index_add(0, tok, contrib)
            if want_inactive:
                inactive = torch.empty_like(flat)
                inactive[order] = torch.cat(dead)
                inactive = inactive.view(-1, k)
        if tap is not None:
            tap.append({"experts": top_i.view(B, T, k).detach(), "logits": logits.view(B, T, E).detach(),
                        "inactive": inactive.view(B, T, k).detach()})
        return out.view(B, T, d), aux


class MoeDecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.block_sparse_moe = MoeBlock(cfg)

    def forward(self, x, cos, sin, tap=None, ffn_mask=None):
        if ffn_mask is not None:
            raise ValueError("smallthinker layers take no ffn_mask")
        h = x + self.self_attn(self.input_layernorm(x), cos, sin)
        out, aux = self.block_sparse_moe(x, self.post_attention_layernorm(h), tap=tap)
        return h + out, aux


class Backbone(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        layer = MoeDecoderLayer if cfg.is_moe else DecoderLayer
        self.layers = nn.ModuleList(layer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LlamaReLU(nn.Module):
    """The causal LM: LlamaForCausalLM (cfg.model_type "llama") or SmallThinkerForCausalLM
    ("smallthinker"); the name is historical (the first bundled model, kjv-relu)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Backbone(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self._rope = None
        self.aux_losses = []  # smallthinker: per-layer load-balancing losses of the last forward

    def init_weights(self, seed):
        g = torch.Generator().manual_seed(seed)
        std = 0.02
        resid_std = std / math.sqrt(2 * self.cfg.num_hidden_layers)
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p)
            else:
                s = resid_std if name.endswith(("o_proj.weight", "down_proj.weight", ".down.weight")) else std
                with torch.no_grad():
                    p.copy_(torch.randn(p.shape, generator=g) * s)

    def rope(self, T, device):
        if self._rope is None or self._rope[0].shape[0] < T or self._rope[0].device != device:
            self._rope = rope_cos_sin(self.cfg, max(T, self.cfg.max_position_embeddings), device)
        return self._rope[0][:T], self._rope[1][:T]

    def forward(self, idx, taps=None, ffn_masks=None):
        """idx [B, T] int64 -> logits [B, T, vocab]."""
        cos, sin = self.rope(idx.shape[1], idx.device)
        x = self.model.embed_tokens(idx)
        self.aux_losses = []
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin, tap=taps, ffn_mask=None if ffn_masks is None else ffn_masks[i])
            if self.cfg.is_moe:
                x, aux = x
                self.aux_losses.append(aux)
        return self.lm_head(self.model.norm(x))

    def set_moe_impl(self, impl):
        for layer in self.model.layers:
            layer.block_sparse_moe.impl = impl

    def param_counts(self):
        """(total, active per token): active counts only k of the n_expert experts."""
        total = sum(p.numel() for p in self.parameters())
        if not self.cfg.is_moe:
            return total, total
        c = self.cfg
        per_expert = 3 * c.hidden_size * c.moe_ffn_hidden_size
        idle = c.num_hidden_layers * (c.moe_num_primary_experts - c.moe_num_active_primary_experts) * per_expert
        return total, total - idle


def save_hf(model, out_dir, tokenizer_model=None):
    """Write config.json + model.safetensors (+ tokenizer.model) in Hugging Face layout."""
    from safetensors.torch import save_file
    import shutil
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(model.cfg.to_hf(), f, indent=2)
    sd = {k: v.detach().float().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(sd, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    if tokenizer_model:
        shutil.copyfile(tokenizer_model, os.path.join(out_dir, "tokenizer.model"))


def load_hf(hf_dir):
    from safetensors.torch import load_file
    with open(os.path.join(hf_dir, "config.json")) as f:
        cfg = Config.from_hf(json.load(f))
    model = LlamaReLU(cfg)
    model.load_state_dict(load_file(os.path.join(hf_dir, "model.safetensors")), strict=True)
    return model.eval()
