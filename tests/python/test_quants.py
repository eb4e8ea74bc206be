"""Quantization: hand-computed blocks for every format, round-trip error bounds derived from
the block scale, and half/bfloat16 rounding."""
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
