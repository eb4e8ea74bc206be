// AVX-512 axpy leaves: y[c0:c1] += sum_k coef_k * D[rows_k, c0:c1] for one column slice.
// Rows are taken eight at a time: for each block of the slice, y is loaded once, the
// group's rows are added in list order, and y is stored, so every y element sees exactly
// the sequence y += c_0 w_0; y += c_1 w_1; ... whatever the slice boundaries (bit-identical
// results for any thread count). The next group's row slices are prefetched meanwhile.
#include <immintrin.h>

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/avx2_leaves.h"
#include "kernels/cpu/avx512_leaves.h"
#include "kernels/cpu/q4_groups.h"
#include "kernels/cpu/scalar_blocks.h"
#include "kernels/cpu/scalar_leaves.h"

namespace pi::cpu::detail {
namespace {

constexpr int kGroup = 8;

inline __m128i loadu128(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// Decoders of one 32-element block. values() gives two vectors w with q = kScale * w - kBias
// (q the raw quant); the block's value is d * (q - kOffset) + mn, with d at byte kD and mn at
// byte kM (both f16). Kernels add (coef * d * kScale) * w per row and fold the constant part
// -(kBias + kOffset) * coef * d + coef * mn into one correction per block and group of rows.
// The 4- and 5-bit quants become floats 1 + q / 2^bits by placing q in the top mantissa
// bits (integer ops only), which keeps the FP pipes for the FMAs.
inline __m512 mantissa(__m512i bits_in_place) {
  return _mm512_castsi512_ps(_mm512_or_si512(bits_in_place, _mm512_set1_epi32(0x3f800000)));
}

// (shifted & mask) | 1.0f in one vpternlogd whose destination is the temporary `shifted`.
inline __m512 mantissa_masked(__m512i shifted, __m512i mask) {
  return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(shifted, mask, _mm512_set1_epi32(0x3f800000), 0xea));
}

inline void nibble_values(const uint8_t* qs, __m512& w0, __m512& w1) {
  const __m512i v = _mm512_cvtepu8_epi32(loadu128(qs));
  const __m512i m = _mm512_set1_epi32(0x00780000);  // bits 19..22
  w0 = mantissa_masked(_mm512_slli_epi32(v, 19), m);
  w1 = mantissa_masked(_mm512_slli_epi32(v, 15), m);
}

struct AxQ4_1 {
  static constexpr size_t kBytes = 20, kD = 0, kM = 2;
  static constexpr bool kMin = true;
  static constexpr int kOffset = 0, kScale = 16, kBias = 16;
  static void values(const uint8_t* p, __m512& w0, __m512& w1) { nibble_values(p + 4, w0, w1); }
};

// 5-bit quants: nibble | fifth bit, as 1 + q / 32.
inline void five_bit_values(const uint8_t* qs, uint32_t qh, __m512& w0, __m512& w1) {
  const __m512i v = _mm512_cvtepu8_epi32(loadu128(qs));
  const __m512i m = _mm512_set1_epi32(0x003c0000);     // nibble at bits 18..21
  const __m512i fifth = _mm512_set1_epi32(0x00400000);  // bit 22
  const __m512i lo = _mm512_and_si512(_mm512_slli_epi32(v, 18), m);
  const __m512i hi = _mm512_and_si512(_mm512_slli_epi32(v, 14), m);
  w0 = mantissa(_mm512_mask_or_epi32(lo, static_cast<__mmask16>(qh & 0xffffu), lo, fifth));
  w1 = mantissa(_mm512_mask_or_epi32(hi, static_cast<__mmask16>(qh >> 16), hi, fifth));
}

struct AxQ5_0 {
  static constexpr size_t kBytes = 22, kD = 0, kM = 0;
  static constexpr bool kMin = false;
  static constexpr int kOffset = 16, kScale = 32, kBias = 32;
  static void values(const uint8_t* p, __m512& w0, __m512& w1) { five_bit_values(p + 6, load_u32(p + 2), w0, w1); }
};

struct AxQ5_1 {
  static constexpr size_t kBytes = 24, kD = 0, kM = 2;
  static constexpr bool kMin = true;
  static constexpr int kOffset = 0, kScale = 32, kBias = 32;
  static void values(const uint8_t* p, __m512& w0, __m512& w1) { five_bit_values(p + 8, load_u32(p + 4), w0, w1); }
};

struct AxQ8_0 {
  static constexpr size_t kBytes = 34, kD = 0, kM = 0;
  static constexpr bool kMin = false;
  static constexpr int kOffset = 0, kScale = 1, kBias = 0;
  static void values(const uint8_t* p, __m512& w0, __m512& w1) {
    w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(loadu128(p + 2)));
    w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(loadu128(p + 18)));
  }
};

inline void prefetch(const uint8_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }

// The f16 fields at byte `at` of blocks [0, n) (stride kBytes) times coef, converted 16 at
// a time; out has room for n rounded up to 16. (Scalar loads beat vpgatherdd by far on the
// CPUs measured.)
template <size_t kBytes>
inline void block_fields(const uint8_t* blocks, size_t at, int64_t n, float coef, float* out) {
  const __m512 c = _mm512_set1_ps(coef);
  for (int64_t i = 0; i < n; i += 16) {
    const uint8_t* p = blocks + at + i * kBytes;
    auto h = [p](int j) { return static_cast<short>(load_u16(p + j * kBytes)); };
    __m256i v;
    if (n - i >= 16) {
      // Built in registers: a staging array would stall on store forwarding.
      v = _mm256_setr_epi16(h(0), h(1), h(2), h(3), h(4), h(5), h(6), h(7), h(8), h(9), h(10), h(11), h(12),
                            h(13), h(14), h(15));
    } else {
      alignas(32) uint16_t tail[16] = {};
      for (int j = 0; j < n - i; ++j) tail[j] = load_u16(p + j * kBytes);
      v = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail));
    }
    _mm512_store_ps(out + i, _mm512_mul_ps(_mm512_cvtph_ps(v), c));
  }
}

