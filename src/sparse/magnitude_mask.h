// Host helpers of the threshold steps (threshold_proj.h, threshold_ffn.h): zeroing the entries
// of small magnitude and listing the kept ones, and the products over such lists. Run on the
// calling thread over mapped device memory, in a fixed order: the lists depend only on the
// values, never on the thread count.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include "backend/ops.h"
#include "model/weights.h"
#include "sparse/sparse_ffn.h"

namespace pi::sparse {

// Y[i, j] = X[i, j] where |X[i, j]| >= t, else 0, and token i's kept columns (ascending) in
// `lists` (CSR, capacity m * n). Returns the number kept. X and Y may alias.
//   X, Y f32 [m, n]
inline int64_t mask_small(const float* X, int64_t m, int64_t n, float t, float* Y,
                          RowLists& lists) {
  // In chunks, two loops each: the select (vectorized) writes y and a keep byte per entry,
  // the compaction adds the bytes. In one loop the compiler branched on the comparison,
  // mispredicted about half the time at the 40-60% kept that calibrated files run at.
  constexpr int64_t kChunk = 512;
  alignas(64) uint8_t keep[kChunk];
  int32_t* idx = lists.idx.data();
  int64_t k = 0;
  lists.m = m;
  lists.offsets[0] = 0;
  for (int64_t i = 0; i < m; ++i) {
    const float* x = X + i * n;
    float* y = Y + i * n;
    for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
      const int64_t jn = n - j0 < kChunk ? n - j0 : kChunk;
      for (int64_t j = 0; j < jn; ++j) {
        const float v = x[j0 + j];
        const bool kp = std::fabs(v) >= t;
        keep[j] = kp ? 1 : 0;
        y[j0 + j] = kp ? v : 0.0f;
      }
      for (int64_t j = 0; j < jn; ++j) {
        idx[k] = static_cast<int32_t>(j0 + j);
        k += keep[j];
      }
    }
    lists.offsets[static_cast<size_t>(i) + 1] = k;
  }
  return k;
}

// Y = W · Xs for the m = lists.m tokens of a masked input Xs whose kept columns are `lists`:
// over the listed rows of the transposed layout w_t [n_in, n_out] when the file stores it
// (only those rows are read), else densely over w [n_out, n_in] (the zeros are multiplied).
// Returns the weight bytes read.   Xs f32 [m, n_in], Y f32 [m, n_out]
inline uint64_t masked_product(backend::Ops& ops, const model::Matrix& w, const model::Matrix& w_t,
                               const float* Xs, const RowLists& lists, float* Y) {
  if (w_t.present()) {
    ops.linear_t_rows(w_t, Xs, lists.m, lists.idx.data(), lists.offsets.data(), Y);
    return static_cast<uint64_t>(lists.size()) * w_t.row_stride();
  }
  ops.linear(w, Xs, lists.m, Y);
  return w.nbytes();
}

}  // namespace pi::sparse
