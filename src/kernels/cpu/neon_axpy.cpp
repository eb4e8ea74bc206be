// NEON axpy leaves: y[c0:c1] += sum_k coef_k * D[rows_k, c0:c1] for one column slice, rows in
// list order. Every row is decoded once per block and added to each token with a nonzero
// coefficient (one FMA per element). Q4_0 sums integers over groups of rows exactly as the
// scalar leaf (q4_groups.h), so its bits equal the scalar ones. Q4_0_SPLIT delegates to the
// scalar leaf (no NEON layout picks it). Compiled for the ARMv8.0 baseline.
#include <arm_neon.h>

#include <cfloat>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/neon_blocks.h"
#include "kernels/cpu/neon_leaves.h"
#include "kernels/cpu/neon_matrix.h"
#include "kernels/cpu/q4_groups.h"
#include "kernels/cpu/scalar_leaves.h"

namespace pi::cpu::detail {
namespace {

inline const uint8_t* axpy_row_ptr(const AxpyTask& t, int64_t k) {
  return t.D + static_cast<size_t>(t.rows[k]) * t.row_bytes;
}

// ---- Q4_0: the scalar leaf's integer group sums, 32 columns at a time -----------------------
// For each output block: v_r = coef_r d_r, k_r = round(v_r 127 / amax) (scalar, as q4_group in
// scalar_matrix.cpp), then sum_r k_r q_rc in int16 lanes (|sum| <= 16 * 127 * 15 fits) and
// y_c = fma(sum_c - 8 sum_r k_r, amax / 127, y_c): the scalar leaf's operations on each element.
void q4_group(const Q4Group& grp, int64_t b0, int64_t b1, float* y, const Q4Next& next) {
  for (int64_t b = b0; b < b1; ++b) {
    const size_t off = static_cast<size_t>(b) * kQ4Bytes;
    for (int r = 0; r < next.n; ++r) nprefetch(next.rows[r] + off);
    float v[kQ4Window];
    float amax = 0.0f;
    bool bad = false;
    for (int r = 0; r < grp.g; ++r) {
      v[r] = grp.coef[r] * nh2f_at(grp.rows[r] + off);
      const float a = __builtin_fabsf(v[r]);
      bad |= !(a < INFINITY);
      amax = a > amax ? a : amax;
    }
    float* yb = y + 32 * b;
    if (bad) {
      for (int c = 0; c < 32; ++c) yb[c] = __builtin_fmaf(0.0f, __builtin_nanf(""), yb[c]);
      continue;
    }
    const bool small = amax < FLT_MIN;
    const float inv = small ? 0.0f : 127.0f / amax;
    const float s = small ? 0.0f : amax / 127.0f;
    int16x8_t acc[4] = {vdupq_n_s16(0), vdupq_n_s16(0), vdupq_n_s16(0), vdupq_n_s16(0)};
    int32_t ksum = 0;
    for (int r = 0; r < grp.g; ++r) {
      const int32_t k = vcvtns_s32_f32(v[r] * inv);  // nearest even, as std::nearbyint
      ksum += k;
      const auto k16 = static_cast<int16_t>(k);
      uint8x16_t lo, hi;
      nibbles(grp.rows[r] + off + 2, lo, hi);
      acc[0] = vmlaq_n_s16(acc[0], vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(lo))), k16);
      acc[1] = vmlaq_n_s16(acc[1], vreinterpretq_s16_u16(vmovl_high_u8(lo)), k16);
      acc[2] = vmlaq_n_s16(acc[2], vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(hi))), k16);
      acc[3] = vmlaq_n_s16(acc[3], vreinterpretq_s16_u16(vmovl_high_u8(hi)), k16);
    }
    const int32x4_t k8 = vdupq_n_s32(8 * ksum);
    const float32x4_t sv = vdupq_n_f32(s);
    for (int h = 0; h < 4; ++h) {
      const int32x4_t e[2] = {vsubq_s32(vmovl_s16(vget_low_s16(acc[h])), k8), vsubq_s32(vmovl_high_s16(acc[h]), k8)};
      for (int q = 0; q < 2; ++q) {
        float* at = yb + 8 * h + 4 * q;
        vst1q_f32(at, vfmaq_f32(vld1q_f32(at), vcvtq_f32_s32(e[q]), sv));
      }
    }
  }
}

void axpy_q4_0(const AxpyTask& t) {
  for_each_q4_group(t, [&](const Q4Group& grp, float* y, const Q4Next& next) { q4_group(grp, t.c0 / 32, t.c1 / 32, y, next); });
}

// ---- the other 32-element block types ----------------------------------------------------------
// y[0:32] += c d q (+ c mn), q the block's signed quants.
template <class Dec>
void axpy_blocks(const AxpyTask& t) {
  const int64_t b0 = t.c0 / 32, b1 = t.c1 / 32;
  for (int64_t k = 0; k < t.n; ++k) {
    const uint8_t* row = axpy_row_ptr(t, k);
    const uint8_t* next = k + 1 < t.n ? axpy_row_ptr(t, k + 1) : row;
    for (int64_t b = b0; b < b1; ++b) {
      const uint8_t* p = row + b * Dec::kBytes;
      nprefetch(next + b * Dec::kBytes);
      int8x16_t lo, hi;
      Dec::quants(p, lo, hi);
      float32x4_t w[8];
      const int16x8_t h[4] = {vmovl_s8(vget_low_s8(lo)), vmovl_high_s8(lo), vmovl_s8(vget_low_s8(hi)), vmovl_high_s8(hi)};
      for (int i = 0; i < 4; ++i) {
        w[2 * i] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(h[i])));
        w[2 * i + 1] = vcvtq_f32_s32(vmovl_high_s16(h[i]));
      }
      const float d = Dec::d(p), mn = Dec::mn(p);
      for (int64_t i = 0; i < t.m; ++i) {
        const float c = t.coef[k * t.m + i];
        if (c == 0.0f) continue;
        const float32x4_t s = vdupq_n_f32(c * d), cm = vdupq_n_f32(c * mn);
        float* y = t.Y + i * t.ldy + 32 * b;
        for (int q = 0; q < 8; ++q) {
          float32x4_t v = vfmaq_f32(vld1q_f32(y + 4 * q), w[q], s);
          if constexpr (Dec::kMin) v = vaddq_f32(v, cm);
          vst1q_f32(y + 4 * q, v);
        }
      }
    }
  }
}

