// NEON small ops (ops_generic.inc over 8-lane vectors: two float32x4_t) and the Neon kernel
// table, which the NeonDot table copies (neon_dot.cpp). Compiled for the ARMv8.0 baseline.
//
// Vectorised on both NEON ISAs: the dot leaves of every supported type (neon_matrix.h; the
// integer products by SDOT on NeonDot), the axpy of every supported type (neon_axpy.cpp), and
// every small op and attention over F16 / Q8_0 / Q4_0 / F32 rows (here).
// Delegated to the scalar leaves: the axpy of Q4_0_SPLIT (scalar_axpy; axpy_layout picks it
// for AVX-512 only) and the R16 layouts (r16_prepare / r16_dot; dot_layout never picks them
// for NEON).
#include <arm_neon.h>

#include <cmath>
#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/quant.h"

#include "kernels/cpu/neon_leaves.h"
#include "kernels/cpu/r16.h"
#include "kernels/cpu/scalar_blocks.h"

namespace pi::cpu::detail {
namespace neon_isa {
namespace {

constexpr int kLanes = 8;
struct VF {
  float32x4_t lo, hi;
};

inline VF vzero() { return {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}; }
inline VF vset1(float s) { return {vdupq_n_f32(s), vdupq_n_f32(s)}; }
inline VF vload(const float* p) { return {vld1q_f32(p), vld1q_f32(p + 4)}; }
inline VF vload_n(const float* p, int n) {
  alignas(16) float tmp[8] = {};
  for (int i = 0; i < n; ++i) tmp[i] = p[i];
  return vload(tmp);
}
inline void vstore(float* p, VF a) {
  vst1q_f32(p, a.lo);
  vst1q_f32(p + 4, a.hi);
}
inline void vstore_n(float* p, VF a, int n) {
  alignas(16) float tmp[8];
  vstore(tmp, a);
  for (int i = 0; i < n; ++i) p[i] = tmp[i];
}
inline VF vmask_n(VF a, int n) {
  static constexpr uint32_t kIota[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  const uint32x4_t vn = vdupq_n_u32(static_cast<uint32_t>(n));
  const uint32x4_t m0 = vcltq_u32(vld1q_u32(kIota), vn), m1 = vcltq_u32(vld1q_u32(kIota + 4), vn);
  return {vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(a.lo), m0)),
          vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(a.hi), m1))};
}
inline VF vadd(VF a, VF b) { return {vaddq_f32(a.lo, b.lo), vaddq_f32(a.hi, b.hi)}; }
inline VF vsub(VF a, VF b) { return {vsubq_f32(a.lo, b.lo), vsubq_f32(a.hi, b.hi)}; }
inline VF vmul(VF a, VF b) { return {vmulq_f32(a.lo, b.lo), vmulq_f32(a.hi, b.hi)}; }
inline VF vdiv(VF a, VF b) { return {vdivq_f32(a.lo, b.lo), vdivq_f32(a.hi, b.hi)}; }
inline VF vfma(VF a, VF b, VF c) { return {vfmaq_f32(c.lo, a.lo, b.lo), vfmaq_f32(c.hi, a.hi, b.hi)}; }
// FMAX / FMIN propagate a NaN of either operand.
inline VF vmax(VF a, VF b) { return {vmaxq_f32(a.lo, b.lo), vmaxq_f32(a.hi, b.hi)}; }
inline VF vmin(VF a, VF b) { return {vminq_f32(a.lo, b.lo), vminq_f32(a.hi, b.hi)}; }
inline VF vmax0(VF a) { return vmax(vzero(), a); }
// The scalar table's order: ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)).
inline float vsum(VF a) {
  const float32x4_t s = vaddq_f32(a.lo, a.hi);
  const float32x2_t t = vadd_f32(vget_low_f32(s), vget_high_f32(s));
  return vget_lane_f32(t, 0) + vget_lane_f32(t, 1);
}
inline float vhmax(VF a) { return vmaxvq_f32(vmaxq_f32(a.lo, a.hi)); }
// kLanes int8 quants, or the low / high nibbles of kLanes bytes less 8 (Q4_0), as floats.
inline VF from_i16(int16x8_t v) {
  return {vcvtq_f32_s32(vmovl_s16(vget_low_s16(v))), vcvtq_f32_s32(vmovl_high_s16(v))};
}
inline VF vload_i8(const int8_t* p) { return from_i16(vmovl_s8(vld1_s8(p))); }
inline VF vload_q4lo(const uint8_t* p) {
  const uint8x8_t q = vand_u8(vld1_u8(p), vdup_n_u8(0x0f));
  return from_i16(vsubq_s16(vreinterpretq_s16_u16(vmovl_u8(q)), vdupq_n_s16(8)));
}
inline VF vload_q4hi(const uint8_t* p) {
  const uint8x8_t q = vshr_n_u8(vld1_u8(p), 4);
  return from_i16(vsubq_s16(vreinterpretq_s16_u16(vmovl_u8(q)), vdupq_n_s16(8)));
}
inline float vhalf(uint16_t h) {  // one f16 scale as a float
  __fp16 f;
  __builtin_memcpy(&f, &h, 2);
  return static_cast<float>(f);
}
inline VF vload_f16(const uint16_t* p) {
  const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(p));
  return {vcvt_f32_f16(vget_low_f16(h)), vcvt_high_f32_f16(h)};
}
inline VF vload_f16_n(const uint16_t* p, int n) {
  alignas(16) uint16_t tmp[8] = {};
  for (int i = 0; i < n; ++i) tmp[i] = p[i];
  return vload_f16(tmp);
}
// f32 -> f16 rounding to nearest even (FCVTN; NaN keeps its top payload bits, quiet bit set,
// as pi::f32_to_f16).
inline void vstore_f16(uint16_t* p, VF a) {
  vst1q_u16(p, vreinterpretq_u16_f16(vcvt_high_f16_f32(vcvt_f16_f32(a.lo), a.hi)));
}
inline void vstore_f16_n(uint16_t* p, VF a, int n) {
  alignas(16) uint16_t tmp[8];
  vstore_f16(tmp, a);
  for (int i = 0; i < n; ++i) p[i] = tmp[i];
}