// y[32 b .. 32 (b + NB)) += the group's rows at blocks b .. b+NB-1 (table column j), then the
// blocks' corrections. NB blocks per call give 2 NB independent accumulation chains, enough
// to hide the FMA latency of the g sequential row updates.
template <class Dec, int NB>
inline void add_blocks(const uint8_t* const* rows, int g, const uint8_t* const* next, int gn,
                       const float (*sd)[128], const float* corr, int64_t b, int64_t j, float* Y) {
  constexpr bool kCorr = Dec::kMin || Dec::kOffset + Dec::kBias != 0;
  float* y = Y + 32 * b;
  __m512 acc[2 * NB];
  for (int i = 0; i < 2 * NB; ++i) acc[i] = _mm512_loadu_ps(y + 16 * i);
  const size_t off = static_cast<size_t>(b) * Dec::kBytes;
  for (int r = 0; r < gn; ++r)
    for (size_t p = 0; p < NB * Dec::kBytes; p += 64) prefetch(next[r] + off + p);
  for (int r = 0; r < g; ++r) {
    for (int i = 0; i < NB; ++i) {
      __m512 w0, w1;
      Dec::values(rows[r] + off + i * Dec::kBytes, w0, w1);
      const __m512 s = _mm512_set1_ps(sd[r][j + i]);
      acc[2 * i] = _mm512_fmadd_ps(w0, s, acc[2 * i]);
      acc[2 * i + 1] = _mm512_fmadd_ps(w1, s, acc[2 * i + 1]);
    }
  }
  for (int i = 0; i < NB; ++i) {
    if constexpr (kCorr) {
      const __m512 c = _mm512_set1_ps(corr[j + i]);
      acc[2 * i] = _mm512_add_ps(acc[2 * i], c);
      acc[2 * i + 1] = _mm512_add_ps(acc[2 * i + 1], c);
    }
    _mm512_storeu_ps(y + 32 * i, acc[2 * i]);
    _mm512_storeu_ps(y + 32 * i + 16, acc[2 * i + 1]);
  }
}

// Block types, one token. Per group of eight rows and chunk of the slice: the rows' scaled
// block scales s = coef * d * kScale go to a table, and each block gets one correction
// sum_r (coef_r * mn_r - (kBias + kOffset) * coef_r * d_r). Then for every two blocks y is loaded once, the
// group's rows add s * q in order, the correction is added, and y is stored. The per-element
// sequence of operations depends only on the row list, never on the column slice.
template <class Dec>
void axpy_blocks_one(const AxpyTask& t) {
  constexpr int64_t kChunk = 128;  // blocks per chunk: 4096 columns
  constexpr int kStep = 4;         // blocks per add_blocks call
  constexpr bool kCorr = Dec::kMin || Dec::kOffset + Dec::kBias != 0;
  alignas(64) float sd[kGroup][kChunk];
  alignas(64) float sm[Dec::kMin ? kChunk : 16];
  alignas(64) float corr[kChunk];
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
      const int64_t nc = cb1 - cb0;
      for (int64_t j = 0; j < nc; j += 16) _mm512_store_ps(corr + j, _mm512_setzero_ps());
      for (int r = 0; r < g; ++r) {
        const uint8_t* blocks = rows[r] + cb0 * Dec::kBytes;
        block_fields<Dec::kBytes>(blocks, Dec::kD, nc, t.coef[k0 + r] * static_cast<float>(Dec::kScale), sd[r]);
        if constexpr (Dec::kMin) block_fields<Dec::kBytes>(blocks, Dec::kM, nc, t.coef[k0 + r], sm);
        if constexpr (kCorr) {
          // (kBias + kOffset) / kScale is exact: a small integer over a power of two.
          const __m512 k = _mm512_set1_ps(static_cast<float>(Dec::kBias + Dec::kOffset) / static_cast<float>(Dec::kScale));
          for (int64_t j = 0; j < nc; j += 16) {
            __m512 c = _mm512_load_ps(corr + j);
            if constexpr (Dec::kBias + Dec::kOffset != 0) c = _mm512_fnmadd_ps(k, _mm512_load_ps(sd[r] + j), c);
            if constexpr (Dec::kMin) c = _mm512_add_ps(c, _mm512_load_ps(sm + j));
            _mm512_store_ps(corr + j, c);
          }
        }
      }
      int64_t b = cb0;
      for (; b + kStep <= cb1; b += kStep) add_blocks<Dec, kStep>(rows, g, next, gn, sd, corr, b, b - cb0, t.Y);
      for (; b < cb1; ++b) add_blocks<Dec, 1>(rows, g, next, 0, sd, corr, b, b - cb0, t.Y);
    }
  }
}

