// A thread per (token, pair): one cosine and sine in double, applied to the pair in every head.
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/vendor.cuh"

namespace pi::gpu {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads)
    rope_kernel(RopeArgs a, float* X, int64_t m, int64_t n_heads, const int32_t* pos) {
  const int64_t half = a.angles.n_rot / 2;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= m * half) return;
  const int64_t t = i / half, p = i % half;
  const double theta = rope_theta(a.angles, pos[t], p);
  double sd, cd;
  sincos(theta, &sd, &cd);
  const float c = static_cast<float>(cd * a.angles.mscale), s = static_cast<float>(sd * a.angles.mscale);
  const int64_t i0 = a.neox ? p : 2 * p, i1 = a.neox ? p + half : 2 * p + 1;
  float* x = X + t * n_heads * a.head_dim;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* xh = x + h * a.head_dim;
    const float v0 = xh[i0], v1 = xh[i1];
    xh[i0] = v0 * c - v1 * s;
    xh[i1] = v0 * s + v1 * c;
  }
}

}  // namespace

cudaError_t rope(const RopeArgs& a, float* X, int64_t m, int64_t n_heads, const int32_t* pos,
                 cudaStream_t stream) {
  const int64_t n = m * (a.angles.n_rot / 2);
  if (n == 0) return cudaSuccess;
  return launch(rope_kernel, static_cast<unsigned>(ceil_div(n, kThreads)), kThreads, 0, stream, a,
                X, m, n_heads, pos);
}

}  // namespace pi::gpu
