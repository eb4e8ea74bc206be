// AVX-512 dot-product leaves: activation quantization to Q8 and the integer dot products
// of the block types (VNNI vpdpbusd), and f32 FMA dot products of F32/F16/BF16 rows.
//
// Prepared activation (integer types), per pair of 32-element blocks A, B, one 192-byte
// slot: 64 int8 quants, 16 int32 (or f32) lane terms, 16 f32 lane scales. A lane is the
// 4 bytes vpdpbusd sums. Byte order is natural (A then B) for Q8_0, and nibble
// order [A0-15, B0-15, A16-31, B16-31] for the 4/5-bit types, which is the order their
// packed nibbles unpack to. The lane term is -offset * (sum of the lane's 4 quants) for
// types stored as q - offset (so vpdpbusd starting from it yields sum (q - offset) * x),
// or dx * (lane sum) in f32 for the types with a minimum. An odd last block fills A only.
//
// Q4_0, the format of most deployed models, and MXFP4 (gpt-oss's experts) have their own
// wider layout, four blocks per 256-byte slot (avx512_quads.h): the weights of a quad are
// loaded with two loads and their nibbles gathered by one byte permute, so one quad costs
// about what one pair costs in the layout above.
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cpu/avx512_leaves.h"
#include "kernels/cpu/avx512_quads.h"
#include "kernels/cpu/avx512_quant.h"
#include "kernels/cpu/scalar_blocks.h"
#include "kernels/cpu/scalar_leaves.h"
#include "kernels/cpu/stream_ahead.h"

namespace pi::cpu::detail {
namespace {

constexpr size_t kSlot = 192;

inline __m128i loadu128(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
inline __m256i loadu256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Lane -> block maps for the scale vectors: nibble order and natural order.
inline __m512i nib_lanes() { return _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1); }
inline __m512i nat_lanes() { return _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1); }

// Two halves (A in bits 0-15, B in bits 16-31) to f32 lanes per `lanes` (index 0 = A).
inline __m512 half_pair(uint32_t ab, __m512i lanes) {
  const __m128 h = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(ab)));
  return _mm512_permutexvar_ps(lanes, _mm512_castps128_ps512(h));
}