// Block types, several tokens: each row block is decoded once and added to every token
// with a nonzero coefficient (y rows of the tokens stay in L1 across the group).
template <class Dec>
void axpy_blocks_many(const AxpyTask& t) {
  const int64_t b0 = t.c0 / 32, b1 = t.c1 / 32;
  for (int64_t k = 0; k < t.n; ++k) {
    const uint8_t* row = t.D + static_cast<size_t>(t.rows[k]) * t.row_bytes;
    const float* coef = t.coef + k * t.m;
    const uint8_t* next = k + 1 < t.n ? t.D + static_cast<size_t>(t.rows[k + 1]) * t.row_bytes : row;
    for (int64_t b = b0; b < b1; ++b) {
      const size_t off = static_cast<size_t>(b) * Dec::kBytes;
      if ((b - b0) % (64 / Dec::kBytes) == 0) prefetch(next + off);
      __m512 w0, w1;
      Dec::values(row + off, w0, w1);
      const float d = _cvtsh_ss(load_u16(row + off + Dec::kD));
      const float mn = Dec::kMin ? _cvtsh_ss(load_u16(row + off + Dec::kM)) : 0.0f;
      for (int64_t i = 0; i < t.m; ++i) {
        if (coef[i] == 0.0f) continue;
        float* y = t.Y + i * t.ldy + 32 * b;
        const float s = coef[i] * d;
        const __m512 vs = _mm512_set1_ps(s * static_cast<float>(Dec::kScale));
        __m512 y0 = _mm512_fmadd_ps(w0, vs, _mm512_loadu_ps(y));
        __m512 y1 = _mm512_fmadd_ps(w1, vs, _mm512_loadu_ps(y + 16));
        if constexpr (Dec::kMin || Dec::kOffset + Dec::kBias != 0) {
          const __m512 c = _mm512_set1_ps(coef[i] * mn - static_cast<float>(Dec::kOffset + Dec::kBias) * s);
          y0 = _mm512_add_ps(y0, c);
          y1 = _mm512_add_ps(y1, c);
        }
        _mm512_storeu_ps(y, y0);
        _mm512_storeu_ps(y + 16, y1);
      }
    }
  }
}

// ---- f32 / f16 / bf16 ------------------------------------------------------------------
template <DType T>
inline __m512 load_w(const uint8_t* row, int64_t j, __mmask16 k) {
  if constexpr (T == DType::F32) return _mm512_maskz_loadu_ps(k, reinterpret_cast<const float*>(row) + j);
  if constexpr (T == DType::F16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, row + 2 * j));
  if constexpr (T == DType::BF16)
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, row + 2 * j)), 16));
}

inline __mmask16 mask_upto(int64_t n) {
  if (n <= 0) return 0;
  return n >= 16 ? 0xffff : static_cast<__mmask16>((1u << n) - 1u);
}

template <DType T>
void axpy_float(const AxpyTask& t) {
  constexpr size_t kElem = T == DType::F32 ? 4 : 2;
  const bool to_l1 = static_cast<size_t>(kGroup) * static_cast<size_t>(t.c1 - t.c0) * kElem <= 16384;
  for (int64_t k0 = 0; k0 < t.n; k0 += kGroup) {
    const int g = static_cast<int>(t.n - k0 < kGroup ? t.n - k0 : kGroup);
    const int64_t kn = k0 + kGroup;
    const int gn = kn < t.n ? static_cast<int>(t.n - kn < kGroup ? t.n - kn : kGroup) : 0;
    for (int64_t j = t.c0; j < t.c1; j += 32) {
      const __mmask16 k_lo = mask_upto(t.c1 - j), k_hi = mask_upto(t.c1 - j - 16);
      // The group's slices of big rows exceed L1: the next group goes to L2 (T1) then.
      for (int r = 0; r < gn; ++r) {
        const uint8_t* p = t.D + static_cast<size_t>(t.rows[kn + r]) * t.row_bytes + j * kElem;
        for (size_t o = 0; o < 32 * kElem; o += 64) {
          if (to_l1) {
            prefetch(p + o);
          } else {
            _mm_prefetch(reinterpret_cast<const char*>(p + o), _MM_HINT_T1);
          }
        }
      }
      for (int64_t i = 0; i < t.m; ++i) {
        float* y = t.Y + i * t.ldy + j;
        __m512 y0 = _mm512_maskz_loadu_ps(k_lo, y), y1 = _mm512_maskz_loadu_ps(k_hi, y + 16);
        for (int r = 0; r < g; ++r) {
          const float c = t.coef[(k0 + r) * t.m + i];
          if (c == 0.0f) continue;
          const uint8_t* row = t.D + static_cast<size_t>(t.rows[k0 + r]) * t.row_bytes;
          const __m512 s = _mm512_set1_ps(c);
          y0 = _mm512_fmadd_ps(load_w<T>(row, j, k_lo), s, y0);
          y1 = _mm512_fmadd_ps(load_w<T>(row, j + 16, k_hi), s, y1);
        }
        _mm512_mask_storeu_ps(y, k_lo, y0);
        _mm512_mask_storeu_ps(y + 16, k_hi, y1);
      }
    }
  }
}

