"""The reference forward pass (the oracle) against an even plainer per-token, per-head
computation on 1-layer models; sparse/dense invariants; the CLI; the tiny models'
sparsity and predictor quality."""
import cmath
import math
import os
import subprocess

import numpy as np
import pytest

import make_tiny_model
import reference_forward as ref
from conftest import PYTHON, REFERENCE_DIR

TOKENS = [1, 17, 260, 5, 299, 42, 3]


def tiny(tmp_path, *args, name="m.gguf"):
    out = tmp_path / name
    assert make_tiny_model.main([*map(str, args), "--out", str(out)]) == 0
    return out


def direct_logits(m: ref.Model, tokens):
    """One-layer forward written token by token, head by head, with RoPE as complex
    multiplication. Deliberately shares nothing with reference_forward but the weights."""
    assert m.n_layer == 1
    w = m.w
    n_embd = w["token_embd.weight"].shape[1]
    d = n_embd // m.n_head
    group = m.n_head // m.n_head_kv

    def rms(v, g):
        return [v[j] / math.sqrt(sum(t * t for t in v) / len(v) + m.eps) * g[j] for j in range(len(v))]

    def ln(v, g, b):
        mu = sum(v) / len(v)
        var = sum((t - mu) ** 2 for t in v) / len(v)
        return [(v[j] - mu) / math.sqrt(var + m.eps) * g[j] + b[j] for j in range(len(v))]

    def matvec(W, v):
        return [float(np.dot(W[i], v)) for i in range(W.shape[0])]

    def rotate(vec, pos):
        out = list(vec)
        half = m.n_rot // 2
        for i in range(half):
            a, b = (i, i + half) if m.arch == "falcon" else (2 * i, 2 * i + 1)
            z = complex(vec[a], vec[b]) * cmath.exp(1j * pos * m.rope_base ** (-2 * i / m.n_rot))
            out[a], out[b] = z.real, z.imag
        return out

    act = {"silu": lambda t: t / (1 + math.exp(-t)), "relu": lambda t: max(t, 0.0),
           "gelu": lambda t: 0.5 * t * (1 + math.tanh(math.sqrt(2 / math.pi) * (t + 0.044715 * t ** 3)))}[m.act]
    xs = [list(w["token_embd.weight"][t]) for t in tokens]
    qs, ks, vs, h1s = [], [], [], []
    for pos, x in enumerate(xs):
        if m.arch == "falcon":
            h1 = ln(x, w["blk.0.attn_norm.weight"], w["blk.0.attn_norm.bias"])
            qkv = matvec(w["blk.0.attn_qkv.weight"], h1)
            q, k, v = qkv[:m.n_head * d], qkv[m.n_head * d:(m.n_head + m.n_head_kv) * d], qkv[(m.n_head + m.n_head_kv) * d:]
        else:
            h1 = rms(x, w["blk.0.attn_norm.weight"])
            q, k, v = (matvec(w[f"blk.0.attn_{s}.weight"], h1) for s in "qkv")
        qs.append([rotate(q[h * d:(h + 1) * d], pos) for h in range(m.n_head)])
        ks.append([rotate(k[h * d:(h + 1) * d], pos) for h in range(m.n_head_kv)])
        vs.append([v[h * d:(h + 1) * d] for h in range(m.n_head_kv)])
        h1s.append(h1)
    logits = []
    for t, x in enumerate(xs):
        heads = []
        for h in range(m.n_head):
            kv = h // group
            s = [sum(a * b for a, b in zip(qs[t][h], ks[u][kv])) / math.sqrt(d) for u in range(t + 1)]
            e = [math.exp(si - max(s)) for si in s]
            heads += [sum(e[u] * vs[u][kv][j] for u in range(t + 1)) / sum(e) for j in range(d)]
        attn = matvec(w["blk.0.attn_output.weight"], heads)
        if m.arch == "falcon":
            f_in = ln(x, w["blk.0.attn_norm_2.weight"], w["blk.0.attn_norm_2.bias"]) \
                if "blk.0.attn_norm_2.weight" in w else h1s[t]
            a = [act(u) for u in matvec(w["blk.0.ffn_up.weight"], f_in)]
            resid = x
        else:
            resid = [x[j] + attn[j] for j in range(n_embd)]
            f_in = rms(resid, w["blk.0.ffn_norm.weight"])
            g, u = matvec(w["blk.0.ffn_gate.weight"], f_in), matvec(w["blk.0.ffn_up.weight"], f_in)
            if m.arch == "bamboo":
                a = [max(gi, 0.0) * max(ui, 0.0) for gi, ui in zip(g, u)]
            else:
                a = [act(gi) * ui for gi, ui in zip(g, u)]
        down = w["blk.0.ffn_down_t.weight"].T if "blk.0.ffn_down_t.weight" in w else w["blk.0.ffn_down.weight"]
        f = matvec(down, a)
        y = [resid[j] + f[j] + (attn[j] if m.arch == "falcon" else 0.0) for j in range(n_embd)]
        y = ln(y, w["output_norm.weight"], w["output_norm.bias"]) if m.arch == "falcon" \
            else rms(y, w["output_norm.weight"])
        logits.append(matvec(w.get("output.weight", w["token_embd.weight"]), y))
    return np.array(logits)


