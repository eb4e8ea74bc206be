// AVX-512 small ops (ops_generic.inc over 16-lane vectors) and the AVX-512 kernel table.
// Compiled with AVX-512 flags; reached only through the table after a cpuid check.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/quant.h"

#include "kernels/cpu/avx512_leaves.h"
#include "kernels/cpu/r16.h"

namespace pi::cpu::detail {
namespace avx512_isa {
namespace {

constexpr int kLanes = 16;
using VF = __m512;

inline __mmask16 first_n(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
inline VF vzero() { return _mm512_setzero_ps(); }
inline VF vset1(float s) { return _mm512_set1_ps(s); }
inline VF vload(const float* p) { return _mm512_loadu_ps(p); }
inline VF vload_n(const float* p, int n) { return _mm512_maskz_loadu_ps(first_n(n), p); }
inline void vstore(float* p, VF a) { _mm512_storeu_ps(p, a); }
inline void vstore_n(float* p, VF a, int n) { _mm512_mask_storeu_ps(p, first_n(n), a); }
inline VF vmask_n(VF a, int n) { return _mm512_maskz_mov_ps(first_n(n), a); }
inline VF vadd(VF a, VF b) { return _mm512_add_ps(a, b); }
inline VF vsub(VF a, VF b) { return _mm512_sub_ps(a, b); }
inline VF vmul(VF a, VF b) { return _mm512_mul_ps(a, b); }
inline VF vdiv(VF a, VF b) { return _mm512_div_ps(a, b); }
inline VF vfma(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
// The x86 max returns its second operand when either is NaN: data goes second.
inline VF vmax(VF a, VF b) { return _mm512_max_ps(a, b); }
inline VF vmin(VF a, VF b) { return _mm512_min_ps(a, b); }
inline VF vmax0(VF a) { return _mm512_max_ps(_mm512_setzero_ps(), a); }
inline float vsum(VF a) { return _mm512_reduce_add_ps(a); }
inline float vhmax(VF a) { return _mm512_reduce_max_ps(a); }
// kLanes int8 quants, or the low / high nibbles of kLanes bytes less 8 (Q4_0), as floats.
inline VF vload_i8(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512i load_u8x16(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline VF vload_q4lo(const uint8_t* p) {
  const __m512i q = _mm512_and_si512(load_u8x16(p), _mm512_set1_epi32(0x0F));
  return _mm512_cvtepi32_ps(_mm512_sub_epi32(q, _mm512_set1_epi32(8)));
}
inline VF vload_q4hi(const uint8_t* p) {
  const __m512i q = _mm512_srli_epi32(load_u8x16(p), 4);
  return _mm512_cvtepi32_ps(_mm512_sub_epi32(q, _mm512_set1_epi32(8)));
}
inline float vhalf(uint16_t h) { return _cvtsh_ss(h); }  // one f16 scale as a float
inline VF vload_f16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline VF vload_f16_n(const uint16_t* p, int n) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first_n(n), p));
}
// f32 -> f16 rounding to nearest even (vcvtps2ph; NaN stays NaN with the quiet bit set).
inline void vstore_f16(uint16_t* p, VF a) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
inline void vstore_f16_n(uint16_t* p, VF a, int n) {
  _mm256_mask_storeu_epi16(p, first_n(n), _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// exp(x) = 2^k exp(r), k = round(x / ln 2), |r| <= ln2 / 2, exp(r) by its degree-7 Taylor
// polynomial (relative error < 3e-8); scalef applies 2^k with correct overflow to Inf and
// gradual underflow. NaN propagates (the clamps keep the data operand second).
inline VF vexp(VF x) {
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
  const VF k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  VF r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.4286068202862268e-06f), r);
  VF p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, k);
}

#include "kernels/cpu/ops_generic.inc"

}  // namespace
}  // namespace avx512_isa

const KernelTable& avx512_table() {
  using namespace avx512_isa;
  static const KernelTable table = with_generic_ops({
      .isa = Isa::Avx512,
      .act_bytes = avx512_act_bytes,
      .prepare_act = avx512_prepare_act,
      .dot = avx512_dot,
      .axpy = avx512_axpy,
      .r16_prepare = avx512_r16_prepare,
      .r16_dot = avx512_r16_dot,
  });
  return table;
}

}  // namespace pi::cpu::detail
