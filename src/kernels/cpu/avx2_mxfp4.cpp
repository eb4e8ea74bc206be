// AVX2 dot-product leaves of MXFP4 (gpt-oss's expert format, tensor/quant.h BlockMXFP4):
// blocks of 17 bytes, an E8M0 exponent byte e and 32 E2M1 codes. Compiled with -mavx2 -mfma
// -mf16c; reached through avx2_matrix.cpp.
//
// Prepared activation, per octet of eight 32-element blocks one kOctetSlot-byte slot: four
// pairs of blocks (A, B) = (2p, 2p + 1) of kPairSlot bytes each - the int8 quants of elements
// 0-15 of A then of B (32 bytes), of elements 16-31 of A then of B (32 bytes), and the lane
// terms -12 x (the sum of the lane's 4 + 4 quants) as 8 int32 - then the eight blocks' scales
// dx (f32, amax / 127 as every integer path). Blocks past the row's end are zero.
//
// Per pair of weight blocks: their 2 x 16 code bytes in one register, the low and the high
// nibbles looked up (vpshufb) as value + 12 (unsigned), each half's vpmaddubsw with its
// activation summed in int16 (at most 2 x 2 x 24 x 128 in magnitude), one vpmaddwd to int32
// lanes (0-3 block A, 4-7 block B), plus the lane terms: the pair's integer sums, exact. Per
// octet the eight exponent bytes are gathered once and made 2^(e - 128) as f32 bits,
// (e - 1) << 23 with e - 1 saturated at 0: exact for e >= 2, and 0 for e = 0 and 1 (values
// below 12 x 2^-127 in magnitude; their exact scales are subnormal, which costs a microcode
// assist per multiply on Intel cores), as the AVX-512 leaf (avx512_quads.h). Then
//   acc = fma(float(s), dd, acc),  dd = (2^(e - 128) x dx) per lane,
// and the row's result is the sum of acc's lanes: the same operations for one token and for
// many, so matmul's tokens equal matvec bit for bit.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx2_blocks.h"
#include "kernels/cpu/avx2_leaves.h"
#include "kernels/cpu/kquant_simd.h"

namespace pi::cpu::detail {
namespace {

constexpr size_t kBlockBytes = 17;
constexpr size_t kOctetBytes = 8 * kBlockBytes;
constexpr size_t kPairSlot = 96;
constexpr size_t kOctetSlot = 4 * kPairSlot + 32;
constexpr int kOffset = 12;

// Lane sums (4 bytes each) of unsigned a times signed b.
inline __m256i lane_sums(__m256i a, __m256i b) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
}

// One block's 32 quants (natural order) and its dx, as avx2_prepare_act quantizes.
inline __m256i quantize_block(const float* x, float* dx) {
  bool nan = false;
  const float am = amax_of(x, 32, &nan);
  *dx = nan ? __builtin_nanf("") : am / 127.0f;
  return quantize32_i8(x, _mm256_set1_ps(am > 0.0f && am <= 3.4e38f ? 127.0f / am : 0.0f));
}

// A pair's codes: value + 12 of the low (lo) and high (hi) nibbles of blocks A and B, in the
// activation's order. qa: A's 16 code bytes; B absent (a row's odd last block) reads as zeros.
struct PairCodes {
  __m256i lo, hi;
};
inline PairCodes pair_codes(const uint8_t* qa, bool with_b, __m256i table) {
  const __m256i v = with_b ? _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(qa + kBlockBytes),
                                                  reinterpret_cast<const __m128i*>(qa))
                           : _mm256_zextsi128_si256(loadu128(qa));
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  return {_mm256_shuffle_epi8(table, _mm256_and_si256(v, m4)),
          _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4))};
}

inline __m256i code_table() {
  alignas(16) int8_t t[16];
  for (int c = 0; c < 16; ++c) t[c] = static_cast<int8_t>(kMxfp4Values[c] + kOffset);
  return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
}

// 2^(e - 128) per block of the octet at w (nbo of its blocks present: the others' lanes 0).
inline __m256 octet_scales(const uint8_t* w, int64_t nbo) {
  const __m256i idx = _mm256_setr_epi32(0, 17, 34, 51, 68, 85, 102, 119);
  const auto* base = reinterpret_cast<const int*>(w);
  __m256i g;
  if (nbo == 8) {
    g = _mm256_i32gather_epi32(base, idx, 1);
  } else {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(nbo)), lane);
    g = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), base, idx, mask, 1);
  }
  const __m256i e = _mm256_and_si256(g, _mm256_set1_epi32(0xff));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_subs_epu8(e, _mm256_set1_epi32(1)), 23));
}

