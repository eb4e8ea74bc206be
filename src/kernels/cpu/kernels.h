// Optimised CPU kernels: the same ops as pi::ref (src/kernels/ref/ref.h), on raw pointers and
// sizes, multi-threaded through a ThreadPool and vectorised for the best instruction set the
// CPU has. This header is the one dispatch boundary: callers never see the ISA.
//
// Conventions (as in ref.h): shapes are outermost first; a weight W: t [rows, cols] has row r
// at W + r * row_bytes(t, cols); cols must be a multiple of the type's block size.
// Supported weight types: F32, F16, BF16, Q8_0, Q4_0 (fast paths), Q4_1, Q5_0, Q5_1, MXFP4,
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
// Calling a kernel with another type or a misaligned cols is a programming error: it aborts
// with a message (ask supports() first).
//
// Numerics: quantized weight types multiply against activations quantized on the fly to
// 8-bit blocks (once per call): blocks of 32, or of 256 for the K-quants (Q2_K..Q5_K, and
// Q6_K on AVX-512 and NEON), so results differ from ref by at most the activation
// quantization error (|x_block|_max / 254 per element) plus float rounding. Results never
// depend on the number of threads: every output element is computed by one task in a fixed
// order. Outputs of different ISAs may differ in the last bits.
//
// Thread-safety: kernels are reentrant; concurrent calls on one pool are serialized by it.
// Scratch memory is a per-calling-thread buffer that grows to the largest call and is reused.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/rope_yarn.h"
#include "tensor/dtype.h"

namespace pi::cpu {

// gpt-oss's SwiGLU constants (its reference implementation's alpha and limit).
inline constexpr float kOaiAlpha = 1.702f;
inline constexpr float kOaiLimit = 7.0f;

namespace detail {
struct KernelTable;
}

// ---- Instruction set selection -------------------------------------------------------
// Neon: ARMv8.0 Advanced SIMD (every aarch64 CPU); NeonDot: ARMv8.2 with the dot-product
// (SDOT) and half-precision arithmetic extensions.
enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2, Neon = 3, NeonDot = 4 };

std::string_view isa_name(Isa isa);
// True when kernels for `isa` are compiled into this binary and the CPU executes them.
bool isa_available(Isa isa);
// The ISA devices start from (and the CPU layouts weights are repacked into at load): the
// best available here, unless set_default_isa() chose another.
Isa default_isa();
// Makes the ISA named `name` (scalar|avx2|avx512|neon|neon-dot) the default for what is
// created afterwards: the front ends pass the environment's PI_KERNELS_ISA (a test and
// benchmark switch; the library reads no environment). An unknown name, or one this binary
// or CPU lacks, keeps the best ISA: the text returned says so ("" when done).
std::string set_default_isa(std::string_view name);

// True for weight types the matrix kernels accept.
bool supports(DType t);
// True for weight types the axpy kernels (axpy_rows, axpy_dense, axpy_rows_union,
// axpy_rows_batch) accept: those of supports() and Q4_0_SPLIT, a layout of transposed Q4_0
// matrices for the axpy alone (tensor/dtype.h).
bool supports_axpy(DType t);
// The layout the axpy of `isa` reads a matrix of type t fastest in: Q4_0_SPLIT for Q4_0 with
// the AVX-512 leaf (its four-block loads are aligned there: docs/BENCHMARKS.md, "A
// scales-apart layout"), else t itself. Same results either way, bit for bit.
DType axpy_layout(Isa isa, DType t);
// True for weight types the dense products (matvec, matvec_multi, matmul) accept: those of
// supports() and the R16 layouts Q4_0_R16 / Q8_0_R16 / Q4_K_R16 / MXFP4_R16 (tensor/dtype.h;
// rows a multiple of 16), layouts of Q4_0, Q8_0, Q4_K and MXFP4 matrices for these alone (the
// row-list kernels refuse them).
bool supports_dense(DType t);
// The layout the dense products of `isa` read a matrix of type t and `rows` rows fastest in:
// Q4_0_R16 for Q4_0, Q8_0_R16 for Q8_0, Q4_K_R16 for Q4_K and MXFP4_R16 for MXFP4 with the
// AVX-512 or AVX2 leaves, when rows is a multiple of 16 (prompt batches 2-3x faster:
// docs/BENCHMARKS.md, "Sixteen rows side by side"), else t. The results differ from the file
// layout's in the last bits (another order of sums), never between batch sizes, thread counts
// or ISAs reading the same layout.
DType dot_layout(Isa isa, DType t, int64_t rows);