// ---- weight decoders: quants as unsigned bytes in the activation's order, scales per lane --
struct DecQ8_0 {
  // One-token consecutive rows one at a time (one sequential stream) when the decoder keeps
  // up with memory; the heavier 4/5-bit decoders with a minimum or fifth bit are bound by
  // compute on one core and measured no faster that way, so they keep groups of four.
  static constexpr bool kStreamRows = true;
  static constexpr size_t kBytes = 34;
  static constexpr bool kMin = false;
  static constexpr bool kNibble = false;
  static constexpr int kOffset = 128;
  static __m512i quants(const uint8_t* b) {
    const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(loadu256(b + 2)), loadu256(b + 36), 1);
    return _mm512_xor_si512(q, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  static __m512i quants1(const uint8_t* b) {
    const __m512i q = _mm512_zextsi256_si512(loadu256(b + 2));
    return _mm512_mask_xor_epi32(q, 0x00ff, q, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  static __m512 scales(const uint8_t* b) { return half_pair(load_u16(b) | uint32_t{load_u16(b + 34)} << 16, nat_lanes()); }
  static __m512 scales1(const uint8_t* b) { return half_pair(load_u16(b), nat_lanes()); }
};

// 32 nibbles of one block as [lo 16 | hi 16] bytes, two blocks as [loA loB hiA hiB].
inline __m512i nibbles2(const uint8_t* qa, const uint8_t* qb) {
  const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(loadu128(qa)), loadu128(qb), 1);
  const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
  return _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
}
inline __m512i nibbles1(const uint8_t* qa) {
  const __m256i q = _mm256_zextsi128_si256(loadu128(qa));
  const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
  return _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
}
// Fifth bits qh (bit j = element j) of A and B in nibble order.
inline __mmask64 fifth_bits(uint32_t ha, uint32_t hb) {
  return (uint64_t{ha & 0xffffu}) | (uint64_t{hb & 0xffffu} << 16) | (uint64_t{ha >> 16} << 32) |
         (uint64_t{hb >> 16} << 48);
}

struct DecQ4_0 {
  static constexpr bool kStreamRows = true;
  static constexpr size_t kBytes = 18;
  static constexpr bool kMin = false;
  static constexpr bool kNibble = true;
  static constexpr int kOffset = 8;
  static __m512i quants(const uint8_t* b) { return nibbles2(b + 2, b + 20); }
  static __m512i quants1(const uint8_t* b) { return nibbles1(b + 2); }
  static __m512 scales(const uint8_t* b) { return half_pair(load_u16(b) | uint32_t{load_u16(b + 18)} << 16, nib_lanes()); }
  static __m512 scales1(const uint8_t* b) { return half_pair(load_u16(b), nib_lanes()); }
};

struct DecQ5_0 {
  static constexpr bool kStreamRows = false;
  static constexpr size_t kBytes = 22;
  static constexpr bool kMin = false;
  static constexpr bool kNibble = true;
  static constexpr int kOffset = 16;
  static __m512i quants(const uint8_t* b) {
    const __m512i z = nibbles2(b + 6, b + 28);
    return _mm512_mask_add_epi8(z, fifth_bits(load_u32(b + 2), load_u32(b + 24)), z, _mm512_set1_epi8(16));
  }
  static __m512i quants1(const uint8_t* b) {
    const __m512i z = nibbles1(b + 6);
    return _mm512_mask_add_epi8(z, fifth_bits(load_u32(b + 2), 0), z, _mm512_set1_epi8(16));
  }
  static __m512 scales(const uint8_t* b) { return half_pair(load_u16(b) | uint32_t{load_u16(b + 22)} << 16, nib_lanes()); }
  static __m512 scales1(const uint8_t* b) { return half_pair(load_u16(b), nib_lanes()); }
};

// Types with a minimum: x = d q + m. scales() yields d per lane, mins() m per lane.
inline __m512 min_pair(uint16_t ma, uint16_t mb) { return half_pair(ma | uint32_t{mb} << 16, nib_lanes()); }

struct DecQ4_1 {
  static constexpr bool kStreamRows = false;
  static constexpr size_t kBytes = 20;
  static constexpr bool kMin = true;
  static constexpr bool kNibble = true;
  static constexpr int kOffset = 0;
  static __m512i quants(const uint8_t* b) { return nibbles2(b + 4, b + 24); }
  static __m512i quants1(const uint8_t* b) { return nibbles1(b + 4); }
  static __m512 scales(const uint8_t* b) { return half_pair(load_u16(b) | uint32_t{load_u16(b + 20)} << 16, nib_lanes()); }
  static __m512 scales1(const uint8_t* b) { return half_pair(load_u16(b), nib_lanes()); }
  static __m512 mins(const uint8_t* b) { return min_pair(load_u16(b + 2), load_u16(b + 22)); }
  static __m512 mins1(const uint8_t* b) { return min_pair(load_u16(b + 2), 0); }
};

struct DecQ5_1 {
  static constexpr bool kStreamRows = false;
  static constexpr size_t kBytes = 24;
  static constexpr bool kMin = true;
  static constexpr bool kNibble = true;
  static constexpr int kOffset = 0;
  static __m512i quants(const uint8_t* b) {
    const __m512i z = nibbles2(b + 8, b + 32);
    return _mm512_mask_add_epi8(z, fifth_bits(load_u32(b + 4), load_u32(b + 28)), z, _mm512_set1_epi8(16));
  }
  static __m512i quants1(const uint8_t* b) {
    const __m512i z = nibbles1(b + 8);
    return _mm512_mask_add_epi8(z, fifth_bits(load_u32(b + 4), 0), z, _mm512_set1_epi8(16));
  }
  static __m512 scales(const uint8_t* b) { return half_pair(load_u16(b) | uint32_t{load_u16(b + 24)} << 16, nib_lanes()); }
  static __m512 scales1(const uint8_t* b) { return half_pair(load_u16(b), nib_lanes()); }
  static __m512 mins(const uint8_t* b) { return min_pair(load_u16(b + 2), load_u16(b + 26)); }
  static __m512 mins1(const uint8_t* b) { return min_pair(load_u16(b + 2), 0); }
};

// ---- activation quantization ---------------------------------------------------------
// The K-quants whose dot products avx512_kquant.cpp computes, Q6_K included.
bool k_quant(DType t) {
  return t == DType::Q2_K || t == DType::Q3_K || t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
}

bool int_path(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1 ||
         t == DType::Q8_0;
}

int act_offset(DType t) {
  switch (t) {
    case DType::Q4_0: return DecQ4_0::kOffset;
    case DType::Q5_0: return DecQ5_0::kOffset;
    case DType::Q8_0: return DecQ8_0::kOffset;
    default: return 0;
  }
}

}  // namespace

size_t avx512_act_bytes(DType t, int64_t cols) {
  if (k_quant(t)) return avx512_kq_act_bytes(t, cols);
  if (t == DType::Q4_0 || t == DType::MXFP4) return static_cast<size_t>((cols / 32 + 3) / 4) * kQuadSlot;
  if (!int_path(t)) return 0;
  return static_cast<size_t>((cols / 32 + 1) / 2) * kSlot;
}

void avx512_prepare_act(DType t, const float* x, int64_t cols, uint8_t* out) {
  if (k_quant(t)) return avx512_kq_prepare(t, x, cols, out);
  if (t == DType::Q4_0) return prepare_quads<QuadQ4_0>(x, cols / 32, out);
  if (t == DType::MXFP4) return prepare_quads<QuadMXFP4>(x, cols / 32, out);
  if (!int_path(t)) return;
  const int64_t nb = cols / 32;
  const bool nibble = t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1;
  const bool with_min = t == DType::Q4_1 || t == DType::Q5_1;
  const __m512i lanes = nibble ? nib_lanes() : nat_lanes();
  const __m512i neg_off = _mm512_set1_epi32(-act_offset(t));
  for (int64_t p = 0; p < (nb + 1) / 2; ++p) {
    alignas(64) int8_t q[64] = {};
    alignas(16) float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    d[0] = quantize32(x + 64 * p, q);
    if (2 * p + 1 < nb) d[1] = quantize32(x + 64 * p + 32, q + 32);
    __m512i xq = _mm512_load_si512(q);
    if (nibble) xq = _mm512_shuffle_i64x2(xq, xq, _MM_SHUFFLE(3, 1, 2, 0));
    const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), xq);
    const __m512 dxv = _mm512_permutexvar_ps(lanes, _mm512_castps128_ps512(_mm_load_ps(d)));
    uint8_t* slot = out + p * kSlot;
    _mm512_store_si512(slot, xq);
    if (with_min) {
      _mm512_store_ps(slot + 64, _mm512_mul_ps(_mm512_cvtepi32_ps(sums), dxv));
    } else {
      _mm512_store_si512(slot + 64, _mm512_mullo_epi32(sums, neg_off));
    }
    _mm512_store_ps(slot + 128, dxv);
  }
}

