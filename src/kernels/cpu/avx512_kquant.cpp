// AVX-512 leaves of the K-quants Q2_K..Q6_K: activations quantized once per call to one int8
// scale per 256-element super-block (kquant_simd.h), integer dot products with the sub-block
// scales applied by VNNI vpdpwssd, and the axpy over decoded super-blocks. Compiled with the
// AVX-512 flags (avx512_matrix.cpp).
//
// Q4_K and Q5_K, the formats of most K-quant models, have 512-bit leaves: 64 bytes of packed
// nibbles hold groups (g, g + 2) in their low nibbles and (g + 1, g + 3) in their high ones,
// so their activation slots store the groups in the order 0 2 1 3 4 6 5 7 (sums and scale
// as in kquant_simd.h) and each 64-byte load of quants meets one 64-byte load of activations.
// Q6_K has a 512-bit leaf on the same slots (natural order). Q2_K and Q3_K use the 256-bit
// leaves of kquant_simd.h.
#include <immintrin.h>

#include "kernels/cpu/avx512_leaves.h"
#include "kernels/cpu/kquant_simd.h"

namespace pi::cpu::detail {
namespace {

constexpr int kNibbleOrder[8] = {0, 2, 1, 3, 4, 6, 5, 7};

bool nibble_layout(DType t) { return t == DType::Q4_K || t == DType::Q5_K; }

// pshufb indices giving, per 128-bit lane, one scale byte of the 16 [sc0..7, m0..7]
// zero-extended to int16: part P's groups are (A, B) = kNibbleOrder[2P], kNibbleOrder[2P+1];
// lanes 0-1 take A, lanes 2-3 take B.
inline __m512i scale_index(int a, int b) {
  const __m128i ia = _mm_set1_epi16(static_cast<short>(a | 0x8000));
  const __m128i ib = _mm_set1_epi16(static_cast<short>(b | 0x8000));
  const __m256i lo = _mm256_setr_m128i(ia, ia), hi = _mm256_setr_m128i(ib, ib);
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// The mins per 16-element sub-block (m[j / 2], bytes 8..15 of [sc, m]) as 16 int16.
inline __m256i min_index() {
  return _mm256_setr_epi8(8, -128, 8, -128, 9, -128, 9, -128, 10, -128, 10, -128, 11, -128, 11, -128,
                          12, -128, 12, -128, 13, -128, 13, -128, 14, -128, 14, -128, 15, -128, 15, -128);
}

// A super-block for the 512-bit leaves: x = d sc z + dc corr per 16-element sub-block.
struct Block512 {
  __m512i z[4];    // quants of the four 64-byte parts, in slot order
  __m512i sc[4];   // int16 scales per part
  __m256i corr;    // int16 correction weight per sub-block (natural order)
  float d, dc;
};

// Fifth bits of groups (A, B) = (2c + h, 2c + h + 2) of Q5_K: bytes with the bit -> 16.
template <bool kQ5>
inline void decode_q45(const uint8_t* b, const __m512i* sidx, Block512& k) {
  k.d = _cvtsh_ss(load_u16(b));
  k.dc = -_cvtsh_ss(load_u16(b + 2));
  uint64_t sc, m;
  kq_scales_k4(b + 4, sc, m);
  const __m128i sm = _mm_set_epi64x(static_cast<long long>(m), static_cast<long long>(sc));
  const __m512i smb = _mm512_broadcast_i32x4(sm);
  for (int p = 0; p < 4; ++p) k.sc[p] = _mm512_shuffle_epi8(smb, sidx[p]);
  k.corr = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(sm), min_index());
  const uint8_t* qs = b + (kQ5 ? 48 : 16);
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  for (int c = 0; c < 2; ++c) {
    const __m512i v = _mm512_loadu_si512(qs + 64 * c);
    k.z[2 * c] = _mm512_and_si512(v, m4);
    k.z[2 * c + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
  }
  if constexpr (kQ5) {
    const __m256i qh = loadu256(b + 16);
    const __m512i h = _mm512_inserti64x4(_mm512_castsi256_si512(qh), qh, 1);
    const __m512i sixteen = _mm512_set1_epi8(16);
    for (int p = 0; p < 4; ++p) {
      const int ga = kNibbleOrder[2 * p], gb = kNibbleOrder[2 * p + 1];
      const __m512i bits = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8(static_cast<char>(1 << ga))),
                                              _mm256_set1_epi8(static_cast<char>(1 << gb)), 1);
      k.z[p] = _mm512_mask_add_epi8(k.z[p], _mm512_test_epi8_mask(h, bits), k.z[p], sixteen);
    }
  }
}

// One row x NT tokens. Per super-block and token: isum = sum over the four parts of
// vpdpwssd(vpmaddubsw(z, q), scales), csum = vpmaddwd(bsums, corr); then
// acc += (d dx) isum and accm += (dc dx) csum. The same operations for every NT.
// decode(b, k) fills a Block512 for the super-block at b (kBytes each).
template <size_t kBytes, int NT, bool kTwoLevel, typename Decode>
inline void row512(const uint8_t* row, const uint8_t* next, const uint8_t* const* acts, int64_t nsb,
                   Decode decode, float* out) {
  __m512 acc[NT];
  __m256 accm[NT];
  for (int i = 0; i < NT; ++i) {
    acc[i] = _mm512_setzero_ps();
    accm[i] = _mm256_setzero_ps();
  }
  for (int64_t s = 0; s < nsb; ++s) {
    const uint8_t* b = row + s * kBytes;
    if (next != nullptr) {
      for (size_t o = 0; o < kBytes; o += 64) prefetch_next<kTwoLevel>(next + s * kBytes + o);
    }
    Block512 k;
    decode(b, k);
    for (int i = 0; i < NT; ++i) {
      const uint8_t* a = acts[i] + static_cast<size_t>(s) * kKSlot;
      __m512i isum = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p)
        isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(k.z[p], _mm512_loadu_si512(a + 64 * p)), k.sc[p]);
      const __m256i csum = _mm256_madd_epi16(loadu256(a + kKSums), k.corr);
      float dx;
      std::memcpy(&dx, a + kKScale, 4);
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(k.d * dx), acc[i]);
      accm[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(csum), _mm256_set1_ps(k.dc * dx), accm[i]);
    }
  }
  for (int i = 0; i < NT; ++i) out[i] = _mm512_reduce_add_ps(acc[i]) + kq_hsum(accm[i]);
}

