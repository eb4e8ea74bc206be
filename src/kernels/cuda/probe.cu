// A grid-stride loop over 16-byte words, four loads issued before their sums.
#include "kernels/cuda/probe.cuh"
#include "kernels/cuda/vendor.cuh"

namespace pi::gpu {
namespace {

constexpr int kThreads = 512;

__global__ void __launch_bounds__(kThreads) read_kernel(const uint4* p, int64_t n, uint64_t* sink) {
  __shared__ uint64_t part[kThreads / kGroup];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  uint64_t acc = 0;
  int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
    acc += a.x ^ b.y ^ c.z ^ d.w;
    acc += a.y ^ b.z ^ c.w ^ d.x;
    acc += a.z ^ b.w ^ c.x ^ d.y;
    acc += a.w ^ b.x ^ c.y ^ d.z;
  }
  for (; i < n; i += stride) {
    const uint4 a = p[i];
    acc += a.x ^ a.y ^ a.z ^ a.w;
  }
  auto lo = static_cast<int>(acc & 0xffffffffu), hi = static_cast<int>(acc >> 32);
  lo = group_sum(lo);
  hi = group_sum(hi);
  if (lane_id() == 0)
    part[group_id()] =
        (static_cast<uint64_t>(static_cast<uint32_t>(hi)) << 32) | static_cast<uint32_t>(lo);
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t s = 0;
    for (int g = 0; g < kThreads / kGroup; ++g) s += part[g];
    sink[blockIdx.x] = s;
  }
}

}  // namespace

cudaError_t read_probe(const uint64_t* p, int64_t n_words, int blocks, uint64_t* sink,
                       cudaStream_t stream) {
  return launch(read_kernel, static_cast<unsigned>(blocks), kThreads, 0, stream,
                reinterpret_cast<const uint4*>(p), n_words / 2, sink);
}

}  // namespace pi::gpu
