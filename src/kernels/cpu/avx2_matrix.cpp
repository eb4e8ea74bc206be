// AVX2 dot-product leaves: activation quantization to Q8, integer dot products of the block
// types (vpmaddubsw + vpmaddwd) and f32 FMA dot products of F32/F16/BF16 rows; the K-quants
// Q2_K..Q6_K go to avx2_kquant.cpp, MXFP4 to avx2_mxfp4.cpp. Compiled with -mavx2 -mfma -mf16c.
//
// Prepared activation (integer types): per 32-element block one 96-byte slot: 32 int8 quants
// (natural order), 8 int32 lane terms (-offset * sum of the lane's 4 quants, for types
// stored as q - offset; the 4-bit and 5-bit quants are unsigned), then f32 dx and
// f32 dx * sum(quants) (for the types with a minimum). Q8_0 weights are signed and use the
// sign trick (|w| times x with w's sign), so their offset is 0.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx2_blocks.h"
#include "kernels/cpu/avx2_leaves.h"
#include "kernels/cpu/scalar_blocks.h"
#include "kernels/cpu/scalar_leaves.h"

namespace pi::cpu::detail {
namespace {

constexpr size_t kSlot = 96;

// Lane sums (4 bytes each) of unsigned a times signed b.
inline __m256i lane_dot(__m256i a, __m256i b) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
}

bool int_path(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1 ||
         t == DType::Q8_0;
}

int act_offset(DType t) {
  switch (t) {
    case DType::Q4_0: return BQ4_0::kOffset;
    case DType::Q5_0: return BQ5_0::kOffset;
    default: return 0;
  }
}

bool k_quant(DType t) {
  return t == DType::Q2_K || t == DType::Q3_K || t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
}

}  // namespace

size_t avx2_act_bytes(DType t, int64_t cols) {
  if (k_quant(t)) return avx2_kq_act_bytes(t, cols);
  if (t == DType::MXFP4) return avx2_mx_act_bytes(cols);
  return int_path(t) ? static_cast<size_t>(cols / 32) * kSlot : 0;
}

void avx2_prepare_act(DType t, const float* x, int64_t cols, uint8_t* out) {
  if (k_quant(t)) return avx2_kq_prepare(t, x, cols, out);
  if (t == DType::MXFP4) return avx2_mx_prepare(x, cols, out);
  if (!int_path(t)) return;
  const __m256i neg_off = _mm256_set1_epi32(-act_offset(t));
  for (int64_t b = 0; b < cols / 32; ++b) {
    const float* xb = x + 32 * b;
    bool nan = false;
    const float am = amax_of(xb, 32, &nan);
    const float d = nan ? __builtin_nanf("") : am / 127.0f;
    const __m256i b8 = quantize32_i8(xb, _mm256_set1_ps(am > 0.0f && am <= 3.4e38f ? 127.0f / am : 0.0f));
    uint8_t* slot = out + b * kSlot;
    _mm256_store_si256(reinterpret_cast<__m256i*>(slot), b8);
    const __m256i sums = lane_dot(_mm256_set1_epi8(1), b8);
    _mm256_store_si256(reinterpret_cast<__m256i*>(slot + 32), _mm256_mullo_epi32(sums, neg_off));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sums), _mm256_extracti128_si256(sums, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    const float f[2] = {d, d * static_cast<float>(_mm_cvtsi128_si32(s4))};
    std::memcpy(slot + 64, f, sizeof f);
  }
}

namespace {

// ---- integer dot products: NR rows x NT tokens --------------------------------------------
template <class Dec, int NR, int NT>
inline void dot_blocks(const uint8_t* const* rows, const uint8_t* const* next, const uint8_t* const* acts,
                       int64_t nb, float* out) {
  __m256 acc[NR][NT];
  float accm[NR][NT];
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < NT; ++i) {
      acc[r][i] = _mm256_setzero_ps();
      accm[r][i] = 0.0f;
    }
  for (int64_t b = 0; b < nb; ++b) {
    const size_t off = static_cast<size_t>(b) * Dec::kBytes;
    // The unsigned types' four-row tiles convert the rows' f16 scales (those starting with
    // an f16 d) in one instruction and multiply them by dx at once: the same
    // products as one row at a time, and one permute per row instead of a convert, a multiply
    // and a broadcast. (Q8_0's tiles measured slower so; they keep the scalar form.)
    constexpr bool kVecScale = NR == 4 && !Dec::kSigned && Dec::kHalfScale;
    __m256 dd[NT];
    if constexpr (kVecScale) {
      uint64_t h = 0;
      for (int r = 0; r < 4; ++r) h |= static_cast<uint64_t>(load_u16(rows[r] + off)) << (16 * r);
      const __m128 d4 = _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(h)));
      for (int i = 0; i < NT; ++i) {
        float dx;
        std::memcpy(&dx, acts[i] + b * kSlot + 64, 4);
        dd[i] = _mm256_castps128_ps256(_mm_mul_ps(d4, _mm_set1_ps(dx)));
      }
    }
    for (int r = 0; r < NR; ++r) {
      const uint8_t* p = rows[r] + off;
      prefetch(next[r] + off);
      const __m256i z = Dec::quants(p);
      const __m256i za = Dec::kSigned ? _mm256_sign_epi8(z, z) : z;
      for (int i = 0; i < NT; ++i) {
        const uint8_t* a = acts[i] + b * kSlot;
        __m256i xq = _mm256_load_si256(reinterpret_cast<const __m256i*>(a));
        if constexpr (Dec::kSigned) xq = _mm256_sign_epi8(xq, z);
        __m256i s = lane_dot(za, xq);
        if constexpr (Dec::kOffset != 0)
          s = _mm256_add_epi32(s, _mm256_load_si256(reinterpret_cast<const __m256i*>(a + 32)));
        float dx, sx;
        std::memcpy(&dx, a + 64, 4);
        const __m256 scale =
            kVecScale ? _mm256_permutevar8x32_ps(dd[i], _mm256_set1_epi32(r)) : _mm256_set1_ps(Dec::d(p) * dx);
        acc[r][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, acc[r][i]);
        if constexpr (Dec::kMin) {
          std::memcpy(&sx, a + 68, 4);
          accm[r][i] += Dec::mn(p) * sx;
        }
      }
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < NT; ++i) {
      __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc[r][i]), _mm256_extractf128_ps(acc[r][i], 1));
      s = _mm_add_ps(s, _mm_movehl_ps(s, s));
      s = _mm_add_ss(s, _mm_movehdup_ps(s));
      out[r * NT + i] = _mm_cvtss_f32(s) + accm[r][i];
    }
}

