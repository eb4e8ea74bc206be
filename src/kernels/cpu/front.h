// Internal: helpers shared by the threaded front ends (matvec.cpp, axpy.cpp): argument checks
// and how work is cut into tasks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/dispatch.h"
#include "tensor/quant.h"

namespace pi::cpu::detail {

// Checks a matrix kernel's weight type and row length; aborts on a programming error.
inline void check_matrix(DType t, int64_t cols) {
  require(supports(t), "unsupported weight type for a matrix kernel");
  require(cols > 0 && cols % dtype_info(t).block_size == 0,
          "cols must be a positive multiple of the weight type's block size");
}

// The same for the dense products, which also take the R16 layouts (rows a multiple of 16).
inline void check_dense_matrix(DType t, int64_t rows, int64_t cols) {
  require(supports_dense(t), "unsupported weight type for a dense matrix kernel");
  require(cols > 0 && cols % dtype_info(t).block_size == 0,
          "cols must be a positive multiple of the weight type's block size");
  require(!is_r16(t) || rows % 16 == 0,
          "an R16 matrix has a multiple of 16 rows");
}

// The same for the axpy kernels, which also take Q4_0_SPLIT.
inline void check_axpy_matrix(DType t, int64_t cols) {
  require(supports_axpy(t), "unsupported weight type for an axpy kernel");
  require(cols > 0 && cols % dtype_info(t).block_size == 0,
          "cols must be a positive multiple of the weight type's block size");
}

// Items (rows or index entries) per dot task: about 8 tasks per thread so that a dynamic
// schedule balances a shared machine, but never below 8 rows (per-task overhead) and a
// multiple of 4 (the multi-row leaves).
inline int64_t rows_per_task(int64_t n_items, int n_threads) {
  if (n_threads <= 1) return std::max<int64_t>(n_items, 1);
  int64_t per = n_items / (static_cast<int64_t>(n_threads) * 8);
  per = std::max<int64_t>(8, (per + 3) / 4 * 4);
  return per;
}

// The per-row token masks of one group of a batch's per-token row lists (CSR: token i's rows
// are idx[offsets[i] .. offsets[i+1])): bit i of masks[r] set when token g0 + i lists row r,
// for the gm <= kMaxMaskTokens tokens from g0. masks is [n_rows]; a row index out of range is
// a programming error.
inline void group_masks(const int32_t* idx, const int64_t* offsets, int64_t g0, int64_t gm, int64_t n_rows,
                        uint64_t* masks) {
  std::memset(masks, 0, static_cast<size_t>(n_rows) * sizeof(uint64_t));
  for (int64_t i = 0; i < gm; ++i) {
    for (int64_t k = offsets[g0 + i]; k < offsets[g0 + i + 1]; ++k) {
      require(idx[k] >= 0 && idx[k] < n_rows, "row index out of range");
      masks[idx[k]] |= uint64_t{1} << i;
    }
  }
}

}  // namespace pi::cpu::detail
