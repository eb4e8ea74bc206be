// Internal to the K-quant leaves (avx2_kquant.cpp, avx512_kquant.cpp): 256-bit decoding of
// the Q2_K..Q6_K super-blocks, the prepared activation, and the generic integer dot and
// float axpy built on them. Everything has internal linkage and is compiled with the flags
// of the including file (AVX2 + FMA + F16C at least; with AVX512-VNNI the dot uses vpdpwssd).
//
// Prepared activation: per 256-element super-block one kKSlot-byte slot: 256 int8 quants
// q = round(x / dx) (round to nearest even, dx = amax / 127 over the super-block; NaN when the
// super-block holds a NaN), in the group order the caller asks for (groups of 32 elements,
// natural order unless stated), then 16 int16 sums of the quants of elements 16 j .. 16 j + 15
// (natural order) at byte 256, then f32 dx at byte 288.
//
// A decoded weight super-block: for each 32-element group g, 32 unsigned quants z (natural
// order within the group); per 16-element sub-block j a signed scale sc[j] and a correction
// weight corr[j] (both fit in int8); and two f32 factors, so that element e decodes to
// d * sc[e / 16] * z[e] + dc * corr[e / 16]. Then
//   W . x = dx * (d * sum_j sc[j] (sum_{e in j} z[e] q[e]) + dc * sum_j corr[j] bsum[j]),
// both sums exact in int32 (|z q| pairs fit int16 for z < 64).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/avx2_blocks.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/scalar_blocks.h"
#include "kernels/cpu/stream_ahead.h"

namespace pi::cpu::detail {
namespace {

constexpr size_t kKSlot = 320;
constexpr size_t kKSums = 256, kKScale = 288;

inline size_t kq_bytes(DType t) { return row_bytes(t, 256); }
// The same, known at compile time (Q2_K..Q6_K).
constexpr size_t kq_bytes_of(DType t) {
  return t == DType::Q2_K ? 84 : t == DType::Q3_K ? 110 : t == DType::Q4_K ? 144 : t == DType::Q5_K ? 176 : 210;
}

// ---- activation ----------------------------------------------------------------------------
// Quantizes the super-block x[0..256) into slot; slot group i holds x's group order[i].
inline void kq_quantize(const float* x, uint8_t* slot, const int* order) {
  bool nan = false;
  const float am = amax_of(x, 256, &nan);
  const float d = nan ? __builtin_nanf("") : am / 127.0f;
  const __m256 id = _mm256_set1_ps(am > 0.0f && am <= 3.4e38f ? 127.0f / am : 0.0f);
  int16_t sums[16];
  for (int i = 0; i < 8; ++i) {
    const __m256i b8 = quantize32_i8(x + 32 * order[i], id);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(slot + 32 * i), b8);
    alignas(32) int8_t qb[32];
    _mm256_store_si256(reinterpret_cast<__m256i*>(qb), b8);
    for (int h = 0; h < 2; ++h) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += qb[16 * h + j];
      sums[2 * order[i] + h] = static_cast<int16_t>(s);
    }
  }
  std::memcpy(slot + kKSums, sums, sizeof sums);
  std::memcpy(slot + kKScale, &d, 4);
}

inline void kq_prepare(const float* x, int64_t cols, uint8_t* out, const int* order) {
  for (int64_t s = 0; s < cols / 256; ++s) kq_quantize(x + 256 * s, out + s * kKSlot, order);
}

constexpr int kNaturalOrder[8] = {0, 1, 2, 3, 4, 5, 6, 7};

// ---- weight decoding -------------------------------------------------------------------------
struct KBlock {
  __m256i z[8];
  alignas(16) int8_t sc[16];
  alignas(16) int8_t corr[16];
  float d, dc;
};

