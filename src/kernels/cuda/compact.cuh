// Flags to row lists (Ops::compact_rows), a deterministic prefix-sum compaction: for each
// token i, the positions k in [0, n_ids), ascending, whose id ids[k] is flagged in row i of
// bits, stored at idx + offsets[i] with offsets[0] = 0 and offsets[i + 1] = offsets[i] + count.
// bits u32 [m, ceil(n / 32)], ids i32 [n_ids] (ascending, < n), idx i32 [m * n_ids],
// offsets i64 [m + 1]; all device memory. One kernel for one token (a decode step); three for
// more (counts, their prefix sum, the writes).
#pragma once

#include "kernels/cuda/runtime.h"

namespace pi::gpu {

cudaError_t compact_rows(const uint32_t* bits, int64_t m, int64_t n, const int32_t* ids,
                         int64_t n_ids, int32_t* idx, int64_t* offsets, cudaStream_t stream);

}  // namespace pi::gpu