@pytest.mark.parametrize("arch,extra", [
    ("llama", []), ("llama", ["--act", "relu", "--tied"]), ("llama", ["--pwri"]), ("bamboo", []),
    ("falcon", ["--kv-heads", "1"]), ("falcon", ["--kv-heads", "2", "--pwri"])])
def test_one_layer_matches_direct_computation(tmp_path, arch, extra):
    path = tiny(tmp_path, "--arch", arch, "--layers", 1, "--seed", 3, *extra)
    m = ref.load_model(path)
    got = ref.forward(m, TOKENS)
    want = direct_logits(m, TOKENS)
    assert got.shape == (len(TOKENS), 300)
    assert np.abs(got - want).max() <= 1e-9 * max(1.0, np.abs(want).max())


@pytest.mark.parametrize("arch", ["llama", "bamboo", "falcon"])
def test_sparse_with_threshold_minus_inf_equals_dense(tmp_path, arch):
    m = ref.load_model(tiny(tmp_path, "--arch", arch, "--pwri", "--outtype", "q8_0", "--seed", 4))
    dense = ref.forward(m, TOKENS)
    assert np.array_equal(ref.forward(m, TOKENS, sparse=True, threshold=-np.inf), dense)
    assert not np.array_equal(ref.forward(m, TOKENS, sparse=True), dense)  # the predictor does mask


def test_rope_conventions():
    x = np.random.default_rng(0).standard_normal((1, 2, 8)).repeat(3, axis=0)   # same vector at 3 positions
    normal, neox = ref.rope(x, 8, 10000.0, False), ref.rope(x, 8, 10000.0, True)
    assert np.array_equal(normal[0], x[0])                                      # position 0: identity
    # pair 0 turns by exactly 1 radian per position: (2i, 2i+1) normal, (i, i+4) neox
    c, s = math.cos(2), math.sin(2)
    assert np.allclose(normal[2, :, 0], x[2, :, 0] * c - x[2, :, 1] * s)
    assert np.allclose(neox[2, :, 4], x[2, :, 0] * s + x[2, :, 4] * c)
    # linear scaling by factor 2 (positions x 0.5): position 2 looks like position 1
    assert np.allclose(ref.rope(x, 8, 10000.0, False, 0.5)[2], normal[1])
    # n_rot < head_dim leaves the tail alone
    assert np.array_equal(ref.rope(x, 4, 10000.0, False)[:, :, 4:], x[:, :, 4:])


def test_pwri_dense_equals_relu_gguf(tmp_path):
    """Same seed: the PWRI file (ffn_down_t, predictors) computes the same dense function as
    the plain GGUF with ReLU."""
    a = ref.load_model(tiny(tmp_path, "--pwri", "--seed", 5, name="a.gguf"))
    b = ref.load_model(tiny(tmp_path, "--act", "relu", "--seed", 5, name="b.gguf"))
    assert a.act == b.act == "relu" and a.pwri and not b.pwri
    assert np.allclose(ref.forward(a, TOKENS), ref.forward(b, TOKENS), rtol=0, atol=1e-12)