// Q4_K/Q5_K 6-bit scales and mins (tensor/quant_kquants.cpp): sc[0..7] and m[0..7] as bytes.
inline void kq_scales_k4(const uint8_t* s, uint64_t& sc, uint64_t& m) {
  const uint32_t a = load_u32(s), b = load_u32(s + 4), c = load_u32(s + 8);
  const uint32_t sc_lo = a & 0x3f3f3f3fu, m_lo = b & 0x3f3f3f3fu;
  const uint32_t sc_hi = (c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u);
  const uint32_t m_hi = ((c >> 4) & 0x0f0f0f0fu) | ((b >> 2) & 0x30303030u);
  sc = sc_lo | (uint64_t{sc_hi} << 32);
  m = m_lo | (uint64_t{m_hi} << 32);
}

// Each of 8 bytes twice: the per-32 values of Q4_K/Q5_K as per-16 ones.
inline void kq_double(uint64_t v, int8_t* out) {
  const __m128i b = _mm_cvtsi64_si128(static_cast<long long>(v));
  _mm_store_si128(reinterpret_cast<__m128i*>(out), _mm_unpacklo_epi8(b, b));
}

inline __m256i kq_nibbles_lo(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0f)); }
inline __m256i kq_nibbles_hi(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f)); }
// Bytes of v with bit `bit` set -> `value`, else 0.
inline __m256i kq_bit(__m256i v, int bit, char value) {
  const __m256i m = _mm256_set1_epi8(static_cast<char>(1u << bit));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, m), m), _mm256_set1_epi8(value));
}

// Q4_K/Q5_K: d, dmin and the scales and mins, the first 16 bytes of both layouts.
inline void kq_header_k4(const uint8_t* b, KBlock& k) {
  k.d = _cvtsh_ss(load_u16(b));
  k.dc = -_cvtsh_ss(load_u16(b + 2));
  uint64_t sc, m;
  kq_scales_k4(b + 4, sc, m);
  kq_double(sc, k.sc);
  kq_double(m, k.corr);
}

inline void kq_decode_q4k(const uint8_t* b, KBlock& k) {
  kq_header_k4(b, k);
  for (int c = 0; c < 4; ++c) {
    const __m256i v = loadu256(b + 16 + 32 * c);
    k.z[2 * c] = kq_nibbles_lo(v);
    k.z[2 * c + 1] = kq_nibbles_hi(v);
  }
}

inline void kq_decode_q5k(const uint8_t* b, KBlock& k) {
  kq_header_k4(b, k);
  const __m256i qh = loadu256(b + 16);
  for (int c = 0; c < 4; ++c) {
    const __m256i v = loadu256(b + 48 + 32 * c);
    k.z[2 * c] = _mm256_or_si256(kq_nibbles_lo(v), kq_bit(qh, 2 * c, 16));
    k.z[2 * c + 1] = _mm256_or_si256(kq_nibbles_hi(v), kq_bit(qh, 2 * c + 1, 16));
  }
}

inline void kq_decode_q2k(const uint8_t* b, KBlock& k) {
  k.d = _cvtsh_ss(load_u16(b + 80));
  k.dc = -_cvtsh_ss(load_u16(b + 82));
  const __m128i s = loadu128(b);
  _mm_store_si128(reinterpret_cast<__m128i*>(k.sc), _mm_and_si128(s, _mm_set1_epi8(0x0f)));
  _mm_store_si128(reinterpret_cast<__m128i*>(k.corr), _mm_and_si128(_mm_srli_epi16(s, 4), _mm_set1_epi8(0x0f)));
  for (int n = 0; n < 2; ++n) {
    const __m256i v = loadu256(b + 16 + 32 * n);
    for (int j = 0; j < 4; ++j)
      k.z[4 * n + j] = _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * j)), _mm256_set1_epi8(3));
  }
}

