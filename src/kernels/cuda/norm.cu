// A block of 256 threads per row. Sums are fixed-order: thread i takes elements i, i + 256,
// ... in order, each lane group adds its lanes by the butterfly, and group 0 adds the 8 group
// sums by the butterfly (padded with zeros). Every thread writes the elements it read.
#include "kernels/cuda/norm.cuh"
#include "kernels/cuda/vendor.cuh"

namespace pi::gpu {
namespace {

constexpr int kThreads = 256;

// The block's sum of v, in every thread.
__device__ float block_sum(float v, float* sh) {
  v = group_sum(v);
  if (lane_id() == 0) sh[group_id()] = v;
  __syncthreads();
  float s = lane_id() < kThreads / kGroup ? sh[lane_id()] : 0.0f;
  s = group_sum(s);
  __syncthreads();  // sh is reused by the next call
  return s;
}

__global__ void __launch_bounds__(kThreads)
    rms_kernel(const float* X, const float* w, int64_t n, float eps, float* Y) {
  __shared__ float sh[kThreads / kGroup];
  const float* x = X + static_cast<int64_t>(blockIdx.x) * n;
  float* y = Y + static_cast<int64_t>(blockIdx.x) * n;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) ss = fmaf(x[i], x[i], ss);
  ss = block_sum(ss, sh);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += kThreads) y[i] = x[i] * inv * w[i];
}

__global__ void __launch_bounds__(kThreads)
    layer_kernel(const float* X, const float* w, const float* b, int64_t n, float eps, float* Y) {
  __shared__ float sh[kThreads / kGroup];
  const float* x = X + static_cast<int64_t>(blockIdx.x) * n;
  float* y = Y + static_cast<int64_t>(blockIdx.x) * n;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) s += x[i];
  const float mean = block_sum(s, sh) / static_cast<float>(n);
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float d = x[i] - mean;
    ss = fmaf(d, d, ss);
  }
  const float inv = 1.0f / sqrtf(block_sum(ss, sh) / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += kThreads)
    y[i] = (x[i] - mean) * inv * w[i] + (b != nullptr ? b[i] : 0.0f);
}

}  // namespace

cudaError_t rms_norm(const float* X, const float* w, int64_t m, int64_t n, float eps, float* Y,
                     cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  return launch(rms_kernel, static_cast<unsigned>(m), kThreads, 0, stream, X, w, n, eps, Y);
}

cudaError_t layer_norm(const float* X, const float* w, const float* b, int64_t m, int64_t n,
                       float eps, float* Y, cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  return launch(layer_kernel, static_cast<unsigned>(m), kThreads, 0, stream, X, w, b, n, eps, Y);
}

}  // namespace pi::gpu
