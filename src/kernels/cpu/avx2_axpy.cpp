// AVX2 axpy leaves: y[c0:c1] += sum_k coef_k * D[rows_k, c0:c1] for one column slice. As in
// avx512_axpy.cpp, one token takes rows eight at a time with y in registers for two blocks,
// adds the group's rows in list order and one correction per block (the minimum),
// so every y element sees the same operations whatever the slice boundaries.
// Compiled with -mavx2 -mfma -mf16c.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx2_blocks.h"
#include "kernels/cpu/avx2_leaves.h"
#include "kernels/cpu/q4_groups.h"
#include "kernels/cpu/scalar_leaves.h"

namespace pi::cpu::detail {
namespace {

// y[0:32] += c * (d * (q - offset) + mn) for one block; quants sign-extended from bytes.
template <class Dec>
inline void axpy_block(const uint8_t* p, float c, float* y) {
  __m256i z = Dec::quants(p);
  if constexpr (Dec::kOffset != 0) z = _mm256_sub_epi8(z, _mm256_set1_epi8(Dec::kOffset));
  const __m256 s = _mm256_set1_ps(c * Dec::d(p));
  const __m256 cm = _mm256_set1_ps(c * Dec::mn(p));
  const __m128i lo = _mm256_castsi256_si128(z), hi = _mm256_extracti128_si256(z, 1);
  const __m128i parts[4] = {lo, _mm_unpackhi_epi64(lo, lo), hi, _mm_unpackhi_epi64(hi, hi)};
  for (int q = 0; q < 4; ++q) {
    __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[q])), s, _mm256_loadu_ps(y + 8 * q));
    if constexpr (Dec::kMin) v = _mm256_add_ps(v, cm);
    _mm256_storeu_ps(y + 8 * q, v);
  }
}

// ---- one token: groups of rows, y in registers ------------------------------------------
constexpr int kGroup = 8;
constexpr int64_t kChunk = 128;  // blocks per scale table: 4096 columns

// Quants minus the offset (exact small integers) of one block as four vectors of 8 floats.
// Subtracting the offset here rather than in a per-block correction keeps the one-token sum
// identical to the many-token one (axpy_block) for the types without a minimum.
template <class Dec>
inline void raw_values(const uint8_t* p, __m256* w) {
  __m256i z = Dec::quants(p);
  if constexpr (Dec::kOffset != 0) z = _mm256_sub_epi8(z, _mm256_set1_epi8(Dec::kOffset));
  const __m128i lo = _mm256_castsi256_si128(z), hi = _mm256_extracti128_si256(z, 1);
  w[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
  w[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(lo, lo)));
  w[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
  w[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(hi, hi)));
}

// y[32 b .. 32 (b + NB)) += the group's rows (s * (q - offset) in row order), then, for the
// types with a minimum, each block's correction sum_r coef_r * mn_r.
template <class Dec, int NB>
inline void add_blocks(const uint8_t* const* rows, int g, const uint8_t* const* next, int gn,
                       const float (*sd)[kChunk], const float* corr, int64_t b, int64_t j, float* Y) {
  float* y = Y + 32 * b;
  __m256 acc[4 * NB];
  for (int i = 0; i < 4 * NB; ++i) acc[i] = _mm256_loadu_ps(y + 8 * i);
  const size_t off = static_cast<size_t>(b) * Dec::kBytes;
  for (int r = 0; r < gn; ++r)
    for (size_t p = 0; p < NB * Dec::kBytes; p += 64) prefetch(next[r] + off + p);
  for (int r = 0; r < g; ++r) {
    for (int i = 0; i < NB; ++i) {
      __m256 w[4];
      raw_values<Dec>(rows[r] + off + i * Dec::kBytes, w);
      const __m256 s = _mm256_broadcast_ss(&sd[r][j + i]);
      for (int q = 0; q < 4; ++q) acc[4 * i + q] = _mm256_fmadd_ps(w[q], s, acc[4 * i + q]);
    }
  }
  for (int i = 0; i < NB; ++i) {
    const __m256 c = _mm256_broadcast_ss(&corr[j + i]);
    for (int q = 0; q < 4; ++q) {
      if constexpr (Dec::kMin) acc[4 * i + q] = _mm256_add_ps(acc[4 * i + q], c);
      _mm256_storeu_ps(y + 32 * i + 8 * q, acc[4 * i + q]);
    }
  }
}