// Q3_K: z = q + 4 (0..7); x = d s (z - 4), so dc = -4 d and corr = s.
inline void kq_decode_q3k(const uint8_t* b, KBlock& k) {
  const float d = _cvtsh_ss(load_u16(b + 108));
  k.d = d;
  k.dc = -4.0f * d;
  // Scale i: low nibble of byte i (i < 8) or high nibble of byte i - 8; bits 4-5 from byte
  // 8 + i % 4 at bit 2 (i / 4) (tensor/quant_kquants.cpp).
  const uint8_t* s = b + 96;
  const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s));
  const __m128i m4 = _mm_set1_epi8(0x0f);
  const __m128i low = _mm_unpacklo_epi64(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
  const __m128i high = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(load_u32(s + 8))),
                                                    _mm_setr_epi32(0, 2, 4, 6)),
                                     _mm_set1_epi8(0x03));
  const __m128i sc = _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));
  _mm_store_si128(reinterpret_cast<__m128i*>(k.sc), sc);
  _mm_store_si128(reinterpret_cast<__m128i*>(k.corr), sc);
  const __m256i hm = loadu256(b);
  for (int n = 0; n < 2; ++n) {
    const __m256i v = loadu256(b + 32 + 32 * n);
    for (int j = 0; j < 4; ++j) {
      const int g = 4 * n + j;
      const __m256i low = _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * j)), _mm256_set1_epi8(3));
      k.z[g] = _mm256_or_si256(low, kq_bit(hm, g, 4));
    }
  }
}

// Q6_K: x = d s (q - 32) with q in 0..63 and signed 8-bit scales per 16 elements, so
// dc = -32 d and the correction weights are the scales themselves.
inline void kq_decode_q6k(const uint8_t* b, KBlock& k) {
  k.d = _cvtsh_ss(load_u16(b + 208));
  k.dc = -32.0f * k.d;
  const __m128i s = loadu128(b + 192);
  _mm_store_si128(reinterpret_cast<__m128i*>(k.sc), s);
  _mm_store_si128(reinterpret_cast<__m128i*>(k.corr), s);
  for (int g = 0; g < 8; ++g) k.z[g] = q6_quants(b, g);
}

// The decoder of type T, chosen at compile time (the dot's row loop inlines it).
template <DType T>
inline void kq_decode_as(const uint8_t* b, KBlock& k) {
  if constexpr (T == DType::Q2_K) kq_decode_q2k(b, k);
  else if constexpr (T == DType::Q3_K) kq_decode_q3k(b, k);
  else if constexpr (T == DType::Q4_K) kq_decode_q4k(b, k);
  else if constexpr (T == DType::Q5_K) kq_decode_q5k(b, k);
  else kq_decode_q6k(b, k);
}

inline void kq_decode(DType t, const uint8_t* b, KBlock& k) {
  switch (t) {
    case DType::Q2_K: return kq_decode_as<DType::Q2_K>(b, k);
    case DType::Q3_K: return kq_decode_as<DType::Q3_K>(b, k);
    case DType::Q4_K: return kq_decode_as<DType::Q4_K>(b, k);
    case DType::Q5_K: return kq_decode_as<DType::Q5_K>(b, k);
    default: return kq_decode_as<DType::Q6_K>(b, k);
  }
}

// ---- generic dot: one decoded super-block against NT prepared activations --------------------
// acc[i] += dx_i * (d * isum + dc * csum) as two FMAs on 8 lanes.
template <int NT>
inline void kq_dot_block(const KBlock& k, const uint8_t* const* acts, size_t off, __m256* acc) {
  const __m256i c16 = _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(k.corr)));
  // Group g's scale vector: sc[2g] in the low 8 int16 lanes, sc[2g+1] in the high 8. The
  // scales as int16, even sub-blocks in the low 128 bits and odd ones in the high 128, give
  // each group's vector with one in-lane shuffle (element g of both halves).
  const __m128i eo = _mm_shuffle_epi8(_mm_load_si128(reinterpret_cast<const __m128i*>(k.sc)),
                                      _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
  const __m256i s16 = _mm256_cvtepi8_epi16(eo);
  __m256i scv[8];
  for (int g = 0; g < 8; ++g)
    scv[g] = _mm256_shuffle_epi8(s16, _mm256_set1_epi16(static_cast<short>(0x0100 * (2 * g + 1) + 2 * g)));
  for (int i = 0; i < NT; ++i) {
    const uint8_t* a = acts[i] + off;
    __m256i isum = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g) {
      const __m256i p = _mm256_maddubs_epi16(k.z[g], loadu256(a + 32 * g));
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
      isum = _mm256_dpwssd_epi32(isum, p, scv[g]);
#else
      isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, scv[g]));