// ---- Q6_K: decode a super-block to 256 floats, then add -----------------------------------
void decode_q6k(const uint8_t* b, float* out) {
  const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(0x03);
  const float d = _cvtsh_ss(load_u16(b + 208));
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  alignas(64) uint8_t q[256];
  for (int h = 0; h < 2; ++h) {
    const __m512i ql = _mm512_loadu_si512(b + 64 * h);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h));
    const __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
    const __m512i h0 = _mm512_slli_epi16(_mm512_and_si512(hh, m2), 4);
    const __m512i h1 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hh, 4), m2), 4);
    _mm512_store_si512(q + 128 * h, _mm512_or_si512(_mm512_and_si512(ql, m4), h0));
    _mm512_store_si512(q + 128 * h + 64, _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), h1));
  }
  const __m512i off = _mm512_set1_epi32(32);
  for (int s = 0; s < 16; ++s) {
    const __m512i v = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(q + 16 * s))), off);
    _mm512_store_ps(out + 16 * s, _mm512_mul_ps(_mm512_set1_ps(d * static_cast<float>(sc[s])), _mm512_cvtepi32_ps(v)));
  }
}

void axpy_q6k(const AxpyTask& t) {
  const int64_t s0 = t.c0 / 256, s1 = t.c1 / 256;
  alignas(64) float w[256];
  for (int64_t k = 0; k < t.n; ++k) {
    const uint8_t* row = t.D + static_cast<size_t>(t.rows[k]) * t.row_bytes;
    // Rows are decoded one at a time: prefetch four rows ahead to cover DRAM latency.
    const uint8_t* next = k + 4 < t.n ? t.D + static_cast<size_t>(t.rows[k + 4]) * t.row_bytes : row;
    for (int64_t s = s0; s < s1; ++s) {
      for (int l = 0; l < 4; ++l) prefetch(next + s * 210 + 64 * l);
      decode_q6k(row + s * 210, w);
      for (int64_t i = 0; i < t.m; ++i) {
        const float c = t.coef[k * t.m + i];
        if (c == 0.0f) continue;
        const __m512 vc = _mm512_set1_ps(c);
        float* y = t.Y + i * t.ldy + 256 * s;
        for (int j = 0; j < 256; j += 16)
          _mm512_storeu_ps(y + j, _mm512_fmadd_ps(_mm512_load_ps(w + j), vc, _mm512_loadu_ps(y + j)));
      }
    }
  }
}

template <class Dec>
void axpy_blocks(const AxpyTask& t) {
  if (t.m == 1) {
    axpy_blocks_one<Dec>(t);
  } else {
    axpy_blocks_many<Dec>(t);
  }
}


// ---- Q4_0: integer sums over groups of rows (q4_groups.h; the scalar leaf is the reference) ----
// The same arithmetic as the AVX2 leaf with VBMI and VNNI: the eight f16 block scales of a row
// come out of two 64-byte loads with one vpermt2b, 16 blocks per step, and the blocks' largest
// magnitudes are kept in the same pass (an unsigned max of the bits); for the products, two
// vpermt2b and two word unpacks put four rows' quant bytes of two blocks side by side in each
// 32-bit lane, and vpdpbusd multiplies them by the four rows' 8-bit coefficients and adds the
// four products into 32-bit sums. The sums are exact and each output gets the same one FMA,
// so the bits are the scalar leaf's.

// Blocks per table: half the AVX2 leaf's kQ4Chunk. With 32-row windows this let a group's
// slices and the next group's, prefetched meanwhile, fit a 48 KiB L1 together (2 x 32 x 576
// bytes; decode at sparsity 0.5 ~1.05x that with 64-block tables); with 16-row windows 64-block
// tables still measured ~0.9x (DRAM-sized `axpy_rows_50pct`, docs/BENCHMARKS.md). The
// chunking does not change the sums.
constexpr int64_t kQ4TableBlocks = 32;

// Tables of one chunk of kQ4TableBlocks blocks, with spare entries past the end so the two-block
// step may read block j + 1 of an odd last block.
struct Q4Tables {
  alignas(64) float v[kQ4Window][kQ4TableBlocks];
  alignas(64) float s[kQ4TableBlocks + 16];
  alignas(64) uint32_t kk[kQ4Window / 4][kQ4TableBlocks + 16];  // the k of rows 4q .. 4q + 3, a byte each
  alignas(64) int32_t kneg[kQ4TableBlocks + 16];                // -8 sum_r k_rb: the sums' start
};

// Byte indices for vpermt2b. Scales: word i <- bytes 18 i, 18 i + 1 of 128 bytes (8 blocks).
// Pairs (two rows' 34 bytes of blocks j and j + 1, row x in the first operand, row y in the
// second): in 128-bit lane L, word t holds (x, y)'s quant byte 4 L + (t & 3) of block j for
// t < 4 and of block j + 1 for t >= 4, so that the word unpacks of two such vectors give, in
// 32-bit lane i, quant byte i of four rows: block j (low unpack) and block j + 1 (high).
struct Q4Perm {
  __m512i scales, pairs;
  Q4Perm() {
    alignas(64) uint8_t sc[64] = {}, pr[64];
    for (int i = 0; i < 8; ++i) {
      sc[2 * i] = static_cast<uint8_t>(18 * i);
      sc[2 * i + 1] = static_cast<uint8_t>(18 * i + 1);
    }
    for (int lane = 0; lane < 4; ++lane) {
      for (int t = 0; t < 8; ++t) {
        const int m = 4 * lane + (t & 3), src = t < 4 ? m : 18 + m;
        pr[16 * lane + 2 * t] = static_cast<uint8_t>(src);
        pr[16 * lane + 2 * t + 1] = static_cast<uint8_t>(64 + src);
      }
    }
    scales = _mm512_load_si512(sc);
    pairs = _mm512_load_si512(pr);
  }
};

