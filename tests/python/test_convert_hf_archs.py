"""convert_hf.py on OPT and Qwen2 checkpoints (tiny, random, safetensors) with byte-level BPE
tokenizers that exist only as tokenizer.json: tensor names and values, metadata, the
vocabulary, predictors (OPT), refusals; and the converted files' float64 reference logits
against a direct NumPy transcription of Hugging Face's OPT and Qwen2 forward passes on the
checkpoint's own tensors (learned positions with their offset of 2; rotate_half RoPE on HF q/k
rows), and against transformers itself where PyTorch and transformers are installed."""
import json
import math
import os

import numpy as np
import pytest

import bpe_vocab
import convert_hf
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


def causal_attention(q, k, v, group=1):
    """q [n, h, d], k/v [n, h_kv, d] -> [n, h * d]; head i reads kv head i // group."""
    n, h, d = q.shape
    out = np.zeros_like(q)
    mask = np.triu(np.ones((n, n), bool), 1)
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