#endif
    }
    const __m256i csum = _mm256_madd_epi16(loadu256(a + kKSums), c16);
    float dx;
    std::memcpy(&dx, a + kKScale, 4);
    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(k.d * dx), acc[i]);
    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(csum), _mm256_set1_ps(k.dc * dx), acc[i]);
  }
}

inline float kq_hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <bool kTwoLevel = false>
inline void kq_prefetch_row(const uint8_t* p, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64) prefetch_next<kTwoLevel>(p + o);
}

// One row x NT tokens over nsb super-blocks of type T; next: a row to prefetch meanwhile (or
// null). The type is a template parameter so that its decoder is inlined into the loop (a
// call per super-block passed the 256 quants through memory).
template <DType T, int NT, bool kTwoLevel = false>
inline void kq_dot_row_t(const uint8_t* row, const uint8_t* next, const uint8_t* const* acts, int64_t nsb,
                         float* out) {
  constexpr size_t bb = kq_bytes_of(T);
  __m256 acc[NT];
  for (int i = 0; i < NT; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    if (next != nullptr) kq_prefetch_row<kTwoLevel>(next + s * bb, bb);
    KBlock k;
    kq_decode_as<T>(row + s * bb, k);
    kq_dot_block<NT>(k, acts, static_cast<size_t>(s) * kKSlot, acc);
  }
  for (int i = 0; i < NT; ++i) out[i] = kq_hsum(acc[i]);
}

template <int NT, bool kTwoLevel = false>
inline void kq_dot_row(DType t, const uint8_t* row, const uint8_t* next, const uint8_t* const* acts,
                       int64_t nsb, float* out) {
  switch (t) {
    case DType::Q2_K: return kq_dot_row_t<DType::Q2_K, NT, kTwoLevel>(row, next, acts, nsb, out);
    case DType::Q3_K: return kq_dot_row_t<DType::Q3_K, NT, kTwoLevel>(row, next, acts, nsb, out);
    case DType::Q4_K: return kq_dot_row_t<DType::Q4_K, NT, kTwoLevel>(row, next, acts, nsb, out);
    case DType::Q5_K: return kq_dot_row_t<DType::Q5_K, NT, kTwoLevel>(row, next, acts, nsb, out);
    default: return kq_dot_row_t<DType::Q6_K, NT, kTwoLevel>(row, next, acts, nsb, out);
  }
}

