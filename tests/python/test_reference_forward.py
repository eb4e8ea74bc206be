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


# ----------------------------------------------------------------------------- qwen3, qwen3moe, smallthinker

def direct_qwen3(path, w, tokens):
    """qwen3 / qwen3moe / smallthinker forward written token by token, head by head, layer by
    layer: explicit per-head q/k RMSNorm (qwen3*), NeoX RoPE as complex multiplication, and for
    the experts an explicit softmax (or sigmoid), top-K and renormalisation per token; for
    smallthinker the router on the raw layer input, ReGLU experts, and with
    attention.sliding_window W layers il % 4 == 0 global without RoPE, the others attending the
    last W positions. Reads the hyperparameters from the file itself (not from ref.Model) and
    shares nothing with reference_forward but the weights w.
    Returns (logits [n_tok, n_vocab], routes [n_layer, n_tok, K] or None)."""
    import gguf_io
    r = gguf_io.GGUFReader(path)
    arch = r.get("general.architecture")
    hp = lambda k: r.get(f"{arch}.{k}")   # noqa: E731
    n_layer, n_head, n_head_kv = hp("block_count"), hp("attention.head_count"), hp("attention.head_count_kv")
    d, n_rot, base = hp("attention.key_length"), hp("rope.dimension_count"), hp("rope.freq_base")
    eps = hp("attention.layer_norm_rms_epsilon")
    n_exp, k_used = hp("expert_count"), hp("expert_used_count")
    sigmoid_gating = arch == "smallthinker" and hp("expert_gating_func") == 2
    sliding_window = hp("attention.sliding_window") if arch == "smallthinker" else None
    group = n_head // n_head_kv

    def rms(v, g):
        s = math.sqrt(sum(t * t for t in v) / len(v) + eps)
        return [v[j] / s * g[j] for j in range(len(v))]

    def matvec(W, v):
        return [float(np.dot(W[i], v)) for i in range(W.shape[0])]

    def silu(t):
        return t / (1 + math.exp(-t))

    def act(t):
        return max(t, 0.0) if arch == "smallthinker" else silu(t)

    def qk_norm(v, g):
        return v if arch == "smallthinker" else rms(v, g)

    def rotate(vec, pos):
        out, half = list(vec), n_rot // 2
        for i in range(half):
            z = complex(vec[i], vec[i + half]) * cmath.exp(1j * pos * base ** (-2 * i / n_rot))
            out[i], out[i + half] = z.real, z.imag
        return out

    xs = [list(w["token_embd.weight"][t]) for t in tokens]
    routes = []
    for il in range(n_layer):
        p = f"blk.{il}."
        nope = sliding_window is not None and il % 4 == 0
        window = sliding_window if sliding_window is not None and il % 4 else None
        turn = (lambda vec, pos: vec) if nope else rotate   # noqa: E731
        qs, ks, vs = [], [], []
        for pos, x in enumerate(xs):
            h1 = rms(x, w[p + "attn_norm.weight"])
            q, k, v = (matvec(w[p + f"attn_{s}.weight"], h1) for s in "qkv")
            assert len(q) == n_head * d and len(k) == len(v) == n_head_kv * d
            qs.append([turn(qk_norm(q[h * d:(h + 1) * d], w.get(p + "attn_q_norm.weight")), pos)
                       for h in range(n_head)])
            ks.append([turn(qk_norm(k[h * d:(h + 1) * d], w.get(p + "attn_k_norm.weight")), pos)
                       for h in range(n_head_kv)])
            vs.append([v[h * d:(h + 1) * d] for h in range(n_head_kv)])
        layer_routes, new_xs = [], []
        for t, x in enumerate(xs):
            seen = range(t + 1) if window is None else range(max(0, t - window + 1), t + 1)
            heads = []
            for h in range(n_head):
                kv = h // group
                s = [sum(a * b for a, b in zip(qs[t][h], ks[u][kv])) / math.sqrt(d) for u in seen]
                e = [math.exp(si - max(s)) for si in s]
                heads += [sum(ei * vs[u][kv][j] for ei, u in zip(e, seen)) / sum(e) for j in range(d)]
            attn = matvec(w[p + "attn_output.weight"], heads)
            resid = [x[j] + attn[j] for j in range(len(x))]
            f_in = rms(resid, w[p + "ffn_norm.weight"])
            if arch in ("qwen3moe", "smallthinker"):
                logits = matvec(w[p + "ffn_gate_inp.weight"], x if arch == "smallthinker" else f_in)
                if sigmoid_gating:
                    prob = [1 / (1 + math.exp(-li)) for li in logits]
                else:
                    ex = [math.exp(li - max(logits)) for li in logits]
                    prob = [e / sum(ex) for e in ex]
                order = logits if arch == "smallthinker" else prob   # (the same order, up to rounding)
                chosen = sorted(range(n_exp), key=lambda e: (-order[e], e))[:k_used]
                total = sum(prob[e] for e in chosen)
                f = [0.0] * len(x)
                for e in chosen:
                    g = matvec(w[p + "ffn_gate_exps.weight"][e], f_in)
                    u = matvec(w[p + "ffn_up_exps.weight"][e], f_in)
                    down = w[p + "ffn_down_exps_t.weight"][e].T if p + "ffn_down_exps_t.weight" in w \
                        else w[p + "ffn_down_exps.weight"][e]
                    y = matvec(down, [act(gi) * ui for gi, ui in zip(g, u)])
                    f = [f[j] + prob[e] / total * y[j] for j in range(len(x))]
                layer_routes.append(chosen)
            else:
                g, u = matvec(w[p + "ffn_gate.weight"], f_in), matvec(w[p + "ffn_up.weight"], f_in)
                f = matvec(w[p + "ffn_down.weight"], [silu(gi) * ui for gi, ui in zip(g, u)])
            new_xs.append([resid[j] + f[j] for j in range(len(x))])
        xs = new_xs
        routes.append(layer_routes)
    head = w.get("output.weight", w["token_embd.weight"])
    logits = np.array([matvec(head, rms(x, w["output_norm.weight"])) for x in xs])
    return logits, (np.array(routes) if arch in ("qwen3moe", "smallthinker") else None)


