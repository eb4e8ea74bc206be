"""Quantization: hand-computed blocks for every format, round-trip error bounds derived from
the block scale, half/bfloat16 rounding, and the MXFP4 quantizer bit for bit against gguf-py's
(when the gguf package is installed) and the committed test vectors."""
import os
import struct

import numpy as np
import pytest

import quants
from quants import GGMLType, dequantize, quantize

ONE_F16 = struct.pack("<e", 1.0)      # b"\x00\x3c"


def test_q8_0_hand_block():
    # amax 127 -> d = 1 exactly, so q = roundf(x): halves round away from zero
    x = np.zeros(32, np.float32)
    x[:6] = [-127, 2.5, -2.5, 0.49, 1.5, 126.6]
    q = quantize(x, GGMLType.Q8_0)
    assert q.shape == (34,)
    assert bytes(q[:2]) == ONE_F16
    assert list(q[2:8].view(np.int8)) == [-127, 3, -3, 0, 2, 127]
    assert not q[8:].any()
    assert np.array_equal(dequantize(q, GGMLType.Q8_0, (32,))[:6], [-127, 3, -3, 0, 2, 127])


def test_q4_0_hand_block():
    # the value of largest magnitude is -8 -> d = -8 / -8 = 1; q = min(15, trunc(x + 8.5))
    x = np.zeros(32, np.float32)
    x[0], x[1], x[2], x[3], x[4] = -8, 7, 7.9, 0.5, -0.5
    x[16], x[17] = 3, -3
    q = quantize(x, GGMLType.Q4_0)
    assert q.shape == (18,) and bytes(q[:2]) == ONE_F16
    qs = q[2:]
    low = [b & 15 for b in qs]
    high = [b >> 4 for b in qs]
    assert low[:5] == [0, 15, 15, 9, 8] and low[5:] == [8] * 11
    assert high[:2] == [11, 5] and high[2:] == [8] * 14
    y = dequantize(q, GGMLType.Q4_0, (32,))
    assert list(y[:5]) == [-8, 7, 7, 1, 0] and y[16] == 3 and y[17] == -3


def test_q4_0_positive_max_gives_negative_scale():
    x = np.zeros(32, np.float32)
    x[5] = 8.0           # d = 8 / -8 = -1; q = trunc(-x + 8.5)
    x[6] = -4.0
    q = quantize(x, GGMLType.Q4_0)
    assert struct.unpack("<e", bytes(q[:2]))[0] == -1.0
    assert q[2 + 5] & 15 == 0 and q[2 + 6] & 15 == 12
    y = dequantize(q, GGMLType.Q4_0, (32,))
    assert y[5] == 8 and y[6] == -4


def test_zero_blocks():
    for t in (GGMLType.Q8_0, GGMLType.Q4_0):
        q = quantize(np.zeros((2, 64)), t)
        assert not dequantize(q, t, (2, 64)).any()


@pytest.mark.parametrize("t", [GGMLType.Q8_0, GGMLType.Q4_0])
def test_round_trip_error_bound(t):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((16, 256)) * rng.uniform(0.01, 10, (16, 1))).astype(np.float32)
    y = dequantize(quantize(x, t), t, x.shape)
    b = x.reshape(-1, 32)
    amax = np.abs(b).max(axis=1, keepdims=True)
    err = np.abs(y.reshape(-1, 32) - b)
    if t == GGMLType.Q8_0:
        d = amax / 127                     # |x - d q| <= d/2, plus the f16 rounding of d times |q| <= 127
        bound = d / 2 + 127 * d * 2.0 ** -11
    else:
        d = amax / 8                       # the clamp at q = 15 can cost a whole step
        bound = d + 8 * d * 2.0 ** -11
    assert np.all(err <= bound * (1 + 1e-6))


def test_dequant_q4_1_q5_0_q5_1_hand_blocks():
    qs = bytes((j % 16) | ((15 - j % 16) << 4) for j in range(16))   # element j: j%16, element j+16: 15-j%16
    qh = struct.pack("<I", 0xA5A5F00F)
    nib = [j % 16 for j in range(16)] + [15 - j % 16 for j in range(16)]
    hb = [(0xA5A5F00F >> j) & 1 for j in range(32)]
    d, m = 0.5, -1.25
    blk = struct.pack("<ee", d, m) + qs
    assert list(dequantize(blk, GGMLType.Q4_1, (32,))) == [d * q + m for q in nib]
    blk = struct.pack("<e", d) + qh + qs
    assert list(dequantize(blk, GGMLType.Q5_0, (32,))) == [d * ((q | h << 4) - 16) for q, h in zip(nib, hb)]
    blk = struct.pack("<ee", d, m) + qh + qs
    assert list(dequantize(blk, GGMLType.Q5_1, (32,))) == [d * (q | h << 4) + m for q, h in zip(nib, hb)]


