// The op set of the forward pass, implemented once per device (cpu, ref, sim; cuda later).
// Model and sparse code call only these; which kernels run, on which threads, is the device's.
//
// Memory: weight views (Matrix, Vector), activations (X, Y, ...) and the KV layer are device
// addresses of the device that owns this Ops; index arrays (token ids, row lists, CSR offsets,
// positions, cells, a KvBatch) are host memory, read before the call returns.
// Calls are submitted to the device's compute queue and may return before the work is done;
// read results through Device::map or a copy.
//
// Every op writes its outputs completely (unless it says which entries it leaves untouched) and
// computes each output element on one thread in a fixed order, so results do not depend on the
// number of threads. Shapes are outermost first; m is the number of tokens.
// Thread-safety: one host thread submits to an Ops at a time.
#pragma once

#include <cstdint>
#include <span>

#include "backend/op_params.h"
#include "tensor/view.h"

namespace pi::backend {

class Ops {
 public:
  virtual ~Ops() = default;

  // X[i, :] = E[tokens[i], :] dequantized.   E [n_vocab, n_embd], X f32 [m, n_embd]
  virtual void embed(const Matrix& E, const int32_t* tokens, int64_t m, float* X) = 0;

  // Y[i, :] = W · X[i, :].   W [rows, cols], X f32 [m, cols], Y f32 [m, rows]
  virtual void linear(const Matrix& W, const float* X, int64_t m, float* Y) = 0;
  // Three products of one input (the q, k, v projections); each result is bit-identical to
  // linear() on its own.
  virtual void linear3(const Matrix& A, const Matrix& B, const Matrix& C, const float* X, int64_t m,
                       float* YA, float* YB, float* YC) = 0;

  // Y[i, :] = sum over r in `rows` of A[i, r] * D[r, :]: the product with a matrix stored
  // transposed (one row per input feature: PowerInfer's ffn_down_t), restricted to the listed
  // rows (all of them for a dense FFN; ascending order streams fastest). Each row of D is read
  // once per call whatever m is.   D [n_rows, cols], A f32 [m, n_rows], Y f32 [m, cols]
  virtual void linear_t(const Matrix& D, const float* A, int64_t m, std::span<const int32_t> rows,
                        float* Y) = 0;

  // Row-sparse products for the sparse FFN. Row lists are per token in CSR form: token i's
  // rows are idx[offsets[i] .. offsets[i+1]), ascending, without duplicates.
  //
  // Y[i, r] = W · X[i, :] restricted to the rows r listed for token i; other Y entries are
  // left untouched. The union of the listed rows is read once per 64 tokens.
  //   W [n_rows, cols], X f32 [m, cols], Y f32 [m, n_rows]
  virtual void linear_rows(const Matrix& W, const float* X, int64_t m, const int32_t* idx,
                           const int64_t* offsets, float* Y) = 0;
  // One row list for every token: Y[i, r] = W[r, :] · X[i, :] for r in `rows`, all i.
  virtual void linear_rows_union(const Matrix& W, const float* X, int64_t m,
                                 std::span<const int32_t> rows, float* Y) = 0;
  // linear_t with per-token lists: Y[i, :] = sum over r listed for token i with A[i, r] != 0
  // of A[i, r] * D[r, :] (Y overwritten). Each token accumulates its rows in list order.
  //   D [n_rows, cols], A f32 [m, n_rows] (only listed entries are read), Y f32 [m, cols]
  virtual void linear_t_rows(const Matrix& D, const float* A, int64_t m, const int32_t* idx,
                             const int64_t* offsets, float* Y) = 0;

  // Y[i, :] = norm(X[i, :]) * w (+ b for layer norm).   X, Y f32 [m, n] (may alias)
  virtual void norm(const NormParams& p, const float* X, const Vector& w, const Vector& b,
                    int64_t m, int64_t n, float* Y) = 0;

  // Rotates X[i] (f32 [n_heads, head_dim]) for position pos[i], in place.
  //   X f32 [m, n_heads * head_dim]
  virtual void rope(const RopeParams& p, float* X, int64_t m, int64_t n_heads,
                    const int32_t* pos) = 0;

  // Writes K[i], V[i] (f32 [n_embd_kv]) as f16 into cell cells[i] of `kv` (in its layout).
  virtual void store_kv(const AttnParams& p, const float* K, const float* V, int64_t m,
                        const KvLayer& kv, const int32_t* cells) = 0;

  // Attention: query row i (f32 [n_head, head_dim]) attends the cells `b` lists for it, in list
  // order.   Q f32 [m, n_embd_q], out f32 [m, n_embd_q]
  virtual void attention(const AttnParams& p, const float* Q, int64_t m, const KvLayer& kv,
                         const KvBatch& b, float* out) = 0;

  // x = act(x) in place, x f32 [n]
  virtual void activate(Activation act, float* x, int64_t n) = 0;
  // FFN combine for a whole batch: G = act(G) * U (Gated), act(G) * act(U) (GatedBoth) or
  // act(U) written to G (Plain, G unused on input).   G, U f32 [m, n_ff]
  virtual void ffn_combine(FfnKind kind, Activation act, float* G, float* U, int64_t m,
                           int64_t n_ff) = 0;
  // Y += X   (f32 [n])
  virtual void add(float* Y, const float* X, int64_t n) = 0;
  // dst[r, :] = src[r, :] for r < rows: n floats per row, rows src_stride / dst_stride floats
  // apart.
  virtual void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                         int64_t rows, int64_t n) = 0;
};

}  // namespace pi::backend
