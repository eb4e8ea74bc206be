// A lane group per mask word: lane k reads element 32 w + k (coalesced) and the group's
// ballot is the word.
#include "kernels/cuda/mask.cuh"
#include "kernels/cuda/vendor.cuh"

namespace pi::gpu {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    mask_kernel(const float* X, int64_t m, int64_t n, float thr, uint32_t* bits) {
  const int64_t words = ceil_div(n, 32);
  const int64_t g = static_cast<int64_t>(blockIdx.x) * (kThreads / kGroup) + group_id();
  if (g >= m * words) return;
  const int64_t t = g / words, w = g % words;
  const int64_t j = w * 32 + lane_id();
  const bool on = j < n && X[t * n + j] >= thr;
  const uint32_t word = group_ballot(on);
  if (lane_id() == 0) bits[g] = word;
}

}  // namespace

cudaError_t threshold_mask(const float* X, int64_t m, int64_t n, float thr, uint32_t* bits,
                           cudaStream_t stream) {
  const int64_t groups = m * ceil_div(n, 32);
  if (groups == 0) return cudaSuccess;
  return launch(mask_kernel, static_cast<unsigned>(ceil_div(groups, kThreads / kGroup)), kThreads,
                0, stream, X, m, n, thr, bits);
}

}  // namespace pi::gpu
