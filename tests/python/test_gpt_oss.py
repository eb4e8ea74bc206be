"""gpt-oss in the float64 reference and the tiny models: the reference against a plainer
token-by-token, head-by-head computation written from the architecture's description (sinks,
sliding windows on even layers, YaRN, biases, the clamped gated unit, top-K routing with the
softmax over the chosen logits); the new pieces one by one (a sink of -inf is plain attention, a
window as long as the sequence is global attention, the clamp is active in the tiny models, the
routing weights); the tiny files' layout, options and the CLI's routes."""
import cmath
import math
import os
import subprocess

import numpy as np
import pytest

import gguf_io
import make_tiny_model
import reference_forward as ref
from conftest import PYTHON, REFERENCE_DIR
from quants import GGMLType

TOKENS = [1, 17, 260, 5, 299, 42, 3, 77]


def tiny(tmp_path, *args, name="m.gguf"):
    out = tmp_path / name
    assert make_tiny_model.main(["--arch", "gpt-oss", *map(str, args), "--out", str(out)]) == 0
    return out


def direct_gpt_oss(path, w, tokens):
    """gpt-oss's forward pass written token by token, head by head and expert by expert from
    the architecture's description, reading the hyperparameters from the file itself: NeoX RoPE
    (YaRN's blend per pair and its attention factor written out) as complex multiplication, a
    sink logit in each head's softmax denominator, windows on the layers il % 2 == 0, biases,
    the K largest router logits weighted by their softmax, min(g, 7) sigmoid(1.702 g)
    (clip(u, -7, 7) + 1). Returns (logits [n_tok, n_vocab], routes [n_layer, n_tok, K])."""
    r = gguf_io.GGUFReader(path)
    hp = lambda k, default=None: r.get(f"gpt-oss.{k}", default)   # noqa: E731
    n_layer, n_head, n_head_kv = hp("block_count"), hp("attention.head_count"), hp("attention.head_count_kv")
    d, base, eps = hp("attention.key_length"), hp("rope.freq_base"), hp("attention.layer_norm_rms_epsilon")
    n_exp, k_used, window = hp("expert_count"), hp("expert_used_count"), hp("attention.sliding_window", 0)
    group, half = n_head // n_head_kv, d // 2
    freq = [base ** (-2 * i / d) for i in range(half)]
    mscale = 1.0
    if hp("rope.scaling.type") == "yarn":
        factor, orig = hp("rope.scaling.factor"), hp("rope.scaling.original_context_length")
        turning = lambda turns: d * math.log(orig / (turns * 2 * math.pi)) / (2 * math.log(base))   # noqa: E731
        low, high = turning(32.0), turning(1.0)
        if hp("rope.scaling.yarn_truncate", False):   # gpt-oss: unrounded unless the file says
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, d - 1)
        for i in range(half):
            keep = 1 - min(max((i - low) / (high - low), 0.0), 1.0)    # 1: the original frequency
            freq[i] = freq[i] / factor * (1 - keep) + freq[i] * keep
        mscale = 0.1 * math.log(factor) + 1

    def rms(v, g):
        s = math.sqrt(sum(t * t for t in v) / len(v) + eps)
        return [v[j] / s * g[j] for j in range(len(v))]

    def affine(W, b, v):
        return [float(np.dot(W[i], v)) + b[i] for i in range(W.shape[0])]

    def rotate(vec, pos):
        out = list(vec)
        for i in range(half):
            z = complex(vec[i], vec[i + half]) * mscale * cmath.exp(1j * pos * freq[i])
            out[i], out[i + half] = z.real, z.imag
        return out

    def unit(g, u):
        g, u = min(g, 7.0), min(max(u, -7.0), 7.0)
        return g / (1 + math.exp(-1.702 * g)) * (u + 1)

    xs = [list(w["token_embd.weight"][t]) for t in tokens]
    routes = []
    for il in range(n_layer):
        p = f"blk.{il}."
        lin = lambda name, v: affine(w[p + name + ".weight"], w[p + name + ".bias"], v)   # noqa: E731
        qs, ks, vs = [], [], []
        for pos, x in enumerate(xs):
            h = rms(x, w[p + "attn_norm.weight"])
            q, k, v = lin("attn_q", h), lin("attn_k", h), lin("attn_v", h)
            qs.append([rotate(q[i * d:(i + 1) * d], pos) for i in range(n_head)])
            ks.append([rotate(k[i * d:(i + 1) * d], pos) for i in range(n_head_kv)])
            vs.append([v[i * d:(i + 1) * d] for i in range(n_head_kv)])
        layer_routes, new_xs = [], []
        for t, x in enumerate(xs):
            seen = range(max(0, t - window + 1), t + 1) if window and il % 2 == 0 else range(t + 1)
            heads = []
            for i in range(n_head):
                kv, sink = i // group, float(w[p + "attn_sinks.weight"][i])
                s = [sum(a * b for a, b in zip(qs[t][i], ks[u][kv])) / math.sqrt(d) for u in seen]
                top = max(s + [sink])
                e = [math.exp(si - top) for si in s]
                total = sum(e) + math.exp(sink - top)
                heads += [sum(ei * vs[u][kv][j] for ei, u in zip(e, seen)) / total for j in range(d)]
            resid = [a + b for a, b in zip(x, lin("attn_output", heads))]
            y = rms(resid, w[p + "post_attention_norm.weight"])
            logits = lin("ffn_gate_inp", y)
            chosen = sorted(range(n_exp), key=lambda e: (-logits[e], e))[:k_used]
            ex = [math.exp(logits[e] - logits[chosen[0]]) for e in chosen]
            out = list(resid)
            for e, weight in zip(chosen, ex):
                g = affine(w[p + "ffn_gate_exps.weight"][e], w[p + "ffn_gate_exps.bias"][e], y)
                u = affine(w[p + "ffn_up_exps.weight"][e], w[p + "ffn_up_exps.bias"][e], y)
                o = affine(w[p + "ffn_down_exps.weight"][e], w[p + "ffn_down_exps.bias"][e],
                           [unit(gi, ui) for gi, ui in zip(g, u)])
                out = [a + weight / sum(ex) * b for a, b in zip(out, o)]
            layer_routes.append(chosen)
            new_xs.append(out)
        xs = new_xs
        routes.append(layer_routes)
    head = w.get("output.weight", w["token_embd.weight"])
    logits = np.array([[float(np.dot(row, rms(x, w["output_norm.weight"]))) for row in head] for x in xs])
    return logits, np.array(routes)