struct MatvecPart {
  DType type;
  const void* W;
  int64_t rows;
  float* y;
  const float* x = nullptr;  // this part's input; nullptr: matvec_multi's x
};
enum class RopeMode { Normal, NeoX };
struct AttentionDims {
  int64_t n_head;     // query heads
  int64_t n_kv_head;  // key/value heads; query head h reads kv head h / (n_head / n_kv_head)
  int64_t head_dim;
  float scale;        // score scale, usually 1 / sqrt(head_dim)
  // Cache layout, in elements: kv head h of cell c starts at h * head_stride + c * cell_stride.
  // 0, 0 means cell-major [cell, n_kv_head, head_dim] (head_stride = head_dim, cell_stride =
  // n_kv_head * head_dim). Head-major [n_kv_head, n_cells, head_dim] (head_stride = n_cells *
  // head_dim, cell_stride = head_dim) lets one head's keys and values stream contiguously.
  int64_t head_stride = 0;
  int64_t cell_stride = 0;
  // Types of the cached keys and values: F16 (bit patterns) or Q8_0 / Q4_0 (tensor/quant.h
  // blocks of 32 along head_dim; head_dim and the strides must then be multiples of 32).
  // Strides still count values: a row starts row_bytes(type, offset in values) bytes in.
  DType k_type = DType::F16;
  DType v_type = DType::F16;
  // Attention sinks (f32 [n_head], or nullptr): head h's softmax has one more logit, sinks[h],
  // with no value.
  const float* sinks = nullptr;
};

// The kernels of one ISA. A Kernels object is a small immutable value (a pointer to the
// ISA's table of leaves): each device or test holds its own, so there is no process-wide
// kernel setting. Methods are reentrant; concurrent calls on one pool are serialized by it.
class Kernels {
 public:
  // Kernels of `isa`, which must be available (isa_available); an unavailable ISA falls back
  // to the best available one below it.
  explicit Kernels(Isa isa);
  Isa isa() const { return isa_; }


  // ---- Dense matrix products -------------------------------------------------------------
  // y[r] = W[r,:] . x           W: t [rows, cols], x: f32 [cols], y: f32 [rows]
  void matvec(ThreadPool& pool, DType t, const void* W, int64_t rows, int64_t cols,
              const float* x, float* y) const;

  // Several matvecs in one dispatch (the q, k and v projections of one input; a token's
  // experts): part j computes y_j = W_j . x_j, x_j = parts[j].x or else x. Every part has
  // `cols` columns; types may differ; parts of one type and input share its prepared
  // activation. Each y_j is bit-identical to matvec(W_j, x_j): only the split into tasks
  // differs. At most kMaxMatvecParts parts.
  static constexpr int kMaxMatvecParts = 32;
  void matvec_multi(ThreadPool& pool, const MatvecPart* parts, int n_parts, int64_t cols,
                    const float* x) const;

  // matvec, matvec_multi and matmul also take the R16 types (supports_dense): every token of a
  // matmul then equals the matvec of that token bit for bit, as for the other types.
  // Y[i, r] = W[r,:] . X[i,:]   X: f32 [m, cols], Y: f32 [m, rows]   (prompt processing)
  void matmul(ThreadPool& pool, DType t, const void* W, int64_t rows, int64_t cols,
              const float* X, int64_t m, float* Y) const;