template <class Dec>
void axpy_blocks_one(const AxpyTask& t) {
  alignas(32) float sd[kGroup][kChunk];
  alignas(32) float corr[kChunk];
  const int64_t b0 = t.c0 / 32, b1 = t.c1 / 32;
  for (int64_t k0 = 0; k0 < t.n; k0 += kGroup) {
    const int g = static_cast<int>(t.n - k0 < kGroup ? t.n - k0 : kGroup);
    const uint8_t* rows[kGroup];
    const uint8_t* next[kGroup];
    for (int r = 0; r < g; ++r) rows[r] = t.D + static_cast<size_t>(t.rows[k0 + r]) * t.row_bytes;
    const int64_t kn = k0 + kGroup;
    const int gn = kn < t.n ? static_cast<int>(t.n - kn < kGroup ? t.n - kn : kGroup) : 0;
    for (int r = 0; r < gn; ++r) next[r] = t.D + static_cast<size_t>(t.rows[kn + r]) * t.row_bytes;
    for (int64_t cb0 = b0; cb0 < b1; cb0 += kChunk) {
      const int64_t cb1 = cb0 + kChunk < b1 ? cb0 + kChunk : b1;
      for (int64_t j = 0; j < cb1 - cb0; ++j) corr[j] = 0.0f;
      for (int r = 0; r < g; ++r) {
        const float c = t.coef[k0 + r];
        const uint8_t* blk = rows[r] + cb0 * Dec::kBytes;
        for (int64_t j = 0; j < cb1 - cb0; ++j, blk += Dec::kBytes) {
          const float s = c * Dec::d(blk);
          sd[r][j] = s;
          if constexpr (Dec::kMin) corr[j] += c * Dec::mn(blk);
        }
      }
      int64_t b = cb0;
      for (; b + 2 <= cb1; b += 2) add_blocks<Dec, 2>(rows, g, next, gn, sd, corr, b, b - cb0, t.Y);
      if (b < cb1) add_blocks<Dec, 1>(rows, g, next, 0, sd, corr, b, b - cb0, t.Y);
    }
  }
}

// ---- Q4_0: integer sums over groups of rows (q4_groups.h; the scalar leaf is the reference) ----

// Blocks b .. b + NB of y (j: b's index in the chunk's tables) += the group's integer sums:
// pmaddubsw of two rows' nibbles, interleaved byte by byte, against their two 8-bit
// coefficients, accumulated in wrapping int16 lanes that start at -8 sum_r k_rb, so they end
// at sum_r k_rb (q_rc - 8), which fits (q4_groups.h). The next rows' bytes of these blocks
// are prefetched meanwhile.
template <int NB>
inline void q4_blocks(const uint8_t* const* rows, int np, const int32_t (*kk)[kQ4Chunk],
                      const int32_t* k8, const float* s, int64_t b, int64_t j, float* y, const Q4Next& next) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  __m256i acc[2 * NB];
  for (int i = 0; i < NB; ++i) acc[2 * i] = acc[2 * i + 1] = _mm256_set1_epi16(static_cast<int16_t>(-k8[j + i]));
  const size_t off = static_cast<size_t>(b) * kQ4Bytes + 2;
  for (int r = 0; r < next.n; ++r) _mm_prefetch(reinterpret_cast<const char*>(next.rows[r] + off), _MM_HINT_T1);
  for (int p = 0; p < np; ++p) {
    for (int i = 0; i < NB; ++i) {
      const __m128i a = loadu128(rows[2 * p] + off + i * kQ4Bytes);
      const __m128i c = loadu128(rows[2 * p + 1] + off + i * kQ4Bytes);
      const __m256i pair = _mm256_setr_m128i(_mm_unpacklo_epi8(a, c), _mm_unpackhi_epi8(a, c));
      const __m256i kv = _mm256_set1_epi16(static_cast<int16_t>(kk[p][j + i]));
      acc[2 * i] = _mm256_add_epi16(acc[2 * i], _mm256_maddubs_epi16(_mm256_and_si256(pair, m4), kv));
      acc[2 * i + 1] = _mm256_add_epi16(
          acc[2 * i + 1], _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(pair, 4), m4), kv));
    }
  }
  for (int i = 0; i < NB; ++i) {
    const __m256 sv = _mm256_broadcast_ss(&s[j + i]);
    float* yb = y + 32 * (b + i);
    for (int h = 0; h < 2; ++h) {
      const __m256i x = acc[2 * i + h];
      const __m256i e[2] = {_mm256_cvtepi16_epi32(_mm256_castsi256_si128(x)),
                            _mm256_cvtepi16_epi32(_mm256_extracti128_si256(x, 1))};
      for (int q = 0; q < 2; ++q) {
        float* at = yb + 16 * h + 8 * q;
        _mm256_storeu_ps(at, _mm256_fmadd_ps(_mm256_cvtepi32_ps(e[q]), sv, _mm256_loadu_ps(at)));
      }
    }
  }
}