namespace {

// ---- integer dot products: NR rows x one token ----------------------------------------
template <class Dec, int NR, bool kTwoLevel = false>
inline void dot_rows(const uint8_t* const* rows, const uint8_t* const* next, const uint8_t* act,
                     int64_t nb, float* out) {
  __m512 acc[NR], accm[NR];
  for (int r = 0; r < NR; ++r) acc[r] = accm[r] = _mm512_setzero_ps();
  const int64_t np = nb / 2;
  for (int64_t p = 0; p < np; ++p) {
    const uint8_t* a = act + p * kSlot;
    const __m512i xq = _mm512_load_si512(a);
    const __m512i aux = _mm512_load_si512(a + 64);
    const __m512 dxv = _mm512_load_ps(a + 128);
    const size_t off = static_cast<size_t>(p) * 2 * Dec::kBytes;
    for (int r = 0; r < NR; ++r) {
      const uint8_t* b = rows[r] + off;
      prefetch_next<kTwoLevel>(next[r] + off);
      if constexpr (2 * Dec::kBytes > 64) prefetch_next<kTwoLevel>(next[r] + off + 64);
      if constexpr (Dec::kMin) {
        const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), Dec::quants(b), xq);
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), dxv), Dec::scales(b), acc[r]);
        accm[r] = _mm512_fmadd_ps(Dec::mins(b), _mm512_castsi512_ps(aux), accm[r]);
      } else {
        const __m512i s = _mm512_dpbusd_epi32(aux, Dec::quants(b), xq);
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), dxv), Dec::scales(b), acc[r]);
      }
    }
  }
  if (nb & 1) {
    const uint8_t* a = act + np * kSlot;
    const __m512i xq = _mm512_load_si512(a);
    const __m512i aux = _mm512_load_si512(a + 64);
    const __m512 dxv = _mm512_load_ps(a + 128);
    const size_t off = static_cast<size_t>(np) * 2 * Dec::kBytes;
    for (int r = 0; r < NR; ++r) {
      const uint8_t* b = rows[r] + off;
      if constexpr (Dec::kMin) {
        const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), Dec::quants1(b), xq);
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), dxv), Dec::scales1(b), acc[r]);
        accm[r] = _mm512_fmadd_ps(Dec::mins1(b), _mm512_castsi512_ps(aux), accm[r]);
      } else {
        const __m512i s = _mm512_dpbusd_epi32(aux, Dec::quants1(b), xq);
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), dxv), Dec::scales1(b), acc[r]);
      }
    }
  }
  for (int r = 0; r < NR; ++r) out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r], accm[r]));
}