@pytest.mark.parametrize("arch,extra", [
    ("qwen3", ["--outtype", "f32"]), ("qwen3", ["--outtype", "q8_0"]),
    ("qwen3", ["--embd", 64, "--heads", 4, "--head-dim", 32]),
    ("qwen3moe", ["--outtype", "f32"]), ("qwen3moe", ["--outtype", "q8_0"]),
    ("qwen3moe", ["--head-dim", 32, "--experts", 6, "--experts-used", 3, "--expert-ff", 32, "--kv-heads", 1])])
def test_qwen3_matches_direct_computation(tmp_path, arch, extra):
    path = tiny(tmp_path, "--arch", arch, "--layers", 2, "--seed", 11, *extra)
    m = ref.load_model(path)
    want, want_routes = direct_qwen3(path, m.w, TOKENS)
    got = ref.forward(m, TOKENS)
    assert got.shape == (len(TOKENS), 300)
    assert np.abs(got - want).max() <= 1e-9 * max(1.0, np.abs(want).max())
    if arch == "qwen3moe":
        assert np.array_equal(ref.routes(m, TOKENS), want_routes)
        assert want_routes.shape == (2, len(TOKENS), m.n_expert_used)
    # the q/k norms take part: without them the result changes
    for name in [n for n in m.w if n.endswith(("attn_q_norm.weight", "attn_k_norm.weight"))]:
        m.w[name] = np.ones_like(m.w[name])
    assert np.abs(ref.forward(m, TOKENS) - got).max() > 1e-3


