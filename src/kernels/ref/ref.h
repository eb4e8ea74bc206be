// Scalar reference implementation of every op: the oracle that optimised kernels are tested
// against. Written to read like the maths; never optimised. Accumulates in double.
// Weights are rows of any computable DType (row r starts at W + r * row_bytes(t, cols)).
// Shapes are outermost first. All functions are thread-safe (no shared state).
// Preconditions are the caller's: t computable, cols a multiple of its block size, indices
// in range. A violated type/length precondition sets the affected outputs to NaN.
#pragma once

#include <cstdint>

#include "kernels/rope_yarn.h"
#include "tensor/dtype.h"

namespace pi::ref {

// y[r] = W[r,:] . x        W: t [rows, cols], x: f32 [cols], y: f32 [rows]
void matvec(DType t, const void* W, int64_t rows, int64_t cols, const float* x, float* y);

// Y[i, r] = W[r,:] . X[i,:]  X: f32 [m, cols], Y: f32 [m, rows]
void matmul(DType t, const void* W, int64_t rows, int64_t cols, const float* X, int64_t m,
            float* Y);

// Row-sparse matvec: for each k < n_idx, y[idx[k]] = W[idx[k],:] . x; other y untouched.
void matvec_rows(DType t, const void* W, int64_t cols, const int32_t* idx, int64_t n_idx,
                 const float* x, float* y);

// Sparse axpy over the transposed down projection:
// y[:] += sum over k < n_idx with a[idx[k]] != 0 of a[idx[k]] * D[idx[k], :]
// D: t [n_rows, cols] (one row per FFN neuron), a: f32 [n_rows], y: f32 [cols].
void axpy_rows(DType t, const void* D, int64_t cols, const int32_t* idx, int64_t n_idx,
               const float* a, float* y);

// Dense y[:] += sum_r a[r] * D[r, :] over all rows (a zero a[r] contributes nothing).
void axpy_dense(DType t, const void* D, int64_t rows, int64_t cols, const float* a, float* y);

// y = x / sqrt(mean(x^2) + eps) * w          x, w, y: f32 [n]
void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* y);
// y = (x - mean) / sqrt(var + eps) * w + b   (b may be null)
void layernorm(const float* x, const float* w, const float* b, int64_t n, float eps, float* y);

enum class RopeMode { Normal, NeoX };
// Rotates the first n_rot dims of each of n_heads heads of size head_dim at position pos,
// in place. Normal (GPT-J/llama.cpp "norm"): pairs (2i, 2i+1). NeoX: pairs (i, i + n_rot/2).
// theta_i = pos * freq_scale * base^(-2i / n_rot); with yarn.ext_factor != 0, YaRN's blend of
// that and the unscaled angle per pair, and cos and sin scaled by its mscale (written out in
// rope.cpp independently of kernels/rope_yarn.h, which the devices share).
void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos, float base,
          float freq_scale, RopeMode mode, const RopeYarn& yarn = {});

void softmax(float* x, int64_t n);  // in place, numerically stable
void silu(const float* x, float* y, int64_t n);
void gelu(const float* x, float* y, int64_t n);  // tanh approximation
void relu(const float* x, float* y, int64_t n);
void relu_squared(const float* x, float* y, int64_t n);
void add(const float* a, const float* b, float* y, int64_t n);
void mul(const float* a, const float* b, float* y, int64_t n);
// gpt-oss's gated unit, in double: g = min(gate, 7), u = clamp(up, -7, 7),
// y = g / (1 + exp(-1.702 g)) * (u + 1) (-0 (u + 1) for g = -inf); NaN stays NaN. y may alias
// gate or up.
void swiglu_oai(const float* gate, const float* up, float* y, int64_t n);
// One row of Ops::combine_rows: y = sum over j < k of w[j] * X[rows[j], :] (n columns), from
// 0, each product and sum rounded; w == nullptr: y = X[rows[0], :] (k == 1).
void combine_row(const float* X, int64_t n, const int32_t* rows, const float* w, int64_t k, float* y);

// Causal attention of one query token over an f16 KV cache, grouped-query:
// q: f32 [n_head, head_dim]; k_cache, v_cache: f16 bits [n_ctx_used, n_kv_head, head_dim]
// (row-major, cell t holds position t); out: f32 [n_head, head_dim].
// Query head h reads kv head h / (n_head / n_kv_head). Scores are scaled by `scale`
// (usually 1/sqrt(head_dim)) and cover cells [0, n_ctx_used).
void attention(const float* q, const uint16_t* k_cache, const uint16_t* v_cache,
               int64_t n_ctx_used, int64_t n_head, int64_t n_kv_head, int64_t head_dim,
               float scale, float* out);
// The same over the listed cells: position t of the softmax is cell cells[t], t < n_cells
// (cells == nullptr: cell t). Kv head g of cell c starts at g * head_stride + c * cell_stride
// elements; 0, 0 is the cell-major layout above (head_dim, n_kv_head * head_dim).
void attention_cells(const float* q, const uint16_t* k_cache, const uint16_t* v_cache,
                     const int32_t* cells, int64_t n_cells, int64_t n_head, int64_t n_kv_head,
                     int64_t head_dim, float scale, float* out, int64_t head_stride = 0,
                     int64_t cell_stride = 0);
// attention_cells over keys and values of KV types (F16, Q8_0, Q4_0; tensor/quant.h blocks),
// each its own: strides count values, so kv head g of cell c of K starts
// row_bytes(k_type, g * head_stride + c * cell_stride) bytes in. head_dim must be a multiple of
// both types' block sizes (else out is NaN). sinks (f32 [n_head], or nullptr): head h's
// softmax has one more logit, sinks[h], with no value (gpt-oss's attention sinks).
void attention_cells_typed(const float* q, DType k_type, const void* k_cache, DType v_type,
                           const void* v_cache, const int32_t* cells, int64_t n_cells,
                           int64_t n_head, int64_t n_kv_head, int64_t head_dim, float scale,
                           float* out, int64_t head_stride = 0, int64_t cell_stride = 0,
                           const float* sinks = nullptr);
// Writes n values of x as a KV type's row at out: f16 bits (round to nearest even) or blocks
// (quantize_row's blocks). n must be a multiple of the block size (else nothing is written
// and false is returned).
bool store_kv_row(DType t, const float* x, int64_t n, void* out);

}  // namespace pi::ref
