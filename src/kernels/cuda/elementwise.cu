// Grid-stride loops, a thread per element.
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/hd_elementwise.h"
#include "kernels/cuda/vendor.cuh"

namespace pi::gpu {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  const int64_t b = ceil_div(n, kThreads);
  return static_cast<unsigned>(b < 65536 ? b : 65536);
}

__device__ __forceinline__ int64_t first() {
  return static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
}
__device__ __forceinline__ int64_t step() { return static_cast<int64_t>(gridDim.x) * kThreads; }

__global__ void __launch_bounds__(kThreads) activate_kernel(int act, float* x, int64_t n) {
  for (int64_t i = first(); i < n; i += step()) x[i] = activate(act, x[i]);
}

__global__ void __launch_bounds__(kThreads)
    combine_kernel(int kind, int act, float* G, const float* U, int64_t n) {
  for (int64_t i = first(); i < n; i += step()) {
    if (kind == 0)
      G[i] = activate(act, G[i]) * U[i];
    else if (kind == 1)
      G[i] = activate(act, G[i]) * activate(act, U[i]);
    else if (kind == 3)  // FfnKind::SwigluOai
      G[i] = swiglu_oai(G[i], U[i]);
    else
      G[i] = activate(act, U[i]);
  }
}

__global__ void __launch_bounds__(kThreads) add_kernel(float* Y, const float* X, int64_t n) {
  for (int64_t i = first(); i < n; i += step()) Y[i] = Y[i] + X[i];
}

__global__ void __launch_bounds__(kThreads)
    add_bias_kernel(float* Y, const float* b, int64_t m, int64_t n) {
  for (int64_t i = first(); i < m * n; i += step()) Y[i] = Y[i] + b[i % n];
}

__global__ void __launch_bounds__(kThreads)
    copy_kernel(const float* src, int64_t ss, float* dst, int64_t ds, int64_t rows, int64_t n) {
  for (int64_t i = first(); i < rows * n; i += step()) {
    const int64_t r = i / n, c = i % n;
    dst[r * ds + c] = src[r * ss + c];
  }
}

__global__ void __launch_bounds__(kThreads) combine_kernel_rows(const float* X, int64_t n, const int32_t* rows,
                                                               const float* w, int64_t m, int64_t k,
                                                               float* Y) {
  for (int64_t i = first(); i < m * n; i += step()) {
    const int64_t r = i / n, c = i % n;
    if (w == nullptr) {
      Y[i] = X[static_cast<int64_t>(rows[r]) * n + c];
      continue;
    }
    float acc = 0.0f;
    for (int64_t j = 0; j < k; ++j)
      acc = add_rn(acc, mul_rn(w[r * k + j], X[static_cast<int64_t>(rows[r * k + j]) * n + c]));
    Y[i] = acc;
  }
}

}  // namespace

cudaError_t activate(int act, float* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return launch(activate_kernel, grid_for(n), kThreads, 0, stream, act, x, n);
}

cudaError_t ffn_combine(int kind, int act, float* G, const float* U, int64_t n,
                        cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return launch(combine_kernel, grid_for(n), kThreads, 0, stream, kind, act, G, U, n);
}

cudaError_t add(float* Y, const float* X, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return launch(add_kernel, grid_for(n), kThreads, 0, stream, Y, X, n);
}

cudaError_t add_bias(float* Y, const float* b, int64_t m, int64_t n, cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  return launch(add_bias_kernel, grid_for(m * n), kThreads, 0, stream, Y, b, m, n);
}

cudaError_t copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                      int64_t rows, int64_t n, cudaStream_t stream) {
  if (rows == 0 || n == 0) return cudaSuccess;
  return launch(copy_kernel, grid_for(rows * n), kThreads, 0, stream, src, src_stride, dst,
                dst_stride, rows, n);
}

cudaError_t combine_rows(const float* X, int64_t n, const int32_t* rows, const float* w, int64_t m,
                         int64_t k, float* Y, cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  return launch(combine_kernel_rows, grid_for(m * n), kThreads, 0, stream, X, n, rows, w, m, k, Y);
}

}  // namespace pi::gpu