// One block of y (two 16-column halves) += s * the sums lo, hi.
inline void add_block_sums(float* y, __m512i lo, __m512i hi, float s) {
  const __m512 sv = _mm512_set1_ps(s);
  _mm512_storeu_ps(y, _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), sv, _mm512_loadu_ps(y)));
  _mm512_storeu_ps(y + 16, _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), sv, _mm512_loadu_ps(y + 16)));
}

// Blocks j, j + 1 of the chunk (b = cb0 + j; with kOne only block j exists): y += the group's
// integer sums times s. Quants of two blocks of one row span 34 bytes, read with 64-byte loads;
// kMasked loads read no further, for the rows within 64 bytes of their matrix's end (the last
// block of a tensor may end at its buffer's end). Unmasked loads: 5-10% faster, L2-resident.
template <bool kOne, bool kMasked>
inline void q4_pair_blocks(const uint8_t* const* rows, int nq, const Q4Tables& tb, const Q4Perm& pm,
                           int64_t b, int64_t j, float* y, const Q4Next& next) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const __mmask64 lm = kOne ? 0xffffull : 0x3ffffffffull;
  auto load = [lm](const uint8_t* p) { return kMasked ? _mm512_maskz_loadu_epi8(lm, p) : _mm512_loadu_si512(p); };
  __m512i acc[4];  // block j: columns 0-15, 16-31; block j + 1: the same
  acc[0] = acc[1] = _mm512_set1_epi32(tb.kneg[j]);
  acc[2] = acc[3] = _mm512_set1_epi32(tb.kneg[j + 1]);
  const size_t off = static_cast<size_t>(b) * kQ4Bytes + 2;
  for (int r = 0; r < next.n; ++r) _mm_prefetch(reinterpret_cast<const char*>(next.rows[r] + off), _MM_HINT_T0);
  for (int q = 0; q < nq; ++q) {
    const uint8_t* const* rq = rows + 4 * q;
    const __m512i x01 = _mm512_permutex2var_epi8(load(rq[0] + off), pm.pairs, load(rq[1] + off));
    const __m512i x23 = _mm512_permutex2var_epi8(load(rq[2] + off), pm.pairs, load(rq[3] + off));
    const __m512i q0 = _mm512_unpacklo_epi16(x01, x23), q1 = _mm512_unpackhi_epi16(x01, x23);
    const __m512i k0 = _mm512_set1_epi32(static_cast<int32_t>(tb.kk[q][j]));
    const __m512i k1 = _mm512_set1_epi32(static_cast<int32_t>(tb.kk[q][j + 1]));
    acc[0] = _mm512_dpbusd_epi32(acc[0], _mm512_and_si512(q0, m4), k0);
    acc[1] = _mm512_dpbusd_epi32(acc[1], _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4), k0);
    acc[2] = _mm512_dpbusd_epi32(acc[2], _mm512_and_si512(q1, m4), k1);
    acc[3] = _mm512_dpbusd_epi32(acc[3], _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4), k1);
  }
  for (int i = 0; i < (kOne ? 1 : 2); ++i) add_block_sums(y + 32 * (b + i), acc[2 * i], acc[2 * i + 1], tb.s[j + i]);
}

// From the largest |v| of 16 blocks' group (as bits; see q4_group): each block's 127 / amax
// (0 where amax is below FLT_MIN or not finite), its scale s = amax / 127 (NaN where not
// finite, 0 below FLT_MIN) and which blocks are finite, as the scalar leaf computes them.
struct GroupScales {
  __m512 inv, s;
  __mmask16 good;
};

inline GroupScales group_scales(__m512i amax_bits) {
  const __m512 amax = _mm512_castsi512_ps(amax_bits);
  const __mmask16 bad = _mm512_cmpge_epu32_mask(amax_bits, _mm512_set1_epi32(0x7f800000));
  const __mmask16 off = bad | _mm512_cmp_ps_mask(amax, _mm512_set1_ps(FLT_MIN), _CMP_LT_OQ);
  const __mmask16 on = static_cast<__mmask16>(~off);
  return GroupScales{_mm512_maskz_div_ps(on, _mm512_set1_ps(127.0f), amax),
                     _mm512_mask_blend_ps(bad, _mm512_maskz_div_ps(on, amax, _mm512_set1_ps(127.0f)),
                                          _mm512_castsi512_ps(_mm512_set1_epi32(-1))),
                     static_cast<__mmask16>(~bad)};
}

