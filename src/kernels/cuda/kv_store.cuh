// The KV cache write (Ops::store_kv): K[i], V[i] f32 [n_head_kv * head_dim] as f16 bits
// (round to nearest even, bit for bit pi::f32_to_f16) into cell cells[i] (device memory);
// kv head h of cell c starts head_stride * h + cell_stride * c elements in.
#pragma once

#include "kernels/cuda/runtime.h"

namespace pi::gpu {

struct KvRef {
  uint16_t* k = nullptr;
  uint16_t* v = nullptr;
  int64_t head_stride = 0;
  int64_t cell_stride = 0;
};

cudaError_t store_kv(const float* K, const float* V, int64_t m, int64_t n_head_kv, int64_t head_dim,
                     const KvRef& kv, const int32_t* cells, cudaStream_t stream);

}  // namespace pi::gpu
