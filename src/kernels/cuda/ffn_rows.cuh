// PowerInfer's ReLU FFN over row lists in device memory (Ops::ffn_rows): for token i and each
// row r listed for it (CSR: idx[offsets[i] .. offsets[i + 1]), device memory),
//   g = gate_r · X[i], u = up_r · X[i] (only where g > 0 when there is a gate),
//   a = g * u (gated), g * max(u, 0) (both), u where u > 0 (plain), else 0,
// and Y[i, :] = sum of a * down_t[r, :] over the listed rows with a != 0. Stage 1: a lane group
// per list entry (row_dot.cuh, the matrix kernels' dot) writes a to the work area; stage 2:
// the two-stage transposed product (axpy_t.cuh). Deterministic; no float atomics.
#pragma once

#include "kernels/cuda/args.h"
#include "kernels/cuda/runtime.h"

namespace pi::gpu {

enum FfnCode : int { kFfnGated = 0, kFfnBoth = 1, kFfnPlain = 2 };

struct FfnRowsArgs {
  int kind = kFfnGated;
  WeightRef gate;  // absent (data null) for kFfnPlain; same type as up otherwise
  WeightRef up;
  WeightRef down;            // ffn_down_t [n_rows, n_embd]
  const float* X = nullptr;  // f32 [m, n_embd]
  int64_t m = 0;
  const int32_t* idx = nullptr;
  const int64_t* offsets = nullptr;
};

// Tokens whose down projections share one pass (and one partial-sum area).
constexpr int kFfnTokens = 8;

// Bytes of the work area for m tokens over matrices of n_rows rows of n_embd columns: the
// activations a by list position, the 8-bit activations, the down projection's partial sums.
int64_t ffn_rows_work_bytes(int64_t m, int64_t n_rows, int64_t n_embd);

// Y f32 [m, n_embd] (overwritten; zero for an empty list).
cudaError_t ffn_rows(const FfnRowsArgs& a, void* work, float* Y, cudaStream_t stream);

}  // namespace pi::gpu
