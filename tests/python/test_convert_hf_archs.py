"""convert_hf.py on OPT, Qwen2, Qwen3, Qwen3-MoE and Mixtral checkpoints (tiny,
random, safetensors) with byte-level BPE tokenizers that exist only as tokenizer.json
(SentencePiece for Mixtral): tensor names and values, metadata, the vocabulary, predictors (OPT),
refusals; and the converted files' float64 logits against a direct NumPy transcription of Hugging
Face's forward passes on the checkpoint's own tensors (learned positions with their offset of 2;
rotate_half RoPE on HF q/k rows; Qwen3's per-head q/k RMSNorm; softmax top-k routing with
renormalised weights), and against transformers itself where PyTorch and transformers are
installed. SmallThinker's are in test_convert_smallthinker.py, which reuses the helpers here."""
import json
import math
import os

import numpy as np
import pytest

import bpe_vocab
import convert_hf
import quants
from conftest import CONVERT_DIR, PYTHON  # noqa: F401  (import paths)
from gguf_io import GGUFReader

WORDS = ("the of and to in is was that for it with as his on be at by this had not are but from or "
         "have an they which one you were her all she there would their we him been has 12 345 6789").split()


def make_tokenizer(d, regex=None, specials=("</s>", "<pad>"), normalizer=False):
    """A byte-level BPE tokenizer.json trained on generated text (GPT-2 split, or a Split on regex)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    import random
    tok = Tokenizer(models.BPE())
    if regex:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(regex), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if normalizer:
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    rng = random.Random(0)
    text = [" ".join(rng.choice(WORDS) for _ in range(10)) for _ in range(300)]
    tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=400, special_tokens=list(specials),
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                      show_progress=False))
    tok.add_tokens(["<tool>"])
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    return tok


def save(d, values):
    from safetensors.numpy import save_file
    save_file({k: v.astype(np.float32) for k, v in values.items()}, os.path.join(d, "model.safetensors"))


def make_opt(d, *, layers=2, embd=64, ff=128, heads=4, vocab=420, n_pos=32, untied=False, prefix="model."):
    """A random OPT checkpoint and its tokenizer; returns {hf name: float32 array}."""
    tok = make_tokenizer(d)
    cfg = {"architectures": ["OPTForCausalLM"], "model_type": "opt", "vocab_size": vocab,
           "hidden_size": embd, "ffn_dim": ff, "num_hidden_layers": layers, "num_attention_heads": heads,
           "max_position_embeddings": n_pos, "do_layer_norm_before": True, "word_embed_proj_dim": embd,
           "activation_function": "relu", "enable_bias": True, "tie_word_embeddings": not untied,
           "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "</s>", "eos_token": "</s>", "pad_token": "<pad>", "add_bos_token": True}, f)
    rng = np.random.default_rng(1)
    p = prefix + "decoder."
    v = {p + "embed_tokens.weight": rng.standard_normal((vocab, embd)),
         p + "embed_positions.weight": 0.5 * rng.standard_normal((n_pos + 2, embd)),
         p + "final_layer_norm.weight": 1 + 0.1 * rng.standard_normal(embd),
         p + "final_layer_norm.bias": 0.1 * rng.standard_normal(embd)}
    if untied:
        v["lm_head.weight"] = rng.standard_normal((vocab, embd)) / 4
    for i in range(layers):
        q = f"{p}layers.{i}."
        for name, rows, cols in (("self_attn.q_proj", embd, embd), ("self_attn.k_proj", embd, embd),
                                 ("self_attn.v_proj", embd, embd), ("self_attn.out_proj", embd, embd),
                                 ("fc1", ff, embd), ("fc2", embd, ff)):
            v[q + name + ".weight"] = rng.standard_normal((rows, cols)) / math.sqrt(cols)
            v[q + name + ".bias"] = 0.2 * rng.standard_normal(rows)
        for norm in ("self_attn_layer_norm", "final_layer_norm"):
            v[q + norm + ".weight"] = 1 + 0.1 * rng.standard_normal(embd)
            v[q + norm + ".bias"] = 0.1 * rng.standard_normal(embd)
    v = {k: x.astype(np.float32) for k, x in v.items()}
    save(d, v)
    return v, tok


def make_qwen2(d, *, layers=2, embd=64, ff=96, heads=4, kv_heads=2, vocab=420, tied=True):
    tok = make_tokenizer(d, regex=bpe_vocab.QWEN2_REGEX, specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
                         normalizer=True)
    cfg = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": vocab,
           "hidden_size": embd, "intermediate_size": ff, "num_hidden_layers": layers,
           "num_attention_heads": heads, "num_key_value_heads": kv_heads, "max_position_embeddings": 256,
           "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "hidden_act": "silu", "tie_word_embeddings": tied,
           "use_sliding_window": False, "bos_token_id": 0, "eos_token_id": 2}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                   "chat_template": "{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}"}, f)
    rng = np.random.default_rng(2)
    d_head = embd // heads
    v = {"model.embed_tokens.weight": rng.standard_normal((vocab, embd)),
         "model.norm.weight": 1 + 0.1 * rng.standard_normal(embd)}
    if not tied:
        v["lm_head.weight"] = rng.standard_normal((vocab, embd)) / 4
    for i in range(layers):
        p = f"model.layers.{i}."
        q_rows, kv_rows = heads * d_head, kv_heads * d_head
        for name, rows, cols in (("self_attn.q_proj", q_rows, embd), ("self_attn.k_proj", kv_rows, embd),
                                 ("self_attn.v_proj", kv_rows, embd), ("self_attn.o_proj", embd, q_rows),
                                 ("mlp.gate_proj", ff, embd), ("mlp.up_proj", ff, embd), ("mlp.down_proj", embd, ff)):
            v[p + name + ".weight"] = rng.standard_normal((rows, cols)) / math.sqrt(cols)
        for name, rows in (("q_proj", q_rows), ("k_proj", kv_rows), ("v_proj", kv_rows)):
            v[p + "self_attn." + name + ".bias"] = 0.5 * rng.standard_normal(rows)
        v[p + "input_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(embd)
        v[p + "post_attention_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(embd)
    v = {k: x.astype(np.float32) for k, x in v.items()}
    save(d, v)
    return v, tok


def convert(*args):
    assert convert_hf.main([str(a) for a in args] + ["--quiet"]) == 0


# ------------------------------------------------------------------ direct HF transcriptions

def layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * w + b


def causal_attention(q, k, v, group=1, window=0):
    """q [n, h, d], k/v [n, h_kv, d] -> [n, h * d]; head i reads kv head i // group. With a
    window W > 0, the query at position p sees the keys at p - W < q <= p."""
    n, h, d = q.shape
    out = np.zeros_like(q)
    mask = np.triu(np.ones((n, n), bool), 1)
    if window:
        mask |= np.tril(np.ones((n, n), bool), -window)
    for i in range(h):
        s = q[:, i] @ k[:, i // group].T / math.sqrt(d)
        s[mask] = -np.inf
        p = np.exp(s - s.max(1, keepdims=True))
        out[:, i] = (p / p.sum(1, keepdims=True)) @ v[:, i // group]
    return out.reshape(n, h * d)


def hf_opt_logits(w, tokens, heads, prefix="model."):
    """modeling_opt (pre-LN, positions = index + 2), float64, on the HF tensor names."""
    w = {k: x.astype(np.float64) for k, x in w.items()}
    p = prefix + "decoder."
    n = len(tokens)
    x = w[p + "embed_tokens.weight"][tokens] + w[p + "embed_positions.weight"][np.arange(n) + 2]
    lin = lambda name, h: h @ w[name + ".weight"].T + w[name + ".bias"]  # noqa: E731
    i = 0
    while f"{p}layers.{i}.fc1.weight" in w:
        q = f"{p}layers.{i}."
        h = layer_norm(x, w[q + "self_attn_layer_norm.weight"], w[q + "self_attn_layer_norm.bias"])
        d = h.shape[1] // heads
        att = causal_attention(*(lin(q + f"self_attn.{t}_proj", h).reshape(n, heads, d) for t in "qkv"))
        x = x + lin(q + "self_attn.out_proj", att)
        h = layer_norm(x, w[q + "final_layer_norm.weight"], w[q + "final_layer_norm.bias"])
        x = x + lin(q + "fc2", np.maximum(lin(q + "fc1", h), 0))
        i += 1
    x = layer_norm(x, w[p + "final_layer_norm.weight"], w[p + "final_layer_norm.bias"])
    return x @ w.get("lm_head.weight", w[p + "embed_tokens.weight"]).T


def hf_qwen2_logits(w, tokens, heads, kv_heads, theta=1e6, eps=1e-6):
    """modeling_qwen2: RMSNorm, biased q/k/v, rotate_half RoPE on HF rows, SwiGLU, float64."""
    w = {k: x.astype(np.float64) for k, x in w.items()}
    rms = lambda x, g: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g  # noqa: E731
    n = len(tokens)
    x = w["model.embed_tokens.weight"][tokens]
    d = x.shape[1] // heads
    inv = theta ** (-np.arange(0, d, 2) / d)
    ang = np.arange(n)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], 1))[:, None], np.sin(np.concatenate([ang, ang], 1))[:, None]

    def rot(t):
        half = np.concatenate([-t[..., d // 2:], t[..., :d // 2]], -1)
        return t * cos + half * sin
    i = 0
    while f"model.layers.{i}.mlp.up_proj.weight" in w:
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])

        def proj(t, nh, h=h, p=p):
            y = h @ w[p + f"self_attn.{t}_proj.weight"].T + w[p + f"self_attn.{t}_proj.bias"]
            return y.reshape(n, nh, d)
        att = causal_attention(rot(proj("q", heads)), rot(proj("k", kv_heads)), proj("v", kv_heads),
                               heads // kv_heads)
        x = x + att @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        g = h @ w[p + "mlp.gate_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
        i += 1
    x = rms(x, w["model.norm.weight"])
    return x @ w.get("lm_head.weight", w["model.embed_tokens.weight"]).T


# ------------------------------------------------------------------ OPT

@pytest.mark.parametrize("untied,prefix", [(False, "model."), (True, "")])
def test_opt_gguf_tensors_metadata_and_logits(tmp_path, untied, prefix):
    import reference_forward as ref
    src, tok = make_opt(tmp_path / "hf", untied=untied, prefix=prefix)
    out = tmp_path / "opt.gguf"
    convert(tmp_path / "hf", "--outfile", out, "--outtype", "f32")
    r = GGUFReader(out)
    md = r.metadata
    assert r.magic == b"GGUF" and md["general.architecture"] == "opt"
    for k, want in {"opt.embedding_length": 64, "opt.block_count": 2, "opt.feed_forward_length": 128,
                    "opt.attention.head_count": 4, "opt.context_length": 32,
                    "opt.feed_forward_activation": "relu", "tokenizer.ggml.model": "gpt2",
                    "tokenizer.ggml.pre": "gpt2", "tokenizer.ggml.bos_token_id": tok.token_to_id("</s>"),
                    "tokenizer.ggml.add_bos_token": True}.items():
        assert md[k] == want, k
    assert "opt.rope.freq_base" not in md
    assert ("output.weight" in r.tensors) == untied
    p = prefix + "decoder."
    assert np.array_equal(r.dequantize("position_embd.weight"), src[p + "embed_positions.weight"])
    assert np.array_equal(r.dequantize("blk.1.ffn_down.bias"), src[p + "layers.1.fc2.bias"])
    assert np.array_equal(r.dequantize("blk.0.attn_output.bias"), src[p + "layers.0.self_attn.out_proj.bias"])
    tokens = [2, 5, 77, 200, 13, 9, 300, 42, 7]
    got = ref.forward(ref.load_model(out), tokens)
    want = hf_opt_logits(src, tokens, 4, prefix)
    assert np.abs(got - want).max() < 1e-9 * max(1.0, np.abs(want).max())


def test_opt_pwri_with_predictors(tmp_path):
    import reference_forward as ref
    from test_convert_hf import write_predictors
    src, _ = make_opt(tmp_path / "hf")
    write_predictors(tmp_path / "pred", src, 2, 64, 128, [32, 48], "npz", threshold=0.5)
    out = tmp_path / "opt.pwri.gguf"
    convert(tmp_path / "hf", "--predictors", tmp_path / "pred", "--outfile", out, "--outtype", "q8_0")
    r = GGUFReader(out)
    assert r.is_pwri and r.metadata["powerinfer.sparse_threshold"] == 0.5
    # The original's names: ffn_down_t and its bias ffn_down_t.bias; no ffn_down.
    assert "blk.0.ffn_down.weight" not in r.tensors and "blk.0.ffn_down.bias" not in r.tensors
    assert r.tensors["blk.0.ffn_down_t.weight"].shape == (128, 64)
    assert np.array_equal(r.dequantize("blk.0.ffn_down_t.bias"), src["model.decoder.layers.0.fc2.bias"])
    assert r.tensors["position_embd.weight"].dtype.name == "F16"   # not quantized
    assert r.tensors["blk.0.fc1.weight"].shape == (32, 64)
    m = ref.load_model(out)
    tokens = [2, 5, 77, 200, 13]
    dense = ref.forward(m, tokens)
    assert np.allclose(ref.forward(m, tokens, sparse=True, threshold=-np.inf), dense)


def test_opt_350m_layout_is_refused(tmp_path):
    make_opt(tmp_path / "hf")
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    cfg.update(do_layer_norm_before=False, word_embed_proj_dim=32)
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    assert convert_hf.main([str(tmp_path / "hf"), "--outfile", str(tmp_path / "x.gguf"), "-q"]) == 1


# ------------------------------------------------------------------ Qwen2

@pytest.mark.parametrize("tied", [True, False])
def test_qwen2_gguf_tensors_vocab_and_logits(tmp_path, tied, capsys):
    import reference_forward as ref
    src, tok = make_qwen2(tmp_path / "hf", tied=tied)
    out = tmp_path / "qwen2.gguf"
    convert(tmp_path / "hf", "--outfile", out, "--outtype", "f32")
    assert "NFC normalizer is not applied" in capsys.readouterr().err
    r = GGUFReader(out)
    md = r.metadata
    assert md["general.architecture"] == "qwen2" and md["qwen2.rope.freq_base"] == 1e6
    assert md["qwen2.attention.head_count_kv"] == 2
    assert md["qwen2.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-6)
    assert md["tokenizer.ggml.pre"] == "qwen2" and md["tokenizer.ggml.add_bos_token"] is False
    assert md["tokenizer.ggml.eos_token_id"] == tok.token_to_id("<|im_end|>")
    assert md["tokenizer.ggml.padding_token_id"] == tok.token_to_id("<|endoftext|>")
    assert md["tokenizer.ggml.bos_token_id"] == 0   # from config.json: tokenizer_config has none
    assert "<|im_start|>" in md["tokenizer.chat_template"]
    # q/k rows stay in HF order (NeoX RoPE), biases copied.
    q = src["model.layers.1.self_attn.q_proj.weight"]
    assert np.array_equal(r.dequantize("blk.1.attn_q.weight"), q)
    assert np.array_equal(r.dequantize("blk.1.attn_k.bias"), src["model.layers.1.self_attn.k_proj.bias"])
    assert "blk.0.attn_output.bias" not in r.tensors
    assert ("output.weight" in r.tensors) == (not tied)
    tokens = [1, 5, 77, 200, 13, 9, 300, 42, 7, 8, 9, 10]
    got = ref.forward(ref.load_model(out), tokens)
    want = hf_qwen2_logits(src, tokens, 4, 2)
    assert np.abs(got - want).max() < 1e-9 * max(1.0, np.abs(want).max())


def test_bpe_vocab_from_tokenizer_json(tmp_path):
    tok = make_tokenizer(tmp_path, regex=bpe_vocab.LLAMA3_REGEX)
    v = bpe_vocab.read_bpe_vocab(str(tmp_path), 450, {"bos_token_id": 0, "eos_token_id": 1})
    n = tok.get_vocab_size(with_added_tokens=True)
    assert v.pre == "llama-bpe"
    assert v.tokens[:n] == [tok.id_to_token(i) for i in range(n)]
    assert v.tokens[n:] == [f"[PAD{i}]" for i in range(n, 450)] and set(v.types[n:]) == {bpe_vocab.UNUSED}
    assert v.types[tok.token_to_id("</s>")] == bpe_vocab.CONTROL
    assert v.types[tok.token_to_id("<tool>")] == bpe_vocab.USER_DEFINED
    j = json.loads(tok.to_str())
    assert v.merges == [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    assert (v.bos_id, v.eos_id, v.add_bos) == (0, 1, False)
    with pytest.raises(bpe_vocab.BpeVocabError, match="token ids but the model has 100"):
        bpe_vocab.read_bpe_vocab(str(tmp_path), 100, {})


def test_bpe_vocab_refusals(tmp_path):
    make_tokenizer(tmp_path, regex=r"\s+|\w+")
    with pytest.raises(bpe_vocab.BpeVocabError, match="split regex"):
        bpe_vocab.read_bpe_vocab(str(tmp_path), 450, {})
    j = json.loads((tmp_path / "tokenizer.json").read_text())
    j["model"]["type"] = "WordPiece"
    (tmp_path / "tokenizer.json").write_text(json.dumps(j))
    with pytest.raises(bpe_vocab.BpeVocabError, match="is not BPE"):
        bpe_vocab.read_bpe_vocab(str(tmp_path), 450, {})


# ------------------------------------------------------------------ transformers itself

def test_opt_and_qwen2_match_transformers(tmp_path):
    torch = pytest.importorskip("torch", reason="needs PyTorch")
    transformers = pytest.importorskip("transformers", reason="needs transformers")
    import reference_forward as ref
    src, _ = make_opt(tmp_path / "opt")
    model = transformers.OPTForCausalLM(transformers.OPTConfig(
        vocab_size=420, hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=32, word_embed_proj_dim=64)).eval()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in src.items()}, strict=False)
    tokens = [2, 5, 77, 200, 13, 9, 300, 42]
    convert(tmp_path / "opt", "--outfile", tmp_path / "opt.gguf", "--outtype", "f32")
    with torch.no_grad():
        want = model(torch.tensor([tokens])).logits[0].double().numpy()
    assert np.abs(ref.forward(ref.load_model(tmp_path / "opt.gguf"), tokens) - want).max() < 1e-4
    src, _ = make_qwen2(tmp_path / "qwen2")
    model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=420, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=True)).eval()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in src.items()}, strict=False)
    convert(tmp_path / "qwen2", "--outfile", tmp_path / "q.gguf", "--outtype", "f32")
    with torch.no_grad():
        want = model(torch.tensor([tokens])).logits[0].double().numpy()
    assert np.abs(ref.forward(ref.load_model(tmp_path / "q.gguf"), tokens) - want).max() < 1e-4


# ------------------------------------------------------------------ Qwen3, Qwen3-MoE, Mixtral

def make_qwen3(d, *, moe=False, layers=2, embd=64, heads=4, kv_heads=2, head_dim=32, ff=96, moe_ff=64,
               experts=4, top_k=2, vocab=420, tied=False, config_extra=None):
    """A random Qwen3 (or, with moe, Qwen3-MoE) checkpoint; head_dim != embd / heads on purpose."""
    tok = make_tokenizer(d, regex=bpe_vocab.QWEN2_REGEX, specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>"))
    cfg = {"architectures": ["Qwen3MoeForCausalLM" if moe else "Qwen3ForCausalLM"],
           "model_type": "qwen3_moe" if moe else "qwen3", "vocab_size": vocab, "hidden_size": embd,
           "intermediate_size": ff, "num_hidden_layers": layers, "num_attention_heads": heads,
           "num_key_value_heads": kv_heads, "head_dim": head_dim, "max_position_embeddings": 256,
           "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "hidden_act": "silu", "tie_word_embeddings": tied,
           "attention_bias": False, "use_sliding_window": False, "bos_token_id": 0, "eos_token_id": 2}
    if moe:
        cfg.update(num_experts=experts, num_experts_per_tok=top_k, moe_intermediate_size=moe_ff,
                   decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True)
    cfg.update(config_extra or {})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, f)
    rng = np.random.default_rng(3 if moe else 4)
    v = {"model.embed_tokens.weight": rng.standard_normal((vocab, embd)),
         "model.norm.weight": 1 + 0.1 * rng.standard_normal(embd)}
    if not tied:
        v["lm_head.weight"] = rng.standard_normal((vocab, embd)) / 4
    q_rows, kv_rows = heads * head_dim, kv_heads * head_dim
    for i in range(layers):
        p = f"model.layers.{i}."
        mats = [("self_attn.q_proj", q_rows, embd), ("self_attn.k_proj", kv_rows, embd),
                ("self_attn.v_proj", kv_rows, embd), ("self_attn.o_proj", embd, q_rows)]
        if moe:
            mats.append(("mlp.gate", experts, embd))
            for e in range(experts):
                mats += [(f"mlp.experts.{e}.gate_proj", moe_ff, embd), (f"mlp.experts.{e}.up_proj", moe_ff, embd),
                         (f"mlp.experts.{e}.down_proj", embd, moe_ff)]
        else:
            mats += [("mlp.gate_proj", ff, embd), ("mlp.up_proj", ff, embd), ("mlp.down_proj", embd, ff)]
        for name, rows, cols in mats:
            v[p + name + ".weight"] = rng.standard_normal((rows, cols)) / math.sqrt(cols)
        for name, n in (("input_layernorm", embd), ("post_attention_layernorm", embd),
                        ("self_attn.q_norm", head_dim), ("self_attn.k_norm", head_dim)):
            v[p + name + ".weight"] = 1 + 0.2 * rng.standard_normal(n)
    v = {k: x.astype(np.float32) for k, x in v.items()}
    save(d, v)
    return v, tok


def add_moe_layers(v, rng, layers, embd, q_rows, kv_rows, experts, ff, router, expert_names):
    """Random attention, norms, router and experts of a Mixtral-layout checkpoint into `v`:
    block_sparse_moe.experts.E.<gate>, <up> [ff, embd] and <down> [embd, ff], expert_names
    being (gate, up, down) as the checkpoint names them."""
    gate, up, down = expert_names
    for i in range(layers):
        p = f"model.layers.{i}."
        mats = [("self_attn.q_proj", q_rows, embd), ("self_attn.k_proj", kv_rows, embd),
                ("self_attn.v_proj", kv_rows, embd), ("self_attn.o_proj", embd, q_rows), (router, experts, embd)]
        for e in range(experts):
            q = f"block_sparse_moe.experts.{e}."
            mats += [(q + gate, ff, embd), (q + up, ff, embd), (q + down, embd, ff)]
        for name, rows, cols in mats:
            v[p + name + ".weight"] = rng.standard_normal((rows, cols)) / math.sqrt(cols)
        v[p + "input_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(embd)
        v[p + "post_attention_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(embd)


def make_mixtral(d, spm_path, *, layers=2, embd=64, heads=4, kv_heads=2, ff=64, experts=4, top_k=2, vocab=320):
    import shutil
    os.makedirs(d, exist_ok=True)
    shutil.copy(spm_path, os.path.join(d, "tokenizer.model"))
    cfg = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": vocab,
           "hidden_size": embd, "intermediate_size": ff, "num_hidden_layers": layers,
           "num_attention_heads": heads, "num_key_value_heads": kv_heads, "max_position_embeddings": 256,
           "rms_norm_eps": 1e-5, "rope_theta": 1000000.0, "hidden_act": "silu", "tie_word_embeddings": False,
           "num_local_experts": experts, "num_experts_per_tok": top_k, "sliding_window": None,
           "bos_token_id": 1, "eos_token_id": 2}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    rng = np.random.default_rng(5)
    hd = embd // heads
    v = {"model.embed_tokens.weight": rng.standard_normal((vocab, embd)),
         "model.norm.weight": 1 + 0.1 * rng.standard_normal(embd),
         "lm_head.weight": rng.standard_normal((vocab, embd)) / 4}
    add_moe_layers(v, rng, layers, embd, heads * hd, kv_heads * hd, experts, ff,
                   "block_sparse_moe.gate", ("w1", "w3", "w2"))
    v = {k: x.astype(np.float32) for k, x in v.items()}
    save(d, v)
    return v


def softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def silu(x):
    return x / (1 + np.exp(-x))


def hf_decoder_logits(w, tokens, *, heads, kv_heads, head_dim, theta, eps, qk_norm=False, moe=None, top_k=0):
    """modeling_qwen3 / modeling_qwen3_moe / modeling_mixtral in float64 on the HF tensor names:
    RMSNorm; q/k/v projections (no biases); Qwen3: RMSNorm of each q and k head (weight
    [head_dim]) before RoPE; rotate_half RoPE on the HF rows; SwiGLU MLP, or the sparse MoE block:
    router softmax over all experts, top-k, weights renormalised to sum 1, expert outputs summed.
    moe: None (dense mlp), "qwen3moe" (mlp.experts.E.{gate,up,down}_proj) or "mixtral"
    (block_sparse_moe.experts.E.{w1,w3,w2})."""
    w = {k: x.astype(np.float64) for k, x in w.items()}
    rms = lambda x, g: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g  # noqa: E731
    n, d = len(tokens), head_dim
    x = w["model.embed_tokens.weight"][tokens]
    ang = np.arange(n)[:, None] * theta ** (-np.arange(0, d, 2) / d)[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], 1))[:, None], np.sin(np.concatenate([ang, ang], 1))[:, None]

    def rot(t):
        return t * cos + np.concatenate([-t[..., d // 2:], t[..., :d // 2]], -1) * sin
    i = 0
    while f"model.layers.{i}.input_layernorm.weight" in w:
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q, k, v = ((h @ w[p + f"self_attn.{t}_proj.weight"].T).reshape(n, nh, d)
                   for t, nh in (("q", heads), ("k", kv_heads), ("v", kv_heads)))
        if qk_norm:
            q, k = rms(q, w[p + "self_attn.q_norm.weight"]), rms(k, w[p + "self_attn.k_norm.weight"])
        x = x + causal_attention(rot(q), rot(k), v, heads // kv_heads) @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        if moe is None:
            mlp = lambda y, t: y @ w[p + f"mlp.{t}_proj.weight"].T  # noqa: E731
            x = x + mlp(silu(mlp(h, "gate")) * mlp(h, "up"), "down")
        else:
            blk, (g, u, dn) = {"qwen3moe": ("mlp.", ("gate_proj", "up_proj", "down_proj")),
                               "mixtral": ("block_sparse_moe.", ("w1", "w3", "w2"))}[moe]
            probs = softmax(h @ w[p + blk + "gate.weight"].T)
            out = np.zeros_like(h)
            for t in range(n):
                top = np.argsort(-probs[t], kind="stable")[:top_k]
                for e, r in zip(top, probs[t, top] / probs[t, top].sum()):
                    ex = lambda name, y: w[f"{p}{blk}experts.{e}.{name}.weight"] @ y  # noqa: E731
                    out[t] += r * ex(dn, silu(ex(g, h[t])) * ex(u, h[t]))
            x = x + out
        i += 1
    x = rms(x, w["model.norm.weight"])
    return x @ w.get("lm_head.weight", w["model.embed_tokens.weight"]).T


def gguf_logits(path, tokens):
    """The converted file read back with gguf_io, as llama.cpp runs llama / qwen3 / qwen3moe, in
    float64: llama rotates adjacent pairs (2i, 2i+1) of its permuted q/k rows, qwen3 the NeoX
    pairs (i, i + d/2); attn_{q,k}_norm per head before RoPE; ffn_gate_inp routes each token to
    the top expert_used_count experts of the softmax, weights renormalised."""
    r = GGUFReader(path)
    md, a = r.metadata, r.metadata["general.architecture"]
    t = lambda name: r.dequantize(name, np.float64)  # noqa: E731
    n_head, n_kv = md[f"{a}.attention.head_count"], md[f"{a}.attention.head_count_kv"]
    d = md.get(f"{a}.attention.key_length", md[f"{a}.embedding_length"] // n_head)
    assert md[f"{a}.rope.dimension_count"] == d
    eps, base = md[f"{a}.attention.layer_norm_rms_epsilon"], md[f"{a}.rope.freq_base"]
    rms = lambda x, g: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g  # noqa: E731
    n = len(tokens)
    ang = np.arange(n)[:, None, None] * base ** (-np.arange(0, d, 2) / d)[None, None, :]
    c, s = np.cos(ang), np.sin(ang)

    def rope(v):
        out = np.empty_like(v)
        if a == "llama":
            x0, x1 = v[..., 0::2], v[..., 1::2]
            out[..., 0::2], out[..., 1::2] = x0 * c - x1 * s, x0 * s + x1 * c
        else:
            x0, x1 = v[..., :d // 2], v[..., d // 2:]
            out[..., :d // 2], out[..., d // 2:] = x0 * c - x1 * s, x0 * s + x1 * c
        return out
    x = t("token_embd.weight")[tokens]
    for il in range(md[f"{a}.block_count"]):
        b = f"blk.{il}."
        h = rms(x, t(b + "attn_norm.weight"))
        q, k, v = ((h @ t(b + f"attn_{x_}.weight").T).reshape(n, nh, d)
                   for x_, nh in (("q", n_head), ("k", n_kv), ("v", n_kv)))
        if b + "attn_q_norm.weight" in r.tensors:
            q, k = rms(q, t(b + "attn_q_norm.weight")), rms(k, t(b + "attn_k_norm.weight"))
        x = x + causal_attention(rope(q), rope(k), v, n_head // n_kv) @ t(b + "attn_output.weight").T
        h = rms(x, t(b + "ffn_norm.weight"))
        if b + "ffn_gate_inp.weight" in r.tensors:
            gate, up, down = (t(b + f"ffn_{x_}_exps.weight") for x_ in ("gate", "up", "down"))
            probs = softmax(h @ t(b + "ffn_gate_inp.weight").T)
            k_used = md[f"{a}.expert_used_count"]
            for j in range(n):
                top = np.argsort(-probs[j], kind="stable")[:k_used]
                wts = probs[j, top] / probs[j, top].sum()
                x[j] += sum(r_ * (down[e] @ (silu(gate[e] @ h[j]) * (up[e] @ h[j]))) for e, r_ in zip(top, wts))
        else:
            x = x + (silu(h @ t(b + "ffn_gate.weight").T) * (h @ t(b + "ffn_up.weight").T)) @ t(b + "ffn_down.weight").T
    x = rms(x, t("output_norm.weight"))
    return x @ t("output.weight" if "output.weight" in r.tensors else "token_embd.weight").T


def assert_close(got, want, rel):
    assert np.abs(got - want).max() < rel * max(1.0, np.abs(want).max()), np.abs(got - want).max()


def assert_experts(r, src, layer, prefix, names, n_expert, dtype):
    """Each expert's slice of the stacked tensors is that expert's HF matrix (quantized row by row)."""
    for gg, hf in zip(("gate", "up", "down"), names):
        info = r.tensors[f"blk.{layer}.ffn_{gg}_exps.weight"]
        assert info.dtype == dtype, (gg, info.dtype)
        got = r.dequantize(info.name)
        for e in range(n_expert):
            m = src[f"model.layers.{layer}.{prefix}experts.{e}.{hf}.weight"]
            want = quants.dequantize(quants.quantize(m, dtype), dtype, m.shape)
            assert np.array_equal(got[e], want), (gg, e)


TOKENS = [1, 5, 77, 200, 13, 9, 300, 42, 7, 8, 9, 10]


@pytest.mark.parametrize("tied", [False, True])
def test_qwen3_gguf_tensors_metadata_and_logits(tmp_path, tied):
    src, tok = make_qwen3(tmp_path / "hf", tied=tied)
    out = tmp_path / "qwen3.gguf"
    convert(tmp_path / "hf", "--outfile", out, "--outtype", "f32")
    r = GGUFReader(out)
    md = r.metadata
    assert md["general.architecture"] == "qwen3"
    for k, want in {"qwen3.embedding_length": 64, "qwen3.feed_forward_length": 96, "qwen3.block_count": 2,
                    "qwen3.attention.head_count": 4, "qwen3.attention.head_count_kv": 2,
                    "qwen3.attention.key_length": 32, "qwen3.attention.value_length": 32,
                    "qwen3.rope.dimension_count": 32, "qwen3.rope.freq_base": 1e6,
                    "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2",
                    "tokenizer.ggml.eos_token_id": tok.token_to_id("<|im_end|>")}.items():
        assert md[k] == want, k
    assert "qwen3.expert_count" not in md
    names = set(r.tensors)
    assert ("output.weight" in names) == (not tied)
    for i in range(2):
        b, p = f"blk.{i}.", f"model.layers.{i}.self_attn."
        assert r.tensors[b + "attn_q.weight"].shape == (128, 64) and r.tensors[b + "attn_k.weight"].shape == (64, 64)
        assert r.tensors[b + "attn_output.weight"].shape == (64, 128)
        assert not any(n.startswith(b) and n.endswith(".bias") for n in names)
        for x in ("q", "k"):
            info = r.tensors[f"{b}attn_{x}_norm.weight"]
            assert info.shape == (32,) and info.dtype == quants.GGMLType.F32
            assert np.array_equal(r.dequantize(info.name), src[f"{p}{x}_norm.weight"])
    # q/k rows in HF order (NeoX RoPE).
    assert np.array_equal(r.dequantize("blk.1.attn_q.weight"), src["model.layers.1.self_attn.q_proj.weight"])
    assert np.array_equal(r.dequantize("blk.1.attn_k.weight"), src["model.layers.1.self_attn.k_proj.weight"])
    want = hf_decoder_logits(src, TOKENS, heads=4, kv_heads=2, head_dim=32, theta=1e6, eps=1e-6, qk_norm=True)
    assert_close(gguf_logits(out, TOKENS), want, 1e-9)
    convert(tmp_path / "hf", "--outfile", tmp_path / "q8.gguf", "--outtype", "q8_0")
    r = GGUFReader(tmp_path / "q8.gguf")
    assert r.tensors["blk.0.attn_q.weight"].dtype == quants.GGMLType.Q8_0
    assert r.tensors["blk.0.attn_q_norm.weight"].dtype == quants.GGMLType.F32
    assert_close(gguf_logits(tmp_path / "q8.gguf", TOKENS), want, 0.03)


def test_qwen3_moe_gguf_tensors_metadata_and_logits(tmp_path):
    src, _ = make_qwen3(tmp_path / "hf", moe=True)
    out = tmp_path / "moe.gguf"
    convert(tmp_path / "hf", "--outfile", out, "--outtype", "f32")
    r = GGUFReader(out)
    md = r.metadata
    assert md["general.architecture"] == "qwen3moe"
    for k, want in {"qwen3moe.expert_count": 4, "qwen3moe.expert_used_count": 2,
                    "qwen3moe.expert_feed_forward_length": 64, "qwen3moe.feed_forward_length": 96,
                    "qwen3moe.attention.key_length": 32, "qwen3moe.attention.value_length": 32,
                    "qwen3moe.rope.dimension_count": 32, "tokenizer.ggml.pre": "qwen2"}.items():
        assert md[k] == want, k
    assert md["qwen3moe.expert_count"] == 4 and r.types["qwen3moe.expert_count"] == convert_hf.VT.UINT32
    for i in range(2):
        b = f"blk.{i}."
        assert not any(b + f"ffn_{x}.weight" in r.tensors for x in ("gate", "up", "down"))
        assert r.tensors[b + "ffn_gate_inp.weight"].shape == (4, 64)
        assert r.tensors[b + "ffn_gate_exps.weight"].shape == (4, 64, 64)
        assert r.tensors[b + "ffn_up_exps.weight"].shape == (4, 64, 64)
        assert r.tensors[b + "ffn_down_exps.weight"].shape == (4, 64, 64)
        assert b + "attn_q_norm.weight" in r.tensors and b + "attn_k_norm.weight" in r.tensors
        assert np.array_equal(r.dequantize(b + "ffn_gate_inp.weight"), src[f"model.layers.{i}.mlp.gate.weight"])
        assert_experts(r, src, i, "mlp.", ("gate_proj", "up_proj", "down_proj"), 4, quants.GGMLType.F32)
    want = hf_decoder_logits(src, TOKENS, heads=4, kv_heads=2, head_dim=32, theta=1e6, eps=1e-6, qk_norm=True,
                             moe="qwen3moe", top_k=2)
    assert_close(gguf_logits(out, TOKENS), want, 1e-9)
    convert(tmp_path / "hf", "--outfile", tmp_path / "q8.gguf", "--outtype", "q8_0")
    r = GGUFReader(tmp_path / "q8.gguf")
    assert r.tensors["blk.1.ffn_gate_inp.weight"].dtype == quants.GGMLType.F32   # the router: never quantized
    assert_experts(r, src, 1, "mlp.", ("gate_proj", "up_proj", "down_proj"), 4, quants.GGMLType.Q8_0)
    assert_close(gguf_logits(tmp_path / "q8.gguf", TOKENS), want, 0.03)


def test_qwen3_moe_types_q4_0_and_unaligned_experts(tmp_path):
    # moe_ff 48: the gate/up rows (n_embd 64) quantize, the down rows (48) fall back to F16.
    src, _ = make_qwen3(tmp_path / "hf", moe=True, moe_ff=48, layers=1)
    convert(tmp_path / "hf", "--outfile", tmp_path / "q4.gguf", "--outtype", "q4_0")
    r = GGUFReader(tmp_path / "q4.gguf")
    T = quants.GGMLType
    assert r.tensors["blk.0.ffn_gate_inp.weight"].dtype == T.F32
    assert r.tensors["blk.0.ffn_down_exps.weight"].shape == (4, 64, 48)
    assert r.tensors["output.weight"].dtype == T.Q8_0
    for gg, dtype in (("gate", T.Q4_0), ("up", T.Q4_0), ("down", T.F16)):
        assert r.tensors[f"blk.0.ffn_{gg}_exps.weight"].dtype == dtype
    assert_experts(r, src, 0, "mlp.", ("gate_proj", "up_proj"), 4, T.Q4_0)


def test_mixtral_gguf_tensors_metadata_and_logits(tmp_path, spm_model):
    src = make_mixtral(tmp_path / "hf", spm_model)
    out = tmp_path / "mixtral.gguf"
    convert(tmp_path / "hf", "--outfile", out, "--outtype", "f32")
    r = GGUFReader(out)
    md = r.metadata
    assert md["general.architecture"] == "llama" and md["tokenizer.ggml.model"] == "llama"
    for k, want in {"llama.expert_count": 4, "llama.expert_used_count": 2, "llama.feed_forward_length": 64,
                    "llama.rope.freq_base": 1e6, "llama.rope.dimension_count": 16,
                    "llama.attention.head_count_kv": 2}.items():
        assert md[k] == want, k
    assert "llama.expert_feed_forward_length" not in md and "llama.attention.key_length" not in md
    for i in range(2):
        b, p = f"blk.{i}.", f"model.layers.{i}."
        assert not any(b + f"ffn_{x}.weight" in r.tensors for x in ("gate", "up", "down"))
        assert b + "attn_q_norm.weight" not in r.tensors
        assert r.tensors[b + "ffn_gate_inp.weight"].shape == (4, 64)
        assert np.array_equal(r.dequantize(b + "ffn_gate_inp.weight"), src[p + "block_sparse_moe.gate.weight"])
        assert_experts(r, src, i, "block_sparse_moe.", ("w1", "w3", "w2"), 4, quants.GGMLType.F32)
    # q/k rows permuted as llama's.
    q = src["model.layers.0.self_attn.q_proj.weight"]
    assert np.array_equal(r.dequantize("blk.0.attn_q.weight"), convert_hf.rope_to_gguf(q, 4))
    assert not np.array_equal(r.dequantize("blk.0.attn_q.weight"), q)
    tokens = [1, 5, 77, 200, 13, 9, 300, 42, 7, 8]
    want = hf_decoder_logits(src, tokens, heads=4, kv_heads=2, head_dim=16, theta=1e6, eps=1e-5,
                             moe="mixtral", top_k=2)
    assert_close(gguf_logits(out, tokens), want, 1e-9)
    convert(tmp_path / "hf", "--outfile", tmp_path / "q8.gguf", "--outtype", "q8_0")
    r = GGUFReader(tmp_path / "q8.gguf")
    assert r.tensors["blk.0.ffn_gate_inp.weight"].dtype == quants.GGMLType.F32
    assert r.metadata["general.file_type"] == 7
    assert_experts(r, src, 0, "block_sparse_moe.", ("w1", "w3", "w2"), 4, quants.GGMLType.Q8_0)
    assert_close(gguf_logits(tmp_path / "q8.gguf", tokens), want, 0.03)


@pytest.mark.parametrize("moe,extra,message", [
    (False, {"attention_bias": True}, "attention_bias is true"),
    (True, {"attention_bias": True}, "attention_bias is true"),
    (True, {"decoder_sparse_step": 2}, "decoder_sparse_step is 2"),
    (True, {"mlp_only_layers": [1]}, "mlp_only_layers [1]"),
    (True, {"norm_topk_prob": False}, "norm_topk_prob is false"),
    (True, {"num_experts_per_tok": 5}, "num_experts_per_tok 5"),
])
def test_qwen3_refusals(tmp_path, capsys, moe, extra, message):
    make_qwen3(tmp_path / "hf", moe=moe, layers=1, config_extra=extra)
    assert convert_hf.main([str(tmp_path / "hf"), "--outfile", str(tmp_path / "x.gguf"), "-q"]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not os.path.exists(tmp_path / "x.gguf")


def test_qwen3_moe_absent_norm_topk_prob_and_predictors_refused(tmp_path, capsys):
    make_qwen3(tmp_path / "hf", moe=True, layers=1)
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    del cfg["norm_topk_prob"]   # transformers' default is False
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    assert convert_hf.main([str(tmp_path / "hf"), "--outfile", str(tmp_path / "x.gguf"), "-q"]) == 1
    assert "norm_topk_prob is false or absent" in capsys.readouterr().err
    cfg["norm_topk_prob"] = True
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    assert convert_hf.main([str(tmp_path / "hf"), "--outfile", str(tmp_path / "x.gguf"), "-q",
                            "--predictors", str(tmp_path)]) == 1
    assert "mixture-of-experts model cannot be converted with --predictors" in capsys.readouterr().err
    # a missing expert is named
    from safetensors.numpy import load_file
    st = load_file(tmp_path / "hf" / "model.safetensors")
    del st["model.layers.0.mlp.experts.3.up_proj.weight"]
    save(tmp_path / "hf", st)
    assert convert_hf.main([str(tmp_path / "hf"), "--outfile", str(tmp_path / "x.gguf"), "-q"]) == 1
    assert "missing tensor(s): model.layers.0.mlp.experts.3.up_proj.weight" in capsys.readouterr().err


def test_qwen3_moe_transformers5_config_layout(tmp_path):
    # transformers 5 saves the expert count as num_local_experts and RoPE as rope_parameters.
    src, _ = make_qwen3(tmp_path / "hf", moe=True, layers=1)
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    cfg["num_local_experts"] = cfg.pop("num_experts")
    cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": cfg.pop("rope_theta")}
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    convert(tmp_path / "hf", "--outfile", tmp_path / "x.gguf", "--outtype", "f32")
    md = GGUFReader(tmp_path / "x.gguf").metadata
    assert md["qwen3moe.expert_count"] == 4 and md["qwen3moe.rope.freq_base"] == 1e6
    want = hf_decoder_logits(src, TOKENS, heads=4, kv_heads=2, head_dim=32, theta=1e6, eps=1e-6, qk_norm=True,
                             moe="qwen3moe", top_k=2)
    assert_close(gguf_logits(tmp_path / "x.gguf", TOKENS), want, 1e-9)
    # YaRN read from rope_parameters too (the original context from max_position_embeddings);
    # a scaling the engine does not compute is refused.
    cfg["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0}
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    convert(tmp_path / "hf", "--outfile", tmp_path / "y.gguf", "--outtype", "f32")
    md = GGUFReader(tmp_path / "y.gguf").metadata
    assert md["qwen3moe.rope.scaling.type"] == "yarn" and md["qwen3moe.rope.scaling.factor"] == 4.0
    assert md["qwen3moe.rope.scaling.original_context_length"] == cfg["max_position_embeddings"]
    cfg["rope_parameters"] = {"rope_type": "longrope", "rope_theta": 1e6, "factor": 4.0}
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    assert convert_hf.main([str(tmp_path / "hf"), "--outfile", str(tmp_path / "z.gguf"), "-q"]) == 1


def _torch_state(torch, model, src):
    """The checkpoint as the model's state dict: per-expert tensors as they are, or, where the
    installed transformers (5.x) fuses a layer's experts in memory (experts.gate_up_proj
    [E, 2 f, e] = gate rows then up rows, experts.down_proj [E, e, f]), stacked to match."""
    out = {}
    for k, ref_t in model.state_dict().items():
        if k.endswith("rotary_emb.inv_freq"):
            continue
        shape = tuple(ref_t.shape)
        v = next((src[a] for a in (k, k.replace(".mlp.", ".block_sparse_moe.")) if a in src), None)
        fused = k.rsplit(".", 1)[-1]
        if v is None and k.endswith("experts." + fused) and fused in ("gate_up_proj", "down_proj"):
            stem = k[:-len(fused)]
            for base, (g, u, dn) in ((stem, ("gate_proj", "up_proj", "down_proj")),
                                     (stem.replace(".mlp.", ".block_sparse_moe."), ("w1", "w3", "w2"))):
                if f"{base}0.{dn}.weight" in src:
                    one = lambda e, n: src[f"{base}{e}.{n}.weight"]  # noqa: E731
                    v = np.stack([np.concatenate([one(e, g), one(e, u)]) if fused == "gate_up_proj"
                                  else one(e, dn) for e in range(shape[0])])
        if v is not None and v.shape != shape and v.ndim == 3 and v.transpose(0, 2, 1).shape == shape:
            v = v.transpose(0, 2, 1)
        if v is None or v.shape != shape:
            pytest.skip(f"this transformers lays out {k} {list(shape)} in a way the test does not know")
        out[k] = torch.from_numpy(np.ascontiguousarray(v))
    return out


def test_qwen3_qwen3moe_mixtral_match_transformers(tmp_path, spm_model):
    torch = pytest.importorskip("torch", reason="needs PyTorch")
    transformers = pytest.importorskip("transformers", reason="needs transformers")
    for cls in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM"):
        if not hasattr(transformers, cls):
            pytest.skip(f"transformers {transformers.__version__} has no {cls}")
    common = dict(vocab_size=420, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=1e6, max_position_embeddings=256)
    cases = [
        ("qwen3", make_qwen3(tmp_path / "qwen3", tied=False)[0], transformers.Qwen3ForCausalLM(
            transformers.Qwen3Config(intermediate_size=96, head_dim=32, tie_word_embeddings=False, **common))),
        ("qwen3moe", make_qwen3(tmp_path / "qwen3moe", moe=True)[0], transformers.Qwen3MoeForCausalLM(
            transformers.Qwen3MoeConfig(intermediate_size=96, head_dim=32, tie_word_embeddings=False,
                                        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                                        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                                        **common))),
        ("mixtral", make_mixtral(tmp_path / "mixtral", spm_model), transformers.MixtralForCausalLM(
            transformers.MixtralConfig(**{**common, "vocab_size": 320, "rms_norm_eps": 1e-5}, intermediate_size=64,
                                       num_local_experts=4, num_experts_per_tok=2, tie_word_embeddings=False))),
    ]
    tokens = [1, 5, 77, 200, 13, 9, 300, 42]
    for name, src, model in cases:
        model = model.float().eval()
        model.load_state_dict(_torch_state(torch, model, src), strict=False)
        convert(tmp_path / name, "--outfile", tmp_path / f"{name}.gguf", "--outtype", "f32")
        with torch.no_grad():
            want = model(torch.tensor([tokens])).logits[0].double().numpy()
        assert np.abs(gguf_logits(tmp_path / f"{name}.gguf", tokens) - want).max() < 1e-4, name
