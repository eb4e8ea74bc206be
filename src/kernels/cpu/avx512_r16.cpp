// AVX-512 VNNI leaves of the Q4_0_R16, Q8_0_R16 and MXFP4_R16 dense products (r16.h): a group of 16 rows x up to 8
// tokens per call, each decoded block (4 loads, 12 logic ops) shared by the tile's tokens and
// each token's activation broadcast 4 bytes at a time into vpdpbusd. Bit-identical to
// scalar_r16.cpp by construction (the same operations per lane, in the same order).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx512_quant.h"
#include "kernels/cpu/r16.h"
#include "kernels/cpu/stream_ahead.h"

namespace pi::cpu::detail {
namespace {

// The three 32-element R16 formats (r16.h).
enum class Fmt { Q4_0, Q8_0, Mxfp4 };

// One group of 16 rows x NT tokens over blocks [0, nb): ys[i][0..15] = the rows' results for
// token i. With kPrefetch (one token: memory-bound) the stream is prefetched ahead in two levels
// (stream_ahead.h), up to `end`.
template <int NT, bool kPrefetch, Fmt kFmt>
inline void group_tile(const uint8_t* G, const uint8_t* const* acts, int64_t nb, float* const* ys,
                       const uint8_t* end) {
  constexpr bool kQ8 = kFmt == Fmt::Q8_0;
  constexpr size_t kBlock = kQ8 ? kR16Q8BlockBytes : kFmt == Fmt::Mxfp4 ? kR16MxBlockBytes : kR16BlockBytes;
  constexpr size_t kQuants = kFmt == Fmt::Mxfp4 ? 16 : 32;  // where the parts start
  __m512 acc[NT];
  for (int i = 0; i < NT; ++i) acc[i] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  // MXFP4: value + 12 of each code, the 16 values four times (vpermb reads 6 index bits).
  alignas(16) int8_t values[16];
  for (int c = 0; c < 16; ++c) values[c] = static_cast<int8_t>(kMxfp4Values[c] + 12);
  const __m512i table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(values)));
  StreamAhead ahead(G, end);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = G + b * kBlock;
    if constexpr (kPrefetch) ahead.upto(p + kBlock);
    __m512 ws;
    if constexpr (kFmt == Fmt::Mxfp4) {
      // 2^(e - 128) as f32 bits (e - 1) << 23, e - 1 saturated at 0 (r16.h's mxfp4_r16_scale).
      const __m128i e = _mm_subs_epu8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), _mm_set1_epi8(1));
      ws = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu8_epi32(e), 23));
    } else {
      ws = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
    // Q4_0 and MXFP4: the parts' low and high nibbles (MXFP4's looked up); Q8_0: the 8 parts.
    __m512i w[8];
    if constexpr (kQ8) {
      for (int k = 0; k < 8; ++k) w[k] = _mm512_loadu_si512(p + kQuants + 64 * k);
    } else if constexpr (kFmt == Fmt::Mxfp4) {
      for (int k = 0; k < 4; ++k) {
        const __m512i v = _mm512_loadu_si512(p + kQuants + 64 * k);
        w[k] = _mm512_permutexvar_epi8(v, table);
        w[4 + k] = _mm512_permutexvar_epi8(_mm512_srli_epi16(v, 4), table);
      }
    } else {
      for (int k = 0; k < 4; ++k) {
        const __m512i v = _mm512_loadu_si512(p + kQuants + 64 * k);
        w[k] = _mm512_and_si512(v, m4);
        w[4 + k] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      }
    }
    for (int i = 0; i < NT; ++i) {
      const uint8_t* a = acts[i] + b * kR16ActBytes;
      __m512i s = _mm512_set1_epi32(kQ8 ? 16 * load_i32(a + 36) : load_i32(a + 36));
      // Part k pairs with activation bytes 4k .. 4k+3 (the high nibbles, parts 4-7, with
      // bytes 16 + 4(k - 4): the same offsets).
      for (int k = 0; k < 8; ++k) s = _mm512_dpbusd_epi32(s, w[k], _mm512_set1_epi32(load_i32(a + 4 * k)));
      float d;
      std::memcpy(&d, a + 32, 4);
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(ws, _mm512_set1_ps(d)), acc[i]);
    }
  }
  for (int i = 0; i < NT; ++i) _mm512_storeu_ps(ys[i], acc[i]);
}

template <Fmt kFmt>
void r16_dot(const DotTask& t) {
  const int64_t nb = t.cols / 32;
  r16_walk<kR16TokenTile>(t, [&](auto nt, const uint8_t* G, const uint8_t* const* acts, float* const* ys,
                                 const uint8_t* end) {
    constexpr int NT = decltype(nt)::value;
    group_tile<NT, NT == 1, kFmt>(G, acts, nb, ys, end);
  });
}

// Sum of 32 int8 quants.
inline int32_t sum32(__m256i v) {
  const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), v);
  const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
  const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
  const __m128i h2 = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtsi128_si32(_mm_add_epi32(h2, _mm_shuffle_epi32(h2, _MM_SHUFFLE(2, 3, 0, 1))));
}

// One Q4_K_R16 super-block's activation (r16.h), as scalar_r16.cpp's prepare_k.
void prepare_k(const float* x, uint8_t* a) {
  __m512 amax = _mm512_setzero_ps();
  __mmask16 nan = 0;
  for (int k = 0; k < 16; ++k) {
    const __m512 v = _mm512_loadu_ps(x + 16 * k);
    amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  }
  const float am = _mm512_reduce_max_ps(amax);
  const float d = nan != 0 ? __builtin_nanf("") : am / 127.0f;
  const float id = am > 0.0f && am <= 3.4e38f ? 127.0f / am : 0.0f;
  for (int j = 0; j < 8; ++j) {
    auto* q = reinterpret_cast<int8_t*>(a + 32 * j);
    quantize32_with(x + 32 * j, id, q);
    const auto s16 = static_cast<int16_t>(sum32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q))));
    std::memcpy(a + 256 + 2 * j, &s16, 2);
  }
  std::memcpy(a + 272, &d, 4);
  std::memset(a + 276, 0, kR16KActBytes - 276);
}

void prepare_32(const float* x, int64_t cols, int32_t offset, uint8_t* out) {
  for (int64_t b = 0; b < cols / 32; ++b) {
    uint8_t* a = out + b * kR16ActBytes;
    alignas(64) int8_t q[32];
    const float d = quantize32(x + 32 * b, q);
    const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(q));
    const int32_t off = -offset * sum32(v);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(a), v);
    std::memcpy(a + 32, &d, 4);
    std::memcpy(a + 36, &off, 4);
  }
}

}  // namespace

void avx512_r16_prepare(DType t, const float* x, int64_t cols, uint8_t* out) {
  if (t == DType::Q4_K_R16) {
    for (int64_t s = 0; s < cols / 256; ++s) prepare_k(x + 256 * s, out + s * kR16KActBytes);
  } else {
    prepare_32(x, cols, r16_act_offset(t), out);
  }
}

void avx512_r16_dot(const DotTask& t) {
  if (t.type == DType::Q4_K_R16) {
    avx512_r16k_dot(t);
  } else if (t.type == DType::Q8_0_R16) {
    r16_dot<Fmt::Q8_0>(t);
  } else if (t.type == DType::MXFP4_R16) {
    r16_dot<Fmt::Mxfp4>(t);
  } else {
    r16_dot<Fmt::Q4_0>(t);
  }
}

}  // namespace pi::cpu::detail
