// Internal to the NEON files (neon_matrix.cpp, neon_dot.cpp, neon_axpy.cpp): block decoders,
// activation quantization and the integer dot of 16 byte pairs. Everything has internal
// linkage (unnamed namespace) and is compiled with the flags of the including file: the
// ARMv8.0 baseline, or ARMv8.2 with the dot product (__ARM_FEATURE_DOTPROD), where idot16 is
// one SDOT.
#pragma once

#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/scalar_blocks.h"
#include "tensor/quant.h"

namespace pi::cpu::detail {
namespace {

// One f16 as a float (FCVT: exact, as half_to_float).
inline float nh2f(uint16_t h) {
  __fp16 f;
  std::memcpy(&f, &h, 2);
  return static_cast<float>(f);
}
inline float nh2f_at(const uint8_t* p) { return nh2f(load_u16(p)); }

inline void nprefetch(const uint8_t* p) { __builtin_prefetch(p); }

// acc + the sums of four products of a and b per int32 lane (|a b| <= 128 * 127).
inline int32x4_t idot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, a, b);
#else
  // Two products per int16 lane fit (<= 32512); their pairs are added into int32.
  const int16x8_t p = vmlal_high_s8(vmull_s8(vget_low_s8(a), vget_low_s8(b)), a, b);
  return vpadalq_s16(acc, p);
#endif
}

// ---- the 32-element block types ---------------------------------------------------------
// quants(p, lo, hi): the block's 32 quants as signed bytes, elements 0..15 in lo and 16..31 in
// hi, value = d * q + mn (the offset of the offset types already subtracted).
inline void nibbles(const uint8_t* qs, uint8x16_t& lo, uint8x16_t& hi) {
  const uint8x16_t v = vld1q_u8(qs);
  lo = vandq_u8(v, vdupq_n_u8(0x0f));
  hi = vshrq_n_u8(v, 4);
}

// Bit j of qh -> byte j = 0x10, j < 32 (lo: bits 0..15, hi: 16..31).
inline void fifth_bits(uint32_t qh, uint8x16_t& lo, uint8x16_t& hi) {
  const uint8x16_t bytes = vreinterpretq_u8_u32(vdupq_n_u32(qh));
  static constexpr uint8_t kLo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
  static constexpr uint8_t kHi[16] = {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
  static constexpr uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t bit = vld1q_u8(kBit), sixteen = vdupq_n_u8(0x10);
  lo = vandq_u8(vtstq_u8(vqtbl1q_u8(bytes, vld1q_u8(kLo)), bit), sixteen);
  hi = vandq_u8(vtstq_u8(vqtbl1q_u8(bytes, vld1q_u8(kHi)), bit), sixteen);
}

struct NQ4_0 {
  static constexpr size_t kBytes = 18;
  static constexpr bool kMin = false;
  static void quants(const uint8_t* p, int8x16_t& lo, int8x16_t& hi) {
    uint8x16_t a, b;
    nibbles(p + 2, a, b);
    lo = vsubq_s8(vreinterpretq_s8_u8(a), vdupq_n_s8(8));
    hi = vsubq_s8(vreinterpretq_s8_u8(b), vdupq_n_s8(8));
  }
  static float d(const uint8_t* p) { return nh2f_at(p); }
  static float mn(const uint8_t*) { return 0.0f; }
};
struct NQ4_1 {
  static constexpr size_t kBytes = 20;
  static constexpr bool kMin = true;
  static void quants(const uint8_t* p, int8x16_t& lo, int8x16_t& hi) {
    uint8x16_t a, b;
    nibbles(p + 4, a, b);
    lo = vreinterpretq_s8_u8(a);
    hi = vreinterpretq_s8_u8(b);
  }
  static float d(const uint8_t* p) { return nh2f_at(p); }
  static float mn(const uint8_t* p) { return nh2f_at(p + 2); }
};
struct NQ5_0 {
  static constexpr size_t kBytes = 22;
  static constexpr bool kMin = false;
  static void quants(const uint8_t* p, int8x16_t& lo, int8x16_t& hi) {
    uint8x16_t a, b, ha, hb;
    nibbles(p + 6, a, b);
    fifth_bits(load_u32(p + 2), ha, hb);
    lo = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(a, ha)), vdupq_n_s8(16));
    hi = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(b, hb)), vdupq_n_s8(16));
  }
  static float d(const uint8_t* p) { return nh2f_at(p); }
  static float mn(const uint8_t*) { return 0.0f; }
};
struct NQ5_1 {
  static constexpr size_t kBytes = 24;
  static constexpr bool kMin = true;
  static void quants(const uint8_t* p, int8x16_t& lo, int8x16_t& hi) {
    uint8x16_t a, b, ha, hb;
    nibbles(p + 8, a, b);
    fifth_bits(load_u32(p + 4), ha, hb);
    lo = vreinterpretq_s8_u8(vorrq_u8(a, ha));
    hi = vreinterpretq_s8_u8(vorrq_u8(b, hb));
  }
  static float d(const uint8_t* p) { return nh2f_at(p); }
  static float mn(const uint8_t* p) { return nh2f_at(p + 2); }
};
struct NQ8_0 {
  static constexpr size_t kBytes = 34;
  static constexpr bool kMin = false;
  static void quants(const uint8_t* p, int8x16_t& lo, int8x16_t& hi) {
    lo = vld1q_s8(reinterpret_cast<const int8_t*>(p + 2));
    hi = vld1q_s8(reinterpret_cast<const int8_t*>(p + 18));
  }
  static float d(const uint8_t* p) { return nh2f_at(p); }
  static float mn(const uint8_t*) { return 0.0f; }
};
// MXFP4: codes looked up as their doubled E2M1 values (kMxfp4Values), d = 2^(e - 128).
struct NMXFP4 {
  static constexpr size_t kBytes = 17;
  static constexpr bool kMin = false;
  static void quants(const uint8_t* p, int8x16_t& lo, int8x16_t& hi) {
    const int8x16_t table = vld1q_s8(kMxfp4Values);
    uint8x16_t a, b;
    nibbles(p + 1, a, b);
    lo = vqtbl1q_s8(table, a);
    hi = vqtbl1q_s8(table, b);
  }
  static float d(const uint8_t* p) { return e8m0_half(p[0]); }
  static float mn(const uint8_t*) { return 0.0f; }
};