// One row x NT tokens: the row is decoded once per pair for all tokens.
template <class Dec, int NT>
inline void dot_tokens(const uint8_t* row, const uint8_t* const* acts, int64_t nb, float* out) {
  __m512 acc[NT], accm[NT];
  for (int i = 0; i < NT; ++i) acc[i] = accm[i] = _mm512_setzero_ps();
  const int64_t np = nb / 2;
  for (int64_t p = 0; p <= np; ++p) {
    if (p == np && (nb & 1) == 0) break;
    const bool tail = p == np;
    const uint8_t* b = row + static_cast<size_t>(p) * 2 * Dec::kBytes;
    const __m512i z = tail ? Dec::quants1(b) : Dec::quants(b);
    const __m512 dw = tail ? Dec::scales1(b) : Dec::scales(b);
    __m512 mv = _mm512_setzero_ps();
    if constexpr (Dec::kMin) mv = tail ? Dec::mins1(b) : Dec::mins(b);
    for (int i = 0; i < NT; ++i) {
      const uint8_t* a = acts[i] + p * kSlot;
      const __m512i xq = _mm512_load_si512(a);
      const __m512i aux = _mm512_load_si512(a + 64);
      const __m512 dxv = _mm512_load_ps(a + 128);
      if constexpr (Dec::kMin) {
        const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), z, xq);
        acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), dxv), dw, acc[i]);
        accm[i] = _mm512_fmadd_ps(mv, _mm512_castsi512_ps(aux), accm[i]);
      } else {
        const __m512i s = _mm512_dpbusd_epi32(aux, z, xq);
        acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), dxv), dw, acc[i]);
      }
    }
  }
  for (int i = 0; i < NT; ++i) out[i] = _mm512_reduce_add_ps(_mm512_add_ps(acc[i], accm[i]));
}

// Two rows x NT tokens, each token's slot loaded once for both rows (as quad_tokens2); every
// (row, token) pair sees exactly dot_tokens' operations.
template <class Dec, int NT>
inline void dot_tokens2(const uint8_t* row0, const uint8_t* row1, const uint8_t* const* acts, int64_t nb,
                        float* out0, float* out1) {
  __m512 acc[2][NT], accm[2][NT];
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < NT; ++i) acc[r][i] = accm[r][i] = _mm512_setzero_ps();
  const uint8_t* rows[2] = {row0, row1};
  const int64_t np = nb / 2;
  for (int64_t p = 0; p <= np; ++p) {
    if (p == np && (nb & 1) == 0) break;
    const bool tail = p == np;
    __m512i z[2];
    __m512 dw[2], mv[2];
    for (int r = 0; r < 2; ++r) {
      const uint8_t* b = rows[r] + static_cast<size_t>(p) * 2 * Dec::kBytes;
      z[r] = tail ? Dec::quants1(b) : Dec::quants(b);
      dw[r] = tail ? Dec::scales1(b) : Dec::scales(b);
      mv[r] = _mm512_setzero_ps();
      if constexpr (Dec::kMin) mv[r] = tail ? Dec::mins1(b) : Dec::mins(b);
    }
    for (int i = 0; i < NT; ++i) {
      const uint8_t* a = acts[i] + p * kSlot;
      const __m512i xq = _mm512_load_si512(a);
      const __m512i aux = _mm512_load_si512(a + 64);
      const __m512 dxv = _mm512_load_ps(a + 128);
      for (int r = 0; r < 2; ++r) {
        if constexpr (Dec::kMin) {
          const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), z[r], xq);
          acc[r][i] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), dxv), dw[r], acc[r][i]);
          accm[r][i] = _mm512_fmadd_ps(mv[r], _mm512_castsi512_ps(aux), accm[r][i]);
        } else {
          const __m512i s = _mm512_dpbusd_epi32(aux, z[r], xq);
          acc[r][i] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), dxv), dw[r], acc[r][i]);
        }
      }
    }
  }
  for (int i = 0; i < NT; ++i) {
    out0[i] = _mm512_reduce_add_ps(_mm512_add_ps(acc[0][i], accm[0][i]));
    out1[i] = _mm512_reduce_add_ps(_mm512_add_ps(acc[1][i], accm[1][i]));
  }
}