// exp as in avx2_ops.cpp: x clamped to [-87.33, 88.73], k = round(x log2 e), r = x - k ln 2 in
// two parts, a degree-7 polynomial, times 2 * 2^(k-1); results below the normal range flushed
// to zero. NaN propagates.
inline float32x4_t vexp4(float32x4_t x) {
  const uint32x4_t tiny = vcltq_f32(x, vdupq_n_f32(-87.33f));
  x = vminq_f32(vdupq_n_f32(88.73f), x);
  x = vmaxq_f32(vdupq_n_f32(-87.33f), x);
  const float32x4_t k = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
  float32x4_t r = vfmsq_f32(x, k, vdupq_n_f32(0.693145751953125f));
  r = vfmsq_f32(r, k, vdupq_n_f32(1.4286068202862268e-06f));
  float32x4_t p = vdupq_n_f32(1.0f / 5040.0f);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 720.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 120.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 24.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 6.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(k), vdupq_n_s32(126)), 23);  // 2^(k-1)
  const float32x4_t res = vmulq_f32(vmulq_f32(p, vdupq_n_f32(2.0f)), vreinterpretq_f32_s32(e));
  return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(res), tiny));
}
inline VF vexp(VF a) { return {vexp4(a.lo), vexp4(a.hi)}; }

#include "kernels/cpu/ops_generic.inc"

}  // namespace
}  // namespace neon_isa

const KernelTable& neon_table() {
  using namespace neon_isa;
  static const KernelTable table = with_generic_ops({
      .isa = Isa::Neon,
      .act_bytes = neon_act_bytes,
      .prepare_act = neon_prepare_act,
      .dot = neon_dot,
      .axpy = neon_axpy,
      .r16_prepare = scalar_r16_prepare,
      .r16_dot = scalar_r16_dot,
  });
  return table;
}

}  // namespace pi::cpu::detail
