// The integer path's activation quantization (hd_q8.h), once per op: X f32 [m, cols] (rows
// ldx floats apart) to q int8 [m, cols] and s Q8Scale [m, cols / 32]. cols % 32 == 0.
#pragma once

#include "kernels/cuda/args.h"
#include "kernels/cuda/runtime.h"

namespace pi::gpu {

cudaError_t quantize_q8(const float* X, int64_t ldx, int64_t m, int64_t cols, int8_t* q, Q8Scale* s,
                        cudaStream_t stream);

}  // namespace pi::gpu