// ---- f32 / f16 / bf16 rows against f32 activations ---------------------------------------
template <DType T>
inline __m512 load_w(const uint8_t* row, int64_t j) {
  if constexpr (T == DType::F32) return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + j);
  if constexpr (T == DType::F16) return _mm512_cvtph_ps(loadu256(row + 2 * j));
  if constexpr (T == DType::BF16)
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(loadu256(row + 2 * j)), 16));
}
template <DType T>
inline __m512 load_w_n(const uint8_t* row, int64_t j, __mmask16 k) {
  if constexpr (T == DType::F32) return _mm512_maskz_loadu_ps(k, reinterpret_cast<const float*>(row) + j);
  if constexpr (T == DType::F16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, row + 2 * j));
  if constexpr (T == DType::BF16)
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, row + 2 * j)), 16));
}

// NR rows x NT tokens (one of them is 1 in practice).
template <DType T, int NR, int NT, bool kTwoLevel = false>
inline void dot_float(const uint8_t* const* rows, const uint8_t* const* next, const float* const* xs,
                      int64_t cols, float* out) {
  __m512 acc[NR][NT];
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < NT; ++i) acc[r][i] = _mm512_setzero_ps();
  constexpr int64_t kElemBytes = T == DType::F32 ? 4 : 2;
  int64_t j = 0;
  for (; j + 16 <= cols; j += 16) {
    for (int r = 0; r < NR; ++r) {
      // Rows of 4 KiB and more: four of them ahead would crowd L1, so they go to L2.
      if ((j * kElemBytes) % 64 == 0) {
        if (kTwoLevel) {
          prefetch_next<true>(next[r] + j * kElemBytes);
        } else if (cols * kElemBytes < 4096) {
          _mm_prefetch(reinterpret_cast<const char*>(next[r] + j * kElemBytes), _MM_HINT_T0);
        } else {
          _mm_prefetch(reinterpret_cast<const char*>(next[r] + j * kElemBytes), _MM_HINT_T1);
        }
      }
      const __m512 w = load_w<T>(rows[r], j);
      for (int i = 0; i < NT; ++i) acc[r][i] = _mm512_fmadd_ps(w, _mm512_loadu_ps(xs[i] + j), acc[r][i]);
    }
  }
  if (j < cols) {
    const __mmask16 k = static_cast<__mmask16>((1u << (cols - j)) - 1u);
    for (int r = 0; r < NR; ++r) {
      const __m512 w = load_w_n<T>(rows[r], j, k);
      for (int i = 0; i < NT; ++i)
        acc[r][i] = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(k, xs[i] + j), acc[r][i]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < NT; ++i) out[r * NT + i] = _mm512_reduce_add_ps(acc[r][i]);
}

// ---- drivers ---------------------------------------------------------------------------

// Bytes of weights the one-token leaves prefetch ahead of the rows they compute: about the
// bandwidth-latency product of one core (~40 GB/s x ~150 ns). One group of short rows (the
// predictor's fc2 has 576-byte rows) is far less, so short rows look several groups ahead.
constexpr size_t kPrefetchAhead = 6144;

