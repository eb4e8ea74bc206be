// Internal: the NEON dot-product leaves, written once and compiled twice: by neon_matrix.cpp
// for the ARMv8.0 baseline (integer products by SMULL / SADALP) and by neon_dot.cpp with the
// ARMv8.2 dot product (SDOT; neon_blocks.h, idot16). Everything has internal linkage.
//
// Prepared activation of the 32-element block types (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 MXFP4): per
// block one kSlot-byte slot: 32 int8 quants q = round(x / dx) (nearest even, dx = amax / 127
// over the block, NaN when it holds a NaN), then f32 dx at byte 32 and f32 dx * sum(q) at
// byte 36 (the types with a minimum). Weights are decoded to signed bytes (q - offset, or
// MXFP4's doubled values), so one integer dot per block gives sum w q exactly.
//
// K-quants (Q2_K..Q6_K): per 256-element super-block one kKSlot-byte slot: 256 int8 quants
// (one dx per super-block), 16 int16 sums of 16 quants at byte 256, f32 dx at byte 288. A
// decoded super-block has 16 sub-blocks of 16 unsigned quants z (0..63), a signed scale sc and
// a correction weight corr per sub-block and two factors d, dc: element e is
// d sc[e / 16] z[e] + dc corr[e / 16] (the decomposition of kquant_simd.h), so
//   W . x = dx (d sum_j sc[j] sum_{e in j} z[e] q[e] + dc sum_j corr[j] bsum[j]),
// both sums exact in int32.
#pragma once

#include <arm_neon.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/neon_blocks.h"
#include "kernels/cpu/scalar_blocks.h"
#include "kernels/cpu/scalar_leaves.h"

