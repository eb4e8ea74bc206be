// The one boundary between model code and the compute kernels. The forward pass and the FFN
// steps call only these functions; which kernels run behind them (the scalar reference or
// the SIMD kernels, and how work is split over the thread pool) is decided in ops.cpp alone.
//
// Every function writes its outputs completely and computes each output element on one
// thread, so results do not depend on the number of threads.
// Shapes are outermost first; m is the number of tokens (rows of activations).
// Thread-safety: an Ops object is used by one session at a time.
#pragma once

#include <cstdint>
#include <span>

#include "core/thread_pool.h"
#include "model/hparams.h"
#include "model/kv_view.h"
#include "model/weights.h"

namespace pi::model {

class Ops {
 public:
  explicit Ops(ThreadPool& pool) : pool_(pool) {}

  ThreadPool& pool() { return pool_; }

  // X[i, :] = E[tokens[i], :] dequantized.   E [n_vocab, n_embd], X f32 [m, n_embd]
  void embed(const Matrix& E, const int32_t* tokens, int64_t m, float* X);

  // Y[i, :] = W · X[i, :].   W [rows, cols], X f32 [m, cols], Y f32 [m, rows]
  void linear(const Matrix& W, const float* X, int64_t m, float* Y);
  // Three products of one input (the q, k, v projections) in one dispatch when m == 1;
  // each result is bit-identical to linear() on its own.
  void linear3(const Matrix& A, const Matrix& B, const Matrix& C, const float* X, int64_t m,
               float* YA, float* YB, float* YC);

  // Y[i, :] = sum over r in `rows` of A[i, r] * D[r, :]: the product with a matrix stored
  // transposed (one row per input feature: PowerInfer's ffn_down_t), restricted to the listed
  // rows (all of them for a dense FFN; ascending order streams fastest). Each row of D is read
  // once per call whatever m is.   D [n_rows, cols], A f32 [m, n_rows], Y f32 [m, cols]
  void linear_t(const Matrix& D, const float* A, int64_t m, std::span<const int32_t> rows,
                float* Y);

  // Row-sparse products for the sparse FFN. Row lists are per token in CSR form: token i's
  // rows are idx[offsets[i] .. offsets[i+1]), ascending, without duplicates.
  //
  // Y[i, r] = W · X[i, :] restricted to the rows r listed for token i; other Y entries are
  // left untouched. The union of the listed rows is read once per 64 tokens.
  //   W [n_rows, cols], X f32 [m, cols], Y f32 [m, n_rows]
  void linear_rows(const Matrix& W, const float* X, int64_t m, const int32_t* idx,
                   const int64_t* offsets, float* Y);
  // One row list for every token: Y[i, r] = W[r, :] · X[i, :] for r in `rows`, all i.
  void linear_rows_union(const Matrix& W, const float* X, int64_t m, std::span<const int32_t> rows,
                         float* Y);
  // linear_t with per-token lists: Y[i, :] = sum over r listed for token i with A[i, r] != 0
  // of A[i, r] * D[r, :] (Y overwritten). Each token accumulates its rows in list order.
  //   D [n_rows, cols], A f32 [m, n_rows] (only listed entries are read), Y f32 [m, cols]
  void linear_t_rows(const Matrix& D, const float* A, int64_t m, const int32_t* idx,
                     const int64_t* offsets, float* Y);

  // Y[i, :] = norm(X[i, :]) * w (+ b for layer norm).   X, Y f32 [m, n] (may alias)
  void norm(NormKind kind, const float* X, const Vector& w, const Vector& b, int64_t m, int64_t n,
            float eps, float* Y);

  // Rotates X[i] (f32 [n_heads, head_dim]) for position pos0 + i, in place.   X f32 [m, n_heads *
  // head_dim]
  void rope(float* X, int64_t m, int64_t n_heads, const HParams& hp, int64_t pos0);

  // The same with token i at position pos[i].
  void rope_at(float* X, int64_t m, int64_t n_heads, const HParams& hp, const int32_t* pos);

  // Writes K[i], V[i] (f32 [n_embd_kv]) as f16 into cell pos0 + i of `kv` (in its layout).
  void store_kv(const float* K, const float* V, int64_t m, const HParams& hp, const KvLayer& kv,
                int64_t pos0);

  // The same into cell cells[i].
  void store_kv_cells(const float* K, const float* V, int64_t m, const HParams& hp,
                      const KvLayer& kv, const int32_t* cells);

  // Causal attention: query row i (position pos0 + i, f32 [n_head, head_dim]) attends cells
  // [0, pos0 + i]. Q f32 [m, n_embd_q], out f32 [m, n_embd_q]
  void attention(const float* Q, int64_t m, const KvLayer& kv, const HParams& hp, int64_t pos0,
                 float* out);
  // Query row i attends the cells batch lists for it, in list order.
  void attention_cells(const float* Q, int64_t m, const KvLayer& kv, const HParams& hp,
                       const KvBatch& batch, float* out);

  // x = act(x) in place, x f32 [n]
  void activate(Activation act, float* x, int64_t n);
  // FFN combine for a whole batch: G = act(G) * U (Gated), act(G) * act(U) (GatedBoth) or
  // act(U) written to G (Plain, G unused on input).   G, U f32 [m, n_ff]
  void ffn_combine(FfnKind kind, Activation act, float* G, float* U, int64_t m, int64_t n_ff);
  // Y += X   (f32 [n])
  void add(float* Y, const float* X, int64_t n);

 private:
  void activate_all(Activation act, float* x, int64_t n);

  ThreadPool& pool_;
};

}  // namespace pi::model
