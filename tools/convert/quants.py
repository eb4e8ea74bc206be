"""ggml tensor types: sizes, NumPy quantization (F32, F16, BF16, Q8_0, Q4_0, MXFP4) and
dequantization (those plus Q4_1, Q5_0, Q5_1, MXFP4 and the K-quants Q2_K..Q6_K), on the
ggml byte layouts.

Arrays are row-major, outermost dimension first; blocks run along the innermost dimension,
so a row's element count must be a multiple of the type's block size. Quantized data is
handled as uint8 arrays [rows..., row_bytes].

Block layouts (little-endian; `d`, `m` are IEEE half floats):
    Q8_0  32 elements, 34 bytes: d, int8 q[32];              x = d * q
          d = amax / 127, q = round-half-away(x / d)
    Q4_0  32 elements, 18 bytes: d, u8 qs[16];                x = d * (q - 8)
          element j in the low nibble of qs[j], element j+16 in the high nibble;
          d = (the value of largest magnitude) / -8, q = min(15, trunc(x / d + 8.5))
    Q4_1  32 elements, 20 bytes: d, m, u8 qs[16];             x = d * q + m
    Q5_0  32 elements, 22 bytes: d, u32 qh, u8 qs[16];        x = d * (q - 16)
          q = nibble as in Q4_0, bit 4 = bit j (element j) / j+16 (element j+16) of qh
    Q5_1  32 elements, 24 bytes: d, m, u32 qh, u8 qs[16];     x = d * q + m
    MXFP4 32 elements, 17 bytes: u8 e, u8 qs[16];             x = v[q] * 2^(e - 128)
          q as in Q4_0, v = E2M1 doubled: 0 1 2 3 4 6 8 12, then the same negated;
          e = floor(log2f(amax)) - 2 + 127 (0 for an all-zero block; clamped to 0..255,
          where ggml's cast is undefined: amax below 2^-125), q = the code nearest x, the
          lowest code on ties
    Q6_K 256 elements, 210 bytes: u8 ql[128], u8 qh[64], int8 scales[16], d
The quantizers compute in float32 exactly as ggml's scalar reference does, so their bytes
match the C++ engine's reference quantization bit for bit.
"""
from __future__ import annotations

import enum

import numpy as np


class GGMLType(enum.IntEnum):
    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39


# (elements per block, bytes per block)
BLOCK = {
    GGMLType.F32: (1, 4), GGMLType.F16: (1, 2), GGMLType.Q4_0: (32, 18), GGMLType.Q4_1: (32, 20),
    GGMLType.Q5_0: (32, 22), GGMLType.Q5_1: (32, 24), GGMLType.Q8_0: (32, 34), GGMLType.Q8_1: (32, 36),
    GGMLType.Q2_K: (256, 84), GGMLType.Q3_K: (256, 110), GGMLType.Q4_K: (256, 144),
    GGMLType.Q5_K: (256, 176), GGMLType.Q6_K: (256, 210), GGMLType.Q8_K: (256, 292),
    GGMLType.IQ2_XXS: (256, 66), GGMLType.IQ2_XS: (256, 74), GGMLType.IQ3_XXS: (256, 98),
    GGMLType.IQ1_S: (256, 50), GGMLType.IQ4_NL: (32, 18), GGMLType.IQ3_S: (256, 110),
    GGMLType.IQ2_S: (256, 82), GGMLType.IQ4_XS: (256, 136), GGMLType.I8: (1, 1),
    GGMLType.I16: (1, 2), GGMLType.I32: (1, 4), GGMLType.I64: (1, 8), GGMLType.F64: (1, 8),
    GGMLType.IQ1_M: (256, 56), GGMLType.BF16: (1, 2), GGMLType.TQ1_0: (256, 54),
    GGMLType.TQ2_0: (256, 66), GGMLType.MXFP4: (32, 17),
}

_PLAIN = {
    GGMLType.F32: "<f4", GGMLType.F16: "<f2", GGMLType.BF16: "<u2", GGMLType.I8: "<i1",
    GGMLType.I16: "<i2", GGMLType.I32: "<i4", GGMLType.I64: "<i8", GGMLType.F64: "<f8",
}


def plain_numpy_dtype(t: GGMLType):
    """NumPy dtype of a non-block type (BF16 as its uint16 bits), else None."""
    return _PLAIN.get(GGMLType(t))


