// Products with a matrix stored transposed, over row lists (Ops::linear_t and linear_t_rows
// for small batches, ffn_rows' down projection over ffn_down_t):
//   Y[i, :] = sum over the rows r listed for token i with a(i, r) != 0 of a(i, r) * D[r, :]
// in two deterministic stages (hd_reduce.h): each (segment of the token's list, group of
// columns) block accumulates its rows in list order into partial sums, then the partial sums
// are added in segment order. No atomics: the result depends only on the inputs.
#pragma once

#include "kernels/cuda/args.h"
#include "kernels/cuda/hd_reduce.h"
#include "kernels/cuda/runtime.h"

namespace pi::gpu {

// The lists and coefficients (device memory), per token i:
//   offsets != null: token i's rows are idx[offsets[i] .. offsets[i + 1]);
//   offsets == null: every token has the list idx[0 .. n) (idx null: 0 .. n - 1).
//   lda > 0: a(i, r) = A[i * lda + r] (by row number);
//   lda == 0: a is by list position, A[offsets[i] + k] for the k-th entry of token i's list.
struct TLists {
  const int32_t* idx = nullptr;
  const int64_t* offsets = nullptr;
  int64_t n = 0;
  const float* A = nullptr;
  int64_t lda = 0;
};

// Floats of partial sums per token for lists of up to max_len rows and D of `cols` columns.
inline int64_t axpy_t_partial_floats(int64_t max_len, int64_t cols) {
  return static_cast<int64_t>(segments(max_len)) * cols;
}

// Y[i, :] for tokens i in [t0, t0 + nt), Y rows ldy floats apart. `partial` holds
// nt * axpy_t_partial_floats(max_len, D.cols) floats, where max_len bounds every token's list
// length (the lists of offsets are read on the device).
cudaError_t axpy_t(const WeightRef& D, const TLists& l, int64_t max_len, int64_t t0, int64_t nt,
                   float* partial, float* Y, int64_t ldy, cudaStream_t stream);

}  // namespace pi::gpu
