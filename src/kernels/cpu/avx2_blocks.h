// Internal to the AVX2 files (avx2_matrix.cpp, avx2_axpy.cpp): block decoders and loads.
// Everything has internal linkage (unnamed namespace) and is compiled with the AVX2 flags only
// by the files that include it.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/scalar_blocks.h"

namespace pi::cpu::detail {
namespace {

inline __m128i loadu128(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline __m256i loadu256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline void prefetch(const uint8_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }

// 16 packed nibbles -> 32 bytes [lo 16 | hi 16]: the 16 bytes loaded into both halves, the
// high half shifted right by 4 (bits from the next byte are masked off), one mask: two ALU
// operations instead of four (shift, two masks, insert).
inline __m256i nibbles(const uint8_t* qs) {
  const __m256i q = _mm256_broadcastsi128_si256(loadu128(qs));
  return _mm256_and_si256(_mm256_srlv_epi64(q, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0f));
}

// Bit j of qh -> byte j = 0x10.
inline __m256i fifth_bits(uint32_t qh) {
  const __m256i bytes = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(qh)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// Block decoders: quants() gives the 32 quants as bytes (unsigned 0..63 for offset types,
// signed for Q8_0), value = d * (q - kOffset) + mn.
struct BQ4_0 {
  static constexpr bool kHalfScale = true;  // d is an f16 at the block's first byte
  static constexpr size_t kBytes = 18;
  static constexpr int kOffset = 8;
  static constexpr bool kMin = false, kSigned = false;
  static __m256i quants(const uint8_t* p) { return nibbles(p + 2); }
  static float d(const uint8_t* p) { return _cvtsh_ss(load_u16(p)); }
  static float mn(const uint8_t*) { return 0.0f; }
};
struct BQ4_1 {
  static constexpr bool kHalfScale = true;  // d is an f16 at the block's first byte
  static constexpr size_t kBytes = 20;
  static constexpr int kOffset = 0;
  static constexpr bool kMin = true, kSigned = false;
  static __m256i quants(const uint8_t* p) { return nibbles(p + 4); }
  static float d(const uint8_t* p) { return _cvtsh_ss(load_u16(p)); }
  static float mn(const uint8_t* p) { return _cvtsh_ss(load_u16(p + 2)); }
};
struct BQ5_0 {
  static constexpr bool kHalfScale = true;  // d is an f16 at the block's first byte
  static constexpr size_t kBytes = 22;
  static constexpr int kOffset = 16;
  static constexpr bool kMin = false, kSigned = false;
  static __m256i quants(const uint8_t* p) { return _mm256_or_si256(nibbles(p + 6), fifth_bits(load_u32(p + 2))); }
  static float d(const uint8_t* p) { return _cvtsh_ss(load_u16(p)); }
  static float mn(const uint8_t*) { return 0.0f; }
};
struct BQ5_1 {
  static constexpr bool kHalfScale = true;  // d is an f16 at the block's first byte
  static constexpr size_t kBytes = 24;
  static constexpr int kOffset = 0;
  static constexpr bool kMin = true, kSigned = false;
  static __m256i quants(const uint8_t* p) { return _mm256_or_si256(nibbles(p + 8), fifth_bits(load_u32(p + 4))); }
  static float d(const uint8_t* p) { return _cvtsh_ss(load_u16(p)); }
  static float mn(const uint8_t* p) { return _cvtsh_ss(load_u16(p + 2)); }
};
struct BQ8_0 {
  static constexpr bool kHalfScale = true;  // d is an f16 at the block's first byte
  static constexpr size_t kBytes = 34;
  static constexpr int kOffset = 0;
  static constexpr bool kMin = false, kSigned = true;
  static __m256i quants(const uint8_t* p) { return loadu256(p + 2); }
  static float d(const uint8_t* p) { return _cvtsh_ss(load_u16(p)); }
  static float mn(const uint8_t*) { return 0.0f; }
};

// MXFP4: codes looked up as their doubled E2M1 value + 12 (unsigned), d = 2^(e - 128).
struct BMXFP4 {
  static constexpr bool kHalfScale = false;
  static constexpr size_t kBytes = 17;
  static constexpr int kOffset = 12;
  static constexpr bool kMin = false, kSigned = false;
  static __m256i quants(const uint8_t* p) {
    const __m256i table = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0, 12, 13, 14, 15,
                                           16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
    return _mm256_shuffle_epi8(table, nibbles(p + 1));
  }
  static float d(const uint8_t* p) { return e8m0_half(p[0]); }
  static float mn(const uint8_t*) { return 0.0f; }
};

// Quants of Q6_K super-block b, elements 32j .. 32j+31 (0..63 each).
inline __m256i q6_quants(const uint8_t* b, int j) {
  const int h = j / 4, g = j % 4;
  const __m256i ql = loadu256(b + 64 * h + 32 * (g & 1));
  const __m256i qh = loadu256(b + 128 + 32 * h);
  const __m256i lo = g < 2 ? _mm256_and_si256(ql, _mm256_set1_epi8(0x0f))
                           : _mm256_and_si256(_mm256_srli_epi16(ql, 4), _mm256_set1_epi8(0x0f));
  const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * g)), _mm256_set1_epi8(0x03));
  return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
}

// ---- activation quantization ----------------------------------------------------------------
// Largest magnitude of x[0..n) (n a multiple of 8) and whether any element is NaN.
inline float amax_of(const float* x, int n, bool* has_nan) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 amax = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v));
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  *has_nan = _mm256_movemask_ps(nan) != 0;
  return _mm_cvtss_f32(m4);
}

// round(x[j] * id) for 32 floats as int8 in order (nearest even, saturated to -127..127).
inline __m256i quantize32_i8(const float* x, __m256 id) {
  __m256i q[4];
  for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), id));
  // Pack 32 int32 -> 32 int8 in order (packs work within 128-bit lanes; fix with a permute).
  const __m256i w01 = _mm256_packs_epi32(q[0], q[1]), w23 = _mm256_packs_epi32(q[2], q[3]);
  const __m256i b8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w01, w23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  return _mm256_max_epi8(b8, _mm256_set1_epi8(-127));
}

// y[0..256) += c * w[0..256) (w 32-byte aligned), one FMA per element.
inline void add_scaled256(const float* w, float c, float* y) {
  const __m256 vc = _mm256_set1_ps(c);
  for (int j = 0; j < 256; j += 8) _mm256_storeu_ps(y + j, _mm256_fmadd_ps(_mm256_load_ps(w + j), vc, _mm256_loadu_ps(y + j)));
}

// ---- float rows --------------------------------------------------------------------------
template <DType T>
inline __m256 load_w(const uint8_t* row, int64_t j) {
  if constexpr (T == DType::F32) return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + j);
  if constexpr (T == DType::F16) return _mm256_cvtph_ps(loadu128(row + 2 * j));
  if constexpr (T == DType::BF16)
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(loadu128(row + 2 * j)), 16));
}
// Partial vector of n < 8 elements (rest zero).
template <DType T>
inline __m256 load_w_n(const uint8_t* row, int64_t j, int n) {
  alignas(32) uint8_t tmp[32] = {};
  const size_t e = T == DType::F32 ? 4 : 2;
  std::memcpy(tmp, row + e * j, e * n);
  return load_w<T>(tmp, 0);
}
inline __m256 load_x_n(const float* x, int n) {
  alignas(32) float tmp[8] = {};
  std::memcpy(tmp, x, 4 * n);
  return _mm256_load_ps(tmp);
}

}  // namespace
}  // namespace pi::cpu::detail
