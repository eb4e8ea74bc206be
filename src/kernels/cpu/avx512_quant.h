// Internal: the AVX-512 activation quantizer shared by the AVX-512 dot leaves
// (avx512_matrix.cpp, avx512_r16.cpp). Include only from files compiled with AVX-512 flags;
// internal linkage, so no flagged copy can be picked for another file.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace pi::cpu::detail {
namespace {

// 32 floats x[j] -> int8 round-to-nearest-even of x[j] * id, saturated (NaN -> -128).
inline void quantize32_with(const float* x, float id, int8_t* q) {
  const __m512 vid = _mm512_set1_ps(id);
  const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x), vid));
  const __m512i qb = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16), vid));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(qa));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtsepi32_epi8(qb));
}

// 32 floats -> 32 int8 with d = amax / 127 (NaN when the block holds a NaN, so that every
// product with it is NaN as in the reference; an Inf gives d = Inf and id = 0).
inline float quantize32(const float* x, int8_t* q) {
  const __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
  const __m512 amax_v = _mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b));
  const float amax = _mm512_reduce_max_ps(amax_v);
  const bool nan = (_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q)) != 0;
  const float d = nan ? __builtin_nanf("") : amax / 127.0f;
  const float id = amax > 0.0f && amax <= 3.4e38f ? 127.0f / amax : 0.0f;
  quantize32_with(x, id, q);
  return d;
}

}  // namespace
}  // namespace pi::cpu::detail