def test_qwen3_file_layout(tmp_path):
    import gguf_io
    from quants import GGMLType
    path = tiny(tmp_path, "--arch", "qwen3moe", "--outtype", "q8_0", "--head-dim", 32, "--experts", 4,
                "--experts-used", 2, "--expert-ff", 96, "--seed", 2)
    r = gguf_io.GGUFReader(path)
    md = r.metadata
    assert md["general.architecture"] == "qwen3moe"
    assert md["qwen3moe.attention.key_length"] == md["qwen3moe.attention.value_length"] == 32
    assert md["qwen3moe.rope.dimension_count"] == 32 and md["qwen3moe.rope.freq_base"] == 1e6
    assert md["qwen3moe.expert_count"] == 4 and md["qwen3moe.expert_used_count"] == 2
    assert md["qwen3moe.expert_feed_forward_length"] == md["qwen3moe.feed_forward_length"] == 96
    assert abs(md["qwen3moe.attention.layer_norm_rms_epsilon"] - 1e-6) < 1e-12
    t = r.tensors
    assert t["blk.1.attn_q.weight"].shape == (4 * 32, 64) and t["blk.1.attn_k.weight"].shape == (2 * 32, 64)
    assert t["blk.1.attn_output.weight"].shape == (64, 4 * 32)
    assert t["blk.1.attn_q_norm.weight"].shape == t["blk.1.attn_k_norm.weight"].shape == (32,)
    assert t["blk.1.ffn_gate_inp.weight"].shape == (4, 64) and t["blk.1.ffn_gate_inp.weight"].dtype == GGMLType.F32
    assert t["blk.1.ffn_gate_exps.weight"].shape == t["blk.1.ffn_up_exps.weight"].shape == (4, 96, 64)
    assert t["blk.1.ffn_down_exps.weight"].shape == (4, 64, 96)
    assert all(t[f"blk.1.ffn_{s}_exps.weight"].dtype == GGMLType.Q8_0 for s in ("gate", "up", "down"))
    assert not any(n.startswith("blk.0.ffn_gate.") or n.endswith(".bias") for n in t)
    m = ref.load_model(path)
    assert (m.head_dim, m.n_rot, m.n_expert, m.n_expert_used, m.act) == (32, 32, 4, 2, "silu")
    assert m.w["blk.0.ffn_down_exps.weight"][:, 0, :].max() == 0.0   # the bias channel stays 3.0
    assert np.all(np.abs(m.w["blk.0.attn_q_norm.weight"] - 1.0) <= 0.5)
    # the writer is deterministic for a seed
    again = tiny(tmp_path, "--arch", "qwen3moe", "--outtype", "q8_0", "--head-dim", 32, "--experts", 4,
                 "--experts-used", 2, "--expert-ff", 96, "--seed", 2, name="again.gguf")
    assert open(path, "rb").read() == open(again, "rb").read()


@pytest.mark.parametrize("args", [["--arch", "qwen3moe"], ["--arch", "smallthinker"],
                                  ["--arch", "smallthinker", "--gating", "softmax", "--swa", 4]])
def test_qwen3moe_routing_is_not_degenerate(tmp_path, args):
    m = ref.load_model(tiny(tmp_path, *args, "--seed", 12))
    toks = np.random.default_rng(1).integers(3, 300, 64)
    seen = {}
    ref.forward(m, toks, hook=lambda il, k, v: seen.__setitem__((il, k), v))
    for il in range(m.n_layer):
        ids = seen[(il, "routes")]
        counts = np.bincount(ids.ravel(), minlength=m.n_expert)
        assert counts.min() >= 1 and counts.max() <= 0.5 * len(toks), counts   # every expert used, none always
        assert len({tuple(sorted(r)) for r in ids}) >= 8                       # many different expert sets
        router_in = seen[(il, "router_in")]   # smallthinker: the raw layer input
        assert np.array_equal(router_in, seen[(il, "ffn_in")]) == (m.arch == "qwen3moe")
        logits = router_in @ m.w[f"blk.{il}.ffn_gate_inp.weight"].T
        top = -np.sort(-logits, axis=1)
        assert np.median(top[:, m.n_expert_used - 1] - top[:, m.n_expert_used]) > 0.1   # visible margins


