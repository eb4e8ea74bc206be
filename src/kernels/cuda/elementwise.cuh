// Elementwise ops (Ops::activate, ffn_combine, add, add_bias, copy_rows, combine_rows): a thread per element, the
// per-element functions of hd_elementwise.h.
#pragma once

#include "kernels/cuda/runtime.h"

namespace pi::gpu {

// x = act(x), x f32 [n]; act: hd_elementwise.h ActCode.
cudaError_t activate(int act, float* x, int64_t n, cudaStream_t stream);

// The FFN combine over n elements: kind 0 (gated): G = act(G) * U; 1 (both): G = act(G) *
// act(U); 2 (plain): G = act(U).
cudaError_t ffn_combine(int kind, int act, float* G, const float* U, int64_t n,
                        cudaStream_t stream);

// Y += X, f32 [n].
cudaError_t add(float* Y, const float* X, int64_t n, cudaStream_t stream);

// Y[i, :] += b for i < m: Y f32 [m, n], b f32 [n].
cudaError_t add_bias(float* Y, const float* b, int64_t m, int64_t n, cudaStream_t stream);

// dst[r, :n] = src[r, :n] for r < rows (rows src_stride / dst_stride floats apart).
cudaError_t copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                      int64_t rows, int64_t n, cudaStream_t stream);

// Y[i, :n] = sum over j < k of w[i * k + j] * X[rows[i * k + j], :n], from 0, each product
// and sum rounded once (Ops::combine_rows); w == nullptr: Y[i, :] = X[rows[i], :] (k == 1).
// rows, w: device memory.
cudaError_t combine_rows(const float* X, int64_t n, const int32_t* rows, const float* w, int64_t m,
                         int64_t k, float* Y, cudaStream_t stream);

}  // namespace pi::gpu
