// A block of 1024 threads per token walks the ids in chunks of 1024: each lane group ballots
// its 32 flags, a lane's place is the count of flagged lanes below it in its group plus the
// groups below it in the chunk (prefix over the 32 group counts by one group) plus the chunk's
// base. The scan of the token counts (m > 1) is one thread's loop, in order.
#include "kernels/cuda/compact.cuh"
#include "kernels/cuda/vendor.cuh"

namespace pi::gpu {
namespace {

constexpr int kThreads = 1024;
constexpr int kGroups = kThreads / kGroup;

__device__ __forceinline__ bool flagged(const uint32_t* row, int32_t j) {
  return ((row[j >> 5] >> (j & 31)) & 1u) != 0;
}

// Token blockIdx.x: count only (count_only) or write idx from base offsets[t] (or 0 and the
// offsets themselves when m == 1).
__global__ void __launch_bounds__(kThreads)
    compact_kernel(const uint32_t* bits, int64_t words, const int32_t* ids, int64_t n_ids,
                   int32_t* idx, int64_t* offsets, bool count_only, bool single) {
  __shared__ int group_count[kGroups];
  __shared__ int group_base[kGroups];
  __shared__ int chunk_total;
  const int64_t t = blockIdx.x;
  const uint32_t* row = bits + t * words;
  int64_t base = count_only || single ? 0 : offsets[t];
  for (int64_t k0 = 0; k0 < n_ids; k0 += kThreads) {
    const int64_t k = k0 + threadIdx.x;
    const bool on = k < n_ids && flagged(row, ids[k]);
    const uint32_t ballot = group_ballot(on);
    if (lane_id() == 0) group_count[group_id()] = __popc(ballot);
    __syncthreads();
    if (group_id() == 0) {
      // Exclusive prefix of the group counts, in order, by the shuffle scan of group 0.
      const int c = group_count[lane_id()];
      int incl = c;
#pragma unroll
      for (int off = 1; off < kGroup; off <<= 1) {
        const int o = shfl(incl, lane_id() >= off ? lane_id() - off : lane_id());
        if (lane_id() >= off) incl += o;
      }
      group_base[lane_id()] = incl - c;
      if (lane_id() == kGroup - 1) chunk_total = incl;
    }
    __syncthreads();
    if (on && !count_only) {
      const int at = group_base[group_id()] + __popc(ballot & lanes_below());
      idx[base + at] = static_cast<int32_t>(k);
    }
    base += chunk_total;
    __syncthreads();  // group_count, group_base and chunk_total are rewritten next chunk
  }
  if (threadIdx.x == 0) {
    if (single) {
      offsets[0] = 0;
      offsets[1] = base;
    } else if (count_only) {
      offsets[t + 1] = base;
    }
  }
}

// offsets[0] = 0, offsets[i + 1] += offsets[i] in order.
__global__ void scan_kernel(int64_t* offsets, int64_t m) {
  offsets[0] = 0;
  for (int64_t i = 1; i <= m; ++i) offsets[i] += offsets[i - 1];
}

}  // namespace

cudaError_t compact_rows(const uint32_t* bits, int64_t m, int64_t n, const int32_t* ids,
                         int64_t n_ids, int32_t* idx, int64_t* offsets, cudaStream_t stream) {
  const int64_t words = ceil_div(n, 32);
  if (m == 0) {
    return cudaMemsetAsync(offsets, 0, sizeof(int64_t), stream);
  }
  if (m == 1) {
    return launch(compact_kernel, 1, kThreads, 0, stream, bits, words, ids, n_ids, idx, offsets,
                  false, true);
  }
  const auto grid = static_cast<unsigned>(m);
  if (const cudaError_t e = launch(compact_kernel, grid, kThreads, 0, stream, bits, words, ids,
                                   n_ids, idx, offsets, true, false);
      e != cudaSuccess)
    return e;
  if (const cudaError_t e = launch(scan_kernel, 1, 1, 0, stream, offsets, m); e != cudaSuccess)
    return e;
  return launch(compact_kernel, grid, kThreads, 0, stream, bits, words, ids, n_ids, idx, offsets,
                false, false);
}

}  // namespace pi::gpu
