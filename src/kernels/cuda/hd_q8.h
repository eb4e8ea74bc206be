// The integer path of the GPU matrix kernels, host and device (hd.h): activations quantized
// once per op to 8 bits in blocks of 32, and dot products of one weight block of Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0 or MXFP4 with one such activation block in integer arithmetic (dp4a: four
// int8 products and a sum per instruction), scaled once.
//
// Activation quantization (as the CPU's SIMD kernels do it): per block of 32, amax = max |x|,
// d = amax / 127, q = round-half-even(x * 127 / amax) (0 when amax is 0); a NaN in the block
// makes d NaN, so the products are NaN as the reference's are.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/hd_blocks.h"

namespace pi::gpu {

// The scale of one block of activation quants and the sum of its quants (for the formats
// whose values carry an offset or a minimum).
struct Q8Scale {
  float d;
  int32_t s;
};

// True for the weight types the integer path takes.
PI_HD constexpr bool q8_path(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1 ||
         t == DType::Q8_0 || t == DType::MXFP4;
}

PI_HD float q8_inverse(float amax) {
  return amax > 0.0f ? 127.0f / amax : (amax == amax ? 0.0f : amax);
}

// One activation quant: x * id rounded half to even (|x| <= amax keeps it in [-127, 127]).
PI_HD int q8_quant(float x, float id) {
  const float v = rintf(x * id);
  return v == v ? static_cast<int>(v) : 0;
}

// Quantizes one block x[0..32) into q and its scale (the host form of act_quant.cu).
PI_HD Q8Scale quantize_q8_block(const float* x, int8_t* q) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = absmax_nan(amax, x[j]);
  const float id = q8_inverse(amax);
  int32_t s = 0;
  for (int j = 0; j < 32; ++j) {
    q[j] = static_cast<int8_t>(q8_quant(x[j], id));
    s += q[j];
  }
  return Q8Scale{amax / 127.0f, s};
}

// sum of the four signed byte products of a and b, plus c.
PI_HD int dp4a(int a, int b, int c) {
#if PI_DEVICE_PASS && defined(__CUDA_ARCH__)
  return __dp4a(a, b, c);
#elif PI_DEVICE_PASS
  return __builtin_amdgcn_sdot4(a, b, c, false);
#else
  for (int k = 0; k < 4; ++k)
    c += static_cast<int8_t>(static_cast<uint32_t>(a) >> (8 * k)) *
         static_cast<int8_t>(static_cast<uint32_t>(b) >> (8 * k));
  return c;
#endif
}

// One weight block held in registers: quants as packed bytes (byte k of word w is element
// 4 w + k), the scale and, where the format has one, the minimum.
template <DType T>
struct WBlock {
  int32_t q[8];
  float d;
  float m;
};

namespace detail {

// Bits 0..3 of b moved to bit 4 of bytes 0..3.
PI_HD uint32_t spread4(uint32_t b) {
  return ((b & 1u) << 4) | ((b & 2u) << 11) | ((b & 4u) << 18) | ((b & 8u) << 25);
}

// MXFP4: the eight codes of quant bytes v (byte i: element i low nibble, 16 + i high) as their
// int8 values (kMxfp4Values), the four low nibbles' in lo, the high ones' in hi, by byte
// permutes of the value table held in four words (no table in memory): a permute selects by
// the low three bits of each selector nibble, so a code picks its byte in both halves of the
// table, and its bit 3 then picks the half. Eight permutes for eight elements.
PI_HD void mxfp4_codes(uint32_t v, uint32_t& lo, uint32_t& hi) {
  constexpr uint32_t kPos0 = 0x03020100u, kPos1 = 0x0c080604u;  //  0  1  2  3 |  4  6  8  12
  constexpr uint32_t kNeg0 = 0xfdfeff00u, kNeg1 = 0xf4f8fafcu;  //  0 -1 -2 -3 | -4 -6 -8 -12
  // Selector nibble 4i + n: n (byte n of the positive lookup), plus 4 (of the negative one)
  // when bit 3 of nibble 4i + n of v is set.
  const uint32_t pick = 0x32103210u | ((v & 0x88888888u) >> 1);
  uint32_t t[2];
  for (int i = 0; i < 2; ++i) {
    // Nibbles 4i .. 4i + 3 of v: elements 2i, 16 + 2i, 2i + 1, 17 + 2i, into bytes 0..3.
    const uint32_t c = v >> (16 * i);
    t[i] = byte_perm(byte_perm(kPos0, kPos1, c), byte_perm(kNeg0, kNeg1, c), pick >> (16 * i));
  }
  lo = byte_perm(t[0], t[1], 0x6420u);
  hi = byte_perm(t[0], t[1], 0x7531u);
}

}  // namespace detail