  // ---- Neuron-sparse products (PowerInfer gate/up and down) -------------------------------
  // Row-sparse matvec: y[idx[k]] = W[idx[k],:] . x for k < n_idx; other y untouched.
  // Any index order is correct; ascending order streams fastest.
  void matvec_rows(ThreadPool& pool, DType t, const void* W, int64_t cols, const int32_t* idx,
                   int64_t n_idx, const float* x, float* y) const;

  // Sparse axpy over the transposed down projection, D: t [n_rows, cols] one row per neuron:
  // y[:] += sum over k < n_idx with a[idx[k]] != 0 of a[idx[k]] * D[idx[k], :]
  // a: f32 [n_rows], y: f32 [cols]. The order of the sums is fixed (axpy.cpp): the listed
  // rows below n_rows / 2 are added to y in list order, those above into a zeroed partial in
  // list order, and the partial to y last - whatever the thread count, and the same per token
  // in the many-token forms below, so results are bit-identical across pool sizes and batch
  // splits. Threads own disjoint (half, column slice) parts: no race. Q4_0 sums integers over
  // groups of rows in one 16-row window, coefficients rounded to 8 bits per group and output
  // block (q4_groups.h): the same bits on every ISA and batch split, for ascending lists.
  void axpy_rows(ThreadPool& pool, DType t, const void* D, int64_t n_rows, int64_t cols,
                 const int32_t* idx, int64_t n_idx, const float* a, float* y) const;

  // Dense y[:] += sum_r a[r] * D[r, :] over all rows (rows with a[r] == 0 are skipped).
  void axpy_dense(ThreadPool& pool, DType t, const void* D, int64_t rows, int64_t cols,
                  const float* a, float* y) const;

  // Several tokens at once. Per-token index lists are in CSR form: token i's list is
  // idx[offsets[i] .. offsets[i+1]) (offsets: [m + 1]), without duplicates, values in
  // [0, n_rows). Each weight row is read once per call however many tokens use it.
  //
  // Y[i, r] = W[r,:] . X[i,:] for r in token i's list; other Y untouched.
  // W: t [n_rows, cols], X: f32 [m, cols], Y: f32 [m, n_rows]
  void matvec_rows_batch(ThreadPool& pool, DType t, const void* W, int64_t n_rows, int64_t cols,
                         const int32_t* idx, const int64_t* offsets, const float* X, int64_t m,
                         float* Y) const;
  // Union-of-masks variant: one list for all tokens, Y[i, idx[k]] = W[idx[k],:] . X[i,:].
  void matvec_rows_union(ThreadPool& pool, DType t, const void* W, int64_t n_rows, int64_t cols,
                         const int32_t* idx, int64_t n_idx, const float* X, int64_t m, float* Y) const;

  // Y[i, :] += sum over r in token i's list with A[i, r] != 0 of A[i, r] * D[r, :]
  // D: t [n_rows, cols], A: f32 [m, n_rows], Y: f32 [m, cols]
  void axpy_rows_batch(ThreadPool& pool, DType t, const void* D, int64_t n_rows, int64_t cols,
                       const int32_t* idx, const int64_t* offsets, const float* A, int64_t m,
                       float* Y) const;
  // Union variant: one list for all tokens (rows where A[i, r] == 0 are skipped per token).
  void axpy_rows_union(ThreadPool& pool, DType t, const void* D, int64_t n_rows, int64_t cols,
                       const int32_t* idx, int64_t n_idx, const float* A, int64_t m, float* Y) const;

  // ---- Small ops (f32 vectors of n elements; same contracts as ref.h) --------------------
  // y = x / sqrt(mean(x^2) + eps) * w
  void rmsnorm(ThreadPool& pool, const float* x, const float* w, int64_t n, float eps, float* y) const;
  // y = (x - mean) / sqrt(var + eps) * w + b   (b may be null)
  void layernorm(ThreadPool& pool, const float* x, const float* w, const float* b, int64_t n,
                 float eps, float* y) const;

