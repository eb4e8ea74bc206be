// AVX2 leaves of the Q4_0_R16, Q8_0_R16, MXFP4_R16 and Q4_K_R16 dense products (r16.h), for CPUs without AVX-512: each group's
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
#include "kernels/cpu/stream_ahead.h"

namespace pi::cpu::detail {
namespace {

constexpr int kTokens = 4;  // tokens per pass: 16 ymm registers hold 8 weight vectors + 4 sums

// The three 32-element R16 formats (r16.h).
enum class Fmt { Q4_0, Q8_0, Mxfp4 };

// Rows 8h .. 8h+7 of one group x NT tokens over blocks [0, nb): ys[i][0..7] = their results.
// Q8_0 (kQ8): the quants back to signed (q + 128 ^ 0x80), each 4-byte dot as vpmaddubsw of
// |q| with x signed by q (at most 2 x 127 x 127 per int16 pair) widened at once by vpmaddwd.
// MXFP4: codes looked up as value + 12 (vpshufb), at most 24, so that 8 vpmaddubsw summed in
// int16 could reach 8 x 2 x 24 x 128: the low and high nibbles' four each are summed apart
// (24576 at most) and widened separately.
// Rows 8h0 .. 8(h0 + NH) - 1 of one group (NH halves of 8 rows: 2 for one token, so that a
// one-token pass reads each 64-byte part once, its stream prefetched in two levels by `ahead`;
// else 1) x NT tokens.
template <int NT, int NH, Fmt kFmt>
inline void half_tile(const uint8_t* G, int h0, const uint8_t* const* acts, int64_t nb, float* const* ys,
                      StreamAhead* ahead) {
  constexpr bool kQ8 = kFmt == Fmt::Q8_0, kMx = kFmt == Fmt::Mxfp4;
  constexpr size_t kBlock = kQ8 ? kR16Q8BlockBytes : kMx ? kR16MxBlockBytes : kR16BlockBytes;
  constexpr size_t kQuants = kMx ? 16 : 32;  // where the parts start
  __m256 acc[NH][NT];
  for (auto& row : acc)
    for (auto& a : row) a = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  alignas(16) int8_t values[16];
  for (int c = 0; c < 16; ++c) values[c] = static_cast<int8_t>(kMxfp4Values[c] + 12);
  const __m256i table = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(values)));
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = G + b * kBlock;
    if (ahead != nullptr) ahead->upto(p + kBlock);
    for (int hh = 0; hh < NH; ++hh) {
      const int h = h0 + hh;
      __m256 ws;
      if constexpr (kMx) {
        // 2^(e - 128) as f32 bits (e - 1) << 23, e - 1 saturated at 0 (r16.h's mxfp4_r16_scale).
        const __m128i e = _mm_subs_epu8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * h)), _mm_set1_epi8(1));
        ws = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu8_epi32(e), 23));
      } else {
        ws = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
      }
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
          acc[hh][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(ws, _mm256_set1_ps(d)), acc[hh][i]);
        }
        continue;
      }
      __m256i lo[4], hi[4];
      for (int k = 0; k < 4; ++k) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kQuants + 64 * k + 32 * h));
        lo[k] = _mm256_and_si256(v, m4);
        hi[k] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if constexpr (kMx) {
          lo[k] = _mm256_shuffle_epi8(table, lo[k]);
          hi[k] = _mm256_shuffle_epi8(table, hi[k]);
        }
      }
      for (int i = 0; i < NT; ++i) {
        const uint8_t* a = acts[i] + b * kR16ActBytes;
        __m256i s16 = _mm256_maddubs_epi16(lo[0], _mm256_set1_epi32(load_i32(a)));
        for (int k = 1; k < 4; ++k)
          s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(lo[k], _mm256_set1_epi32(load_i32(a + 4 * k))));
        __m256i s32 = _mm256_setzero_si256();
        if constexpr (kMx) {
          s32 = _mm256_madd_epi16(s16, ones);
          s16 = _mm256_setzero_si256();
        }
        for (int k = 0; k < 4; ++k)
          s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(hi[k], _mm256_set1_epi32(load_i32(a + 16 + 4 * k))));
        s32 = _mm256_add_epi32(s32, _mm256_madd_epi16(s16, ones));
        const __m256i s = _mm256_add_epi32(s32, _mm256_set1_epi32(load_i32(a + 36)));
        float d;
        std::memcpy(&d, a + 32, 4);
        acc[hh][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(ws, _mm256_set1_ps(d)), acc[hh][i]);
      }
    }
  }
  for (int hh = 0; hh < NH; ++hh)
    for (int i = 0; i < NT; ++i) _mm256_storeu_ps(ys[i] + 8 * (h0 + hh), acc[hh][i]);
}