// Loads block u of a row into registers as unsigned quants 0..15 / 0..31 (Q4/Q5) or int8
// (Q8_0; MXFP4: the code values -12..12). b must be 2-byte aligned (MXFP4: any address).
template <DType T>
PI_HD WBlock<T> load_wblock(const uint8_t* row, int64_t u) {
  static_assert(q8_path(T), "load_wblock: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4 only");
  const uint8_t* b = row + u * Unit<T>::kBlockBytes;
  WBlock<T> w{};
  if constexpr (T == DType::MXFP4) {
    w.d = e8m0_half(b[0]);
    for (int k = 0; k < 4; ++k) {
      uint32_t lo = 0, hi = 0;
      detail::mxfp4_codes(load_u32_a1(b + 1 + 4 * k), lo, hi);
      w.q[k] = static_cast<int32_t>(lo);      // elements 4k .. 4k+3
      w.q[k + 4] = static_cast<int32_t>(hi);  // elements 16+4k .. 16+4k+3
    }
  } else if constexpr (T == DType::Q8_0) {
    w.d = half_to_float(load_u16(b));
    for (int k = 0; k < 8; ++k) w.q[k] = static_cast<int32_t>(load_u32_a2(b + 2 + 4 * k));
  } else {
    w.d = half_to_float(load_u16(b));
    const bool has_min = T == DType::Q4_1 || T == DType::Q5_1;
    const bool five = T == DType::Q5_0 || T == DType::Q5_1;
    int at = 2;
    if (has_min) {
      w.m = half_to_float(load_u16(b + 2));
      at = 4;
    }
    uint32_t qh = 0;
    if (five) {
      qh = load_u32_a2(b + at);
      at += 4;
    }
    for (int k = 0; k < 4; ++k) {
      const uint32_t v = load_u32_a2(b + at + 4 * k);
      uint32_t lo = v & 0x0f0f0f0fu, hi = (v >> 4) & 0x0f0f0f0fu;
      if (five) {
        lo |= detail::spread4((qh >> (4 * k)) & 15u);
        hi |= detail::spread4((qh >> (16 + 4 * k)) & 15u);
      }
      w.q[k] = static_cast<int32_t>(lo);      // elements 4k .. 4k+3
      w.q[k + 4] = static_cast<int32_t>(hi);  // elements 16+4k .. 16+4k+3
    }
  }
  return w;
}

// The block's dot product with one activation block (a: its 32 quants as 8 packed words):
//   Q4_0: d da (sum q a - 8 s)   Q5_0: d da (sum q a - 16 s)   Q8_0, MXFP4: d da sum q a
//   Q4_1, Q5_1: d da sum q a + m da s
template <DType T>
PI_HD float dot_q8(const WBlock<T>& w, const int32_t* a, Q8Scale as) {
  int sum = 0;
  for (int k = 0; k < 8; ++k) sum = dp4a(w.q[k], a[k], sum);
  if constexpr (T == DType::Q4_0) return w.d * (as.d * static_cast<float>(sum - 8 * as.s));
  if constexpr (T == DType::Q5_0) return w.d * (as.d * static_cast<float>(sum - 16 * as.s));
  if constexpr (T == DType::Q8_0 || T == DType::MXFP4)
    return w.d * (as.d * static_cast<float>(sum));
  return w.d * (as.d * static_cast<float>(sum)) + w.m * (as.d * static_cast<float>(as.s));
}

}  // namespace pi::gpu