// limit: the last row address whose blocks [b0, b1) may be read with unmasked 64-byte loads.
void q4_group(const Q4Group& grp, int64_t b0, int64_t b1, float* y, const Q4Next& next, uintptr_t limit) {
  static const Q4Perm pm;
  Q4Tables tb;
  const int g = grp.g, nq = (g + 3) / 4;
  const uint8_t* rows[kQ4Window];
  for (int r = 0; r < g; ++r) rows[r] = grp.rows[r];
  for (int r = g; r < 4 * nq; ++r) rows[r] = rows[g - 1];  // partners whose coefficient is 0
  bool masked = false;
  for (int r = 0; r < g; ++r) masked |= reinterpret_cast<uintptr_t>(rows[r]) > limit;
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  for (int64_t cb0 = b0; cb0 < b1; cb0 += kQ4TableBlocks) {
    const int64_t nb = b1 - cb0 < kQ4TableBlocks ? b1 - cb0 : kQ4TableBlocks;
    const int64_t nv = (nb + 15) / 16 * 16;
    for (int64_t j = 0; j < nv; j += 16) {
      // v = coef * d for 16 blocks of every row, and the largest |v| as bits: for non-negative
      // floats the unsigned order of the bits is the numeric order, and the non-finite ones
      // (inf, NaN) are the patterns from 0x7f800000 up. So amax is the scalar leaf's
      // `a > amax ? a : amax` over finite |v|, and group_scales' `bad` its !(a < inf).
      __m512i amax_bits = _mm512_setzero_si512();
      for (int r = 0; r < g; ++r) {
        const float c = grp.coef[r];
        const uint8_t* p = grp.rows[r] + (cb0 + j) * kQ4Bytes;
        __m512 v;
        if (nb - j >= 16) {
          // Eight blocks span 144 bytes, their scales the first 128: one vpermt2b of two loads.
          const __m512i lo = _mm512_permutex2var_epi8(_mm512_loadu_si512(p), pm.scales, _mm512_loadu_si512(p + 64));
          const __m512i hi = _mm512_permutex2var_epi8(_mm512_loadu_si512(p + 144), pm.scales, _mm512_loadu_si512(p + 208));
          const __m256i h = _mm256_inserti128_si256(_mm512_castsi512_si256(lo), _mm512_castsi512_si128(hi), 1);
          v = _mm512_mul_ps(_mm512_set1_ps(c), _mm512_cvtph_ps(h));
        } else {
          alignas(64) float t[16] = {};
          for (int64_t i = 0; i < nb - j; ++i) t[i] = c * _cvtsh_ss(load_u16(p + i * kQ4Bytes));
          v = _mm512_load_ps(t);
        }
        _mm512_store_ps(&tb.v[r][j], v);
        amax_bits = _mm512_max_epu32(amax_bits, _mm512_and_si512(_mm512_castps_si512(v), abs_mask));
      }
      const GroupScales gs = group_scales(amax_bits);
      const __m512 inv = gs.inv;
      const __mmask16 good = gs.good;
      _mm512_store_ps(&tb.s[j], gs.s);
      // Each row's k as a byte of its quad's word; the words' byte sums (vpdpbusd by ones) give
      // sum_r k_rb exactly (|k| <= 127).
      const __m512i lo_byte = _mm512_set1_epi32(0xff);
      __m512i ksum = _mm512_setzero_si512();
      for (int q = 0; q < nq; ++q) {
        __m512i word = _mm512_setzero_si512();
        for (int u = 0; u < 4; ++u) {
          const int r = 4 * q + u;
          if (r >= g) break;
          const __m512i k = _mm512_maskz_cvtps_epi32(good, _mm512_mul_ps(_mm512_load_ps(&tb.v[r][j]), inv));
          word = _mm512_or_si512(word, _mm512_slli_epi32(_mm512_and_si512(k, lo_byte), 8 * u));
        }
        _mm512_store_si512(&tb.kk[q][j], word);
        ksum = _mm512_dpbusd_epi32(ksum, _mm512_set1_epi8(1), word);
      }
      _mm512_store_si512(&tb.kneg[j], _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(ksum, 3)));
    }
    int64_t j = 0;
    if (masked) {
      for (; j + 2 <= nb; j += 2) q4_pair_blocks<false, true>(rows, nq, tb, pm, cb0 + j, j, y, next);
    } else {
      for (; j + 2 <= nb; j += 2) q4_pair_blocks<false, false>(rows, nq, tb, pm, cb0 + j, j, y, next);
    }
    if (j < nb) q4_pair_blocks<true, true>(rows, nq, tb, pm, cb0 + j, j, y, next);
  }
}

void axpy_q4_0(const AxpyTask& t) {
  // A pair call at block b reads [18 b + 2, 18 b + 66) of its row: rows up to `limit` stay
  // within the matrix for every b < c1 / 32.
  const uintptr_t end = reinterpret_cast<uintptr_t>(t.D) + static_cast<uintptr_t>(t.n_rows) * t.row_bytes;
  const uintptr_t reach = static_cast<uintptr_t>(t.c1 / 32) * kQ4Bytes + 66;
  const uintptr_t limit = end >= reinterpret_cast<uintptr_t>(t.D) + reach ? end - reach : 0;
  for_each_q4_group(t, [&](const Q4Group& grp, float* y, const Q4Next& next) {
    q4_group(grp, t.c0 / 32, t.c1 / 32, y, next, limit);
  });
}

// ---- Q4_0_SPLIT: the same sums over rows laid out [scales][quants] (tensor/dtype.h) ----
// The arithmetic of q4_group above (and of the scalar reference), so the bits are the same;
// the layout lets four blocks of a row's quants come in one aligned 64-byte load (Q4_0 needs
// one load, nearly always split over two lines, per two blocks, and byte permutes to gather
// the scales). A unit's 64 bytes hold its four blocks' 4-byte words transposed (128-bit lane
// L: word L of blocks 0..3), so byte then word unpacks of four rows' loads give t[i] = block i
// of the unit, 32-bit lane c holding quant byte c of the four rows: the accumulators are in
// column order and each takes one block's coefficients, start and scale as broadcasts. Blocks
// past the last whole unit of a row are stored as in Q4_0 and take a one-block step. With
// one thread 1.2-1.3x the Q4_0 leaf's rate DRAM-sized, 1.3x L2-resident (docs/BENCHMARKS.md,
// "Q4_0_SPLIT units transposed by words"; the first split layout, whose accumulators held
// columns permuted and y was shuffled around the groups: 1.1-1.2x and 1.15-1.2x).

