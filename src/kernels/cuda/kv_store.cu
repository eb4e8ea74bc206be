// f16 caches: a thread per (token, element). Otherwise a thread per (token, kv head, block of
// 32) writes that block of K and of V, each in its kind.
#include "kernels/cuda/hd_scalar.h"
#include "kernels/cuda/kv_store.cuh"
#include "kernels/cuda/vendor.cuh"

namespace pi::gpu {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    store_kv_kernel(const float* K, const float* V, int64_t m, int64_t n_head_kv, int64_t head_dim,
                    KvRef kv, const int32_t* cells) {
  const int64_t n = n_head_kv * head_dim;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= m * n) return;
  const int64_t t = i / n, e = i % n, h = e / head_dim, d = e % head_dim;
  const int64_t at = h * kv.head_stride + static_cast<int64_t>(cells[t]) * kv.cell_stride + d;
  kv.k[at] = float_to_half(K[i]);
  kv.v[at] = float_to_half(V[i]);
}

__device__ void store_block(int32_t kind, const float* x, uint8_t* row) {
  if (kind == kKvF16) {
    auto* h = reinterpret_cast<uint16_t*>(row);
    for (int j = 0; j < kKvBlock; ++j) h[j] = float_to_half(x[j]);
  } else {
    kv_quantize_block(kind, x, row);
  }
}

__global__ void __launch_bounds__(kThreads)
    store_kv_blocks_kernel(const float* K, const float* V, int64_t m, int64_t n_head_kv,
                           int64_t head_dim, KvRef kv, const int32_t* cells) {
  const int64_t nb = head_dim / kKvBlock, n = n_head_kv * head_dim;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= m * n_head_kv * nb) return;
  const int64_t t = i / (n_head_kv * nb), h = i / nb % n_head_kv, b = i % nb;
  const int64_t at = h * kv.head_stride + static_cast<int64_t>(cells[t]) * kv.cell_stride + b * kKvBlock;
  const int64_t x = t * n + h * head_dim + b * kKvBlock;
  store_block(kv.k_kind, K + x, reinterpret_cast<uint8_t*>(kv.k) + kv_bytes(kv.k_kind, at));
  store_block(kv.v_kind, V + x, reinterpret_cast<uint8_t*>(kv.v) + kv_bytes(kv.v_kind, at));
}

}  // namespace

cudaError_t store_kv(const float* K, const float* V, int64_t m, int64_t n_head_kv, int64_t head_dim,
                     const KvRef& kv, const int32_t* cells, cudaStream_t stream) {
  const int64_t n = m * n_head_kv * head_dim;
  if (n == 0) return cudaSuccess;
  if (kv.k_kind != kKvF16 || kv.v_kind != kKvF16) {
    if (head_dim % kKvBlock != 0) return cudaErrorInvalidValue;
    const int64_t nb = n / kKvBlock;
    return launch(store_kv_blocks_kernel, static_cast<unsigned>(ceil_div(nb, kThreads)), kThreads,
                  0, stream, K, V, m, n_head_kv, head_dim, kv, cells);
  }
  return launch(store_kv_kernel, static_cast<unsigned>(ceil_div(n, kThreads)), kThreads, 0, stream,
                K, V, m, n_head_kv, head_dim, kv, cells);
}

}  // namespace pi::gpu