@pytest.mark.parametrize("arch", ["llama", "bamboo", "falcon"])
def test_tiny_pwri_models_are_sparse_and_predictable(tmp_path, arch):
    m = ref.load_model(tiny(tmp_path, "--arch", arch, "--pwri", "--layers", 2, "--seed", 6))
    seen = {}
    ref.forward(m, np.random.default_rng(0).integers(3, 300, 64), hook=lambda il, k, v: seen.__setitem__((il, k), v))
    for il in range(m.n_layer):
        x, h, p = seen[(il, "ffn_in")], seen[(il, "pred_in")], f"blk.{il}."
        if arch == "falcon":
            active = x @ m.w[p + "ffn_up.weight"].T > 0
        else:
            active = x @ m.w[p + "ffn_gate.weight"].T > 0
            if arch == "bamboo":
                active &= x @ m.w[p + "ffn_up.weight"].T > 0
        predicted = ref.predictor_mask(m, il, h, m.threshold)
        assert 0.75 <= 1 - active.mean() <= 0.95, (il, active.mean())
        assert (active & predicted).sum() / active.sum() >= 0.7   # recall
        assert predicted.mean() <= 0.35                           # and still sparse


def test_cli_out_and_greedy(tmp_path):
    path = tiny(tmp_path, "--arch", "llama", "--pwri", "--outtype", "q4_0", "--seed", 8)
    script = os.path.join(REFERENCE_DIR, "reference_forward.py")
    out = tmp_path / "logits.bin"
    p = subprocess.run([PYTHON, script, str(path), "--tokens", "1,5,9", "--sparse", "--out", str(out),
                        "--greedy", "4"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    m = ref.load_model(path)
    logits = np.fromfile(out, dtype="<f4").reshape(3, 300)
    assert np.array_equal(logits, ref.forward(m, [1, 5, 9], sparse=True).astype(np.float32))
    ids = [int(t) for t in p.stdout.split()]
    seq = [1, 5, 9]
    for _ in range(4):
        seq.append(int(np.argmax(ref.forward(m, seq, sparse=True)[-1])))
    assert ids == seq[3:]
    p = subprocess.run([PYTHON, script, str(tiny(tmp_path, "--seed", 1, name="d.gguf")), "--tokens", "1",
                        "--sparse", "--greedy", "1"], capture_output=True, text=True)
    assert p.returncode != 0 and "PWRI" in p.stderr


def test_cli_hidden_is_the_normed_state_the_head_reads(tmp_path):
    path = tiny(tmp_path, "--arch", "qwen2", "--seed", 3, name="h.gguf")
    out = tmp_path / "hidden.bin"
    p = subprocess.run([PYTHON, os.path.join(REFERENCE_DIR, "reference_forward.py"), str(path),
                        "--tokens", "1,5,9,4", "--hidden", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    m = ref.load_model(path)
    h = ref.hidden(m, [1, 5, 9, 4])
    assert np.array_equal(np.fromfile(out, dtype="<f4").reshape(h.shape), h.astype(np.float32))
    head = m.w.get("output.weight", m.w["token_embd.weight"])
    assert np.allclose(h @ head.T, ref.forward(m, [1, 5, 9, 4]), rtol=0, atol=1e-12)
    # RMS-normed rows times the norm weight: rms(h / w) is 1.
    w = m.w["output_norm.weight"]
    assert np.allclose(np.sqrt(np.mean((h / w) ** 2, axis=1)), 1.0, atol=1e-4)


def test_quantized_model_stays_close_to_f32(tmp_path):
    f32 = ref.forward(ref.load_model(tiny(tmp_path, "--seed", 9, name="f.gguf")), TOKENS)
    for t in ("f16", "q8_0", "q4_0"):
        q = ref.forward(ref.load_model(tiny(tmp_path, "--seed", 9, "--outtype", t, name=f"{t}.gguf")), TOKENS)
        assert np.corrcoef(q.ravel(), f32.ravel())[0, 1] > 0.98, t


def test_tiny_vocab_is_valid_spm(tmp_path):
    import gguf_io
    r = gguf_io.GGUFReader(tiny(tmp_path, "--seed", 1, "--vocab", 400))
    toks, types = r.metadata["tokenizer.ggml.tokens"], list(r.metadata["tokenizer.ggml.token_type"])
    assert len(toks) == len(set(toks)) == 400 and toks[:3] == ["<unk>", "<s>", "</s>"]
    assert toks[3:259] == [f"<0x{b:02X}>" for b in range(256)] and types[3:259] == [6] * 256
    pieces = set(toks[259:])
    for t in toks[259:]:   # every multi-character piece can be built by merging two pieces
        assert len(t) == 1 or any(t[:i] in pieces and t[i:] in pieces for i in range(1, len(t))), t