// Blocks per table: 16 (32: ~0.9x DRAM-sized; 64 and 128: 0.7-0.85x).
constexpr int64_t kSplitTable = 16;

struct SplitTables {
  alignas(64) float v[kQ4Window][kSplitTable];
  alignas(64) int32_t k[kQ4Window / 4][kSplitTable];  // the k of rows 4q .. 4q + 3, a byte each
  alignas(64) float s[kSplitTable];
  alignas(64) int32_t start[kSplitTable];  // -8 sum_r k_rb
};

// Four rows' quant bytes of one block, quads in column order: dword i holds byte i of each.
inline __m512i block_quads(const uint8_t* a, const uint8_t* b, const uint8_t* c, const uint8_t* d) {
  const __m128i x = loadu128(a), y = loadu128(b), z = loadu128(c), w = loadu128(d);
  const __m128i xy0 = _mm_unpacklo_epi8(x, y), xy1 = _mm_unpackhi_epi8(x, y);
  const __m128i zw0 = _mm_unpacklo_epi8(z, w), zw1 = _mm_unpackhi_epi8(z, w);
  const __m256i lo = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(xy0, zw0)),
                                             _mm_unpackhi_epi16(xy0, zw0), 1);
  const __m256i hi = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(xy1, zw1)),
                                             _mm_unpackhi_epi16(xy1, zw1), 1);
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// The tables of blocks [cb0, cb0 + n) (n <= kSplitTable): v, amax, s and k as q4_group's
// scale pass; lanes past n hold zeros, never read.
inline void split_tables(const Q4Group& grp, int64_t cb0, int64_t n, SplitTables& tb) {
  const int g = grp.g, nq = (g + 3) / 4;
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __mmask16 valid = static_cast<__mmask16>(n >= 16 ? 0xffffu : (1u << n) - 1u);
  __m512i amax_bits = _mm512_setzero_si512();
  for (int r = 0; r < g; ++r) {
    const __m256i h = _mm256_maskz_loadu_epi16(valid, grp.rows[r] + 2 * cb0);
    const __m512 v = _mm512_mul_ps(_mm512_set1_ps(grp.coef[r]), _mm512_cvtph_ps(h));
    _mm512_store_ps(tb.v[r], v);
    amax_bits = _mm512_max_epu32(amax_bits, _mm512_and_si512(_mm512_castps_si512(v), abs_mask));
  }
  const GroupScales gs = group_scales(amax_bits);
  _mm512_store_ps(tb.s, gs.s);
  __m512i ksum = _mm512_setzero_si512();
  for (int q = 0; q < nq; ++q) {
    __m512i word = _mm512_setzero_si512();
    for (int u = 0; u < 4 && 4 * q + u < g; ++u) {
      const __m512i k = _mm512_maskz_cvtps_epi32(gs.good, _mm512_mul_ps(_mm512_load_ps(tb.v[4 * q + u]), gs.inv));
      word = _mm512_or_si512(word, _mm512_slli_epi32(_mm512_and_si512(k, _mm512_set1_epi32(0xff)), 8 * u));
    }
    _mm512_store_si512(tb.k[q], word);
    ksum = _mm512_dpbusd_epi32(ksum, _mm512_set1_epi8(1), word);
  }
  _mm512_store_si512(tb.start, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(ksum, 3)));
}

// Whole units [0, units) of the table at block cb0, NQ quads of rows: four aligned loads per
// quad and unit, the next group's line of each unit prefetched.
template <int NQ>
inline void split_units(const uint8_t* const* rows, const SplitTables& tb, const Q4Next& next, size_t quants,
                        int64_t cb0, int64_t units, float* y) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  for (int64_t u = 0; u < units; ++u) {
    const int64_t j = 4 * u;
    const size_t at = quants + static_cast<size_t>(cb0 + j) * 16;
    for (int r = 0; r < next.n; ++r) _mm_prefetch(reinterpret_cast<const char*>(next.rows[r] + at), _MM_HINT_T0);
    __m512i acc[8];
    for (int i = 0; i < 4; ++i) acc[2 * i] = acc[2 * i + 1] = _mm512_set1_epi32(tb.start[j + i]);
    for (int q = 0; q < NQ; ++q) {
      const uint8_t* const* rq = rows + 4 * q;
      const __m512i a = _mm512_loadu_si512(rq[0] + at), b = _mm512_loadu_si512(rq[1] + at);
      const __m512i c = _mm512_loadu_si512(rq[2] + at), d = _mm512_loadu_si512(rq[3] + at);
      const __m512i ab0 = _mm512_unpacklo_epi8(a, b), ab1 = _mm512_unpackhi_epi8(a, b);
      const __m512i cd0 = _mm512_unpacklo_epi8(c, d), cd1 = _mm512_unpackhi_epi8(c, d);
      const __m512i t[4] = {_mm512_unpacklo_epi16(ab0, cd0), _mm512_unpackhi_epi16(ab0, cd0),
                            _mm512_unpacklo_epi16(ab1, cd1), _mm512_unpackhi_epi16(ab1, cd1)};
      for (int i = 0; i < 4; ++i) {
        const __m512i k = _mm512_set1_epi32(tb.k[q][j + i]);
        acc[2 * i] = _mm512_dpbusd_epi32(acc[2 * i], _mm512_and_si512(t[i], m4), k);
        acc[2 * i + 1] = _mm512_dpbusd_epi32(acc[2 * i + 1], _mm512_and_si512(_mm512_srli_epi16(t[i], 4), m4), k);
      }
    }
    for (int i = 0; i < 4; ++i) add_block_sums(y + 32 * (cb0 + j + i), acc[2 * i], acc[2 * i + 1], tb.s[j + i]);
  }
}