// Q4_K_R16 (r16.h): rows 8h0 .. 8(h0 + NH) - 1 of one group (NH halves of 8 rows: 2 for one
// token, so that a one-token pass reads each 64-byte part once, prefetched by `ahead`) x NT
// tokens. Per sub-block, 8 vpmaddubsw of 4 bytes per row summed in int16 (at most
// 8 x 2 x 15 x 128 = 30720), then one vpmaddwd with the row's scale in both halves: sc_j times the sub-block's sum in int32, exact.
// The mins go through the per-32 activation sums (vpmaddwd with (m_2k, m_2k+1) pairs).
template <int NT, int NH>
inline void tile_k(const uint8_t* G, int h0, const uint8_t* const* acts, int64_t nsb, float* const* ys,
                   StreamAhead* ahead) {
  __m256 acc[NH][NT];
  for (auto& row : acc)
    for (auto& a : row) a = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i m6 = _mm256_set1_epi32(0x3f3f3f3f), n4 = _mm256_set1_epi32(0x0f0f0f0f);
  const __m256i hi2 = _mm256_set1_epi32(0x30303030);
  const __m256i low_byte = _mm256_set1_epi32(0x000000ff), third_byte = _mm256_set1_epi32(0x00ff0000);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* p = G + sb * kR16KBlockBytes;
    if (ahead != nullptr) ahead->upto(p + kR16KBlockBytes);
    const auto load = [&](size_t at, int h) {
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + at + 32 * h));
    };
    __m256i sc_lo[NH], sc_hi[NH], m_lo[NH], m_hi[NH];
    for (int hh = 0; hh < NH; ++hh) {
      const __m256i a = load(64, h0 + hh), b = load(128, h0 + hh), c = load(192, h0 + hh);
      sc_lo[hh] = _mm256_and_si256(a, m6);
      sc_hi[hh] = _mm256_or_si256(_mm256_and_si256(c, n4), _mm256_and_si256(_mm256_srli_epi32(a, 2), hi2));
      m_lo[hh] = _mm256_and_si256(b, m6);
      m_hi[hh] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(c, 4), n4),
                                 _mm256_and_si256(_mm256_srli_epi32(b, 2), hi2));
    }
    __m256i isum[NH][NT];
    for (auto& row : isum)
      for (auto& v : row) v = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      __m256i s16[NH][NT];
      for (auto& row : s16)
        for (auto& v : row) v = _mm256_setzero_si256();
      for (int u = 0; u < 8; ++u) {
        for (int hh = 0; hh < NH; ++hh) {
          const __m256i v = load(256 + 64 * (8 * (j / 2) + u), h0 + hh);
          const __m256i z = _mm256_and_si256(j % 2 == 0 ? v : _mm256_srli_epi16(v, 4), m4);
          for (int i = 0; i < NT; ++i) {
            const uint8_t* x = acts[i] + sb * kR16KActBytes + 32 * j + 4 * u;
            s16[hh][i] = _mm256_add_epi16(s16[hh][i], _mm256_maddubs_epi16(z, _mm256_set1_epi32(load_i32(x))));
          }
        }
      }
      for (int hh = 0; hh < NH; ++hh) {
        // sc_j in both int16 halves of each lane.
        const __m256i sw = _mm256_and_si256(_mm256_srli_epi32(j < 4 ? sc_lo[hh] : sc_hi[hh], 8 * (j % 4)), low_byte);
        const __m256i scj = _mm256_or_si256(sw, _mm256_slli_epi32(sw, 16));
        for (int i = 0; i < NT; ++i) isum[hh][i] = _mm256_add_epi32(isum[hh][i], _mm256_madd_epi16(s16[hh][i], scj));
      }
    }
    const auto pair = [&](__m256i w) {
      return _mm256_or_si256(_mm256_and_si256(w, low_byte), _mm256_and_si256(_mm256_slli_epi32(w, 8), third_byte));
    };
    for (int hh = 0; hh < NH; ++hh) {
      const __m256i mp[4] = {pair(m_lo[hh]), pair(_mm256_srli_epi32(m_lo[hh], 16)), pair(m_hi[hh]),
                             pair(_mm256_srli_epi32(m_hi[hh], 16))};
      const int h = h0 + hh;
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
      const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32 + 16 * h)));
      for (int i = 0; i < NT; ++i) {
        const uint8_t* x = acts[i] + sb * kR16KActBytes;
        __m256i imin = _mm256_setzero_si256();
        for (int k = 0; k < 4; ++k)
          imin = _mm256_add_epi32(imin, _mm256_madd_epi16(mp[k], _mm256_set1_epi32(load_i32(x + 256 + 4 * k))));
        float dx;
        std::memcpy(&dx, x + 272, 4);
        const __m256 vdx = _mm256_set1_ps(dx);
        acc[hh][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[hh][i]), _mm256_mul_ps(d, vdx), acc[hh][i]);
        acc[hh][i] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_mul_ps(dmin, vdx), acc[hh][i]);
      }
    }
  }
  for (int hh = 0; hh < NH; ++hh)
    for (int i = 0; i < NT; ++i) _mm256_storeu_ps(ys[i] + 8 * (h0 + hh), acc[hh][i]);
}