// ---- activation quantization ---------------------------------------------------------------
// Largest magnitude of x[0..n) (n a multiple of 8); NaN when any element is NaN.
inline float namax(const float* x, int n) {
  float32x4_t a = vdupq_n_f32(0.0f), b = vdupq_n_f32(0.0f);
  for (int i = 0; i < n; i += 8) {
    a = vmaxq_f32(a, vabsq_f32(vld1q_f32(x + i)));
    b = vmaxq_f32(b, vabsq_f32(vld1q_f32(x + i + 4)));
  }
  return vmaxvq_f32(vmaxq_f32(a, b));  // FMAX propagates NaN
}

// round(x[j] * id) for 16 floats as int8 (nearest even, saturated to -127..127).
inline int8x16_t nquantize16(const float* x, float32x4_t id) {
  int32x4_t q[4];
  for (int i = 0; i < 4; ++i) q[i] = vcvtnq_s32_f32(vmulq_f32(vld1q_f32(x + 4 * i), id));
  const int16x8_t a = vcombine_s16(vqmovn_s32(q[0]), vqmovn_s32(q[1]));
  const int16x8_t b = vcombine_s16(vqmovn_s32(q[2]), vqmovn_s32(q[3]));
  return vmaxq_s8(vcombine_s8(vqmovn_s16(a), vqmovn_s16(b)), vdupq_n_s8(-127));
}

// The scale of a block of largest magnitude am: dx (NaN when the block holds a NaN) and the
// multiplier 127 / am (0 for an all-zero or non-finite block).
inline void nscale(float am, float* dx, float* id) {
  *dx = am / 127.0f;  // NaN stays NaN
  *id = am > 0.0f && am <= 3.4e38f ? 127.0f / am : 0.0f;
}

// ---- float rows ----------------------------------------------------------------------------
// Four elements j .. j + 3 of an F32 / F16 / BF16 row as floats.
template <DType T>
inline float32x4_t nload_w4(const uint8_t* row, int64_t j) {
  if constexpr (T == DType::F32) return vld1q_f32(reinterpret_cast<const float*>(row) + j);
  if constexpr (T == DType::F16)
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(row) + j)));
  if constexpr (T == DType::BF16)
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(reinterpret_cast<const uint16_t*>(row) + j), 16));
}

}  // namespace
}  // namespace pi::cpu::detail
