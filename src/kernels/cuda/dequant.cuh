// Rows of a weight matrix decoded to f32 (Ops::embed, and the tiles the many-token products
// hand to cuBLAS): bit-exact with the reference dequantizers (hd_blocks.h).
#pragma once

#include "kernels/cuda/args.h"
#include "kernels/cuda/runtime.h"

namespace pi::gpu {

// out[k, :] = row rows[k] of w decoded (rows: device memory; null means r0 + k), k < n;
// out rows ldo floats apart.
cudaError_t dequant_rows(const WeightRef& w, const int32_t* rows, int64_t r0, int64_t n, float* out,
                         int64_t ldo, cudaStream_t stream);

}  // namespace pi::gpu