def q6_k_scalar(blk: bytes):
    """Q6_K block decoder written as plain loops, element by element."""
    ql, qh = blk[:128], blk[128:192]
    sc = struct.unpack("<16b", blk[192:208])
    (d,) = struct.unpack("<e", blk[208:210])
    y = [0.0] * 256
    for n in range(256):
        half, r = divmod(n, 128)          # which 128-element half, position inside it
        group, l = divmod(r, 32)          # which of 4 groups of 32, position inside it
        lo_byte = ql[64 * half + l + (32 if group in (1, 3) else 0)]
        low = (lo_byte & 15) if group < 2 else (lo_byte >> 4)
        high = (qh[32 * half + l] >> (2 * group)) & 3
        scale = sc[8 * half + 2 * group + l // 16]
        y[n] = d * scale * ((low | high << 4) - 32)
    return y


def test_dequant_q6_k_matches_scalar_decoder():
    rng = np.random.default_rng(2)
    blocks = [bytes(rng.integers(0, 256, 208, dtype=np.uint8)) + struct.pack("<e", 0.03125) for _ in range(3)]
    got = dequantize(b"".join(blocks), GGMLType.Q6_K, (3, 256))
    for i, blk in enumerate(blocks):
        assert np.allclose(got[i], q6_k_scalar(blk), rtol=0, atol=1e-6)


def test_dequant_mxfp4_every_exponent_and_code():
    # Every exponent byte with every code in both nibbles: 2^(e - 128) times E2M1 doubled,
    # exact (subnormal scales for e = 0, 1; infinities where 12 x 2^127 overflows).
    codes = np.arange(16, dtype=np.uint8)
    raw = np.zeros((256, 17), np.uint8)
    raw[:, 0] = np.arange(256)
    raw[:, 1:] = codes | ((15 - codes) << 4)
    got = dequantize(raw, GGMLType.MXFP4, (256, 32))
    values = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12]
    for e in range(256):
        for j in range(16):
            for col, code in ((j, j), (j + 16, 15 - j)):
                want = np.float32(np.ldexp(np.float64(values[code]), e - 128))
                assert got[e, col] == want or (np.isinf(want) and got[e, col] == want), (e, col)


def test_half_and_bfloat16():
    x = np.array([1.0, 1.00048828125, 65504.0, 1e-8, -0.0], np.float32)
    assert np.array_equal(quantize(x, GGMLType.F16), x.astype(np.float16))
    # bf16: round to nearest even on the dropped 16 bits
    bits = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x7FC00001, 0xFF800000], np.uint32)
    got = quantize(bits.view(np.float32), GGMLType.BF16)
    assert list(got[:3]) == [0x3F80, 0x3F82, 0x3F81]
    assert np.isnan(quants.bf16_bits_to_f32(got[3:4]))[0] and got[4] == 0xFF80
    vals = np.array([1.5, -2.0, 3.140625], np.float32)
    assert np.array_equal(dequantize(quantize(vals, GGMLType.BF16), GGMLType.BF16, (3,)), vals)


def test_sizes():
    assert quants.nbytes(GGMLType.Q4_0, (10, 64)) == 10 * 2 * 18
    assert quants.nbytes(GGMLType.Q6_K, (256,)) == 210
    assert quants.nbytes(GGMLType.BF16, (3, 5)) == 30
    with pytest.raises(ValueError):
        quants.nbytes(GGMLType.Q8_0, (33,))


# ----------------------------------------------------------------------------- MXFP4 quantizer

def test_mxfp4_hand_block():
    # amax 6 -> e = floor(log2 6) - 2 + 127 = 127, d = 2^-1: the codes are exactly E2M1's values,
    # and a value halfway between two codes takes the lower code (ggml's first-minimum scan).
    x = np.zeros(32, np.float32)
    x[:8] = [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    x[8:12] = [-0.5, -6, 5, 2.5]          # 5: codes 6 (4) and 7 (6) tie; 2.5: codes 4 and 5 tie
    x[16:19] = [-5, -0.25, 0.75]          # -5: codes 14 (-4) and 15 (-6); -0.25: 0 and 9 (-0.5)
    q = quantize(x, GGMLType.MXFP4)
    assert q.shape == (17,) and q[0] == 127
    codes = [b & 15 for b in q[1:]] + [b >> 4 for b in q[1:]]
    assert codes[:12] == [0, 1, 2, 3, 4, 5, 6, 7, 9, 15, 6, 4]
    assert codes[16:19] == [14, 0, 1] and codes[12:16] == [0] * 4 and codes[19:] == [0] * 13
    y = dequantize(q, GGMLType.MXFP4, (32,))
    assert list(y[:12]) == [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.5, -6, 4, 2]


def mxfp4_inputs():
    """Blocks at every scale a float32 reaches without reaching ggml's undefined cast (amax
    below 2^-125): zeros, single values, tiny and huge blocks, values just below and at powers
    of two (where log2f's rounding decides e), exact midpoints between codes."""
    rng = np.random.default_rng(7)
    blocks = [np.zeros(32), np.eye(32)[3] * -2.0 ** -100, np.full(32, 3.0e38), np.full(32, -2.0 ** -125)]
    for k in (-124, -60, -3, 0, 1, 2, 7, 60, 126):
        for v in (2.0 ** k, np.nextafter(np.float32(2.0 ** k), np.float32(0)), 1.5 * 2.0 ** k):
            b = rng.uniform(-1, 1, 32) * float(v)
            b[rng.integers(32)] = float(v)
            blocks.append(b)
    mid = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -5.0, -3.5] * 3 + [6.0, -6.0]) * 2.0 ** -3
    blocks.append(mid)
    for _ in range(64):
        blocks.append(rng.standard_normal(32) * 10.0 ** rng.uniform(-30, 30))
    return np.stack(blocks).astype(np.float32)


