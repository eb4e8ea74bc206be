// The KV cache write (Ops::store_kv): K[i], V[i] f32 [n_head_kv * head_dim] into cell
// cells[i] (device memory), each in its kind (hd_kv.h): f16 bits (round to nearest even, bit
// for bit pi::f32_to_f16), or Q8_0 / Q4_0 blocks of 32 along head_dim, the reference
// quantizer's bytes. kv head h of cell c starts head_stride * h + cell_stride * c values in,
// kv_bytes(kind, that) bytes (the block kinds need head_dim and the strides multiples of 32).
#pragma once

#include "kernels/cuda/hd_kv.h"
#include "kernels/cuda/runtime.h"

namespace pi::gpu {

struct KvRef {
  uint16_t* k = nullptr;
  uint16_t* v = nullptr;
  int64_t head_stride = 0;
  int64_t cell_stride = 0;
  int32_t k_kind = kKvF16;
  int32_t v_kind = kKvF16;
};

cudaError_t store_kv(const float* K, const float* V, int64_t m, int64_t n_head_kv, int64_t head_dim,
                     const KvRef& kv, const int32_t* cells, cudaStream_t stream);

}  // namespace pi::gpu