// One group over blocks [b0, b1) of rows of nb blocks (b0 at a unit's start, b1 at one's end
// or past the last whole unit); y the token's row.
void q4_split_group(const Q4Group& grp, int64_t b0, int64_t b1, int64_t nb, float* y, const Q4Next& next) {
  SplitTables tb;
  const int g = grp.g, nq = (g + 3) / 4;
  const uint8_t* rows[kQ4Window];
  for (int r = 0; r < g; ++r) rows[r] = grp.rows[r];
  for (int r = g; r < 4 * nq; ++r) rows[r] = rows[g - 1];  // partners whose coefficient is 0
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const size_t quants = static_cast<size_t>(nb) * 2;
  const int64_t whole = nb / 4 * 4;  // blocks in whole units
  for (int64_t cb0 = b0; cb0 < b1; cb0 += kSplitTable) {
    const int64_t n = b1 - cb0 < kSplitTable ? b1 - cb0 : kSplitTable;
    for (int r = 0; r < next.n; ++r) _mm_prefetch(reinterpret_cast<const char*>(next.rows[r] + 2 * cb0), _MM_HINT_T0);
    split_tables(grp, cb0, n, tb);
    const int64_t in_units = whole - cb0 < n ? whole - cb0 : n;  // blocks of this chunk in whole units
    const int64_t units = in_units > 0 ? in_units / 4 : 0;
    // The quads' loop unrolled: nq as a constant keeps the row pointers and accumulators in
    // registers (L2-resident ~1.06x the loop over a variable nq; DRAM-sized the same).
    static_assert(kQ4Window <= 16, "split_units takes at most four quads");
    switch (nq) {
      case 1: split_units<1>(rows, tb, next, quants, cb0, units, y); break;
      case 2: split_units<2>(rows, tb, next, quants, cb0, units, y); break;
      case 3: split_units<3>(rows, tb, next, quants, cb0, units, y); break;
      default: split_units<4>(rows, tb, next, quants, cb0, units, y); break;
    }
    // Blocks past the last whole unit (stored as in Q4_0): one at a time.
    for (int64_t j = 4 * units; j < n; ++j) {
      const size_t at = quants + static_cast<size_t>(cb0 + j) * 16;
      __m512i lo = _mm512_set1_epi32(tb.start[j]), hi = lo;
      for (int q = 0; q < nq; ++q) {
        const uint8_t* const* rq = rows + 4 * q;
        const __m512i quads = block_quads(rq[0] + at, rq[1] + at, rq[2] + at, rq[3] + at);
        const __m512i k = _mm512_set1_epi32(tb.k[q][j]);
        lo = _mm512_dpbusd_epi32(lo, _mm512_and_si512(quads, m4), k);
        hi = _mm512_dpbusd_epi32(hi, _mm512_and_si512(_mm512_srli_epi16(quads, 4), m4), k);
      }
      add_block_sums(y + 32 * (cb0 + j), lo, hi, tb.s[j]);
    }
  }
}

void axpy_q4_0_split(const AxpyTask& t) {
  const int64_t b0 = t.c0 / 32, b1 = t.c1 / 32, nb = static_cast<int64_t>(t.row_bytes / kQ4Bytes);
  // Slices start and end at whole units (granule() in axpy.cpp); any other task takes the
  // scalar leaf, which reads every block and gives the same bits.
  if (b0 % 4 != 0 || (b1 % 4 != 0 && b1 < nb / 4 * 4)) return scalar_axpy(t);
  for_each_q4_group(t, [&](const Q4Group& grp, float* y, const Q4Next& next) {
    q4_split_group(grp, b0, b1, nb, y, next);
  });
}

}  // namespace

void avx512_axpy(const AxpyTask& t) {
  switch (t.type) {
    case DType::Q4_0: return axpy_q4_0(t);
    case DType::Q4_0_SPLIT: return axpy_q4_0_split(t);
    case DType::Q4_1: return axpy_blocks<AxQ4_1>(t);
    case DType::Q5_0: return axpy_blocks<AxQ5_0>(t);
    case DType::Q5_1: return axpy_blocks<AxQ5_1>(t);
    case DType::Q8_0: return axpy_blocks<AxQ8_0>(t);
    // MXFP4 (its scales are exponent bytes, not the f16 fields the leaves above read): the
    // AVX2 leaf, compiled into every AVX-512 build, with the same results.
    case DType::MXFP4: return avx2_axpy(t);
    case DType::Q6_K: return axpy_q6k(t);
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K: return avx512_kq_axpy(t);
    case DType::F32: return axpy_float<DType::F32>(t);
    case DType::F16: return axpy_float<DType::F16>(t);
    case DType::BF16: return axpy_float<DType::BF16>(t);
    default: return scalar_axpy(t);
  }
}

}  // namespace pi::cpu::detail
