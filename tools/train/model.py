"""A small LLaMA (gated FFN) in plain PyTorch, numerically matching Hugging Face
LlamaForCausalLM with hidden_act="relu" (ReGLU, the bundled kjv-relu) or "silu" (SwiGLU,
the ordinary Llama FFN: the kjv-silu twin).

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

    @property
    def head_dim(self):
        return self.hidden_size // self.num_attention_heads

    def to_hf(self):
        d = asdict(self)
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

    @classmethod
    def from_hf(cls, d):
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


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


class Backbone(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LlamaReLU(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Backbone(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self._rope = None

    def init_weights(self, seed):
        g = torch.Generator().manual_seed(seed)
        std = 0.02
        resid_std = std / math.sqrt(2 * self.cfg.num_hidden_layers)
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p)
            else:
                s = resid_std if name.endswith(("o_proj.weight", "down_proj.weight")) else std
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
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin, tap=taps, ffn_mask=None if ffn_masks is None else ffn_masks[i])
        return self.lm_head(self.model.norm(x))


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
