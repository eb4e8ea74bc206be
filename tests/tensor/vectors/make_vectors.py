#!/usr/bin/env python3
"""Writes the quantization test vectors in this folder, using the `gguf` Python package
(gguf-py's numpy implementation of ggml's reference quantizers) as an independent oracle.

Run once by hand; CI only reads the .bin files and never needs the package:
    python3 -m venv /tmp/ggufvenv && /tmp/ggufvenv/bin/pip install gguf numpy
    /tmp/ggufvenv/bin/python tests/tensor/vectors/make_vectors.py
Produced with gguf 0.19.0 and numpy 2.4 (q2_k..q5_k: `make_vectors.py --k`, gguf 0.19.0).

File format (all little-endian), one file per type, <type>.bin:
    char[4] "PIQV"; u32 version = 1; u32 ggml type id; u32 n (elements);
    u32 flags (bit 0: the file holds inputs x and q = quantize(x));
    f32 x[n] (only with bit 0);
    u32 nbytes; u8 q[nbytes] (gguf quantize(x), or hand-made random blocks without bit 0);
    f32 y[n] (gguf dequantize(q)).
"""
import os
import struct

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(20240601)


def block_inputs(n_blocks: int) -> np.ndarray:
    """32-element blocks covering the cases the quantizers branch on."""
    blocks = []
    # Normal values at many magnitudes, including f16-subnormal scales and large ones.
    for scale in [1e-6, 1e-3, 0.02, 0.5, 1.0, 7.0, 100.0, 3000.0]:
        blocks.append(rng.standard_normal(32) * scale)
    blocks.append(np.zeros(32))                              # all zero: d = 0
    one = np.zeros(32); one[5] = -3.25; blocks.append(one)   # single nonzero, negative max
    blocks.append(np.full(32, 1.5))                          # constant: max == min
    blocks.append(np.arange(-16, 16) * 0.5)                  # exact half-steps (ties)
    blocks.append(np.linspace(-8, 8, 32))                    # max magnitude on both ends
    blocks.append(-np.abs(rng.standard_normal(32)))          # all negative
    blocks.append(np.abs(rng.standard_normal(32)) + 10.0)    # all positive, offset
    tie = rng.standard_normal(32); tie[3] = 2.0; tie[9] = -2.0; tie = np.clip(tie, -1.9, 1.9)
    tie[3] = 2.0; tie[9] = -2.0; blocks.append(tie)          # magnitude tie: first one wins
    while len(blocks) < n_blocks:
        blocks.append(rng.standard_normal(32) * rng.uniform(0.01, 10.0))
    return np.concatenate(blocks[:n_blocks]).astype(np.float32)


def float_inputs() -> np.ndarray:
    """Values for F16/BF16 rounding: specials, subnormals, midpoints, random."""
    special = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, 65504.0, 65519.0, 65520.0, 1e6,
               6.1035156e-05, 5.9604645e-08, 2.9802322e-08, 2.9802326e-08, 1e-8, 1e-40,
               3.4028235e38, -3.4028235e38, 1.0009765625, 1.00048828125, 1.00146484375,
               0.333333343, np.pi, -np.e]
    x = np.array(special, dtype=np.float32)
    # Exact midpoints between neighbouring halves (ties), both parities.
    h = rng.integers(0, 0x7bff, 200).astype(np.uint16)
    lo = h.view(np.float16).astype(np.float64)
    hi = (h + 1).view(np.float16).astype(np.float64)
    mid = ((lo + hi) / 2).astype(np.float32)
    # Random bit patterns (finite, not NaN) and random magnitudes.
    bits = rng.integers(0, 2**32, 300, dtype=np.uint64).astype(np.uint32)
    bits = bits[(bits & 0x7f800000) != 0x7f800000]
    rand = bits.view(np.float32)
    logu = (rng.standard_normal(300) * 10 ** rng.uniform(-9, 6, 300)).astype(np.float32)
    return np.concatenate([x, mid, rand, logu]).astype(np.float32)


