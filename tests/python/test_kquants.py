"""K-quants (Q2_K..Q6_K) against the `gguf` package (llama.cpp's gguf-py), an independent
NumPy implementation of ggml's dequantization:

- tools/convert/quants.py decodes random blocks exactly as gguf does;
- blocks the C++ engine wrote (`powerinfer quantize` of the bundled model to every K mix)
  decode with gguf to exactly the floats the engine's own decoder produces (the same file
  converted to f32 by `powerinfer quantize`), and close to the source weights.

The second test needs the engine binary: PI_BIN_DIR (set by CTest) or build/bin."""
import os
import subprocess

import numpy as np
import pytest

import gguf_io
import quants
from quants import GGMLType

gguf_quants = pytest.importorskip("gguf.quants")
from gguf import GGMLQuantizationType as T  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
K_TYPES = [(GGMLType.Q2_K, T.Q2_K, (80, 82)), (GGMLType.Q3_K, T.Q3_K, (108,)),
           (GGMLType.Q4_K, T.Q4_K, (0, 2)), (GGMLType.Q5_K, T.Q5_K, (0, 2)),
           (GGMLType.Q6_K, T.Q6_K, (208,))]


def same_bits(a, b) -> bool:
    a = np.ascontiguousarray(a, dtype=np.float32)
    b = np.ascontiguousarray(b, dtype=np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("ours,theirs,halves", K_TYPES)
def test_numpy_dequant_matches_gguf(ours, theirs, halves):
    rng = np.random.default_rng(int(ours))
    bs, ts = quants.BLOCK[ours]
    raw = rng.integers(0, 256, (64, ts), dtype=np.uint16).astype(np.uint8)
    for at in halves:
        h = (rng.uniform(-1, 1, 64) * 10 ** rng.uniform(-5, 1, 64)).astype(np.float16)
        raw[:, at:at + 2] = h.view(np.uint8).reshape(64, 2)
    got = quants.dequantize(raw, ours, (64 * bs,))
    want = gguf_quants.dequantize(raw.reshape(-1), theirs)
    assert same_bits(got, want)


def engine() -> str:
    d = os.environ.get("PI_BIN_DIR", os.path.join(ROOT, "build", "bin"))
    exe = os.path.join(d, "powerinfer")
    if not os.access(exe, os.X_OK):
        pytest.skip(f"no engine binary at {exe}")
    return exe


@pytest.mark.parametrize("mix", ["q2_k", "q3_k_m", "q4_k_m", "q5_k_m", "q6_k"])
def test_engine_blocks_decode_as_gguf(tmp_path, mix):
    exe = engine()
    src = os.path.join(ROOT, "models", "kjv-relu", "kjv-relu.pwri.gguf")
    kq, f32 = str(tmp_path / f"m.{mix}.gguf"), str(tmp_path / "m.f32.gguf")
    for args in ([src, kq, mix], [kq, f32, "f32"]):
        r = subprocess.run([exe, "quantize", "--allow-requantize", *args], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    a, b, s = gguf_io.GGUFReader(kq), gguf_io.GGUFReader(f32), gguf_io.GGUFReader(src)
    assert a.is_pwri
    assert any(n.endswith("ffn_down_t.weight") for n in a.tensors)
    assert any(n.endswith("fc1.weight") for n in a.tensors)
    k_seen = set()
    for name, t in a.tensors.items():
        if t.dtype not in (k[0] for k in K_TYPES):
            continue
        k_seen.add(t.dtype)
        theirs = gguf_quants.dequantize(np.asarray(a.raw(name)).reshape(-1), T(int(t.dtype)))
        mine = np.asarray(b.tensor(name), dtype=np.float32).reshape(-1)
        assert same_bits(theirs, mine), name
        x = s.dequantize(name).reshape(-1)
        rel = np.sqrt(np.sum((x - theirs) ** 2) / np.sum(x ** 2))
        assert rel < 0.5, (name, rel)  # a sanity check; tests/tensor bounds the error
    assert GGMLType.Q6_K in k_seen and len(k_seen) >= (1 if mix == "q6_k" else 2)
