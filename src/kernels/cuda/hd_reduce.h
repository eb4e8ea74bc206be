// Fixed summation orders of the GPU kernels, host and device (hd.h), so that every result is
// the same on every run and can be replayed on the CPU:
// - lane groups sum their 32 lanes' values with the xor butterfly (offsets 16, 8, 4, 2, 1);
//   every lane ends with the same sum (group_sum in vendor.cuh; butterfly_sum32 here);
// - the transposed products (linear_t, linear_t_rows, ffn_rows' down projection) split a
//   token's list of n rows into segments(n) consecutive segments; each segment's rows are
//   accumulated in list order into a partial sum per column, and the partial sums are added
//   in segment order (two stages, no atomics).
#pragma once

#include <cstdint>

#include "kernels/cuda/hd.h"

namespace pi::gpu {

// A segment holds at most kSegRows rows, until a list is long enough to need more than
// kMaxSegments (2048 rows): then kMaxSegments segments of up to ceil(n / kMaxSegments).
// Short segments give a decode step's sparse down projection enough blocks to keep the
// memory busy; the cap bounds the partial sums (kMaxSegments x cols floats per token).
constexpr int kSegRows = 8;
constexpr int kMaxSegments = 256;

PI_HD int segments(int64_t n) {
  if (n <= 0) return 0;
  const int64_t s = ceil_div(n, kSegRows);
  return static_cast<int>(s < kMaxSegments ? s : kMaxSegments);
}

// Segment s of S over a list of n rows: [seg_begin(n, S, s), seg_begin(n, S, s + 1)).
PI_HD int64_t seg_begin(int64_t n, int S, int s) { return n * s / S; }

// The second stage: partial[0], partial[stride], ... partial[(S - 1) stride] added in order.
PI_HD float combine_segments(const float* partial, int S, int64_t stride) {
  float y = 0.0f;
  for (int s = 0; s < S; ++s) y += partial[s * stride];
  return y;
}

// The butterfly over 32 lane values, as the shuffles compute it (v is overwritten).
PI_HD float butterfly_sum32(float* v) {
  for (int off = 16; off > 0; off >>= 1) {
    float t[32];
    for (int l = 0; l < 32; ++l) t[l] = v[l] + v[l ^ off];
    for (int l = 0; l < 32; ++l) v[l] = t[l];
  }
  return v[0];
}

}  // namespace pi::gpu
