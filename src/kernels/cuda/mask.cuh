// The predictor's threshold as flags (Ops::threshold_mask): bits[i] word w, bit k = (X[i,
// 32 w + k] >= thr), the bits past n zero. X f32 [m, n], bits u32 [m, ceil(n / 32)].
#pragma once

#include "kernels/cuda/runtime.h"

namespace pi::gpu {

cudaError_t threshold_mask(const float* X, int64_t m, int64_t n, float thr, uint32_t* bits,
                           cudaStream_t stream);

}  // namespace pi::gpu
