// Row normalisation (Ops::norm): RMSNorm y = x / sqrt(mean(x^2) + eps) * w, and LayerNorm
// y = (x - mean) / sqrt(var + eps) * w + b (b may be null). X, Y f32 [m, n] (may alias).
#pragma once

#include "kernels/cuda/runtime.h"

namespace pi::gpu {

cudaError_t rms_norm(const float* X, const float* w, int64_t m, int64_t n, float eps, float* Y,
                     cudaStream_t stream);
cudaError_t layer_norm(const float* X, const float* w, const float* b, int64_t m, int64_t n,
                       float eps, float* Y, cudaStream_t stream);

}  // namespace pi::gpu
