// The device-memory read probe (CudaDevice::probe): reads n_words 64-bit words with 16-byte
// loads, several in flight per thread, and leaves one sum per block in sink (so the reads
// cannot be dropped). `blocks` blocks of 512 threads; sink holds `blocks` words.
#pragma once

#include "kernels/cuda/runtime.h"

namespace pi::gpu {

cudaError_t read_probe(const uint64_t* p, int64_t n_words, int blocks, uint64_t* sink,
                       cudaStream_t stream);

}  // namespace pi::gpu