// Lane -> block of pair p for the octet's scale vector.
alignas(32) constexpr int32_t kPairLanes[4][8] = {
    {0, 0, 0, 0, 1, 1, 1, 1}, {2, 2, 2, 2, 3, 3, 3, 3}, {4, 4, 4, 4, 5, 5, 5, 5}, {6, 6, 6, 6, 7, 7, 7, 7}};

inline __m256i load256(const uint8_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// One row x NT tokens over nb blocks; next (or null): a row to prefetch meanwhile.
template <int NT, bool kTwoLevel = false>
inline void dot_row(const uint8_t* row, const uint8_t* next, const uint8_t* const* acts, int64_t nb, float* out) {
  const __m256i table = code_table();
  __m256 acc[NT];
  for (int i = 0; i < NT; ++i) acc[i] = _mm256_setzero_ps();
  auto octet = [&](int64_t o, int64_t nbo) {
    const uint8_t* w = row + o * kOctetBytes;
    if (next != nullptr) {
      for (size_t l = 0; l < kOctetBytes; l += 64) prefetch_next<kTwoLevel>(next + o * kOctetBytes + l);
    }
    const __m256 dw = octet_scales(w, nbo);
    __m256 dd[NT];
    for (int i = 0; i < NT; ++i) {
      const auto* dx = reinterpret_cast<const float*>(acts[i] + o * kOctetSlot + 4 * kPairSlot);
      dd[i] = _mm256_mul_ps(dw, _mm256_load_ps(dx));
    }
    for (int64_t p = 0; 2 * p < nbo; ++p) {
      const PairCodes c = pair_codes(w + 2 * p * kBlockBytes + 1, 2 * p + 1 < nbo, table);
      const __m256i lanes = _mm256_load_si256(reinterpret_cast<const __m256i*>(kPairLanes[p]));
      for (int i = 0; i < NT; ++i) {
        const uint8_t* a = acts[i] + o * kOctetSlot + p * kPairSlot;
        const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(c.lo, load256(a)), _mm256_maddubs_epi16(c.hi, load256(a + 32)));
        const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)), load256(a + 64));
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_permutevar8x32_ps(dd[i], lanes), acc[i]);
      }
    }
  };
  const int64_t full = nb / 8;
  for (int64_t o = 0; o < full; ++o) octet(o, 8);
  if (nb % 8 != 0) octet(full, nb % 8);
  for (int i = 0; i < NT; ++i) out[i] = hsum(acc[i]);
}

}  // namespace

size_t avx2_mx_act_bytes(int64_t cols) { return static_cast<size_t>((cols / 32 + 7) / 8) * kOctetSlot; }

void avx2_mx_prepare(const float* x, int64_t cols, uint8_t* out) {
  const int64_t nb = cols / 32;
  for (int64_t o = 0; o < (nb + 7) / 8; ++o) {
    uint8_t* slot = out + o * kOctetSlot;
    alignas(32) float dx[8] = {};
    for (int p = 0; p < 4; ++p) {
      const int64_t a = 8 * o + 2 * p;
      const __m256i qa = a < nb ? quantize_block(x + 32 * a, &dx[2 * p]) : _mm256_setzero_si256();
      const __m256i qb = a + 1 < nb ? quantize_block(x + 32 * (a + 1), &dx[2 * p + 1]) : _mm256_setzero_si256();
      const __m256i lo = _mm256_permute2x128_si256(qa, qb, 0x20), hi = _mm256_permute2x128_si256(qa, qb, 0x31);
      const __m256i ones = _mm256_set1_epi8(1);
      const __m256i sums = _mm256_add_epi32(lane_sums(ones, lo), lane_sums(ones, hi));
      uint8_t* s = slot + p * kPairSlot;
      _mm256_store_si256(reinterpret_cast<__m256i*>(s), lo);
      _mm256_store_si256(reinterpret_cast<__m256i*>(s + 32), hi);
      _mm256_store_si256(reinterpret_cast<__m256i*>(s + 64), _mm256_mullo_epi32(sums, _mm256_set1_epi32(-kOffset)));
    }
    _mm256_store_ps(reinterpret_cast<float*>(slot + 4 * kPairSlot), _mm256_load_ps(dx));
  }
}

void avx2_mx_dot(const DotTask& t) {
  const int64_t nb = t.cols / 32;
  kq_drive(t, [&](auto nt, auto two, const uint8_t* row, const uint8_t* next, const uint8_t* const* acts, float* out) {
    dot_row<decltype(nt)::value, decltype(two)::value>(row, next, acts, nb, out);
  });
}

}  // namespace pi::cpu::detail
