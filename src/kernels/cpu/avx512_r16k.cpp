// AVX-512 VNNI leaf of the Q4_K_R16 dense products (r16.h): a group of 16 rows x up to 8
// tokens per call. Per super-block the 16 rows' scales and mins are unpacked once (lane i is
// row 16g + i) and each 64-byte quant load (4 bytes of 16 rows: 4 elements of two sub-blocks)
// is split into nibbles once for every token of the tile; a token's activation is broadcast 4
// bytes at a time into vpdpbusd, each sub-block's sum scaled by its 6-bit scale in int32
// (vpmulld), the mins applied through the sub-block sums with vpdpwssd. Bit-identical to
// scalar_r16.cpp's dot_k (the same exact integers, then the same two fmas per super-block).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/r16.h"
#include "kernels/cpu/stream_ahead.h"

namespace pi::cpu::detail {
namespace {

// The scales of a super-block of 16 rows, lane i for row i: sc[j] (int32) and the mins as
// int16 pairs mp[k] = (m_2k, m_2k+1) for vpdpwssd.
struct Scales {
  __m512i sc_lo, sc_hi;  // bytes j (j < 4) and j - 4 (j >= 4) of each lane are sc_j
  __m512i mp[4];
};

inline Scales unpack(const uint8_t* p) {
  const __m512i a = _mm512_loadu_si512(p + 64), b = _mm512_loadu_si512(p + 128), c = _mm512_loadu_si512(p + 192);
  const __m512i m6 = _mm512_set1_epi32(0x3f3f3f3f), m4 = _mm512_set1_epi32(0x0f0f0f0f);
  const __m512i hi2 = _mm512_set1_epi32(0x30303030);
  Scales s;
  s.sc_lo = _mm512_and_si512(a, m6);
  s.sc_hi = _mm512_or_si512(_mm512_and_si512(c, m4), _mm512_and_si512(_mm512_srli_epi32(a, 2), hi2));
  const __m512i m_lo = _mm512_and_si512(b, m6);
  const __m512i m_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(c, 4), m4),
                                       _mm512_and_si512(_mm512_srli_epi32(b, 2), hi2));
  // Bytes (x0, x1, x2, x3) of a lane -> int16 pairs (x0, x1) and (x2, x3).
  const __m512i low_byte = _mm512_set1_epi32(0x000000ff), third_byte = _mm512_set1_epi32(0x00ff0000);
  const auto pair = [&](__m512i w) {
    return _mm512_or_si512(_mm512_and_si512(w, low_byte), _mm512_and_si512(_mm512_slli_epi32(w, 8), third_byte));
  };
  s.mp[0] = pair(m_lo);
  s.mp[1] = pair(_mm512_srli_epi32(m_lo, 16));
  s.mp[2] = pair(m_hi);
  s.mp[3] = pair(_mm512_srli_epi32(m_hi, 16));
  return s;
}

inline __m512i scale_of(const Scales& s, int j) {
  const __m512i w = j < 4 ? s.sc_lo : s.sc_hi;
  return _mm512_and_si512(_mm512_srli_epi32(w, 8 * (j % 4)), _mm512_set1_epi32(0xff));
}

template <int NT, bool kPrefetch>
inline void group_tile(const uint8_t* G, const uint8_t* const* acts, int64_t nsb, float* const* ys,
                       const uint8_t* end) {
  __m512 acc[NT];
  for (int i = 0; i < NT; ++i) acc[i] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  StreamAhead ahead(G, end);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* p = G + sb * kR16KBlockBytes;
    if constexpr (kPrefetch) ahead.upto(p + kR16KBlockBytes);
    const Scales sc = unpack(p);
    __m512i isum[NT];
    for (int i = 0; i < NT; ++i) isum[i] = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) {  // sub-blocks 2c (low nibbles) and 2c + 1 (high nibbles)
      __m512i v[8];
      for (int u = 0; u < 8; ++u) v[u] = _mm512_loadu_si512(p + 256 + 64 * (8 * c + u));
      for (int h = 0; h < 2; ++h) {
        const int j = 2 * c + h;
        __m512i z[8];
        for (int u = 0; u < 8; ++u) z[u] = _mm512_and_si512(h == 0 ? v[u] : _mm512_srli_epi16(v[u], 4), m4);
        const __m512i scj = scale_of(sc, j);
        for (int i = 0; i < NT; ++i) {
          const uint8_t* a = acts[i] + sb * kR16KActBytes + 32 * j;
          __m512i s = _mm512_setzero_si512();
          for (int u = 0; u < 8; ++u) s = _mm512_dpbusd_epi32(s, z[u], _mm512_set1_epi32(load_i32(a + 4 * u)));
          isum[i] = _mm512_add_epi32(isum[i], _mm512_mullo_epi32(s, scj));
        }
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));
    for (int i = 0; i < NT; ++i) {
      const uint8_t* a = acts[i] + sb * kR16KActBytes;
      __m512i imin = _mm512_setzero_si512();
      for (int k = 0; k < 4; ++k) imin = _mm512_dpwssd_epi32(imin, sc.mp[k], _mm512_set1_epi32(load_i32(a + 256 + 4 * k)));
      float dx;
      std::memcpy(&dx, a + 272, 4);
      const __m512 vdx = _mm512_set1_ps(dx);
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i]), _mm512_mul_ps(d, vdx), acc[i]);
      acc[i] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imin), _mm512_mul_ps(dmin, vdx), acc[i]);
    }
  }
  for (int i = 0; i < NT; ++i) _mm512_storeu_ps(ys[i], acc[i]);
}

}  // namespace

void avx512_r16k_dot(const DotTask& t) {
  const int64_t nsb = t.cols / 256;
  r16_walk<kR16TokenTile>(t, [&](auto nt, const uint8_t* G, const uint8_t* const* acts, float* const* ys,
                                 const uint8_t* end) {
    constexpr int NT = decltype(nt)::value;
    group_tile<NT, NT == 1>(G, acts, nsb, ys, end);
  });
}

}  // namespace pi::cpu::detail
