// One lane group per block of 32 activations: the group's NaN-propagating max of |x|, each
// lane's quant, the group's sum of quants (hd_q8.h: quantize_q8_block, lane by lane).
#include "kernels/cuda/act_quant.cuh"
#include "kernels/cuda/vendor.cuh"

namespace pi::gpu {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    quantize_q8_kernel(const float* X, int64_t ldx, int64_t m, int64_t cols, int8_t* q,
                       Q8Scale* s) {
  const int64_t per_row = cols / 32;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * (kThreads / kGroup) + group_id();
  if (g >= m * per_row) return;
  const int64_t t = g / per_row, b = g % per_row;
  const int lane = lane_id();
  const float x = X[t * ldx + b * 32 + lane];
  const float amax = group_max(fabsf(x));
  const int v = q8_quant(x, q8_inverse(amax));
  q[t * cols + b * 32 + lane] = static_cast<int8_t>(v);
  const int sum = group_sum(v);
  if (lane == 0) s[g] = Q8Scale{amax / 127.0f, sum};
}

}  // namespace

cudaError_t quantize_q8(const float* X, int64_t ldx, int64_t m, int64_t cols, int8_t* q, Q8Scale* s,
                        cudaStream_t stream) {
  const int64_t groups = m * (cols / 32);
  if (groups == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(ceil_div(groups, kThreads / kGroup));
  return launch(quantize_q8_kernel, blocks, kThreads, 0, stream, X, ldx, m, cols, q, s);
}

}  // namespace pi::gpu
