// Scalars of the GPU kernels, host and device (hd.h): half and bfloat16 conversions, loads of
// little-endian words from block bytes, and products and sums that are never fused into a
// multiply-add (the reference dequantizers round each product: src/tensor, -ffp-contract=off).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/hd.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#elif defined(__HIPCC__)
#include <hip/hip_fp16.h>
#endif

namespace pi::gpu {

// a * b and a + b, each rounded once (nvcc would otherwise contract a * b + c into an fma).
PI_HD float mul_rn(float a, float b) {
#if PI_DEVICE_PASS
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
PI_HD float add_rn(float a, float b) {
#if PI_DEVICE_PASS
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
PI_HD float sub_rn(float a, float b) {
#if PI_DEVICE_PASS
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// IEEE half bits -> float (exact).
PI_HD float half_to_float(uint16_t h) {
#if PI_DEVICE_PASS
  return __half2float(__ushort_as_half(h));
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp == 0) {
    const float mag = static_cast<float>(man) * 0x1p-24f;  // zero or subnormal, exact
    std::memcpy(&bits, &mag, 4);
    bits |= sign;
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

PI_HD uint32_t float_bits(float f) {
#if PI_DEVICE_PASS
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

PI_HD float bits_float(uint32_t u) {
#if PI_DEVICE_PASS
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// bfloat16 bits -> float (exact).
PI_HD float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

// float -> IEEE half bits, round to nearest even; NaN keeps its top payload bits with the
// quiet bit set, overflow gives Inf: bit for bit pi::f32_to_f16 (the KV cache's f16), on the
// host and on the device alike.
PI_HD uint16_t float_to_half(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t exp = (u >> 23) & 0xffu, man = u & 0x7fffffu;
  if (exp == 0xff) {
    return static_cast<uint16_t>(sign | 0x7c00u | (man != 0 ? 0x0200u | (man >> 13) : 0u));
  }
  const int e = static_cast<int>(exp) - 112;  // rebias 127 -> 15
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e >= 1) {
    const uint32_t bits = (static_cast<uint32_t>(e) << 10) | (man >> 13);
    const uint32_t dropped = man & 0x1fffu;
    const uint32_t up = dropped > 0x1000u || (dropped == 0x1000u && (bits & 1u)) ? 1u : 0u;
    return static_cast<uint16_t>(sign | (bits + up));  // a carry into Inf is correct
  }
  const int shift = 14 - e;  // subnormal or zero in half
  if (shift > 24) return sign;
  const uint32_t sig = man | 0x800000u;
  const uint32_t kept = sig >> shift, dropped = sig & ((1u << shift) - 1u),
                 half = 1u << (shift - 1);
  const uint32_t up = dropped > half || (dropped == half && (kept & 1u)) ? 1u : 0u;
  return static_cast<uint16_t>(sign | (kept + up));
}

// Little-endian loads from block bytes. Every block format but MXFP4 keeps its fields at even
// offsets and blocks of an even size, so a block that starts 2-byte aligned (the ops require
// it: cuda_ops.cpp) allows 16-bit loads; a 32-bit field is read as two of them. MXFP4's
// 17-byte blocks may start at any byte: load_u32_a1.
PI_HD uint16_t load_u16(const uint8_t* p) {
#if PI_DEVICE_PASS
  return *reinterpret_cast<const uint16_t*>(p);
#else
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
#endif
}
PI_HD uint32_t load_u32_a2(const uint8_t* p) {
  return static_cast<uint32_t>(load_u16(p)) | (static_cast<uint32_t>(load_u16(p + 2)) << 16);
}
// A 32-bit load at any byte address, byte by byte.
PI_HD uint32_t load_u32_a1(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
// A 4-byte aligned 32-bit load (activation quants, f32 weights).
PI_HD uint32_t load_u32(const uint8_t* p) {
#if PI_DEVICE_PASS
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#endif
}

// MXFP4's block scale: E8M0 exponent e as 2^(e - 128), bit for bit pi::e8m0_half (a
// subnormal for e 0 and 1).
PI_HD float e8m0_half(uint8_t e) {
  return bits_float(e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23);
}

// CUDA's __byte_perm: byte n of the result is byte s[4n + 2 .. 4n] (selector nibble n, its
// top bit ignored) of the 8 bytes x (0..3), y (4..7).
PI_HD uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#if PI_DEVICE_PASS
  return __byte_perm(x, y, s);
#else
  const uint64_t xy = x | (static_cast<uint64_t>(y) << 32);
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n)
    r |= static_cast<uint32_t>((xy >> (8 * ((s >> (4 * n)) & 7u))) & 0xffu) << (8 * n);
  return r;
#endif
}

// NaN-propagating maximum of |x| (fmaxf would drop a NaN).
PI_HD float absmax_nan(float acc, float x) {
  const float a = fabsf(x);
  return (a > acc || a != a) ? a : acc;
}

}  // namespace pi::gpu