namespace pi::cpu::detail {
namespace {

constexpr size_t kSlot = 48;
constexpr size_t kKSlot = 304;
constexpr size_t kKSums = 256, kKScale = 288;

inline bool n_int_type(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1 ||
         t == DType::Q8_0 || t == DType::MXFP4;
}
inline bool n_k_type(DType t) {
  return t == DType::Q2_K || t == DType::Q3_K || t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
}

inline size_t n_act_bytes(DType t, int64_t cols) {
  if (n_k_type(t)) return static_cast<size_t>(cols / 256) * kKSlot;
  return n_int_type(t) ? static_cast<size_t>(cols / 32) * kSlot : 0;
}

// Quantizes x[0..16 n) with the multiplier id into q; returns sum(q).
inline int32_t n_quantize(const float* x, int n, float id, int8_t* q, int16_t* sums16) {
  const float32x4_t vid = vdupq_n_f32(id);
  int32_t total = 0;
  for (int i = 0; i < n; ++i) {
    const int8x16_t b = nquantize16(x + 16 * i, vid);
    vst1q_s8(q + 16 * i, b);
    const int32_t s = vaddlvq_s8(b);
    if (sums16 != nullptr) sums16[i] = static_cast<int16_t>(s);
    total += s;
  }
  return total;
}

inline void n_prepare_act(DType t, const float* x, int64_t cols, uint8_t* out) {
  if (n_k_type(t)) {
    for (int64_t s = 0; s < cols / 256; ++s) {
      uint8_t* slot = out + s * kKSlot;
      float dx, id;
      nscale(namax(x + 256 * s, 256), &dx, &id);
      int16_t sums[16];
      n_quantize(x + 256 * s, 16, id, reinterpret_cast<int8_t*>(slot), sums);
      std::memcpy(slot + kKSums, sums, sizeof sums);
      std::memcpy(slot + kKScale, &dx, 4);
    }
    return;
  }
  if (!n_int_type(t)) return;
  for (int64_t b = 0; b < cols / 32; ++b) {
    uint8_t* slot = out + b * kSlot;
    float dx, id;
    nscale(namax(x + 32 * b, 32), &dx, &id);
    const int32_t sum = n_quantize(x + 32 * b, 2, id, reinterpret_cast<int8_t*>(slot), nullptr);
    const float f[2] = {dx, dx * static_cast<float>(sum)};
    std::memcpy(slot + 32, f, sizeof f);
  }
}

// ---- drivers ---------------------------------------------------------------------------------
// Calls f(std::integral_constant<int, NT>) for NT = nt in 1..4.
template <typename F>
inline void n_tokens(int nt, F f) {
  switch (nt) {
    case 4: return f(std::integral_constant<int, 4>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 2: return f(std::integral_constant<int, 2>{});
    default: return f(std::integral_constant<int, 1>{});
  }
}

// ---- 32-element block types: NR rows x NT tokens -----------------------------------------------
template <class Dec, int NR, int NT>
inline void n_dot_blocks(const uint8_t* const* rows, const uint8_t* const* next, const uint8_t* const* acts,
                         int64_t nb, float* out) {
  float32x4_t acc[NR][NT];
  float accm[NR][NT];
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < NT; ++i) {
      acc[r][i] = vdupq_n_f32(0.0f);
      accm[r][i] = 0.0f;
    }
  for (int64_t b = 0; b < nb; ++b) {
    const size_t off = static_cast<size_t>(b) * Dec::kBytes;
    for (int r = 0; r < NR; ++r) {
      const uint8_t* p = rows[r] + off;
      nprefetch(next[r] + off);
      int8x16_t lo, hi;
      Dec::quants(p, lo, hi);
      const float d = Dec::d(p);
      for (int i = 0; i < NT; ++i) {
        const uint8_t* a = acts[i] + b * kSlot;
        const auto* q = reinterpret_cast<const int8_t*>(a);
        const int32x4_t s = idot16(idot16(vdupq_n_s32(0), lo, vld1q_s8(q)), hi, vld1q_s8(q + 16));
        float f[2];
        std::memcpy(f, a + 32, sizeof f);
        acc[r][i] = vfmaq_n_f32(acc[r][i], vcvtq_f32_s32(s), d * f[0]);
        if constexpr (Dec::kMin) accm[r][i] += Dec::mn(p) * f[1];
      }
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < NT; ++i) out[r * NT + i] = vaddvq_f32(acc[r][i]) + accm[r][i];
}

template <class Dec>
void n_dot_quant(const DotTask& t) {
  const int64_t nb = t.cols / 32;
  const uint8_t* act0 = t.act;
  drive_rows4(
      t, [&](const uint8_t* const* r, const uint8_t* const* n, float* o) { n_dot_blocks<Dec, 4, 1>(r, n, &act0, nb, o); },
      [&](const uint8_t* r, float* o) { n_dot_blocks<Dec, 1, 1>(&r, &r, &act0, nb, o); },
      [&](const uint8_t* r, const int* sel, int nt, float* o) {
        const uint8_t* acts[4];
        for (int i = 0; i < nt; ++i) acts[i] = t.act + sel[i] * t.act_stride;
        n_tokens(nt, [&](auto c) { n_dot_blocks<Dec, 1, decltype(c)::value>(&r, &r, acts, nb, o); });
      });
}

// ---- F32 / F16 / BF16 rows: f32 FMAs on eight lanes (two vectors) -------------------------
template <DType T, int NR, int NT>
inline void n_dot_float(const uint8_t* const* rows, const uint8_t* const* next, const float* const* xs,
                        int64_t cols, float* out) {
  float32x4_t acc[NR][NT][2];
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < NT; ++i) acc[r][i][0] = acc[r][i][1] = vdupq_n_f32(0.0f);
  constexpr int64_t kElem = T == DType::F32 ? 4 : 2;
  int64_t j = 0;
  for (; j + 8 <= cols; j += 8) {
    for (int r = 0; r < NR; ++r) {
      if ((j * kElem) % 64 == 0) nprefetch(next[r] + j * kElem + 256);
      const float32x4_t w0 = nload_w4<T>(rows[r], j), w1 = nload_w4<T>(rows[r], j + 4);
      for (int i = 0; i < NT; ++i) {
        acc[r][i][0] = vfmaq_f32(acc[r][i][0], w0, vld1q_f32(xs[i] + j));
        acc[r][i][1] = vfmaq_f32(acc[r][i][1], w1, vld1q_f32(xs[i] + j + 4));
      }
    }
  }
  if (j < cols) {
    const int n = static_cast<int>(cols - j);
    alignas(16) uint8_t wt[32] = {};
    alignas(16) float xt[8] = {};
    for (int r = 0; r < NR; ++r) {
      std::memcpy(wt, rows[r] + j * kElem, static_cast<size_t>(n * kElem));
      const float32x4_t w0 = nload_w4<T>(wt, 0), w1 = nload_w4<T>(wt, 4);
      for (int i = 0; i < NT; ++i) {
        std::memcpy(xt, xs[i] + j, static_cast<size_t>(n) * 4);
        acc[r][i][0] = vfmaq_f32(acc[r][i][0], w0, vld1q_f32(xt));
        acc[r][i][1] = vfmaq_f32(acc[r][i][1], w1, vld1q_f32(xt + 4));
      }
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < NT; ++i) out[r * NT + i] = vaddvq_f32(vaddq_f32(acc[r][i][0], acc[r][i][1]));
}

template <DType T>
void n_dot_floats(const DotTask& t) {
  const float* x0 = t.x;
  drive_rows4(
      t, [&](const uint8_t* const* r, const uint8_t* const* n, float* o) { n_dot_float<T, 4, 1>(r, n, &x0, t.cols, o); },
      [&](const uint8_t* r, float* o) { n_dot_float<T, 1, 1>(&r, &r, &x0, t.cols, o); },
      [&](const uint8_t* r, const int* sel, int nt, float* o) {
        const float* xs[4];
        for (int i = 0; i < nt; ++i) xs[i] = t.x + sel[i] * t.x_stride;
        n_tokens(nt, [&](auto c) { n_dot_float<T, 1, decltype(c)::value>(&r, &r, xs, t.cols, o); });
      });
}

// ---- K-quants ------------------------------------------------------------------------------
struct NKBlock {
  uint8x16_t z[16];  // sub-block j: elements 16 j .. 16 j + 15
  int8_t sc[16];
  int8_t corr[16];
  float d, dc;
};

// Q4_K/Q5_K 6-bit scales and mins (tensor/quant_kquants.cpp), each doubled to per-16 values.
inline void nk_header_k4(const uint8_t* b, NKBlock& k) {
  k.d = nh2f_at(b);
  k.dc = -nh2f_at(b + 2);
  const uint8_t* s = b + 4;
  for (int j = 0; j < 8; ++j) {
    const int sc = j < 4 ? s[j] & 63 : (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    const int m = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    k.sc[2 * j] = k.sc[2 * j + 1] = static_cast<int8_t>(sc);
    k.corr[2 * j] = k.corr[2 * j + 1] = static_cast<int8_t>(m);
  }
}

// Bytes of v with bit `bit` set -> value, else 0.
inline uint8x16_t nk_bit(uint8x16_t v, int bit, uint8_t value) {
  return vandq_u8(vtstq_u8(v, vdupq_n_u8(static_cast<uint8_t>(1u << bit))), vdupq_n_u8(value));
}
inline uint8x16_t nk_lo(uint8x16_t v) { return vandq_u8(v, vdupq_n_u8(0x0f)); }
inline uint8x16_t nk_hi(uint8x16_t v) { return vshrq_n_u8(v, 4); }
// (v >> s) & 3, s in 0, 2, 4, 6.
inline uint8x16_t nk_two(uint8x16_t v, int s) {
  const int8x16_t sh = vdupq_n_s8(static_cast<int8_t>(-s));
  return vandq_u8(vshlq_u8(v, sh), vdupq_n_u8(3));
}

// Group g (32 elements) of Q4_K/Q5_K is nibble g % 2 of qs[32 (g / 2) + l]; Q5_K adds bit g of
// qh[l] as 16.
inline void nk_decode_q4k(const uint8_t* b, NKBlock& k) {
  nk_header_k4(b, k);
  for (int c = 0; c < 4; ++c) {
    const uint8x16_t v0 = vld1q_u8(b + 16 + 32 * c), v1 = vld1q_u8(b + 32 + 32 * c);
    k.z[4 * c] = nk_lo(v0);
    k.z[4 * c + 1] = nk_lo(v1);
    k.z[4 * c + 2] = nk_hi(v0);
    k.z[4 * c + 3] = nk_hi(v1);
  }
}

inline void nk_decode_q5k(const uint8_t* b, NKBlock& k) {
  nk_header_k4(b, k);
  const uint8x16_t h0 = vld1q_u8(b + 16), h1 = vld1q_u8(b + 32);
  for (int c = 0; c < 4; ++c) {
    const uint8x16_t v0 = vld1q_u8(b + 48 + 32 * c), v1 = vld1q_u8(b + 64 + 32 * c);
    k.z[4 * c] = vorrq_u8(nk_lo(v0), nk_bit(h0, 2 * c, 16));
    k.z[4 * c + 1] = vorrq_u8(nk_lo(v1), nk_bit(h1, 2 * c, 16));
    k.z[4 * c + 2] = vorrq_u8(nk_hi(v0), nk_bit(h0, 2 * c + 1, 16));
    k.z[4 * c + 3] = vorrq_u8(nk_hi(v1), nk_bit(h1, 2 * c + 1, 16));
  }
}

// Q2_K / Q3_K: group g's 2-bit quants are bits 2 (g % 4) of qs[32 (g / 4) + l]; Q3_K's third
// bit is bit g of hmask[l] (z = q + 4, so dc = -4 d and corr = sc).
inline void nk_decode_q2k(const uint8_t* b, NKBlock& k) {
  k.d = nh2f_at(b + 80);
  k.dc = -nh2f_at(b + 82);
  const uint8x16_t s = vld1q_u8(b);
  vst1q_s8(k.sc, vreinterpretq_s8_u8(nk_lo(s)));
  vst1q_s8(k.corr, vreinterpretq_s8_u8(nk_hi(s)));
  for (int n = 0; n < 2; ++n) {
    const uint8x16_t v0 = vld1q_u8(b + 16 + 32 * n), v1 = vld1q_u8(b + 32 + 32 * n);
    for (int j = 0; j < 4; ++j) {
      k.z[2 * (4 * n + j)] = nk_two(v0, 2 * j);
      k.z[2 * (4 * n + j) + 1] = nk_two(v1, 2 * j);
    }
  }
}

inline void nk_decode_q3k(const uint8_t* b, NKBlock& k) {
  const float d = nh2f_at(b + 108);
  k.d = d;
  k.dc = -4.0f * d;
  // Scale i: low nibble of byte i (i < 8) or high nibble of byte i - 8; bits 4-5 from byte
  // 8 + i % 4 at bit 2 (i / 4); stored + 32.
  const uint8_t* s = b + 96;
  for (int i = 0; i < 16; ++i) {
    const int low = i < 8 ? s[i] & 0x0f : s[i - 8] >> 4;
    const int high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
    k.sc[i] = k.corr[i] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
  const uint8x16_t h0 = vld1q_u8(b), h1 = vld1q_u8(b + 16);
  for (int n = 0; n < 2; ++n) {
    const uint8x16_t v0 = vld1q_u8(b + 32 + 32 * n), v1 = vld1q_u8(b + 48 + 32 * n);
    for (int j = 0; j < 4; ++j) {
      const int g = 4 * n + j;
      k.z[2 * g] = vorrq_u8(nk_two(v0, 2 * j), nk_bit(h0, g, 4));
      k.z[2 * g + 1] = vorrq_u8(nk_two(v1, 2 * j), nk_bit(h1, g, 4));
    }
  }
}

// Q6_K: group j = 4 h + g (32 elements): low 4 bits from ql[64 h + 32 (g & 1) + l] (nibble
// g / 2), high 2 from qh[32 h + l] at bit 2 g; x = d sc (q - 32), so dc = -32 d, corr = sc.
inline void nk_decode_q6k(const uint8_t* b, NKBlock& k) {
  k.d = nh2f_at(b + 208);
  k.dc = -32.0f * k.d;
  vst1q_s8(k.sc, vld1q_s8(reinterpret_cast<const int8_t*>(b + 192)));
  vst1q_s8(k.corr, vld1q_s8(reinterpret_cast<const int8_t*>(b + 192)));
  for (int j = 0; j < 8; ++j) {
    const int h = j / 4, g = j % 4;
    for (int half = 0; half < 2; ++half) {
      const uint8x16_t ql = vld1q_u8(b + 64 * h + 32 * (g & 1) + 16 * half);
      const uint8x16_t qh = vld1q_u8(b + 128 + 32 * h + 16 * half);
      const uint8x16_t lo = g < 2 ? nk_lo(ql) : nk_hi(ql);
      k.z[2 * j + half] = vorrq_u8(lo, vshlq_n_u8(nk_two(qh, 2 * g), 4));
    }
  }
}

template <DType T>
inline void nk_decode_as(const uint8_t* b, NKBlock& k) {
  if constexpr (T == DType::Q2_K) nk_decode_q2k(b, k);
  else if constexpr (T == DType::Q3_K) nk_decode_q3k(b, k);
  else if constexpr (T == DType::Q4_K) nk_decode_q4k(b, k);
  else if constexpr (T == DType::Q5_K) nk_decode_q5k(b, k);
  else nk_decode_q6k(b, k);
}

inline void nk_decode(DType t, const uint8_t* b, NKBlock& k) {
  switch (t) {
    case DType::Q2_K: return nk_decode_as<DType::Q2_K>(b, k);
    case DType::Q3_K: return nk_decode_as<DType::Q3_K>(b, k);
    case DType::Q4_K: return nk_decode_as<DType::Q4_K>(b, k);
    case DType::Q5_K: return nk_decode_as<DType::Q5_K>(b, k);
    default: return nk_decode_as<DType::Q6_K>(b, k);
  }
}

// acc[i] += dx_i (d isum + dc csum) for one decoded super-block against NT activations.
template <int NT>
inline void nk_dot_block(const NKBlock& k, const uint8_t* const* acts, size_t off, float32x4_t* acc) {
  const int8x16_t corr = vld1q_s8(k.corr);
  const int16x8_t c_lo = vmovl_s8(vget_low_s8(corr)), c_hi = vmovl_high_s8(corr);
  int32x4_t scv[4];
  {
    const int8x16_t sc = vld1q_s8(k.sc);
    const int16x8_t s_lo = vmovl_s8(vget_low_s8(sc)), s_hi = vmovl_high_s8(sc);
    scv[0] = vmovl_s16(vget_low_s16(s_lo));
    scv[1] = vmovl_high_s16(s_lo);
    scv[2] = vmovl_s16(vget_low_s16(s_hi));
    scv[3] = vmovl_high_s16(s_hi);
  }
  for (int i = 0; i < NT; ++i) {
    const uint8_t* a = acts[i] + off;
    const auto* q = reinterpret_cast<const int8_t*>(a);
    int32x4_t isum = vdupq_n_s32(0);
    for (int j4 = 0; j4 < 4; ++j4) {
      int32x4_t s[4];
      for (int u = 0; u < 4; ++u) {
        const int j = 4 * j4 + u;
        s[u] = idot16(vdupq_n_s32(0), vreinterpretq_s8_u8(k.z[j]), vld1q_s8(q + 16 * j));
      }
      // Lane u: sub-block 4 j4 + u's sum, times its scale.
      const int32x4_t sums = vpaddq_s32(vpaddq_s32(s[0], s[1]), vpaddq_s32(s[2], s[3]));
      isum = vmlaq_s32(isum, sums, scv[j4]);
    }
    int16_t bs[16];
    std::memcpy(bs, a + kKSums, sizeof bs);
    const int16x8_t b_lo = vld1q_s16(bs), b_hi = vld1q_s16(bs + 8);
    int32x4_t csum = vmull_s16(vget_low_s16(b_lo), vget_low_s16(c_lo));
    csum = vmlal_high_s16(csum, b_lo, c_lo);
    csum = vmlal_s16(csum, vget_low_s16(b_hi), vget_low_s16(c_hi));
    csum = vmlal_high_s16(csum, b_hi, c_hi);
    float dx;
    std::memcpy(&dx, a + kKScale, 4);
    acc[i] = vfmaq_n_f32(acc[i], vcvtq_f32_s32(isum), k.d * dx);
    acc[i] = vfmaq_n_f32(acc[i], vcvtq_f32_s32(csum), k.dc * dx);
  }
}

template <DType T, int NT>
inline void nk_dot_row(const uint8_t* row, const uint8_t* next, const uint8_t* const* acts, int64_t nsb,
                       float* out) {
  const size_t bb = row_bytes(T, 256);
  float32x4_t acc[NT];
  for (int i = 0; i < NT; ++i) acc[i] = vdupq_n_f32(0.0f);
  for (int64_t s = 0; s < nsb; ++s) {
    if (next != nullptr)
      for (size_t o = 0; o < bb; o += 64) nprefetch(next + s * bb + o);
    NKBlock k;
    nk_decode_as<T>(row + s * bb, k);
    nk_dot_block<NT>(k, acts, static_cast<size_t>(s) * kKSlot, acc);
  }
  for (int i = 0; i < NT; ++i) out[i] = vaddvq_f32(acc[i]);
}

template <DType T>
void nk_dot(const DotTask& t) {
  const int64_t nsb = t.cols / 256;
  const uint8_t* act0 = t.act;
  drive_rows4(
      t,
      [&](const uint8_t* const* r, const uint8_t* const* n, float* o) {
        for (int i = 0; i < 4; ++i) nk_dot_row<T, 1>(r[i], n[i], &act0, nsb, o + i);
      },
      [&](const uint8_t* r, float* o) { nk_dot_row<T, 1>(r, nullptr, &act0, nsb, o); },
      [&](const uint8_t* r, const int* sel, int nt, float* o) {
        const uint8_t* acts[4];
        for (int i = 0; i < nt; ++i) acts[i] = t.act + sel[i] * t.act_stride;
        n_tokens(nt, [&](auto c) { nk_dot_row<T, decltype(c)::value>(r, nullptr, acts, nsb, o); });
      });
}

// The dot leaf: every supported type (the R16 layouts go to r16_dot, not here).
inline void n_dot(const DotTask& t) {
  switch (t.type) {
    case DType::Q4_0: return n_dot_quant<NQ4_0>(t);
    case DType::Q4_1: return n_dot_quant<NQ4_1>(t);
    case DType::Q5_0: return n_dot_quant<NQ5_0>(t);
    case DType::Q5_1: return n_dot_quant<NQ5_1>(t);
    case DType::Q8_0: return n_dot_quant<NQ8_0>(t);
    case DType::MXFP4: return n_dot_quant<NMXFP4>(t);
    case DType::Q2_K: return nk_dot<DType::Q2_K>(t);
    case DType::Q3_K: return nk_dot<DType::Q3_K>(t);
    case DType::Q4_K: return nk_dot<DType::Q4_K>(t);
    case DType::Q5_K: return nk_dot<DType::Q5_K>(t);
    case DType::Q6_K: return nk_dot<DType::Q6_K>(t);
    case DType::F32: return n_dot_floats<DType::F32>(t);
    case DType::F16: return n_dot_floats<DType::F16>(t);
    case DType::BF16: return n_dot_floats<DType::BF16>(t);
    default: return scalar_dot(t);
  }
}

}  // namespace
}  // namespace pi::cpu::detail