@pytest.mark.parametrize("arch,extra", [("qwen3moe", []), ("smallthinker", ["--swa", 2])])
def test_cli_routes(tmp_path, arch, extra):
    path = tiny(tmp_path, "--arch", arch, "--outtype", "q8_0", "--layers", 2, "--seed", 13, *extra)
    script = os.path.join(REFERENCE_DIR, "reference_forward.py")
    routes, logits = tmp_path / "routes.bin", tmp_path / "logits.bin"
    p = subprocess.run([PYTHON, script, str(path), "--tokens", ",".join(map(str, TOKENS)), "--routes", str(routes),
                        "--out", str(logits)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    m = ref.load_model(path)
    _, want_routes = direct_qwen3(path, m.w, TOKENS)
    got = np.fromfile(routes, dtype="<i4")
    assert got.size == 2 * len(TOKENS) * 2
    assert np.array_equal(got.reshape(2, len(TOKENS), 2), want_routes)
    assert np.array_equal(np.fromfile(logits, dtype="<f4").reshape(len(TOKENS), 300),
                          ref.forward(m, TOKENS).astype(np.float32))
    p = subprocess.run([PYTHON, script, str(tiny(tmp_path, "--arch", "qwen3", "--seed", 1, name="d.gguf")),
                        "--tokens", "1", "--routes", str(routes)], capture_output=True, text=True)
    assert p.returncode != 0 and "need a mixture-of-experts model" in p.stderr


@pytest.mark.parametrize("arch,extra", [("qwen3moe", []), ("smallthinker", ["--gating", "softmax"]),
                                        ("smallthinker", ["--gating", "sigmoid", "--transpose-down"])])
def test_cli_force_routes_and_probs(tmp_path, arch, extra):
    """Forcing the oracle's own routes reproduces its logits; forcing others changes them; the
    probabilities are the softmax (sigmoid gating: the sigmoid) of each layer's router logits
    along the pass."""
    path = tiny(tmp_path, "--arch", arch, "--layers", 2, "--seed", 21, *extra)
    script = os.path.join(REFERENCE_DIR, "reference_forward.py")
    toks = ",".join(map(str, TOKENS))
    m = ref.load_model(path)
    own = ref.routes(m, TOKENS).astype("<i4")
    forced, logits, probs = tmp_path / "forced.bin", tmp_path / "logits.bin", tmp_path / "probs.bin"
    own.tofile(forced)
    p = subprocess.run([PYTHON, script, str(path), "--tokens", toks, "--force-routes", str(forced), "--out",
                        str(logits), "--route-probs", str(probs)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    want = ref.forward(m, TOKENS).astype(np.float32)
    assert np.array_equal(np.fromfile(logits, dtype="<f4").reshape(want.shape), want)
    pr = np.fromfile(probs, dtype="<f8").reshape(2, len(TOKENS), m.n_expert)
    seen = {}
    ref.hidden(m, TOKENS, hook=lambda il, k, v: seen.__setitem__((il, k), v))
    logit = np.stack([seen[(il, "router_in")] @ m.w[f"blk.{il}.ffn_gate_inp.weight"].T for il in range(2)])
    if m.gating == "sigmoid":
        assert np.allclose(pr, 1 / (1 + np.exp(-logit)), rtol=0, atol=1e-12)
        assert not np.allclose(pr.sum(axis=2), 1.0)
    else:
        assert np.allclose(pr, np.exp(logit) / np.exp(logit).sum(axis=2, keepdims=True), rtol=0, atol=1e-12)
        assert np.allclose(pr.sum(axis=2), 1.0)
    assert np.array_equal(np.argsort(-pr, axis=2, kind="stable")[:, :, :m.n_expert_used], own)
    other = own.copy()
    other[1, 3] = [e for e in range(m.n_expert) if e not in own[1, 3]][:m.n_expert_used]
    other.tofile(forced)
    p = subprocess.run([PYTHON, script, str(path), "--tokens", toks, "--force-routes", str(forced), "--out",
                        str(logits)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    got = np.fromfile(logits, dtype="<f4").reshape(want.shape)
    assert np.array_equal(got[:3], want[:3]) and not np.allclose(got[3], want[3])
    other[0, 0, 0] = m.n_expert
    other.tofile(forced)
    p = subprocess.run([PYTHON, script, str(path), "--tokens", toks, "--force-routes", str(forced), "--out",
                        str(logits)], capture_output=True, text=True)
    assert p.returncode != 0 and "expert ids must be in" in p.stderr


@pytest.mark.parametrize("args,message", [
    (["--arch", "qwen3moe", "--experts", 4, "--experts-used", 5], "--experts-used must be in [1, --experts]"),
    (["--arch", "qwen3moe", "--experts-used", 0], "--experts-used must be in [1, --experts]"),
    (["--arch", "qwen3", "--pwri"], "--pwri is not supported for qwen3"),
    (["--arch", "qwen3moe", "--pwri"], "--pwri is not supported for qwen3moe"),
    (["--arch", "llama", "--head-dim", 32], "--head-dim is only for qwen3, qwen3moe, smallthinker and gpt-oss"),
    (["--arch", "qwen3", "--experts", 4], "--experts is only for qwen3moe")])
def test_qwen3_option_errors(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as e:
        make_tiny_model.main([*map(str, args), "--out", str(tmp_path / "x.gguf")])
    assert e.value.code != 0
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.gguf").exists()


# ----------------------------------------------------------------------------- smallthinker

@pytest.mark.parametrize("extra", [
    ["--layers", 1, "--gating", "softmax"], ["--layers", 1, "--gating", "sigmoid", "--tied"],
    ["--layers", 2, "--gating", "softmax", "--outtype", "q8_0"],
    ["--layers", 2, "--gating", "sigmoid", "--head-dim", 32, "--experts", 6, "--experts-used", 3,
     "--expert-ff", 32, "--kv-heads", 1, "--transpose-down"],
    ["--layers", 2, "--gating", "sigmoid", "--swa", 3], ["--layers", 2, "--gating", "softmax", "--swa", 2]])
def test_smallthinker_matches_direct_computation(tmp_path, extra):
    """Router on the raw layer input, softmax/sigmoid gating, ReGLU experts, NeoX RoPE; with
    --swa, layer 0 global NoPE and layer 1 a sliding window shorter than the sequence."""
    path = tiny(tmp_path, "--arch", "smallthinker", "--seed", 31, *extra)
    m = ref.load_model(path)
    want, want_routes = direct_qwen3(path, m.w, TOKENS)
    got = ref.forward(m, TOKENS)
    assert got.shape == (len(TOKENS), 300)
    assert np.abs(got - want).max() <= 1e-9 * max(1.0, np.abs(want).max())
    assert np.array_equal(ref.routes(m, TOKENS), want_routes)


def test_smallthinker_file_layout(tmp_path):
    import gguf_io
    from quants import GGMLType
    args = ["--arch", "smallthinker", "--outtype", "q8_0", "--layers", 5, "--head-dim", 32, "--experts", 4,
            "--experts-used", 2, "--expert-ff", 96, "--swa", 6, "--transpose-down", "--seed", 2]
    path = tiny(tmp_path, *args)
    r = gguf_io.GGUFReader(path)
    md, t = r.metadata, r.tensors
    assert md["general.architecture"] == "smallthinker"
    assert md["smallthinker.attention.key_length"] == md["smallthinker.attention.value_length"] == 32
    assert md["smallthinker.rope.dimension_count"] == 32 and md["smallthinker.rope.freq_base"] == 1e6
    assert md["smallthinker.expert_count"] == 4 and md["smallthinker.expert_used_count"] == 2
    assert md["smallthinker.expert_feed_forward_length"] == md["smallthinker.feed_forward_length"] == 96
    assert md["smallthinker.expert_gating_func"] == 2 and md["smallthinker.attention.sliding_window"] == 6
    assert abs(md["smallthinker.attention.layer_norm_rms_epsilon"] - 1e-6) < 1e-12
    assert "smallthinker.feed_forward_activation" not in md
    assert t["blk.1.attn_q.weight"].shape == (4 * 32, 64) and t["blk.1.attn_output.weight"].shape == (64, 4 * 32)
    assert t["blk.1.ffn_gate_inp.weight"].shape == (4, 64) and t["blk.1.ffn_gate_inp.weight"].dtype == GGMLType.F32
    assert t["blk.1.ffn_gate_exps.weight"].shape == t["blk.1.ffn_up_exps.weight"].shape == (4, 96, 64)
    assert t["blk.1.ffn_down_exps_t.weight"].shape == (4, 96, 64) and "blk.1.ffn_down_exps.weight" not in t
    assert not any("norm" in n and n.startswith("blk.0.attn_") and n != "blk.0.attn_norm.weight" for n in t)
    assert not any(n.endswith(".bias") for n in t) and "output.weight" in t
    m = ref.load_model(path)
    assert (m.head_dim, m.n_rot, m.n_expert, m.n_expert_used, m.act, m.gating) == (32, 32, 4, 2, "relu", "sigmoid")
    assert m.windows == [0, 6, 6, 6, 0] and m.nope == [True, False, False, False, True]
    assert m.w["blk.0.ffn_down_exps_t.weight"][:, :, 0].max() == 0.0   # the bias channel stays 3.0
    # defaults: sigmoid gating, no sliding-window key (all layers global with RoPE), ffn_down_exps
    path = tiny(tmp_path, "--arch", "smallthinker", "--tied", "--seed", 2, name="d.gguf")
    again = tiny(tmp_path, "--arch", "smallthinker", "--tied", "--seed", 2, name="again.gguf")
    assert open(path, "rb").read() == open(again, "rb").read()   # deterministic for a seed
    r = gguf_io.GGUFReader(path)
    assert r.metadata["smallthinker.expert_gating_func"] == 2 and "output.weight" not in r.tensors
    assert "smallthinker.attention.sliding_window" not in r.metadata
    assert r.tensors["blk.0.ffn_down_exps.weight"].shape == (8, 64, 64)
    m = ref.load_model(tiny(tmp_path, "--arch", "smallthinker", "--gating", "softmax", "--seed", 2, name="s.gguf"))
    assert m.gating == "softmax" and m.windows == [] and m.nope == []


def test_sliding_window_attention():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((6, 4, 8)), rng.standard_normal((6, 2, 8)), rng.standard_normal((6, 2, 8))
    full = ref.attention(q, k, v)
    assert np.array_equal(ref.attention(q, k, v, 6), full)   # a window as long as the sequence
    assert np.array_equal(ref.attention(q, k, v, 1), np.repeat(v, 2, axis=1).reshape(6, 32))   # only itself
    w3 = ref.attention(q, k, v, 3)
    assert np.array_equal(w3[:3], full[:3]) and not np.allclose(w3[3:], full[3:])
    # position 5 with window 3 sees positions 3..5 only: as full attention over those alone
    assert np.allclose(w3[5], ref.attention(q[3:], k[3:], v[3:])[2], rtol=0, atol=1e-14)


def test_smallthinker_sliding_window_changes_long_sequences_only(tmp_path):
    m = ref.load_model(tiny(tmp_path, "--arch", "smallthinker", "--swa", 4, "--seed", 32))
    assert m.windows == [0, 4]
    seq = list(np.random.default_rng(2).integers(3, 300, 9))
    windowed = ref.forward(m, seq)
    m.windows = [0, 0]   # the same weights, every layer global (layer 0 still NoPE)
    glob = ref.forward(m, seq)
    assert np.array_equal(windowed[:4], glob[:4])            # p < W: the window holds the whole prefix
    assert all(np.abs(windowed[p] - glob[p]).max() > 1e-6 for p in range(4, 9))
    m.windows = [0, 4]
    assert np.allclose(ref.forward(m, seq[:4]), windowed[:4], rtol=0, atol=1e-12)   # (causal: prefixes agree)


def test_smallthinker_layer0_is_nope(tmp_path):
    """With --swa, layer 0 attends globally without RoPE: a one-layer model's last-token logits
    do not depend on the order of the earlier tokens; with RoPE (no --swa) they do."""
    seq = [17, 260, 5, 299, 42, 3]
    perm = [seq[i] for i in (3, 0, 4, 2, 1)] + [seq[-1]]
    m = ref.load_model(tiny(tmp_path, "--arch", "smallthinker", "--layers", 1, "--swa", 2, "--seed", 33))
    assert m.nope == [True] and m.windows == [0]
    a, b = ref.forward(m, seq)[-1], ref.forward(m, perm)[-1]
    assert np.allclose(a, b, rtol=0, atol=1e-9)
    m.nope = []   # the same weights with RoPE
    assert np.abs(ref.forward(m, seq)[-1] - ref.forward(m, perm)[-1]).max() > 1e-4
    m = ref.load_model(tiny(tmp_path, "--arch", "smallthinker", "--layers", 1, "--seed", 33, name="r.gguf"))
    assert m.nope == [] and np.abs(ref.forward(m, seq)[-1] - ref.forward(m, perm)[-1]).max() > 1e-4


def test_smallthinker_transpose_down_is_the_same_function(tmp_path):
    args = ["--arch", "smallthinker", "--swa", 3, "--seed", 34]
    a = ref.load_model(tiny(tmp_path, *args, name="a.gguf"))
    b = ref.load_model(tiny(tmp_path, *args, "--transpose-down", name="b.gguf"))
    for il in range(2):
        assert np.array_equal(b.w[f"blk.{il}.ffn_down_exps_t.weight"],
                              np.swapaxes(a.w[f"blk.{il}.ffn_down_exps.weight"], 1, 2))
    assert set(a.w) - set(b.w) == {"blk.0.ffn_down_exps.weight", "blk.1.ffn_down_exps.weight"}
    assert all(np.array_equal(a.w[n], b.w[n]) for n in a.w if n in b.w)
    assert np.allclose(ref.forward(a, TOKENS), ref.forward(b, TOKENS), rtol=0, atol=1e-12)
    assert np.array_equal(ref.routes(a, TOKENS), ref.routes(b, TOKENS))


@pytest.mark.parametrize("gating", ["sigmoid", "softmax"])
def test_smallthinker_experts_are_sparse(tmp_path, gating):
    """ReGLU experts: on random tokens, ~85% of the chosen experts' gate outputs are <= 0
    (neuron i of an expert fires on ~Beta(0.6, 3.4) of the tokens routed to it)."""
    m = ref.load_model(tiny(tmp_path, "--arch", "smallthinker", "--gating", gating, "--swa", 4, "--seed", 35))
    seen = {}
    ref.forward(m, np.random.default_rng(3).integers(3, 300, 64), hook=lambda il, k, v: seen.__setitem__((il, k), v))
    for il in range(m.n_layer):
        ids, y = seen[(il, "routes")], seen[(il, "ffn_in")]
        gate = m.w[f"blk.{il}.ffn_gate_exps.weight"]
        z = np.einsum("tkfe,te->tkf", gate[ids], y)                # [n_tok, K, F]
        assert 0.75 <= (z <= 0).mean() <= 0.95, (il, (z <= 0).mean())
        per_neuron = (z > 0).mean(axis=(0, 1))
        assert 0.01 < per_neuron.mean() < 0.3 and per_neuron.max() > 0.3   # skewed hot/cold spread


def test_reference_rejects_unknown_gating(tmp_path, monkeypatch):
    monkeypatch.setitem(make_tiny_model.GATING_FUNC, "sigmoid", 3)
    path = tiny(tmp_path, "--arch", "smallthinker", "--layers", 1, "--seed", 1)
    with pytest.raises(ValueError, match="expert_gating_func 3 is not supported"):
        ref.load_model(path)


@pytest.mark.parametrize("args,message", [
    (["--arch", "smallthinker", "--pwri"], "--pwri is not supported for smallthinker"),
    (["--arch", "smallthinker", "--act", "silu"], "--act is not supported for smallthinker"),
    (["--arch", "smallthinker", "--experts", 4, "--experts-used", 5], "--experts-used must be in [1, --experts]"),
    (["--arch", "smallthinker", "--swa", 0], "--swa must be at least 1"),
    (["--arch", "smallthinker", "--gating", "tanh"], "invalid choice"),
    (["--arch", "qwen3moe", "--gating", "softmax"], "--gating is only for smallthinker"),
    (["--arch", "qwen3moe", "--swa", 4], "--swa is only for smallthinker"),
    (["--arch", "llama", "--experts", 4, "--transpose-down"], "--transpose-down is only for smallthinker"),
    (["--arch", "qwen3", "--expert-ff", 32], "--expert-ff is only for qwen3moe, smallthinker")])
def test_smallthinker_option_errors(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as e:
        make_tiny_model.main([*map(str, args), "--out", str(tmp_path / "x.gguf")])
    assert e.value.code != 0
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.gguf").exists()