template <DType T, int NR, int NT>
inline void dot_float(const uint8_t* const* rows, const uint8_t* const* next, const float* const* xs,
                      int64_t cols, float* out) {
  __m256 acc[NR][NT];
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < NT; ++i) acc[r][i] = _mm256_setzero_ps();
  constexpr int64_t kElem = T == DType::F32 ? 4 : 2;
  int64_t j = 0;
  for (; j + 8 <= cols; j += 8) {
    for (int r = 0; r < NR; ++r) {
      if ((j * kElem) % 64 == 0) prefetch(next[r] + j * kElem);
      const __m256 w = load_w<T>(rows[r], j);
      for (int i = 0; i < NT; ++i) acc[r][i] = _mm256_fmadd_ps(w, _mm256_loadu_ps(xs[i] + j), acc[r][i]);
    }
  }
  if (j < cols) {
    const int n = static_cast<int>(cols - j);
    for (int r = 0; r < NR; ++r) {
      const __m256 w = load_w_n<T>(rows[r], j, n);
      for (int i = 0; i < NT; ++i) acc[r][i] = _mm256_fmadd_ps(w, load_x_n(xs[i] + j, n), acc[r][i]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < NT; ++i) {
      __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc[r][i]), _mm256_extractf128_ps(acc[r][i], 1));
      s = _mm_add_ps(s, _mm_movehl_ps(s, s));
      s = _mm_add_ss(s, _mm_movehdup_ps(s));
      out[r * NT + i] = _mm_cvtss_f32(s);
    }
}

template <class Dec>
void dot_quant(const DotTask& t) {
  const int64_t nb = t.cols / 32;
  const uint8_t* act0 = t.act;
  drive_rows4(
      t, [&](const uint8_t* const* r, const uint8_t* const* n, float* o) { dot_blocks<Dec, 4, 1>(r, n, &act0, nb, o); },
      [&](const uint8_t* r, float* o) { dot_blocks<Dec, 1, 1>(&r, &r, &act0, nb, o); },
      [&](const uint8_t* r, const int* sel, int nt, float* o) {
        const uint8_t* acts[4];
        for (int i = 0; i < nt; ++i) acts[i] = t.act + sel[i] * t.act_stride;
        switch (nt) {
          case 4: dot_blocks<Dec, 1, 4>(&r, &r, acts, nb, o); break;
          case 3: dot_blocks<Dec, 1, 3>(&r, &r, acts, nb, o); break;
          case 2: dot_blocks<Dec, 1, 2>(&r, &r, acts, nb, o); break;
          default: dot_blocks<Dec, 1, 1>(&r, &r, acts, nb, o); break;
        }
      });
}

template <DType T>
void dot_floats(const DotTask& t) {
  const float* x0 = t.x;
  drive_rows4(
      t, [&](const uint8_t* const* r, const uint8_t* const* n, float* o) { dot_float<T, 4, 1>(r, n, &x0, t.cols, o); },
      [&](const uint8_t* r, float* o) { dot_float<T, 1, 1>(&r, &r, &x0, t.cols, o); },
      [&](const uint8_t* r, const int* sel, int nt, float* o) {
        const float* xs[4];
        for (int i = 0; i < nt; ++i) xs[i] = t.x + sel[i] * t.x_stride;
        switch (nt) {
          case 4: dot_float<T, 1, 4>(&r, &r, xs, t.cols, o); break;
          case 3: dot_float<T, 1, 3>(&r, &r, xs, t.cols, o); break;
          case 2: dot_float<T, 1, 2>(&r, &r, xs, t.cols, o); break;
          default: dot_float<T, 1, 1>(&r, &r, xs, t.cols, o); break;
        }
      });
}

}  // namespace

void avx2_dot(const DotTask& t) {
  switch (t.type) {
    case DType::Q4_0: return dot_quant<BQ4_0>(t);
    case DType::Q4_1: return dot_quant<BQ4_1>(t);
    case DType::Q5_0: return dot_quant<BQ5_0>(t);
    case DType::Q5_1: return dot_quant<BQ5_1>(t);
    case DType::Q8_0: return dot_quant<BQ8_0>(t);
    case DType::MXFP4: return avx2_mx_dot(t);
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return avx2_kq_dot(t);
    case DType::F32: return dot_floats<DType::F32>(t);
    case DType::F16: return dot_floats<DType::F16>(t);
    case DType::BF16: return dot_floats<DType::BF16>(t);
    default: return scalar_dot(t);
  }
}

}  // namespace pi::cpu::detail