// One token: rows in groups of G, prefetching the group `ahead` groups on while computing
// this one (ahead chosen so that about kPrefetchAhead bytes are in flight).
template <int G = 4, typename GroupG, typename Group1>
void rows_one_token(const DotTask& t, GroupG gg, Group1 g1) {
  const size_t group_bytes = G * t.row_bytes;
  const int64_t ahead = G * static_cast<int64_t>((kPrefetchAhead + group_bytes - 1) / group_bytes);
  int64_t k = t.k0;
  for (; k + G <= t.k1; k += G) {
    const uint8_t* rows[G];
    const uint8_t* next[G];
    float out[G];
    for (int r = 0; r < G; ++r) {
      rows[r] = row_ptr(t, k + r);
      next[r] = k + ahead + r < t.k1 ? row_ptr(t, k + ahead + r) : rows[r];
    }
    gg(rows, next, out);
    for (int r = 0; r < G; ++r) t.Y[row_of(t, k + r)] = out[r];
  }
  for (; k < t.k1; ++k) {
    const uint8_t* row = row_ptr(t, k);
    float out;
    g1(&row, &row, &out);
    t.Y[row_of(t, k)] = out;
  }
}

// One token, consecutive rows one at a time (t.idx null): one stream, prefetched in two levels
// (stream_ahead.h) by leaf(rows, next, out), a one-row leaf built with kTwoLevel.
template <typename Leaf>
void rows_streamed(const DotTask& t, Leaf leaf) {
  stream_rows(t.W, t.row_bytes, t.k0, t.k1, [&](const uint8_t* row, const uint8_t* next, int64_t k) {
    float out;
    leaf(&row, &next, &out);
    t.Y[k] = out;
  });
}

// Several tokens: per row, the selected tokens in groups of up to four. The row about
// kPrefetchAhead bytes on is prefetched meanwhile (rows from a list are not consecutive, so
// the hardware prefetcher cannot find them).
template <typename Tokens>
void rows_many_tokens(const DotTask& t, Tokens fn) {
  const int64_t ahead = static_cast<int64_t>((kPrefetchAhead + t.row_bytes - 1) / t.row_bytes);
  for (int64_t k = t.k0; k < t.k1; ++k) {
    const uint8_t* row = row_ptr(t, k);
    if (k + ahead < t.k1) {
      const uint8_t* next = row_ptr(t, k + ahead);
      for (size_t o = 0; o < t.row_bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(next + o), _MM_HINT_T0);
    }
    const int64_t r = row_of(t, k);
    int sel[kMaxMaskTokens];
    const int n = select_tokens(t, k, sel);
    for (int g = 0; g < n; g += 4) {
      const int nt = n - g < 4 ? n - g : 4;
      float out[4];
      fn(row, sel + g, nt, out);
      for (int i = 0; i < nt; ++i) t.Y[sel[g + i] * t.ldy + r] = out[i];
    }
  }
}

// Several tokens, all of them for every row (no masks): rows in pairs, tokens in groups of
// up to four; fn2(row0, row1, first token, count, out0, out1). An odd last row goes to fn1
// as in rows_many_tokens.
template <typename Tokens2, typename Tokens1>
void row_pairs_all_tokens(const DotTask& t, Tokens2 fn2, Tokens1 fn1) {
  const int64_t ahead = static_cast<int64_t>((kPrefetchAhead + t.row_bytes - 1) / t.row_bytes);
  int sel[kMaxMaskTokens];
  for (int i = 0; i < t.m && i < kMaxMaskTokens; ++i) sel[i] = i;
  int64_t k = t.k0;
  for (; k + 2 <= t.k1; k += 2) {
    for (int64_t j = k + ahead; j < k + ahead + 2 && j < t.k1; ++j) {
      const uint8_t* next = row_ptr(t, j);
      for (size_t o = 0; o < t.row_bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(next + o), _MM_HINT_T0);
    }
    const int64_t r0 = row_of(t, k), r1 = row_of(t, k + 1);
    for (int g = 0; g < t.m; g += 4) {
      const int nt = t.m - g < 4 ? static_cast<int>(t.m - g) : 4;
      float out0[4], out1[4];
      fn2(row_ptr(t, k), row_ptr(t, k + 1), sel + g, nt, out0, out1);
      for (int i = 0; i < nt; ++i) {
        t.Y[(g + i) * t.ldy + r0] = out0[i];
        t.Y[(g + i) * t.ldy + r1] = out1[i];
      }
    }
  }
  for (; k < t.k1; ++k) {
    const int64_t r = row_of(t, k);
    for (int g = 0; g < t.m; g += 4) {
      const int nt = t.m - g < 4 ? static_cast<int>(t.m - g) : 4;
      float out[4];
      fn1(row_ptr(t, k), sel + g, nt, out);
      for (int i = 0; i < nt; ++i) t.Y[(g + i) * t.ldy + r] = out[i];
    }
  }
}

