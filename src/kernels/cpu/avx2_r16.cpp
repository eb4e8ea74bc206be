// AVX2 leaves of the Q4_0_R16 dense products (r16.h), for CPUs without AVX-512: each group's
// 16 rows as two halves of 8 (one ymm lane per row), up to 4 tokens per pass over a block.
// Without VNNI the 4-byte dots are vpmaddubsw (pairs to int16; a block's 8 of them summed in
// int16, at most 8 x 2 x 15 x 127 = 30480) and one vpmaddwd to int32: the same exact integer
// sums as every other R16 leaf, then the same convert, multiply and FMA per lane, so the
// results are bit-identical to scalar_r16.cpp and avx512_r16.cpp. The activation is prepared
// by the portable scalar_r16_prepare (bit-identical by contract, a small part of the work).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/r16.h"

namespace pi::cpu::detail {
namespace {

constexpr int kTokens = 4;  // tokens per pass: 16 ymm registers hold 8 weight vectors + 4 sums

inline int32_t load_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Rows 8h .. 8h+7 of one group x NT tokens over blocks [0, nb): ys[i][0..7] = their results.
// Q8_0 (kQ8): the quants back to signed (q + 128 ^ 0x80), each 4-byte dot as vpmaddubsw of
// |q| with x signed by q (at most 2 x 127 x 127 per int16 pair) widened at once by vpmaddwd.
template <int NT, bool kQ8>
inline void half_tile(const uint8_t* G, int h, const uint8_t* const* acts, int64_t nb, float* const* ys) {
  constexpr size_t kBlock = kQ8 ? kR16Q8BlockBytes : kR16BlockBytes;
  __m256 acc[NT];
  for (int i = 0; i < NT; ++i) acc[i] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = G + b * kBlock;
    const __m256 ws = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
    if constexpr (kQ8) {
      __m256i q[8], aq[8];
      for (int k = 0; k < 8; ++k) {
        q[k] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 + 64 * k + 32 * h)),
                                _mm256_set1_epi8(static_cast<char>(0x80)));
        aq[k] = _mm256_abs_epi8(q[k]);
      }
      for (int i = 0; i < NT; ++i) {
        const uint8_t* a = acts[i] + b * kR16ActBytes;
        __m256i s = _mm256_setzero_si256();
        for (int k = 0; k < 8; ++k) {
          const __m256i x = _mm256_sign_epi8(_mm256_set1_epi32(load_i32(a + 4 * k)), q[k]);
          s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(aq[k], x), ones));
        }
        float d;
        std::memcpy(&d, a + 32, 4);
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(ws, _mm256_set1_ps(d)), acc[i]);
      }
      continue;
    }
    __m256i lo[4], hi[4];
    for (int k = 0; k < 4; ++k) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 + 64 * k + 32 * h));
      lo[k] = _mm256_and_si256(v, m4);
      hi[k] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
    for (int i = 0; i < NT; ++i) {
      const uint8_t* a = acts[i] + b * kR16ActBytes;
      __m256i s16 = _mm256_maddubs_epi16(lo[0], _mm256_set1_epi32(load_i32(a)));
      for (int k = 1; k < 4; ++k)
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(lo[k], _mm256_set1_epi32(load_i32(a + 4 * k))));
      for (int k = 0; k < 4; ++k)
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(hi[k], _mm256_set1_epi32(load_i32(a + 16 + 4 * k))));
      const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(s16, ones), _mm256_set1_epi32(load_i32(a + 36)));
      float d;
      std::memcpy(&d, a + 32, 4);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(ws, _mm256_set1_ps(d)), acc[i]);
    }
  }
  for (int i = 0; i < NT; ++i) _mm256_storeu_ps(ys[i] + 8 * h, acc[i]);
}

template <bool kQ8>
void r16_dot(const DotTask& t) {
  const int64_t nb = t.cols / 32;
  const size_t group_bytes = static_cast<size_t>(kR16Rows) * t.row_bytes;
  for (int64_t g = t.k0 / kR16Rows; g < t.k1 / kR16Rows; ++g) {
    const uint8_t* G = t.W + static_cast<size_t>(g) * group_bytes;
    for (int64_t i0 = 0; i0 < t.m; i0 += kTokens) {
      const int nt = static_cast<int>(t.m - i0 < kTokens ? t.m - i0 : kTokens);
      const uint8_t* acts[kTokens];
      float* ys[kTokens];
      for (int i = 0; i < nt; ++i) {
        acts[i] = t.act + (i0 + i) * t.act_stride;
        ys[i] = t.Y + (i0 + i) * t.ldy + g * kR16Rows;
      }
      for (int h = 0; h < 2; ++h) {
        switch (nt) {
          case 4: half_tile<4, kQ8>(G, h, acts, nb, ys); break;
          case 3: half_tile<3, kQ8>(G, h, acts, nb, ys); break;
          case 2: half_tile<2, kQ8>(G, h, acts, nb, ys); break;
          default: half_tile<1, kQ8>(G, h, acts, nb, ys); break;
        }
      }
    }
  }
}

}  // namespace

void avx2_r16_dot(const DotTask& t) {
  if (t.type == DType::Q4_K_R16) {
    scalar_r16_dot(t);  // no AVX2 leaf for it yet: cpu::dot_layout does not pick it here
  } else if (t.type == DType::Q8_0_R16) {
    r16_dot<true>(t);
  } else {
    r16_dot<false>(t);
  }
}

}  // namespace pi::cpu::detail