def test_mxfp4_quantizer_matches_gguf_py():
    gguf_quants = pytest.importorskip("gguf.quants")
    from gguf import GGMLQuantizationType
    x = mxfp4_inputs()
    assert np.abs(x).max(axis=1)[1:].min() >= 2.0 ** -125 and np.isfinite(x).all()
    with np.errstate(over="ignore"):
        want = gguf_quants.quantize(x, GGMLQuantizationType.MXFP4)
    got = quantize(x, GGMLType.MXFP4)
    assert got.dtype == np.uint8 and got.shape == (x.shape[0], 17)
    assert np.array_equal(got, want)
    # rows of several blocks, and the chunked path (more blocks than one chunk)
    rows = x.reshape(-1, 128)[:8]
    assert np.array_equal(quantize(rows, GGMLType.MXFP4), want.reshape(-1, 4 * 17)[:8])
    assert np.array_equal(quants.quantize_mxfp4(x, chunk_blocks=5), want)


def read_vectors(name):
    """(x or None, q, y) of tests/tensor/vectors/<name>.bin (layout: make_vectors.py)."""
    path = os.path.join(os.path.dirname(__file__), "..", "tensor", "vectors", name + ".bin")
    with open(path, "rb") as f:
        magic, (version, qtype, n, flags) = f.read(4), struct.unpack("<4I", f.read(16))
        assert magic == b"PIQV" and version == 1 and qtype == GGMLType.MXFP4
        x = np.frombuffer(f.read(4 * n), "<f4") if flags & 1 else None
        (nbytes,) = struct.unpack("<I", f.read(4))
        q = np.frombuffer(f.read(nbytes), np.uint8)
        y = np.frombuffer(f.read(4 * n), "<f4")
    return x, q, y


def test_mxfp4_quantizer_matches_the_test_vectors():
    x, q, y = read_vectors("mxfp4")            # gguf-py's blocks of the usual inputs
    assert np.array_equal(quantize(x, GGMLType.MXFP4), q)
    assert np.array_equal(dequantize(q, GGMLType.MXFP4, x.shape), y)
    _, q, y = read_vectors("mxfp4_all")        # every exponent byte, every code, decoded by gguf-py
    assert np.array_equal(dequantize(q, GGMLType.MXFP4, y.shape), y)


def test_mxfp4_exponent_clamps_where_ggml_is_undefined():
    # amax below 2^-125 would give a negative exponent, which ggml casts to uint8 (undefined);
    # here (as in the engine) it is 0, d = 2^-128, and such tiny values round to code 0.
    x = np.zeros(32, np.float32)
    x[0], x[1] = 1e-40, -2.0 ** -127
    q = quantize(x, GGMLType.MXFP4)
    assert q[0] == 0
    y = dequantize(q, GGMLType.MXFP4, (32,))
    assert y[1] == -2.0 ** -127 and y[0] == 0.0


def test_mxfp4_round_trip_error_bound():
    # Each value is the nearest point of d times E2M1 doubled, d = 2^(floor(log2 amax) - 3): the
    # widest gap (8 d to 12 d) costs at most 2 d, and values above 12 d (amax < 16 d) saturate
    # there, at most 4 d off.
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((16, 256)) * rng.uniform(0.01, 10, (16, 1))).astype(np.float32)
    y = dequantize(quantize(x, GGMLType.MXFP4), GGMLType.MXFP4, x.shape)
    b = x.reshape(-1, 32)
    d = 2.0 ** (np.floor(np.log2(np.abs(b).max(axis=1, keepdims=True))) - 3)
    err = np.abs(y.reshape(-1, 32) - b)
    assert np.all(err <= 4 * d) and np.all((err <= 2 * d) | (np.abs(b) > 12 * d))