// Rows of a DotTask (one row at a time: consecutive rows for one token as one stream prefetched
// in two levels, else the row about 6 KiB ahead prefetched; several tokens in groups of up to
// four). row_fn(nt, two, row, next, acts, out) computes one row for NT = nt (a
// std::integral_constant) tokens, prefetching `next` in two levels when `two` is std::true_type
// (stream_ahead.h's prefetch_next).
template <typename RowFn>
inline void kq_drive(const DotTask& t, RowFn row_fn) {
  // Q2_K and Q3_K are bound by their decoding on one core (50-65% of the read probe), and
  // the second level measured 15% slower for them (matvec 4096x4096, one thread).
  const bool compute_bound = t.type == DType::Q2_K || t.type == DType::Q3_K;
  if (t.m == 1 && t.masks == nullptr && t.idx == nullptr && !compute_bound) {
    // Consecutive rows, one token: one stream, prefetched in two levels (stream_ahead.h).
    stream_rows(t.W, t.row_bytes, t.k0, t.k1, [&](const uint8_t* row, const uint8_t* next, int64_t k) {
      float out;
      row_fn(std::integral_constant<int, 1>{}, std::true_type{}, row, next, &t.act, &out);
      t.Y[k] = out;
    });
    return;
  }
  const int64_t ahead = static_cast<int64_t>((6144 + t.row_bytes - 1) / t.row_bytes);
  auto row_of = [&](int64_t k) { return t.idx != nullptr ? t.idx[k] : k; };
  auto ptr = [&](int64_t k) { return t.W + static_cast<size_t>(row_of(k)) * t.row_bytes; };
  for (int64_t k = t.k0; k < t.k1; ++k) {
    const uint8_t* row = ptr(k);
    const uint8_t* next = k + ahead < t.k1 ? ptr(k + ahead) : nullptr;
    const int64_t r = row_of(k);
    if (t.m == 1 && t.masks == nullptr) {
      float out;
      row_fn(std::integral_constant<int, 1>{}, std::false_type{}, row, next, &t.act, &out);
      t.Y[r] = out;
      continue;
    }
    int sel[kMaxMaskTokens];
    const int n = select_tokens(t, k, sel);
    for (int g = 0; g < n; g += 4) {
      const int nt = n - g < 4 ? n - g : 4;
      const uint8_t* acts[4];
      for (int i = 0; i < nt; ++i) acts[i] = t.act + sel[g + i] * t.act_stride;
      float out[4];
      const uint8_t* pf = g == 0 ? next : nullptr;
      switch (nt) {
        case 4: row_fn(std::integral_constant<int, 4>{}, std::false_type{}, row, pf, acts, out); break;
        case 3: row_fn(std::integral_constant<int, 3>{}, std::false_type{}, row, pf, acts, out); break;
        case 2: row_fn(std::integral_constant<int, 2>{}, std::false_type{}, row, pf, acts, out); break;
        default: row_fn(std::integral_constant<int, 1>{}, std::false_type{}, row, pf, acts, out); break;
      }
      for (int i = 0; i < nt; ++i) t.Y[sel[g + i] * t.ldy + r] = out[i];
    }
  }
}

// ---- axpy: decode a super-block to 256 floats, then y += c * w per token --------------------
// w[e] = fma(z, d sc, dc corr) per 16-element sub-block.
inline void kq_decode_floats(DType t, const uint8_t* b, float* w) {
  KBlock k;
  kq_decode(t, b, k);
  for (int g = 0; g < 8; ++g) {
    const __m256i z = k.z[g];
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * g + h;
      const __m256 s = _mm256_set1_ps(k.d * static_cast<float>(k.sc[j]));
      const __m256 c = _mm256_set1_ps(k.dc * static_cast<float>(k.corr[j]));
      const __m128i zz = h == 0 ? _mm256_castsi256_si128(z) : _mm256_extracti128_si256(z, 1);
      _mm256_store_ps(w + 16 * j, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(zz)), s, c));
      _mm256_store_ps(w + 16 * j + 8,
                      _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(zz, zz))), s, c));
    }
  }
}

inline void kq_axpy(const AxpyTask& t) {
  const size_t bb = kq_bytes(t.type);
  alignas(32) float w[256];
  for (int64_t k = 0; k < t.n; ++k) {
    const uint8_t* row = t.D + static_cast<size_t>(t.rows[k]) * t.row_bytes;
    const uint8_t* next = k + 4 < t.n ? t.D + static_cast<size_t>(t.rows[k + 4]) * t.row_bytes : nullptr;
    for (int64_t s = t.c0 / 256; s < t.c1 / 256; ++s) {
      if (next != nullptr) kq_prefetch_row(next + s * bb, bb);
      kq_decode_floats(t.type, row + s * bb, w);
      for (int64_t i = 0; i < t.m; ++i) {
        const float c = t.coef[k * t.m + i];
        if (c != 0.0f) add_scaled256(w, c, t.Y + i * t.ldy + 256 * s);
      }
    }
  }
}

}  // namespace
}  // namespace pi::cpu::detail
