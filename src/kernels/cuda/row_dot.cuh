// Dot products of one weight row with activations, by one lane group: the inner loop the
// matrix kernels (matvec.cu) and the sparse FFN (ffn_rows.cu) share, so that a row gives the
// same value whichever op computes it. Lane l takes units l, l + 32, ... (hd_blocks.h) in
// order, accumulating with fma; the float formats' partial unit at the row's end goes element
// by element to lanes 0, 1, ...; then the group's butterfly sum. Included only by .cu files.
#pragma once

#include "kernels/cuda/args.h"
#include "kernels/cuda/hd_blocks.h"
#include "kernels/cuda/hd_q8.h"
#include "kernels/cuda/vendor.cuh"

namespace pi::gpu {

// Unit u of a row into w; kVec: one 16-byte load (float formats; the row 16-byte aligned).
template <DType T, bool kVec>
__device__ __forceinline__ void load_unit(const uint8_t* row, int64_t u, float* w) {
  if constexpr (kVec && T == DType::F32) {
    const float4 v = reinterpret_cast<const float4*>(row)[u];
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  } else if constexpr (kVec && (T == DType::F16 || T == DType::BF16)) {
    const uint4 v = reinterpret_cast<const uint4*>(row)[u];
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const auto lo = static_cast<uint16_t>(words[k] & 0xffffu);
      const auto hi = static_cast<uint16_t>(words[k] >> 16);
      w[2 * k] = T == DType::F16 ? half_to_float(lo) : bf16_to_float(lo);
      w[2 * k + 1] = T == DType::F16 ? half_to_float(hi) : bf16_to_float(hi);
    }
  } else {
    decode_unit<T>(row, u, w);
  }
}

// E floats of activations at x; kVec: 16-byte loads (x 16-byte aligned).
template <int E, bool kVec>
__device__ __forceinline__ void load_x(const float* x, float* v) {
  if constexpr (kVec && E % 4 == 0) {
#pragma unroll
    for (int k = 0; k < E / 4; ++k) {
      const float4 f = reinterpret_cast<const float4*>(x)[k];
      v[4 * k] = f.x, v[4 * k + 1] = f.y, v[4 * k + 2] = f.z, v[4 * k + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < E; ++k) v[k] = x[k];
  }
}

// Iterations of a lane's loop issued together: one token unrolls for loads in flight; more
// tokens already have their own work per load.
template <int kTok>
constexpr int kUnrollUnits = kTok == 1 ? 2 : 1;
template <int kTok>
constexpr int kUnrollBlocks = kTok == 1 ? 4 : 1;

// sum over the row of w * x, for nt <= kTok tokens at once (token t's activations at
// x + t * ldx); every lane returns the sums in acc. Each token's value is the same for any nt.
template <DType T, bool kVec, int kTok>
__device__ __forceinline__ void row_dot_f32(const uint8_t* row, int64_t cols, const float* x,
                                            int64_t ldx, int nt, float (&acc)[kTok]) {
  constexpr int E = Unit<T>::kElems;
  const int lane = lane_id();
  const int64_t units = cols / E;
#pragma unroll
  for (int t = 0; t < kTok; ++t) acc[t] = 0.0f;
#pragma unroll kUnrollUnits<kTok>
  for (int64_t u = lane; u < units; u += kGroup) {
    float w[E];
    load_unit<T, kVec>(row, u, w);
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      if (t < nt) {
        float xv[E];
        load_x<E, kVec>(x + t * ldx + u * E, xv);
#pragma unroll
        for (int j = 0; j < E; ++j) acc[t] = fmaf(w[j], xv[j], acc[t]);
      }
    }
  }
  if constexpr (Unit<T>::kFloat) {
    for (int64_t j = units * E + lane; j < cols; j += kGroup) {
      const float w = decode_elem<T>(row, j);
#pragma unroll
      for (int t = 0; t < kTok; ++t)
        if (t < nt) acc[t] = fmaf(w, x[t * ldx + j], acc[t]);
    }
  }
#pragma unroll
  for (int t = 0; t < kTok; ++t) acc[t] = group_sum(acc[t]);
}

// The integer path (q8_path(T)): lane l takes blocks l, l + 32, ...; token t's quants at
// q + t * cols, its scales at s + t * cols / 32.
template <DType T, int kTok>
__device__ __forceinline__ void row_dot_q8(const uint8_t* row, int64_t cols, const int8_t* q,
                                           const Q8Scale* s, int nt, float (&acc)[kTok]) {
  const int lane = lane_id();
  const int64_t blocks = cols / 32;
#pragma unroll
  for (int t = 0; t < kTok; ++t) acc[t] = 0.0f;
#pragma unroll kUnrollBlocks<kTok>
  for (int64_t b = lane; b < blocks; b += kGroup) {
    const WBlock<T> w = load_wblock<T>(row, b);
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      if (t < nt) {
        const int4* qa = reinterpret_cast<const int4*>(q + t * cols + b * 32);
        const int4 a0 = qa[0], a1 = qa[1];
        const int32_t a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
        acc[t] += dot_q8<T>(w, a, s[t * blocks + b]);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kTok; ++t) acc[t] = group_sum(acc[t]);
}

// One row with the activations of one token, by either path.
template <DType T, bool kVec>
__device__ __forceinline__ float row_dot(const uint8_t* row, int64_t cols, const ActRef& a,
                                         int64_t token) {
  float acc[1];
  if constexpr (q8_path(T)) {
    row_dot_q8<T, 1>(row, cols, a.q + token * cols, a.s + token * (cols / 32), 1, acc);
  } else {
    row_dot_f32<T, kVec, 1>(row, cols, a.x + token * a.ldx, a.ldx, 1, acc);
  }
  return acc[0];
}

}  // namespace pi::gpu