// The many-token leaves of a block format: single(NT, row, acts, out) for one row and
// pair(NT, row0, row1, acts, out0, out1) for two, generic lambdas called with NT = 1 .. 4 as
// a std::integral_constant; rows in pairs when every token takes every row (no masks).
template <typename Single, typename Pair>
void many_tokens(const DotTask& t, Single single, Pair pair) {
  auto with_nt = [](int nt, auto&& f) {
    switch (nt) {
      case 4: return f(std::integral_constant<int, 4>{});
      case 3: return f(std::integral_constant<int, 3>{});
      case 2: return f(std::integral_constant<int, 2>{});
      default: return f(std::integral_constant<int, 1>{});
    }
  };
  auto acts_of = [&](const int* sel, int nt, const uint8_t** acts) {
    for (int i = 0; i < nt; ++i) acts[i] = t.act + sel[i] * t.act_stride;
  };
  auto one = [&](const uint8_t* row, const int* sel, int nt, float* out) {
    const uint8_t* acts[4];
    acts_of(sel, nt, acts);
    with_nt(nt, [&](auto n) { single(n, row, acts, out); });
  };
  if (t.masks == nullptr && t.m <= kMaxMaskTokens) {
    row_pairs_all_tokens(
        t,
        [&](const uint8_t* r0, const uint8_t* r1, const int* sel, int nt, float* o0, float* o1) {
          const uint8_t* acts[4];
          acts_of(sel, nt, acts);
          with_nt(nt, [&](auto n) { pair(n, r0, r1, acts, o0, o1); });
        },
        one);
    return;
  }
  rows_many_tokens(t, one);
}

template <class Dec>
void dot_quant(const DotTask& t) {
  const int64_t nb = t.cols / 32;
  if (t.m == 1 && t.masks == nullptr) {
    auto one = [&](const uint8_t* const* r, const uint8_t* const* n, float* o) { dot_rows<Dec, 1>(r, n, t.act, nb, o); };
    if (Dec::kStreamRows && t.idx == nullptr) {
      // Consecutive rows one at a time: a single sequential stream (see dot_quads).
      rows_streamed(t, [&](const uint8_t* const* r, const uint8_t* const* n, float* o) { dot_rows<Dec, 1, true>(r, n, t.act, nb, o); });
    } else if (t.row_bytes <= 2560) {
      rows_one_token<4>(t, [&](const uint8_t* const* r, const uint8_t* const* n, float* o) { dot_rows<Dec, 4>(r, n, t.act, nb, o); }, one);
    } else {
      // Longer rows (Q8_0 at 4096 columns): two per group keeps this group, the prefetched
      // next one and the activation within L1. (Prefetching into L2 only when the activation
      // is large, as for 11008 columns, measured no better.)
      rows_one_token<2>(t, [&](const uint8_t* const* r, const uint8_t* const* n, float* o) { dot_rows<Dec, 2>(r, n, t.act, nb, o); }, one);
    }
    return;
  }
  many_tokens(
      t,
      [&](auto n, const uint8_t* row, const uint8_t* const* acts, float* out) {
        dot_tokens<Dec, decltype(n)::value>(row, acts, nb, out);
      },
      [&](auto n, const uint8_t* r0, const uint8_t* r1, const uint8_t* const* acts, float* o0, float* o1) {
        dot_tokens2<Dec, decltype(n)::value>(r0, r1, acts, nb, o0, o1);
      });
}