// v[r][j] = coef_r * d_r,(cb0 + j) for j < nb and every row of the group, 0 for nb <= j < nv;
// eight f16 scales at a time, gathered with scalar loads.
void q4_scale_table(const Q4Group& grp, int64_t cb0, int64_t nb, int64_t nv, float (*v)[kQ4Chunk]) {
  for (int r = 0; r < grp.g; ++r) {
    const float c = grp.coef[r];
    const uint8_t* blk = grp.rows[r] + cb0 * kQ4Bytes;
    const __m256 cv = _mm256_set1_ps(c);
    int64_t j = 0;
    for (; j + 8 <= nb; j += 8) {
      const uint8_t* p = blk + j * kQ4Bytes;
      const __m128i h = _mm_setr_epi16(
          static_cast<int16_t>(load_u16(p)), static_cast<int16_t>(load_u16(p + 18)),
          static_cast<int16_t>(load_u16(p + 36)), static_cast<int16_t>(load_u16(p + 54)),
          static_cast<int16_t>(load_u16(p + 72)), static_cast<int16_t>(load_u16(p + 90)),
          static_cast<int16_t>(load_u16(p + 108)), static_cast<int16_t>(load_u16(p + 126)));
      _mm256_store_ps(&v[r][j], _mm256_mul_ps(cv, _mm256_cvtph_ps(h)));
    }
    for (; j < nb; ++j) v[r][j] = c * _cvtsh_ss(load_u16(blk + j * kQ4Bytes));
    for (; j < nv; ++j) v[r][j] = 0.0f;
  }
}

void q4_group(const Q4Group& grp, int64_t b0, int64_t b1, float* y, const Q4Next& next) {
  alignas(32) float v[kQ4Window][kQ4Chunk];
  alignas(32) float s[kQ4Chunk];
  alignas(32) int32_t kk[kQ4Window / 2][kQ4Chunk];
  alignas(32) int32_t k8[kQ4Chunk];
  const int g = grp.g, np = (g + 1) / 2;
  const uint8_t* rows[kQ4Window];
  for (int r = 0; r < g; ++r) rows[r] = grp.rows[r];
  if (g % 2 != 0) rows[g] = rows[g - 1];  // a partner whose coefficient is 0
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t cb0 = b0; cb0 < b1; cb0 += kQ4Chunk) {
    const int64_t nb = b1 - cb0 < kQ4Chunk ? b1 - cb0 : kQ4Chunk;
    const int64_t nv = (nb + 7) / 8 * 8;
    q4_scale_table(grp, cb0, nb, nv, v);
    for (int64_t j = 0; j < nv; j += 8) {
      __m256 amax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
      for (int r = 0; r < g; ++r) {
        const __m256 a = _mm256_and_ps(_mm256_load_ps(&v[r][j]), abs_mask);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, _mm256_set1_ps(INFINITY), _CMP_NLT_UQ));
        amax = _mm256_max_ps(a, amax);  // a > amax ? a : amax, as the scalar leaf
      }
      const __m256 off = _mm256_or_ps(bad, _mm256_cmp_ps(amax, _mm256_set1_ps(FLT_MIN), _CMP_LT_OQ));
      const __m256 inv = _mm256_andnot_ps(off, _mm256_div_ps(_mm256_set1_ps(127.0f), amax));
      const __m256 sv = _mm256_or_ps(bad, _mm256_andnot_ps(off, _mm256_div_ps(amax, _mm256_set1_ps(127.0f))));
      _mm256_store_ps(&s[j], sv);
      const __m256i badi = _mm256_castps_si256(bad);
      __m256i ksum = _mm256_setzero_si256();
      for (int p = 0; p < np; ++p) {
        const __m256i k0 = _mm256_andnot_si256(badi, _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_load_ps(&v[2 * p][j]), inv)));
        const __m256i k1 = 2 * p + 1 < g ? _mm256_andnot_si256(badi, _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_load_ps(&v[2 * p + 1][j]), inv)))
                                         : _mm256_setzero_si256();
        ksum = _mm256_add_epi32(ksum, _mm256_add_epi32(k0, k1));
        _mm256_store_si256(reinterpret_cast<__m256i*>(&kk[p][j]),
                           _mm256_or_si256(_mm256_and_si256(k0, _mm256_set1_epi32(0xff)), _mm256_slli_epi32(k1, 8)));
      }
      _mm256_store_si256(reinterpret_cast<__m256i*>(&k8[j]), _mm256_slli_epi32(ksum, 3));
    }
    int64_t j = 0;
    for (; j + 2 <= nb; j += 2) q4_blocks<2>(rows, np, kk, k8, s, cb0 + j, j, y, next);
    if (j < nb) q4_blocks<1>(rows, np, kk, k8, s, cb0 + j, j, y, next);
  }
}

void axpy_q4_0(const AxpyTask& t) {
  for_each_q4_group(t, [&](const Q4Group& grp, float* y, const Q4Next& next) { q4_group(grp, t.c0 / 32, t.c1 / 32, y, next); });
}