  // In place on x: f32 [n_heads, head_dim]; rotates the first n_rot dims of each head at
  // position pos. Normal: pairs (2i, 2i+1). NeoX: pairs (i, i + n_rot/2).
  // theta_i = pos * freq_scale * base^(-2i / n_rot), or YaRN's angles and magnitude when
  // yarn.ext_factor != 0 (kernels/rope_yarn.h).
  void rope(ThreadPool& pool, float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot,
            int64_t pos, float base, float freq_scale, RopeMode mode, const RopeYarn& yarn = {}) const;

  void softmax(ThreadPool& pool, float* x, int64_t n) const;  // in place, numerically stable
  void silu(ThreadPool& pool, const float* x, float* y, int64_t n) const;
  void gelu(ThreadPool& pool, const float* x, float* y, int64_t n) const;  // tanh approximation
  void relu(ThreadPool& pool, const float* x, float* y, int64_t n) const;
  void relu_squared(ThreadPool& pool, const float* x, float* y, int64_t n) const;
  void add(ThreadPool& pool, const float* a, const float* b, float* y, int64_t n) const;
  void mul(ThreadPool& pool, const float* a, const float* b, float* y, int64_t n) const;
  // gpt-oss's gated unit: g = min(gate, kOaiLimit), u = clamp(up, -kOaiLimit, kOaiLimit),
  // y = g * sigmoid(kOaiAlpha * g) * (u + 1). y may alias gate or up.
  void swiglu_oai(ThreadPool& pool, const float* gate, const float* up, float* y, int64_t n) const;
  // y = x as f16 bit patterns, rounded to nearest even; identical to pi::f32_to_f16 for every
  // input (NaN included).
  void to_f16(ThreadPool& pool, const float* x, uint16_t* y, int64_t n) const;

  // ---- Attention over an f16 (or Q8_0 / Q4_0, AttentionDims) KV cache ----------------------
  // The cache pointers are the first bytes of K and V whatever their types.

  // One query token over cells [0, n_ctx_used):
  // q: f32 [n_head, head_dim]; k_cache, v_cache: f16 bits in the dims' layout, at least
  // n_ctx_used cells (cell t holds position t); out: f32 [n_head, head_dim].
  void attention(ThreadPool& pool, const AttentionDims& dims, const float* q,
                 const uint16_t* k_cache, const uint16_t* v_cache, int64_t n_ctx_used,
                 float* out) const;

  // A causal batch of n_q query tokens at positions pos0 .. pos0 + n_q - 1; query i attends to
  // cells [0, pos0 + i]. The cache must already hold cells [0, pos0 + n_q).
  // q, out: f32 [n_q, n_head, head_dim].
  void attention_batch(ThreadPool& pool, const AttentionDims& dims, const float* q, int64_t n_q,
                       int64_t pos0, const uint16_t* k_cache, const uint16_t* v_cache,
                       float* out) const;

  // Queries over listed cells (a multi-sequence batch): query i attends the cells
  // cells[begin[i] .. begin[i] + len[i]) in that order, len[i] >= 1; cells == nullptr means the
  // list 0, 1, ..., len[i] - 1 (begin unused). With the list 0, 1, ..., n-1 the result is
  // bit-identical to attention() over n cells; a list visiting the same keys and values in the
  // same order gives the same bits wherever the cells lie.
  // q, out: f32 [n_q, n_head, head_dim]; cells < the cache's cell count.
  void attention_cells(ThreadPool& pool, const AttentionDims& dims, const float* q, int64_t n_q,
                       const int32_t* cells, const int64_t* begin, const int64_t* len,
                       const uint16_t* k_cache, const uint16_t* v_cache, float* out) const;

 private:
  Isa isa_;
  const detail::KernelTable* table_;
};

}  // namespace pi::cpu
