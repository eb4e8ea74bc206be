// AVX2 small ops (ops_generic.inc over 8-lane vectors) and the AVX2 kernel table.
// Compiled with -mavx2 -mfma -mf16c; reached only through the table after a cpuid check.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/quant.h"

#include "kernels/cpu/avx2_leaves.h"
#include "kernels/cpu/r16.h"

namespace pi::cpu::detail {
namespace avx2_isa {
namespace {

constexpr int kLanes = 8;
using VF = __m256;

inline __m256i first_n(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline VF vzero() { return _mm256_setzero_ps(); }
inline VF vset1(float s) { return _mm256_set1_ps(s); }
inline VF vload(const float* p) { return _mm256_loadu_ps(p); }
inline VF vload_n(const float* p, int n) { return _mm256_maskload_ps(p, first_n(n)); }
inline void vstore(float* p, VF a) { _mm256_storeu_ps(p, a); }
inline void vstore_n(float* p, VF a, int n) { _mm256_maskstore_ps(p, first_n(n), a); }
inline VF vmask_n(VF a, int n) { return _mm256_and_ps(a, _mm256_castsi256_ps(first_n(n))); }
inline VF vadd(VF a, VF b) { return _mm256_add_ps(a, b); }
inline VF vsub(VF a, VF b) { return _mm256_sub_ps(a, b); }
inline VF vmul(VF a, VF b) { return _mm256_mul_ps(a, b); }
inline VF vdiv(VF a, VF b) { return _mm256_div_ps(a, b); }
inline VF vfma(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
inline VF vmax(VF a, VF b) { return _mm256_max_ps(a, b); }
inline VF vmin(VF a, VF b) { return _mm256_min_ps(a, b); }
inline VF vmax0(VF a) { return _mm256_max_ps(_mm256_setzero_ps(), a); }
inline float vsum(VF a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float vhmax(VF a) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
// kLanes int8 quants, or the low / high nibbles of kLanes bytes less 8 (Q4_0), as floats.
inline VF vload_i8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256i load_u8x8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
inline VF vload_q4lo(const uint8_t* p) {
  const __m256i q = _mm256_and_si256(load_u8x8(p), _mm256_set1_epi32(0x0F));
  return _mm256_cvtepi32_ps(_mm256_sub_epi32(q, _mm256_set1_epi32(8)));
}
inline VF vload_q4hi(const uint8_t* p) {
  const __m256i q = _mm256_srli_epi32(load_u8x8(p), 4);
  return _mm256_cvtepi32_ps(_mm256_sub_epi32(q, _mm256_set1_epi32(8)));
}
inline float vhalf(uint16_t h) { return _cvtsh_ss(h); }  // one f16 scale as a float
inline VF vload_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline VF vload_f16_n(const uint16_t* p, int n) {
  alignas(16) uint16_t tmp[8] = {};
  for (int i = 0; i < n; ++i) tmp[i] = p[i];
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(tmp)));
}
// f32 -> f16 rounding to nearest even (vcvtps2ph; NaN stays NaN with the quiet bit set).
inline void vstore_f16(uint16_t* p, VF a) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
inline void vstore_f16_n(uint16_t* p, VF a, int n) {
  alignas(16) uint16_t tmp[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(tmp), _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (int i = 0; i < n; ++i) p[i] = tmp[i];
}

// exp as in avx512_ops.cpp; without scalef, 2^k is applied as 2 * 2^(k-1) so that k = 128
// (x just below the overflow threshold) stays representable, and results below the
// normal range are flushed to zero. NaN propagates.
inline VF vexp(VF x) {
  const VF tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33f), _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_set1_ps(88.73f), x);
  x = _mm256_max_ps(_mm256_set1_ps(-87.33f), x);
  const VF k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  VF r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.4286068202862268e-06f), r);
  VF p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(126)), 23);  // 2^(k-1)
  const VF res = _mm256_mul_ps(_mm256_mul_ps(p, _mm256_set1_ps(2.0f)), _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(tiny, res);
}

#include "kernels/cpu/ops_generic.inc"

}  // namespace
}  // namespace avx2_isa

const KernelTable& avx2_table() {
  using namespace avx2_isa;
  static const KernelTable table = with_generic_ops({
      .isa = Isa::Avx2,
      .act_bytes = avx2_act_bytes,
      .prepare_act = avx2_prepare_act,
      .dot = avx2_dot,
      .axpy = avx2_axpy,
      .r16_prepare = scalar_r16_prepare,
      .r16_dot = avx2_r16_dot,
  });
  return table;
}

}  // namespace pi::cpu::detail