// kK: Q4_K_R16 (super-blocks of 256), else Q4_0_R16 / Q8_0_R16 / MXFP4_R16 (blocks of 32).
template <Fmt kFmt, bool kK = false>
void r16_dot(const DotTask& t) {
  const int64_t nb = t.cols / (kK ? 256 : 32);
  const size_t group_bytes = static_cast<size_t>(kR16Rows) * t.row_bytes;
  StreamAhead ahead(t.W + static_cast<size_t>(t.k0 / kR16Rows) * group_bytes,
                    t.W + static_cast<size_t>(t.k1 / kR16Rows) * group_bytes);
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
      if (nt == 1) {  // both halves at once: each 64-byte part read in one pass
        if constexpr (kK) {
          tile_k<1, 2>(G, 0, acts, nb, ys, &ahead);
        } else {
          half_tile<1, 2, kFmt>(G, 0, acts, nb, ys, &ahead);
        }
        continue;
      }
      for (int h = 0; h < 2; ++h) {
        if constexpr (kK) {
          switch (nt) {
            case 4: tile_k<4, 1>(G, h, acts, nb, ys, nullptr); break;
            case 3: tile_k<3, 1>(G, h, acts, nb, ys, nullptr); break;
            default: tile_k<2, 1>(G, h, acts, nb, ys, nullptr); break;
          }
          continue;
        }
        switch (nt) {
          case 4: half_tile<4, 1, kFmt>(G, h, acts, nb, ys, nullptr); break;
          case 3: half_tile<3, 1, kFmt>(G, h, acts, nb, ys, nullptr); break;
          case 2: half_tile<2, 1, kFmt>(G, h, acts, nb, ys, nullptr); break;
          default: half_tile<1, 1, kFmt>(G, h, acts, nb, ys, nullptr); break;
        }
      }
    }
  }
}

}  // namespace

void avx2_r16_dot(const DotTask& t) {
  if (t.type == DType::Q4_K_R16) {
    r16_dot<Fmt::Q4_0, true>(t);
  } else if (t.type == DType::Q8_0_R16) {
    r16_dot<Fmt::Q8_0>(t);
  } else if (t.type == DType::MXFP4_R16) {
    r16_dot<Fmt::Mxfp4>(t);
  } else {
    r16_dot<Fmt::Q4_0>(t);
  }
}

}  // namespace pi::cpu::detail