template <bool kQ5, int NT, bool kTwoLevel>
inline void q45_row(const uint8_t* row, const uint8_t* next, const uint8_t* const* acts, int64_t nsb, float* out) {
  __m512i sidx[4];
  for (int p = 0; p < 4; ++p) sidx[p] = scale_index(kNibbleOrder[2 * p], kNibbleOrder[2 * p + 1]);
  row512<kQ5 ? 176 : 144, NT, kTwoLevel>(row, next, acts, nsb, [&](const uint8_t* b, Block512& k) { decode_q45<kQ5>(b, sidx, k); },
                              out);
}

// Q6_K through the same activation slots (natural order): quarter p of a super-block (64
// elements) has sub-blocks 4p .. 4p+3, x = d s (q - 32) with q in 0..63, so dc = -32 d and
// the correction weights are the scales.
inline void q6k_quarters(const uint8_t* b, __m512i* z) {
  const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(0x03);
  for (int h = 0; h < 2; ++h) {
    const __m512i ql = _mm512_loadu_si512(b + 64 * h);
    const __m256i qh = loadu256(b + 128 + 32 * h);
    const __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
    const __m512i h0 = _mm512_slli_epi16(_mm512_and_si512(hh, m2), 4);
    const __m512i h1 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hh, 4), m2), 4);
    z[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4), h0);
    z[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), h1);
  }
}

template <int NT, bool kTwoLevel>
inline void q6k_row(const uint8_t* row, const uint8_t* next, const uint8_t* const* acts, int64_t nsb, float* out) {
  __m512i sidx[4];
  for (int p = 0; p < 4; ++p) {
    alignas(64) int16_t idx[32];
    for (int l = 0; l < 32; ++l) idx[l] = static_cast<int16_t>(4 * p + l / 8);
    sidx[p] = _mm512_load_si512(idx);
  }
  row512<210, NT, kTwoLevel>(row, next, acts, nsb, [&](const uint8_t* b, Block512& k) {
    q6k_quarters(b, k.z);
    k.corr = _mm256_cvtepi8_epi16(loadu128(b + 192));
    for (int p = 0; p < 4; ++p) k.sc[p] = _mm512_permutexvar_epi16(sidx[p], _mm512_castsi256_si512(k.corr));
    k.d = _cvtsh_ss(load_u16(b + 208));
    k.dc = -32.0f * k.d;
  }, out);
}

}  // namespace

size_t avx512_kq_act_bytes(DType, int64_t cols) { return static_cast<size_t>(cols / 256) * kKSlot; }

void avx512_kq_prepare(DType t, const float* x, int64_t cols, uint8_t* out) {
  kq_prepare(x, cols, out, nibble_layout(t) ? kNibbleOrder : kNaturalOrder);
}

void avx512_kq_dot(const DotTask& t) {
  const int64_t nsb = t.cols / 256;
  if (t.type == DType::Q4_K) {
    kq_drive(t, [&](auto nt, auto two, const uint8_t* row, const uint8_t* next, const uint8_t* const* acts, float* out) {
      q45_row<false, decltype(nt)::value, decltype(two)::value>(row, next, acts, nsb, out);
    });
  } else if (t.type == DType::Q6_K) {
    kq_drive(t, [&](auto nt, auto two, const uint8_t* row, const uint8_t* next, const uint8_t* const* acts, float* out) {
      q6k_row<decltype(nt)::value, decltype(two)::value>(row, next, acts, nsb, out);
    });
  } else if (t.type == DType::Q5_K) {
    kq_drive(t, [&](auto nt, auto two, const uint8_t* row, const uint8_t* next, const uint8_t* const* acts, float* out) {
      q45_row<true, decltype(nt)::value, decltype(two)::value>(row, next, acts, nsb, out);
    });
  } else {
    kq_drive(t, [&](auto nt, auto two, const uint8_t* row, const uint8_t* next, const uint8_t* const* acts, float* out) {
      kq_dot_row<decltype(nt)::value, decltype(two)::value>(t.type, row, next, acts, nsb, out);
    });
  }
}

void avx512_kq_axpy(const AxpyTask& t) { kq_axpy(t); }

}  // namespace pi::cpu::detail
