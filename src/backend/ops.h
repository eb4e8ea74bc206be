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

// The rows of one set of FFN neurons, row r of each matrix belonging to the same neuron: the
// weights ffn_rows() reads. gate is absent (data == nullptr) for FfnKind::Plain.
//   gate, up [n_rows, n_embd]; down_t [n_rows, n_embd] (PowerInfer's transposed down)
struct FfnRows {
  Matrix gate;
  Matrix up;
  Matrix down_t;
};

// One single-token product of a list (Ops::linear_each): y = W · x.
struct LinearPart {
  const Matrix* W;
  const float* x;
  float* y;
};

// u32 words of one row of a flag matrix over n entries (threshold_mask, compact_rows): flag j
// is bit j % 32 of word j / 32; the bits past n in the last word are zero.
inline int64_t mask_words(int64_t n) { return (n + 31) / 32; }

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
  // Single-token products of any number of matrices, each with its own input and output (a
  // token's selected experts: their gates and ups of one input, then their downs); each y is
  // bit-identical to linear(*W, x, 1, y). The default runs them one by one; a device may run
  // them together (the CPU: one dispatch, each distinct input prepared once).
  virtual void linear_each(std::span<const LinearPart> parts) {
    for (const LinearPart& p : parts) linear(*p.W, p.x, 1, p.y);
  }

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

  // Writes K[i], V[i] (f32 [n_embd_kv]) into cell cells[i] of `kv` (in its layout), each in its
  // type: f16, or Q8_0 / Q4_0 blocks of 32 along head_dim with the reference quantizer's bytes
  // (tensor/quant.h), the same bytes on every device.
  virtual void store_kv(const AttnParams& p, const float* K, const float* V, int64_t m,
                        const KvLayer& kv, const int32_t* cells) = 0;

  // Attention: query row i (f32 [n_head, head_dim]) attends the cells `b` lists for it, in list
  // order, reading the keys and values in their types (no dequantized copy of the cache).
  //   Q f32 [m, n_embd_q], out f32 [m, n_embd_q]
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
  // Y[i, :] += b for every row i < m: a bias broadcast over the tokens.
  //   Y f32 [m, n], b f32 [n] (a weight vector of this device)
  virtual void add_bias(float* Y, const Vector& b, int64_t m, int64_t n) = 0;
  // dst[r, :] = src[r, :] for r < rows: n floats per row, rows src_stride / dst_stride floats
  // apart.
  virtual void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                         int64_t rows, int64_t n) = 0;
  // Y[i, :] = sum over j < k, in j order, of w[i * k + j] * X[rows[i * k + j], :]: the sum
  // starts at 0 and each product and each sum is rounded to f32 (no fused multiply-add), so
  // every device gives the same bits. w == nullptr (then k must be 1): Y[i, :] = X[rows[i], :]
  // exactly, a gather. The mixture-of-experts FFN gathers a batch's inputs by expert with it
  // and sums each token's experts' outputs with their routing weights.
  //   X f32 [*, n], rows i32 and w f32 [m * k] (host), Y f32 [m, n] (must not overlap X)
  virtual void combine_rows(const float* X, int64_t n, const int32_t* rows, const float* w,
                            int64_t m, int64_t k, float* Y) = 0;

  // ---- The sparse FFN over neuron lists that live in device memory ----
  // The device half of the hybrid executor picks and computes its neurons without a round trip
  // to the host: the predictor's logits become flags, the flags of the device's neurons become
  // row lists, and the lists drive the FFN. Unlike the ops above, every array of these three
  // ops (flags, ids, row lists) is device memory.
  //
  // bits[i] = flags (X[i, j] >= thr) for j < n.   X f32 [m, n], bits u32 [m, mask_words(n)]
  virtual void threshold_mask(const float* X, int64_t m, int64_t n, float thr,
                              uint32_t* bits) = 0;
  // Per token i, in CSR form: the k in [0, n_ids), ascending, whose entry ids[k] is flagged in
  // row i of bits.   bits u32 [m, mask_words(n)], ids i32 [n_ids] (ascending, < n),
  // idx i32 [m * n_ids] (token i's list at idx + offsets[i]), offsets i64 [m + 1] (offsets[0] = 0)
  virtual void compact_rows(const uint32_t* bits, int64_t m, int64_t n, const int32_t* ids,
                            int64_t n_ids, int32_t* idx, int64_t* offsets) = 0;
  // PowerInfer's ReLU FFN over the rows listed per token (CSR, device memory, ascending, as
  // compact_rows makes them): for token i and each listed row r,
  //   g = gate_r · X[i], u = up_r · X[i] (computed only where g > 0 when there is a gate),
  //   a = g * u (Gated), g * max(u, 0) (GatedBoth), u where u > 0 (Plain), else 0,
  // and Y[i, :] = the sum, in list order, of a * down_t[r, :] over the listed rows with a != 0
  // (Y overwritten; zero for an empty list). `work` is device scratch of
  // ffn_rows_work_bytes(m, n_rows, n_embd) bytes.
  //   X f32 [m, n_embd], Y f32 [m, n_embd]
  virtual void ffn_rows(FfnKind kind, const FfnRows& w, const float* X, int64_t m,
                        const int32_t* idx, const int64_t* offsets, void* work, float* Y) = 0;
  // Device scratch ffn_rows needs for m tokens over matrices of n_rows rows.
  virtual uint64_t ffn_rows_work_bytes(int64_t m, int64_t n_rows, int64_t n_embd) const = 0;
};

}  // namespace pi::backend