// ---- F32 / F16 / BF16 ------------------------------------------------------------------------
template <DType T>
void axpy_floats(const AxpyTask& t) {
  constexpr int64_t kElem = T == DType::F32 ? 4 : 2;
  for (int64_t k = 0; k < t.n; ++k) {
    const uint8_t* row = axpy_row_ptr(t, k);
    const uint8_t* next = k + 1 < t.n ? axpy_row_ptr(t, k + 1) : row;
    for (int64_t j = t.c0; j < t.c1; j += 64 / kElem) nprefetch(next + j * kElem);
    for (int64_t i = 0; i < t.m; ++i) {
      const float c = t.coef[k * t.m + i];
      if (c == 0.0f) continue;
      const float32x4_t vc = vdupq_n_f32(c);
      float* y = t.Y + i * t.ldy;
      int64_t j = t.c0;
      for (; j + 4 <= t.c1; j += 4) vst1q_f32(y + j, vfmaq_f32(vld1q_f32(y + j), nload_w4<T>(row, j), vc));
      for (; j < t.c1; ++j) {
        float w;
        if constexpr (T == DType::F32) std::memcpy(&w, row + 4 * j, 4);
        if constexpr (T == DType::F16) w = nh2f_at(row + 2 * j);
        if constexpr (T == DType::BF16) w = bf16_to_float(load_u16(row + 2 * j));
        y[j] = __builtin_fmaf(w, c, y[j]);
      }
    }
  }
}

// ---- K-quants: a super-block decoded to 256 floats (neon_matrix.h's NKBlock) ------------------
// w[e] = fma(z, d sc, dc corr) per 16-element sub-block.
void kq_decode_floats(DType type, const uint8_t* b, float* w) {
  NKBlock k;
  nk_decode(type, b, k);
  for (int j = 0; j < 16; ++j) {
    const float32x4_t s = vdupq_n_f32(k.d * static_cast<float>(k.sc[j]));
    const float32x4_t c = vdupq_n_f32(k.dc * static_cast<float>(k.corr[j]));
    const uint16x8_t z0 = vmovl_u8(vget_low_u8(k.z[j])), z1 = vmovl_high_u8(k.z[j]);
    const uint32x4_t z[4] = {vmovl_u16(vget_low_u16(z0)), vmovl_high_u16(z0), vmovl_u16(vget_low_u16(z1)),
                             vmovl_high_u16(z1)};
    for (int q = 0; q < 4; ++q) vst1q_f32(w + 16 * j + 4 * q, vfmaq_f32(c, vcvtq_f32_u32(z[q]), s));
  }
}

void axpy_kquant(const AxpyTask& t) {
  const size_t bb = row_bytes(t.type, 256);
  alignas(16) float w[256];
  for (int64_t k = 0; k < t.n; ++k) {
    const uint8_t* row = axpy_row_ptr(t, k);
    const uint8_t* next = k + 1 < t.n ? axpy_row_ptr(t, k + 1) : nullptr;
    for (int64_t s = t.c0 / 256; s < t.c1 / 256; ++s) {
      if (next != nullptr)
        for (size_t o = 0; o < bb; o += 64) nprefetch(next + s * bb + o);
      kq_decode_floats(t.type, row + s * bb, w);
      for (int64_t i = 0; i < t.m; ++i) {
        const float c = t.coef[k * t.m + i];
        if (c == 0.0f) continue;
        const float32x4_t vc = vdupq_n_f32(c);
        float* y = t.Y + i * t.ldy + 256 * s;
        for (int e = 0; e < 256; e += 4) vst1q_f32(y + e, vfmaq_f32(vld1q_f32(y + e), vld1q_f32(w + e), vc));
      }
    }
  }
}

}  // namespace

void neon_axpy(const AxpyTask& t) {
  switch (t.type) {
    case DType::Q4_0: return axpy_q4_0(t);
    case DType::Q4_1: return axpy_blocks<NQ4_1>(t);
    case DType::Q5_0: return axpy_blocks<NQ5_0>(t);
    case DType::Q5_1: return axpy_blocks<NQ5_1>(t);
    case DType::Q8_0: return axpy_blocks<NQ8_0>(t);
    case DType::MXFP4: return axpy_blocks<NMXFP4>(t);
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return axpy_kquant(t);
    case DType::F32: return axpy_floats<DType::F32>(t);
    case DType::F16: return axpy_floats<DType::F16>(t);
    case DType::BF16: return axpy_floats<DType::BF16>(t);
    default: return scalar_axpy(t);  // Q4_0_SPLIT
  }
}

}  // namespace pi::cpu::detail