@pytest.mark.parametrize("extra", [
    [],                                                        # f32, window 3 on layers 0 and 2
    ["--outtype", "mxfp4", "--yarn", 32, "--head-dim", 16],    # the released layout: MXFP4 experts, YaRN
    ["--swa", 0, "--kv-heads", 1, "--experts", 4, "--experts-used", 4, "--head-dim", 8],
    ["--outtype", "q8_0", "--tied", "--swa", 2]])
def test_gpt_oss_matches_direct_computation(tmp_path, extra):
    path = tiny(tmp_path, "--layers", 3, "--seed", 41, *extra)
    m = ref.load_model(path)
    want, want_routes = direct_gpt_oss(path, m.w, TOKENS)
    got = ref.forward(m, TOKENS)
    assert got.shape == (len(TOKENS), 300)
    assert np.abs(got - want).max() <= 1e-9 * max(1.0, np.abs(want).max())
    assert np.array_equal(ref.routes(m, TOKENS), want_routes)


def test_sink_of_minus_inf_is_plain_attention():
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((6, 4, 8)), rng.standard_normal((6, 2, 8)), rng.standard_normal((6, 2, 8))
    plain = ref.attention(q, k, v)
    assert np.array_equal(ref.attention(q, k, v, sinks=np.full(4, -np.inf)), plain)
    assert np.array_equal(ref.attention(q, k, v, sinks=np.full(4, -1e4)), plain)       # (exp underflows)
    assert np.array_equal(ref.attention(q, k, v, 3, sinks=np.full(4, -np.inf)), ref.attention(q, k, v, 3))
    # The first token sees only itself: its value scaled by e^s / (e^s + e^sink).
    sinks = np.array([0.0, 1.5, -2.0, 30.0])
    out = ref.attention(q, k, v, sinks=sinks).reshape(6, 4, 8)
    for h in range(4):
        s = q[0, h] @ k[0, h // 2] / math.sqrt(8)
        assert np.allclose(out[0, h], v[0, h // 2] / (1 + math.exp(sinks[h] - s)), rtol=1e-13, atol=1e-300)
    assert np.abs(out[:, 3]).max() < 1e-6        # a huge sink takes (almost) all the weight
    assert np.abs(out[:, 1] - plain.reshape(6, 4, 8)[:, 1]).max() > 0.1


def test_sinks_change_the_tiny_model(tmp_path):
    m = ref.load_model(tiny(tmp_path, "--seed", 42))
    with_sinks = ref.forward(m, TOKENS)
    for il in range(m.n_layer):
        m.w[f"blk.{il}.attn_sinks.weight"] = np.full(m.n_head, -np.inf)
    assert np.abs(ref.forward(m, TOKENS) - with_sinks).max() > 0.1 * np.abs(with_sinks).max()


def test_window_as_long_as_the_sequence_is_global(tmp_path):
    m = ref.load_model(tiny(tmp_path, "--layers", 3, "--swa", 3, "--seed", 43))
    assert m.windows == [3, 0, 3]
    windowed = ref.forward(m, TOKENS)
    m.windows = [len(TOKENS), 0, len(TOKENS)]
    glob = ref.forward(m, TOKENS)
    m.windows = []
    assert np.array_equal(ref.forward(m, TOKENS), glob)
    # p < W: the window holds the whole prefix (equal up to rounding: the experts' matrix
    # products run over other token subsets once later tokens route differently)
    assert np.allclose(windowed[:3], glob[:3], rtol=0, atol=1e-12)
    assert all(np.abs(windowed[p] - glob[p]).max() > 1e-6 for p in range(3, len(TOKENS)))
    # --swa 0 writes no key: every layer global
    path = tiny(tmp_path, "--layers", 3, "--swa", 0, "--seed", 43, name="g.gguf")
    assert "gpt-oss.attention.sliding_window" not in gguf_io.GGUFReader(path).metadata
    assert ref.load_model(path).windows == []


def test_gated_unit_and_its_clamp():
    g = np.array([-30.0, -1.0, 0.0, 2.0, 7.0, 9.0, 1e3])
    u = np.array([-9.0, 0.5, 3.0, -7.5, 8.0, 6.0, 0.0])
    want = [min(a, 7) / (1 + math.exp(-1.702 * min(a, 7))) * (min(max(b, -7), 7) + 1) for a, b in zip(g, u)]
    assert np.allclose(ref.swiglu_oai(g, u), want, rtol=1e-15, atol=0)
    assert ref.swiglu_oai(np.array([9.0]), np.array([1.0]))[0] == ref.swiglu_oai(np.array([7.0]), np.array([1.0]))[0]


def expert_preactivations(m, seqs):
    """Per layer, the gate and up pre-activations of the experts each token was routed to."""
    out = []
    for il in range(m.n_layer):
        y = make_tiny_model.ffn_inputs(m, il, seqs)
        ids = make_tiny_model.ffn_inputs(m, il, seqs, "routes")
        p = f"blk.{il}."
        gs, us = [], []
        for e in range(m.n_expert):
            ye = y[np.any(ids == e, axis=1)]
            gs.append(ye @ m.w[p + "ffn_gate_exps.weight"][e].T + m.w[p + "ffn_gate_exps.bias"][e])
            us.append(ye @ m.w[p + "ffn_up_exps.weight"][e].T + m.w[p + "ffn_up_exps.bias"][e])
        out.append((np.concatenate(gs), np.concatenate(us)))
    return out


@pytest.mark.parametrize("outtype", ["f32", "mxfp4"])
def test_the_clamp_is_active_in_tiny_models(tmp_path, outtype, monkeypatch):
    m = ref.load_model(tiny(tmp_path, "--outtype", outtype, "--seed", 44))
    seqs = np.random.default_rng(4).integers(3, 300, size=(4, 16))
    for g, u in expert_preactivations(m, seqs):
        assert 0.002 < (g > 7).mean() < 0.05 and 0.002 < (np.abs(u) > 7).mean() < 0.08
        assert (u > 7).any() and (u < -7).any()
    clamped = ref.forward(m, TOKENS)
    monkeypatch.setattr(ref, "SWIGLU_LIMIT", np.inf)
    assert np.abs(ref.forward(m, TOKENS) - clamped).max() > 1e-3


def test_routing_weights_are_the_softmax_over_the_chosen_logits(tmp_path):
    m = ref.load_model(tiny(tmp_path, "--experts", 6, "--experts-used", 3, "--seed", 45))
    toks = np.random.default_rng(5).integers(3, 300, 48)
    seen = {}
    ref.hidden(m, toks, hook=lambda il, k, v: seen.__setitem__((il, k), v))
    changed = 0
    for il in range(m.n_layer):
        y, p = seen[(il, "router_in")], f"blk.{il}."
        assert np.array_equal(y, seen[(il, "ffn_in")])
        logits = y @ m.w[p + "ffn_gate_inp.weight"].T + m.w[p + "ffn_gate_inp.bias"]
        ids, weights = ref.moe_route(m, il, y)
        assert np.array_equal(ids, np.argsort(-logits, axis=1, kind="stable")[:, :3])
        assert np.array_equal(seen[(il, "routes")], ids)
        chosen = np.take_along_axis(logits, ids, axis=1)
        soft = np.exp(chosen - chosen.max(axis=1, keepdims=True))
        assert np.allclose(weights, soft / soft.sum(axis=1, keepdims=True), rtol=0, atol=1e-14)
        probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)   # over all N, with the bias
        assert np.allclose(seen[(il, "route_probs")], probs, rtol=0, atol=1e-14)
        counts = np.bincount(ids.ravel(), minlength=6)
        assert counts.min() >= 1 and counts.max() <= 0.8 * len(toks), counts   # every expert used, none always
        without_bias = np.argsort(-(logits - m.w[p + "ffn_gate_inp.bias"]), axis=1, kind="stable")[:, :3]
        changed += (np.sort(without_bias, axis=1) != np.sort(ids, axis=1)).any(axis=1).sum()
    assert changed > 0   # the router's bias takes part in the choice


def test_cli_routes_force_routes_and_probs(tmp_path):
    path = tiny(tmp_path, "--outtype", "mxfp4", "--seed", 46)
    script = os.path.join(REFERENCE_DIR, "reference_forward.py")
    toks = ",".join(map(str, TOKENS))
    routes, logits, probs = tmp_path / "routes.bin", tmp_path / "logits.bin", tmp_path / "probs.bin"
    run = lambda *a: subprocess.run([PYTHON, script, str(path), "--tokens", toks, *map(str, a)],   # noqa: E731
                                    capture_output=True, text=True)
    p = run("--routes", routes, "--route-probs", probs, "--out", logits)
    assert p.returncode == 0, p.stderr
    m = ref.load_model(path)
    _, want_routes = direct_gpt_oss(path, m.w, TOKENS)
    own = np.fromfile(routes, dtype="<i4").reshape(2, len(TOKENS), 2)
    assert np.array_equal(own, want_routes)
    pr = np.fromfile(probs, dtype="<f8").reshape(2, len(TOKENS), 8)
    assert np.allclose(pr.sum(axis=2), 1.0) and np.array_equal(np.argsort(-pr, axis=2, kind="stable")[:, :, :2], own)
    want = np.fromfile(logits, dtype="<f4")
    p = run("--force-routes", routes, "--out", logits)   # the oracle's own routes: the same logits
    assert p.returncode == 0, p.stderr
    assert np.array_equal(np.fromfile(logits, dtype="<f4"), want)
    other = own.copy()
    other[0, 4] = [e for e in range(8) if e not in own[0, 4]][:2]
    other.tofile(routes)
    p = run("--force-routes", routes, "--out", logits)
    got = np.fromfile(logits, dtype="<f4").reshape(len(TOKENS), 300)
    assert np.array_equal(got[:4], want.reshape(got.shape)[:4]) and not np.allclose(got[4], want.reshape(got.shape)[4])


def test_file_layout(tmp_path):
    path = tiny(tmp_path, "--outtype", "mxfp4", "--head-dim", 32, "--experts", 4, "--expert-ff", 96, "--seed", 47)
    r = gguf_io.GGUFReader(path)
    md, t = r.metadata, r.tensors
    assert md["general.architecture"] == "gpt-oss" and md["general.file_type"] == 38
    assert md["general.quantization_version"] == 2
    assert md["gpt-oss.attention.key_length"] == md["gpt-oss.attention.value_length"] == 32
    assert md["gpt-oss.rope.dimension_count"] == 32 and md["gpt-oss.rope.freq_base"] == 150000.0
    assert md["gpt-oss.expert_count"] == 4 and md["gpt-oss.expert_used_count"] == 2
    assert md["gpt-oss.expert_feed_forward_length"] == md["gpt-oss.feed_forward_length"] == 96
    assert md["gpt-oss.attention.sliding_window"] == 3
    assert abs(md["gpt-oss.attention.layer_norm_rms_epsilon"] - 1e-5) < 1e-12
    assert "gpt-oss.feed_forward_activation" not in md and "gpt-oss.rope.scaling.type" not in md
    layer = {"attn_norm.weight": (64,), "attn_q.weight": (128, 64), "attn_q.bias": (128,),
             "attn_k.weight": (64, 64), "attn_k.bias": (64,), "attn_v.weight": (64, 64), "attn_v.bias": (64,),
             "attn_output.weight": (64, 128), "attn_output.bias": (64,), "attn_sinks.weight": (4,),
             "post_attention_norm.weight": (64,), "ffn_gate_inp.weight": (4, 64), "ffn_gate_inp.bias": (4,),
             "ffn_gate_exps.weight": (4, 96, 64), "ffn_gate_exps.bias": (4, 96),
             "ffn_up_exps.weight": (4, 96, 64), "ffn_up_exps.bias": (4, 96),
             "ffn_down_exps.weight": (4, 64, 96), "ffn_down_exps.bias": (4, 64)}
    want = {"token_embd.weight": (300, 64), "output_norm.weight": (64,), "output.weight": (300, 64)}
    want.update({f"blk.{il}.{k}": s for il in range(2) for k, s in layer.items()})
    assert {n: ti.shape for n, ti in t.items()} == want
    for n, ti in t.items():
        assert ti.dtype == (GGMLType.MXFP4 if n.endswith("_exps.weight") else GGMLType.F32), n
    m = ref.load_model(path)
    assert (m.head_dim, m.n_rot, m.n_expert, m.n_expert_used, m.act, m.windows) == (32, 32, 4, 2, "swiglu_oai", [3, 0])
    assert m.w["blk.0.ffn_down_exps.bias"][:, 0].max() == 0.0 == np.abs(m.w["blk.0.attn_output.bias"][0])
    # q8_0: the matrices Q8_0, the biases (also the 2-D expert biases), sinks and router F32
    t = gguf_io.GGUFReader(tiny(tmp_path, "--outtype", "q8_0", "--seed", 47, name="q.gguf")).tensors
    assert t["blk.1.ffn_up_exps.weight"].dtype == t["blk.1.attn_q.weight"].dtype == GGMLType.Q8_0
    assert all(t[f"blk.1.{n}"].dtype == GGMLType.F32 for n in ("ffn_up_exps.bias", "attn_sinks.weight",
                                                             "ffn_gate_inp.weight", "attn_q.bias"))
    again = tiny(tmp_path, "--outtype", "mxfp4", "--head-dim", 32, "--experts", 4, "--expert-ff", 96, "--seed", 47,
                 name="again.gguf")
    assert open(path, "rb").read() == open(again, "rb").read()


def test_mxfp4_file_holds_the_quantized_f32_experts(tmp_path):
    """The same seed in f32 and mxfp4: every tensor equal, the experts quantized by the rule."""
    from quants import dequantize, quantize
    a = ref.load_model(tiny(tmp_path, "--seed", 48, name="a.gguf"))
    b = ref.load_model(tiny(tmp_path, "--outtype", "mxfp4", "--seed", 48, name="b.gguf"))
    assert set(a.w) == set(b.w)
    for n in a.w:
        if n.endswith("_exps.weight"):
            x = a.w[n].astype(np.float32)
            assert np.array_equal(b.w[n], dequantize(quantize(x, GGMLType.MXFP4), GGMLType.MXFP4, x.shape)), n
        else:
            assert np.array_equal(a.w[n], b.w[n]), n


@pytest.mark.parametrize("change,message", [
    (lambda w: w.pop("blk.1.attn_sinks.weight"), r"gpt-oss tensor\(s\) missing: blk.1.attn_sinks.weight"),
    (lambda w: w.pop("blk.0.ffn_down_exps.bias"), r"gpt-oss tensor\(s\) missing: blk.0.ffn_down_exps.bias"),
    (lambda w: w.__setitem__("blk.1.attn_sinks.weight", np.zeros(3)),
     r"blk.1.attn_sinks.weight is \[3\], expected \[4\] \(one sink per head\)")])
def test_reference_names_a_missing_or_misshapen_tensor(tmp_path, monkeypatch, change, message):
    build = make_tiny_model.build

    def changed(a):
        w, act = build(a)
        change(w)
        return w, act
    monkeypatch.setattr(make_tiny_model, "build", changed)
    with pytest.raises(ValueError, match=message):
        ref.load_model(tiny(tmp_path, "--seed", 1))


@pytest.mark.parametrize("args,message", [
    (["--arch", "gpt-oss", "--act", "silu"], "--act is not supported for gpt-oss"),
    (["--arch", "gpt-oss", "--pwri"], "--pwri is not supported for gpt-oss"),
    (["--arch", "gpt-oss", "--swa", -1], "--swa must be in [0, --ctx]"),
    (["--arch", "gpt-oss", "--gating", "softmax"], "--gating is only for smallthinker"),
    (["--arch", "gpt-oss", "--transpose-down"], "--transpose-down is only for smallthinker"),
    (["--arch", "gpt-oss", "--outtype", "mxfp4", "--expert-ff", 48], "--outtype mxfp4 needs --embd and --expert-ff"),
    (["--arch", "llama", "--outtype", "mxfp4"], "--outtype mxfp4 quantizes expert stacks: only for mixture-of-experts"),
    (["--arch", "qwen3moe", "--swa", 4], "--swa is only for smallthinker and gpt-oss")])
def test_option_errors(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as e:
        make_tiny_model.main([*map(str, args), "--out", str(tmp_path / "x.gguf")])
    assert e.value.code != 0
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.gguf").exists()


def test_mxfp4_outtype_for_the_other_moe_architectures(tmp_path):
    out = tmp_path / "q.gguf"
    assert make_tiny_model.main(["--arch", "qwen3moe", "--outtype", "mxfp4", "--seed", "3", "--out", str(out)]) == 0
    t = gguf_io.GGUFReader(out).tensors
    assert {n for n, ti in t.items() if ti.dtype == GGMLType.MXFP4} == {
        f"blk.{il}.ffn_{x}_exps.weight" for il in range(2) for x in ("gate", "up", "down")}
    assert all(ti.dtype == GGMLType.F32 for n, ti in t.items() if "_exps." not in n)
