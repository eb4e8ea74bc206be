// Row products of a weight matrix with the activations of a few tokens (Ops::linear for
// small batches, linear_rows, linear_rows_union, the predictors): one lane group per
// (row, token group) computes W[r, :] · X[i, :] (row_dot.cuh), by the integer path for the
// block formats of hd_q8.h (the activations quantized first: act_quant.cuh) and in f32
// otherwise (16-byte loads where the rows and activations are 16-byte aligned).
#pragma once

#include "kernels/cuda/args.h"
#include "kernels/cuda/runtime.h"

namespace pi::gpu {

// Tokens per pass of a lane group over its row: up to this many share one read of the row.
constexpr int kMatvecTokens = 8;

// Y[i, r] = W[r, :] · X[i, :] for every listed row r (rows: device memory, n entries; null
// means 0 .. n - 1) and every token i < m (Y rows ldy floats apart). Rows are read once per
// kMatvecTokens tokens.
cudaError_t matvec_rows(const WeightRef& w, const int32_t* rows, int64_t n, const ActRef& x,
                        int64_t m, float* Y, int64_t ldy, cudaStream_t stream);

// Per-token lists in CSR form (device memory): Y[i, r] = W[r, :] · X[i, :] for the rows r of
// token i, idx[offsets[i] .. offsets[i + 1]); `total` = offsets[m] (known to the caller).
cudaError_t matvec_csr(const WeightRef& w, const int32_t* idx, const int64_t* offsets, int64_t m,
                       int64_t total, const ActRef& x, float* Y, int64_t ldy, cudaStream_t stream);

}  // namespace pi::gpu
