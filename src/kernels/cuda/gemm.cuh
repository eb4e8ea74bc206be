// Many-token products (Ops::linear and linear_t for prompt batches) as cuBLAS SGEMMs on f32
// tiles of decoded weight rows (dequant.cuh): plain f32 arithmetic (no TF32), deterministic
// for a given shape. CUDA only: the HIP build leaves this file out.
#pragma once

#include "kernels/cuda/args.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/runtime.h"

namespace pi::gpu {

// Device scratch the products decode into: `tile` holds rows of decoded weights, `gather`
// (linear_t) the coefficients of a tile's rows for every token.
struct GemmScratch {
  float* tile = nullptr;
  int64_t tile_floats = 0;
  float* gather = nullptr;
  int64_t gather_floats = 0;
};

// The first failing call (nullptr when all succeeded) and its status.
struct GemmStatus {
  const char* call = nullptr;
  int code = 0;
  bool ok() const { return call == nullptr; }
};

// Y[i, r] = w[r, :] · X[i, :] for every row r and token i < m (X rows ldx floats apart, Y rows
// ldy apart). The handle must be bound to `stream`.
GemmStatus gemm_linear(cublasHandle_t h, const WeightRef& w, const float* X, int64_t ldx, int64_t m,
                       float* Y, int64_t ldy, const GemmScratch& s, cudaStream_t stream);

// Y[i, :] = sum over k < n of A[i, rows[k]] * D[rows[k], :] (rows: device memory, null means
// 0 .. n - 1; A rows lda floats apart, Y rows ldy apart; Y overwritten, zero when n == 0).
GemmStatus gemm_linear_t(cublasHandle_t h, const WeightRef& D, const int32_t* rows, int64_t n,
                         const float* A, int64_t lda, int64_t m, float* Y, int64_t ldy,
                         const GemmScratch& s, cudaStream_t stream);

}  // namespace pi::gpu
