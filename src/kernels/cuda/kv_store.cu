// A thread per (token, element).
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

}  // namespace

cudaError_t store_kv(const float* K, const float* V, int64_t m, int64_t n_head_kv, int64_t head_dim,
                     const KvRef& kv, const int32_t* cells, cudaStream_t stream) {
  const int64_t n = m * n_head_kv * head_dim;
  if (n == 0) return cudaSuccess;
  return launch(store_kv_kernel, static_cast<unsigned>(ceil_div(n, kThreads)), kThreads, 0, stream,
                K, V, m, n_head_kv, head_dim, kv, cells);
}

}  // namespace pi::gpu