def write(name: str, qtype: T, x, q: np.ndarray, y: np.ndarray) -> None:
    q = np.ascontiguousarray(q).view(np.uint8).reshape(-1)
    y = np.ascontiguousarray(y, dtype=np.float32).reshape(-1)
    flags = 1 if x is not None else 0
    with open(os.path.join(HERE, name + ".bin"), "wb") as f:
        f.write(b"PIQV")
        f.write(struct.pack("<IIII", 1, int(qtype), y.size, flags))
        if x is not None:
            f.write(np.ascontiguousarray(x, dtype="<f4").tobytes())
        f.write(struct.pack("<I", q.size))
        f.write(q.tobytes())
        f.write(y.astype("<f4").tobytes())


def main() -> None:
    x = block_inputs(32)
    for name, qt in [("q4_0", T.Q4_0), ("q4_1", T.Q4_1), ("q5_0", T.Q5_0),
                     ("q5_1", T.Q5_1), ("q8_0", T.Q8_0)]:
        q = quants.quantize(x.reshape(1, -1), qt)
        write(name, qt, x, q, quants.dequantize(q, qt))

    xf = float_inputs()
    q16 = xf.astype(np.float16)
    write("f16", T.F16, xf, q16, q16.astype(np.float32))
    # BF16 also covers NaNs whose payload lives only in the dropped bits (must stay NaN).
    nans = np.array([0x7f800001, 0xff800001, 0x7fc00000, 0x7fa00000, 0x7f80ffff],
                    dtype=np.uint32).view(np.float32)
    xb = np.concatenate([xf, nans]).astype(np.float32)
    qb = quants.quantize(xb, T.BF16)
    write("bf16", T.BF16, xb, qb, quants.dequantize(qb, T.BF16))

    # Q6_K: random blocks (gguf-py has no Q6_K quantizer); d a random finite normal half.
    n_blocks = 8
    raw = rng.integers(0, 256, (n_blocks, 210), dtype=np.uint16).astype(np.uint8)
    d = (rng.uniform(-1, 1, n_blocks) * 10 ** rng.uniform(-4, 0, n_blocks)).astype(np.float16)
    raw[:, 208:210] = d.view(np.uint8).reshape(n_blocks, 2)
    write("q6_k", T.Q6_K, None, raw, quants.dequantize(raw.reshape(-1), T.Q6_K))

    # Q2_K..Q5_K: random blocks too (gguf-py quantizes none of them), d and dmin random
    # finite normal halves (dmin of either sign: the format allows it) at the byte offsets of
    # each layout.
    write_k_blocks()


def write_k_blocks() -> None:
    for name, qt, size, halves in [("q2_k", T.Q2_K, 84, (80, 82)), ("q3_k", T.Q3_K, 110, (108,)),
                                   ("q4_k", T.Q4_K, 144, (0, 2)), ("q5_k", T.Q5_K, 176, (0, 2))]:
        n_blocks = 8
        raw = rng.integers(0, 256, (n_blocks, size), dtype=np.uint16).astype(np.uint8)
        for at in halves:
            h = (rng.uniform(-1, 1, n_blocks) * 10 ** rng.uniform(-4, 0, n_blocks)).astype(np.float16)
            raw[:, at:at + 2] = h.view(np.uint8).reshape(n_blocks, 2)
        write(name, qt, None, raw, quants.dequantize(raw.reshape(-1), qt))


def write_mxfp4() -> None:
    """MXFP4: gguf's quantizer on the usual inputs, and every exponent byte (0..255) with
    every code in both nibbles, decoded."""
    x = block_inputs(32)
    q = quants.quantize(x.reshape(1, -1), T.MXFP4)
    write("mxfp4", T.MXFP4, x, q, quants.dequantize(q, T.MXFP4))
    raw = np.zeros((256, 17), dtype=np.uint8)
    raw[:, 0] = np.arange(256)
    codes = np.arange(16, dtype=np.uint8)
    raw[:, 1:] = codes | ((15 - codes) << 4)
    write("mxfp4_all", T.MXFP4, None, raw, quants.dequantize(raw.reshape(-1), T.MXFP4))


if __name__ == "__main__":
    import sys
    # --k: (re)write only the Q2_K..Q5_K files (added later; the others stay as committed);
    # --mxfp4 likewise for the MXFP4 files (gguf 0.19.0, numpy 2.4.6).
    if "--mxfp4" in sys.argv:
        rng = np.random.default_rng(20261207)
        write_mxfp4()
    elif "--k" in sys.argv:
        rng = np.random.default_rng(20261201)
        write_k_blocks()
    else:
        main()