def nbytes(t: GGMLType, shape) -> int:
    """Bytes of a tensor of `shape` (outermost first); the innermost dimension must be a
    multiple of the block size."""
    bs, ts = BLOCK[GGMLType(t)]
    shape = tuple(int(d) for d in shape)
    if shape[-1] % bs:
        raise ValueError(f"{GGMLType(t).name}: row length {shape[-1]} is not a multiple of {bs}")
    n = 1
    for d in shape:
        n *= d
    return n // bs * ts


# ----------------------------------------------------------------------------- plain types

def f32_to_bf16_bits(x) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), round to nearest even; NaN stays a quiet NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u.astype(np.uint64) + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), rounded)


def bf16_bits_to_f32(bits) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


# ----------------------------------------------------------------------------- blocks

def _blocks(x, qk: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.shape[-1] % qk:
        raise ValueError(f"row length {x.shape[-1]} is not a multiple of {qk}")
    return x.reshape(-1, qk)


def _round_half_away(v32: np.ndarray) -> np.ndarray:
    """C roundf on float32 values (computed exactly in float64)."""
    v = v32.astype(np.float64)
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def quantize_q8_0(x) -> np.ndarray:
    """float [..., n] -> uint8 [..., n/32*34]."""
    x = np.asarray(x, dtype=np.float32)
    b = _blocks(x, 32)
    d = np.max(np.abs(b), axis=1) / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = _round_half_away(b * inv[:, None]).astype(np.int8)
    out = np.empty((b.shape[0], 34), dtype=np.uint8)
    out[:, 0:2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.reshape(*x.shape[:-1], x.shape[-1] // 32 * 34)


def quantize_q4_0(x) -> np.ndarray:
    """float [..., n] -> uint8 [..., n/32*18]."""
    x = np.asarray(x, dtype=np.float32)
    b = _blocks(x, 32)
    idx = np.argmax(np.abs(b), axis=1)           # first element of largest magnitude
    vmax = b[np.arange(b.shape[0]), idx]
    d = (vmax / np.float32(-8)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    v = (b * inv[:, None] + np.float32(8.5)).astype(np.float32)
    q = np.minimum(15, np.trunc(v)).astype(np.uint8)  # v >= 0.5 for every finite input
    out = np.empty((b.shape[0], 18), dtype=np.uint8)
    out[:, 0:2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return out.reshape(*x.shape[:-1], x.shape[-1] // 32 * 18)


def _half(blocks: np.ndarray, at: int) -> np.ndarray:
    return np.ascontiguousarray(blocks[:, at:at + 2]).view("<f2").astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """uint8 [nb, 16] -> uint8 [nb, 32]: low nibbles are elements 0..15, high 16..31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _high_bits(qh: np.ndarray) -> np.ndarray:
    """uint8 [nb, 4] (a little-endian u32) -> uint8 [nb, 32]: bit j of the u32."""
    u = np.ascontiguousarray(qh).view("<u4")
    return ((u >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)


def _dq_q8_0(b):
    return _half(b, 0) * b[:, 2:34].view(np.int8).astype(np.float32)


def _dq_q4_0(b):
    return _half(b, 0) * (_nibbles(b[:, 2:18]).astype(np.float32) - 8)


def _dq_q4_1(b):
    return _half(b, 0) * _nibbles(b[:, 4:20]).astype(np.float32) + _half(b, 2)


def _dq_q5_0(b):
    q = _nibbles(b[:, 6:22]) | (_high_bits(b[:, 2:6]) << 4)
    return _half(b, 0) * (q.astype(np.float32) - 16)


def _dq_q5_1(b):
    q = _nibbles(b[:, 8:24]) | (_high_bits(b[:, 4:8]) << 4)
    return _half(b, 0) * q.astype(np.float32) + _half(b, 2)


_MXFP4_VALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)


def _e8m0_half(e) -> np.ndarray:
    """2^(e - 128) as float32 from its bits, as ggml: subnormal for e = 0 and 1, exact everywhere."""
    e = np.asarray(e).astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << np.uint32(23)).astype(np.uint32)
    return bits.view(np.float32)


def _dq_mxfp4(b):
    d = _e8m0_half(b[:, 0])[:, None]
    with np.errstate(over="ignore"):
        return d * _MXFP4_VALUES[_nibbles(b[:, 1:17])]


def quantize_mxfp4(x, chunk_blocks: int = 1 << 14) -> np.ndarray:
    """float [..., n] -> uint8 [..., n/32*17], ggml's reference quantizer (see the module
    docstring) chunk by chunk, so the temporaries stay bounded. Inputs must be finite."""
    x = np.asarray(x, dtype=np.float32)
    b = _blocks(x, 32)
    out = np.empty((b.shape[0], 17), dtype=np.uint8)
    for at in range(0, b.shape[0], chunk_blocks):
        out[at:at + chunk_blocks] = _mxfp4_blocks(b[at:at + chunk_blocks])
    return out.reshape(*x.shape[:-1], x.shape[-1] // 32 * 17)


def _mxfp4_blocks(b: np.ndarray) -> np.ndarray:
    amax = np.max(np.abs(b), axis=1)
    # log2f correctly rounded: the float64 logarithm rounded to float32 (so the floor of a
    # value just below a power of two is the one ggml's log2f gives).
    with np.errstate(divide="ignore"):
        l2 = np.floor(np.log2(amax.astype(np.float64)).astype(np.float32))
    e = np.where(amax > 0, np.clip(l2 - 2 + 127, 0, 255), 0).astype(np.uint8)
    d = _e8m0_half(e)[:, None, None]
    # |v[c] * d - x| in float32 for every code c; argmin takes the first (lowest) minimum.
    with np.errstate(over="ignore", invalid="ignore"):
        err = np.abs(_MXFP4_VALUES[None, None, :] * d - b[:, :, None])
    q = np.argmin(err, axis=2).astype(np.uint8)                   # [nb, 32]
    out = np.empty((b.shape[0], 17), dtype=np.uint8)
    out[:, 0] = e
    out[:, 1:] = q[:, :16] | (q[:, 16:] << 4)
    return out


def _dq_q6_k(b):
    ql, qh = b[:, 0:128], b[:, 128:192]
    sc = b[:, 192:208].view(np.int8).astype(np.float32)
    d = _half(b, 208)
    y = np.empty((b.shape[0], 256), dtype=np.float32)
    for half in range(2):                    # two halves of 128 elements
        l_ = ql[:, 64 * half:64 * half + 64]
        h_ = qh[:, 32 * half:32 * half + 32]
        s_ = sc[:, 8 * half:8 * half + 8]
        groups = [
            (l_[:, :32] & 0xF) | (((h_ >> 0) & 3) << 4),   # elements   0..31
            (l_[:, 32:] & 0xF) | (((h_ >> 2) & 3) << 4),   # elements  32..63
            (l_[:, :32] >> 4) | (((h_ >> 4) & 3) << 4),    # elements  64..95
            (l_[:, 32:] >> 4) | (((h_ >> 6) & 3) << 4),    # elements  96..127
        ]
        for g, q in enumerate(groups):
            q = q.astype(np.float32) - 32
            # each group of 32 uses two scales: one per 16 elements
            scale = np.repeat(s_[:, 2 * g:2 * g + 2], 16, axis=1)
            y[:, 128 * half + 32 * g:128 * half + 32 * g + 32] = d * scale * q
    return y


# K-quants Q2_K..Q5_K. Element e of a super-block lies in 32-element group g = e // 32 at
# l = e % 32 (see src/tensor/quant_kquants.cpp): Q4_K/Q5_K keep it in nibble g % 2 of
# qs[32 (g // 2) + l] (Q5_K's fifth bit: bit g of qh[l]), sub-block g; Q2_K/Q3_K in bits
# 2 (g % 4) of qs[32 (g // 4) + l] (Q3_K's third bit: bit g of hmask[l]), sub-block e // 16.
# Values are computed in float32 in ggml's order: (d * scale) * q - (dmin * min).
_E = np.arange(256)
_G, _L = _E // 32, _E % 32


def _k4_scales(s):
    """uint8 [nb, 12] -> 6-bit scales and mins, float32 [nb, 8] each."""
    s = s.astype(np.int32)
    sc = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)], axis=1)
    m = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
    return sc.astype(np.float32), m.astype(np.float32)


def _dq_q4_k(b):
    sc, m = _k4_scales(b[:, 4:16])
    q = (b[:, 16:144][:, 32 * (_G // 2) + _L] >> (4 * (_G % 2)).astype(np.uint8)) & 15
    return (_half(b, 0) * sc[:, _G]) * q.astype(np.float32) - _half(b, 2) * m[:, _G]


def _dq_q5_k(b):
    sc, m = _k4_scales(b[:, 4:16])
    q = (b[:, 48:176][:, 32 * (_G // 2) + _L] >> (4 * (_G % 2)).astype(np.uint8)) & 15
    q = q | (((b[:, 16:48][:, _L] >> _G.astype(np.uint8)) & 1) << 4)
    return (_half(b, 0) * sc[:, _G]) * q.astype(np.float32) - _half(b, 2) * m[:, _G]


def _low2(qs):
    return (qs[:, 32 * (_G // 4) + _L] >> (2 * (_G % 4)).astype(np.uint8)) & 3


def _dq_q2_k(b):
    s = b[:, 0:16][:, _E // 16]
    sc, m = (s & 15).astype(np.float32), (s >> 4).astype(np.float32)
    return (_half(b, 80) * sc) * _low2(b[:, 16:80]).astype(np.float32) - _half(b, 82) * m


def _dq_q3_k(b):
    s = b[:, 96:108].astype(np.int32)
    i = np.arange(16)
    low = np.where(i < 8, s[:, i % 8] & 15, s[:, i % 8] >> 4)
    high = (s[:, 8 + i % 4] >> (2 * (i // 4))) & 3
    scale = ((low | (high << 4)) - 32).astype(np.float32)[:, _E // 16]
    hbit = (b[:, 0:32][:, _L] >> _G.astype(np.uint8)) & 1
    q = _low2(b[:, 32:96]).astype(np.int32) - np.where(hbit == 1, 0, 4)
    return (_half(b, 108) * scale) * q.astype(np.float32)


_DEQUANT = {
    GGMLType.Q8_0: _dq_q8_0, GGMLType.Q4_0: _dq_q4_0, GGMLType.Q4_1: _dq_q4_1,
    GGMLType.Q5_0: _dq_q5_0, GGMLType.Q5_1: _dq_q5_1, GGMLType.Q6_K: _dq_q6_k,
    GGMLType.Q2_K: _dq_q2_k, GGMLType.Q3_K: _dq_q3_k, GGMLType.Q4_K: _dq_q4_k,
    GGMLType.Q5_K: _dq_q5_k, GGMLType.MXFP4: _dq_mxfp4,
}

QUANTIZE = {GGMLType.Q8_0: quantize_q8_0, GGMLType.Q4_0: quantize_q4_0, GGMLType.MXFP4: quantize_mxfp4}


def dequantize(data, t: GGMLType, shape) -> np.ndarray:
    """Raw tensor bytes (any uint8 array or bytes) of type t -> float32 array of `shape`."""
    t = GGMLType(t)
    raw = np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray)) \
        else np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    if raw.size != nbytes(t, shape):
        raise ValueError(f"{t.name} {list(shape)}: {raw.size} bytes, expected {nbytes(t, shape)}")
    if t == GGMLType.BF16:
        return bf16_bits_to_f32(raw.view("<u2")).reshape(shape)
    if t in _PLAIN:
        return raw.view(_PLAIN[t]).astype(np.float32).reshape(shape)
    if t not in _DEQUANT:
        raise ValueError(f"dequantization of {t.name} is not implemented")
    bs, ts = BLOCK[t]
    return _DEQUANT[t](raw.reshape(-1, ts)).reshape(shape)


def quantize(x, t: GGMLType) -> np.ndarray:
    """float array -> the bytes of type t as a uint8 (or plain typed) array. Plain types come
    back typed (F32 float32, F16 float16, BF16 uint16 bits); block types as uint8 blocks."""
    t = GGMLType(t)
    x = np.asarray(x, dtype=np.float32)
    if t == GGMLType.F32:
        return x.astype("<f4")
    if t == GGMLType.F16:
        return x.astype("<f2")
    if t == GGMLType.BF16:
        return f32_to_bf16_bits(x)
    if t not in QUANTIZE:
        raise ValueError(f"quantization to {t.name} is not implemented")
    return QUANTIZE[t](x)