// Q4_0 and MXFP4 (F: QuadQ4_0, QuadMXFP4) over activation quads.
template <class F>
void dot_quads(const DotTask& t) {
  const F f;
  const int64_t nb = t.cols / 32;
  if (t.m == 1 && t.masks == nullptr) {
    auto one = [&](const uint8_t* const* r, const uint8_t* const* n, float* o) { quad_rows<F, 1>(f, r, n, t.act, nb, o); };
    if (t.idx != nullptr) {
      // Scattered rows (sparse gate/up): eight in flight measured 10-15% faster than four
      // (matvec_rows_10pct, one thread) and ~3% on the gate/up phase of the 7B-shaped file;
      // one or two at a time 7-13% slower.
      rows_one_token<8>(t, [&](const uint8_t* const* r, const uint8_t* const* n, float* o) { quad_rows<F, 8>(f, r, n, t.act, nb, o); }, one);
    } else if (t.row_bytes <= 1152) {
      // Consecutive rows one at a time: the weights stream as one sequential run, which the
      // hardware prefetchers follow best. Groups of four rows (four interleaved streams 2304
      // bytes apart) read at ~80% of the probe, one row at 95-105% (matvec 4096x4096 and
      // 11008x4096, 1 and 2 threads) - end to end +15% dense and +13% sparse decode - with
      // the same compute ceiling (matvec_l2). Short rows (the predictor's fc2): light prefetch.
      rows_streamed(t, [&](const uint8_t* const* r, const uint8_t* const* n, float* o) { quad_rows<F, 1, true, true>(f, r, n, t.act, nb, o); });
    } else {
      rows_streamed(t, [&](const uint8_t* const* r, const uint8_t* const* n, float* o) { quad_rows<F, 1, false, true>(f, r, n, t.act, nb, o); });
    }
    return;
  }
  many_tokens(
      t,
      [&](auto n, const uint8_t* row, const uint8_t* const* acts, float* out) {
        quad_tokens<F, decltype(n)::value>(f, row, acts, nb, out);
      },
      [&](auto n, const uint8_t* r0, const uint8_t* r1, const uint8_t* const* acts, float* o0, float* o1) {
        quad_tokens2<F, decltype(n)::value>(f, r0, r1, acts, nb, o0, o1);
      });
}

template <DType T>
void dot_floats(const DotTask& t) {
  if (t.m == 1 && t.masks == nullptr) {
    const float* x = t.x;
    auto one = [&](const uint8_t* const* r, const uint8_t* const* n, float* o) { dot_float<T, 1, 1>(r, n, &x, t.cols, o); };
    if (t.idx == nullptr) {
      // One sequential stream (see dot_quads): 84% -> 94-98%.
      rows_streamed(t, [&](const uint8_t* const* r, const uint8_t* const* n, float* o) { dot_float<T, 1, 1, true>(r, n, &x, t.cols, o); });
    } else {
      rows_one_token(t, [&](const uint8_t* const* r, const uint8_t* const* n, float* o) { dot_float<T, 4, 1>(r, n, &x, t.cols, o); }, one);
    }
    return;
  }
  rows_many_tokens(t, [&](const uint8_t* row, const int* sel, int nt, float* out) {
    const float* xs[4];
    for (int i = 0; i < nt; ++i) xs[i] = t.x + sel[i] * t.x_stride;
    switch (nt) {
      case 4: dot_float<T, 1, 4>(&row, &row, xs, t.cols, out); break;
      case 3: dot_float<T, 1, 3>(&row, &row, xs, t.cols, out); break;
      case 2: dot_float<T, 1, 2>(&row, &row, xs, t.cols, out); break;
      default: dot_float<T, 1, 1>(&row, &row, xs, t.cols, out); break;
    }
  });
}

}  // namespace

void avx512_dot(const DotTask& t) {
  switch (t.type) {
    case DType::Q4_0: return dot_quads<QuadQ4_0>(t);
    case DType::Q4_1: return dot_quant<DecQ4_1>(t);
    case DType::Q5_0: return dot_quant<DecQ5_0>(t);
    case DType::Q5_1: return dot_quant<DecQ5_1>(t);
    case DType::Q8_0: return dot_quant<DecQ8_0>(t);
    case DType::MXFP4: return dot_quads<QuadMXFP4>(t);
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return avx512_kq_dot(t);
    case DType::F32: return dot_floats<DType::F32>(t);
    case DType::F16: return dot_floats<DType::F16>(t);
    case DType::BF16: return dot_floats<DType::BF16>(t);
    default: return scalar_dot(t);
  }
}

}  // namespace pi::cpu::detail