// ---- several tokens: per row and block, decode once and add to every token ----------------
template <class Dec>
void axpy_blocks(const AxpyTask& t) {
  if (t.m == 1) return axpy_blocks_one<Dec>(t);
  const int64_t b0 = t.c0 / 32, b1 = t.c1 / 32;
  for (int64_t k = 0; k < t.n; ++k) {
    const uint8_t* row = t.D + static_cast<size_t>(t.rows[k]) * t.row_bytes;
    const uint8_t* next = k + 1 < t.n ? t.D + static_cast<size_t>(t.rows[k + 1]) * t.row_bytes : row;
    for (int64_t b = b0; b < b1; ++b) {
      if ((b - b0) % (64 / Dec::kBytes) == 0) prefetch(next + b * Dec::kBytes);
      for (int64_t i = 0; i < t.m; ++i) {
        const float c = t.coef[k * t.m + i];
        if (c != 0.0f) axpy_block<Dec>(row + b * Dec::kBytes, c, t.Y + i * t.ldy + 32 * b);
      }
    }
  }
}

template <DType T>
void axpy_floats(const AxpyTask& t) {
  constexpr int64_t kElem = T == DType::F32 ? 4 : 2;
  for (int64_t k = 0; k < t.n; ++k) {
    const uint8_t* row = t.D + static_cast<size_t>(t.rows[k]) * t.row_bytes;
    const uint8_t* next = k + 1 < t.n ? t.D + static_cast<size_t>(t.rows[k + 1]) * t.row_bytes : row;
    for (int64_t j = t.c0; j < t.c1; j += 64 / kElem) prefetch(next + j * kElem);
    for (int64_t i = 0; i < t.m; ++i) {
      const float c = t.coef[k * t.m + i];
      if (c == 0.0f) continue;
      const __m256 vc = _mm256_set1_ps(c);
      float* y = t.Y + i * t.ldy;
      int64_t j = t.c0;
      for (; j + 8 <= t.c1; j += 8)
        _mm256_storeu_ps(y + j, _mm256_fmadd_ps(load_w<T>(row, j), vc, _mm256_loadu_ps(y + j)));
      for (; j < t.c1; ++j) {
        float w;
        if constexpr (T == DType::F32) std::memcpy(&w, row + 4 * j, 4);
        if constexpr (T == DType::F16) w = _cvtsh_ss(load_u16(row + 2 * j));
        if constexpr (T == DType::BF16) w = bf16_to_float(load_u16(row + 2 * j));
        y[j] = __builtin_fmaf(w, c, y[j]);
      }
    }
  }
}

void axpy_q6k(const AxpyTask& t) {
  alignas(32) float w[256];
  for (int64_t k = 0; k < t.n; ++k) {
    const uint8_t* row = t.D + static_cast<size_t>(t.rows[k]) * t.row_bytes;
    for (int64_t s = t.c0 / 256; s < t.c1 / 256; ++s) {
      const uint8_t* b = row + s * 210;
      const float d = _cvtsh_ss(load_u16(b + 208));
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
      for (int j = 0; j < 8; ++j) {
        const __m256i z = _mm256_sub_epi8(q6_quants(b, j), _mm256_set1_epi8(32));
        for (int h = 0; h < 2; ++h) {
          const __m128i zz = h == 0 ? _mm256_castsi256_si128(z) : _mm256_extracti128_si256(z, 1);
          const __m256 s = _mm256_set1_ps(d * static_cast<float>(sc[2 * j + h]));
          _mm256_store_ps(w + 32 * j + 16 * h, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(zz))));
          _mm256_store_ps(w + 32 * j + 16 * h + 8,
                          _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(zz, zz)))));
        }
      }
      for (int64_t i = 0; i < t.m; ++i) {
        const float c = t.coef[k * t.m + i];
        if (c != 0.0f) add_scaled256(w, c, t.Y + i * t.ldy + 256 * s);
      }
    }
  }
}

}  // namespace

void avx2_axpy(const AxpyTask& t) {
  switch (t.type) {
    case DType::Q4_0: return axpy_q4_0(t);
    case DType::Q4_1: return axpy_blocks<BQ4_1>(t);
    case DType::Q5_0: return axpy_blocks<BQ5_0>(t);
    case DType::Q5_1: return axpy_blocks<BQ5_1>(t);
    case DType::Q8_0: return axpy_blocks<BQ8_0>(t);
    case DType::MXFP4: return axpy_blocks<BMXFP4>(t);
    case DType::Q6_K: return axpy_q6k(t);
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K: return avx2_kq_axpy(t);
    case DType::F32: return axpy_floats<DType::F32>(t);
    case DType::F16: return axpy_floats<DType::F16>(t);
    case DType::BF16: return axpy_floats<DType::BF16>(t);
    default: return scalar_axpy(t);
  }
}

}  // namespace pi::cpu::detail
