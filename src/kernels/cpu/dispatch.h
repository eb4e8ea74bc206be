// Internal: the table of single-threaded leaf kernels that each ISA file provides, and the
// task descriptions the threaded front ends (matvec.cpp, axpy.cpp, ops.cpp) hand to them.
// Leaves work on a slice of the output and never allocate.
//
// Adding an ISA: write a file that fills a KernelTable, declare its getter below, and list it
// in isa.cpp (as avx2_*, avx512_* and neon_* do). Leaves may delegate types they do not
// vectorise to the scalar ones.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/kernels.h"
#include "tensor/dtype.h"

namespace pi::cpu::detail {

// Maximum tokens one masked dot task handles (one bit per token in a uint64_t mask).
constexpr int64_t kMaxMaskTokens = 64;

// Dot products of weight rows with m token activations.
// Rows: idx ? idx[k] : k, for k in [k0, k1). Token i is computed for row k when
// masks == nullptr or bit i of masks[k] is set; then Y[i * ldy + row] = W[row] . x_i.
struct DotTask {
  DType type;
  const uint8_t* W;
  size_t row_bytes;
  int64_t cols;
  const float* x;       // raw activations f32 [m, cols] (token stride x_stride floats)
  int64_t x_stride;
  const uint8_t* act;   // activations prepared by prepare_act (token stride act_stride)
  size_t act_stride;
  int64_t m;
  const int32_t* idx;
  const uint64_t* masks;  // requires m <= kMaxMaskTokens when set
  int64_t k0, k1;
  float* Y;
  int64_t ldy;
};

// Column slice of an axpy: for k in [0, n) in order, for tokens i in [0, m) with
// coef[k * m + i] != 0: Y[i * ldy + c] += coef[k * m + i] * D[rows[k], c] for c in [c0, c1).
// c0 and c1 are multiples of the type's block size (or c1 == cols).
struct AxpyTask {
  DType type;
  const uint8_t* D;
  size_t row_bytes;
  int64_t n_rows = 0;  // rows of D: a leaf may read past a row's slice up to D + n_rows * row_bytes
                       // (0: only the slice)
  const int32_t* rows;
  int64_t n;
  const float* coef;
  int64_t m;
  int64_t c0, c1;
  float* Y;
  int64_t ldy;
};

// One query head over n_ctx KV cells: out[0:head_dim] = softmax(scale * q.K^T) V over
// cells [0, n_ctx), or over cells[0 .. n_ctx) in that order when `cells` is set (scores and
// sums follow the list order, so a list 0, 1, ..., n_ctx-1 gives the same bits as no list).
// kb, vb point at the head's part of cell 0 of K and V, cells kb_stride / vb_stride bytes
// apart, stored as k_type / v_type: F16, Q8_0 or Q4_0 (the cache's types; head_dim a multiple
// of 32 for the block types), or F32 (a copy a batch decoded once with decode_kv_row).
// scores: scratch [n_ctx].
struct AttnHeadTask {
  const float* q;
  DType k_type = DType::F16;
  DType v_type = DType::F16;
  const uint8_t* kb = nullptr;
  const uint8_t* vb = nullptr;
  int64_t kb_stride = 0;
  int64_t vb_stride = 0;
  const int32_t* cells;  // nullptr: cells 0 .. n_ctx-1
  int64_t n_ctx;
  int64_t head_dim;
  float scale;
  float sink = -INFINITY;  // an extra softmax logit with no value (-inf: none)
  float* scores;
  float* out;
};

// Filled by name (designated initialisers, and ops_generic.inc's with_generic_ops for the
// small ops every ISA takes from there), so that two entries of one signature cannot be
// swapped silently; an entry left unset is null, which a test checks for every table.
struct KernelTable {
  Isa isa = Isa::Scalar;
  // Bytes of one token's prepared activation for weight type t (0: leaves read x directly).
  size_t (*act_bytes)(DType t, int64_t cols) = nullptr;
  void (*prepare_act)(DType t, const float* x, int64_t cols, uint8_t* out) = nullptr;
  void (*dot)(const DotTask& task) = nullptr;
  void (*axpy)(const AxpyTask& task) = nullptr;

  void (*rmsnorm)(const float* x, const float* w, int64_t n, float eps, float* y) = nullptr;
  void (*layernorm)(const float* x, const float* w, const float* b, int64_t n, float eps,
                    float* y) = nullptr;
  void (*softmax)(float* x, int64_t n) = nullptr;
  void (*silu)(const float* x, float* y, int64_t n) = nullptr;
  void (*gelu)(const float* x, float* y, int64_t n) = nullptr;
  void (*relu)(const float* x, float* y, int64_t n) = nullptr;
  void (*relu_squared)(const float* x, float* y, int64_t n) = nullptr;
  void (*add)(const float* a, const float* b, float* y, int64_t n) = nullptr;
  void (*mul)(const float* a, const float* b, float* y, int64_t n) = nullptr;
  // y = gpt-oss's clamped gated unit of gate and up (Kernels::swiglu_oai).
  void (*swiglu_oai)(const float* gate, const float* up, float* y, int64_t n) = nullptr;
  // x: f32 [n_heads, head_dim]; in each head, pair p < n_pairs, (a, b) -> (a c - b s,
  // a s + b c) with c = cs[p], s = cs[n_pairs + p]. The pair is (p, p + n_pairs) when neox,
  // else (2p, 2p + 1).
  void (*rope)(float* x, int64_t n_heads, int64_t head_dim, int64_t n_pairs, const float* cs,
               bool neox) = nullptr;
  void (*attn_head)(const AttnHeadTask& task) = nullptr;
  // y = x rounded to f16 (nearest even; bit patterns as pi::f32_to_f16), n elements.
  void (*to_f16)(const float* x, uint16_t* y, int64_t n) = nullptr;
  // out[0:n] = a Q8_0 / Q4_0 K or V row of type t decoded to f32 (n a multiple of 32): the
  // floats attn_head reads from that row, so attention over the decoded copy (type F32) gives
  // the same bits as over the blocks.
  void (*decode_kv_row)(DType t, const uint8_t* row, float* out, int64_t n) = nullptr;
  // Dense products over the R16 layouts (r16.h): one token's activation for a matrix of R16
  // type t prepared into r16_act_bytes(t, cols) bytes, and the dot leaf over whole groups of
  // 16 rows.
  void (*r16_prepare)(DType t, const float* x, int64_t cols, uint8_t* out) = nullptr;
  void (*r16_dot)(const DotTask& task) = nullptr;
};

const KernelTable& scalar_table();
#if defined(PI_KERNELS_HAVE_AVX2)
const KernelTable& avx2_table();
#endif
#if defined(PI_KERNELS_HAVE_AVX512)
const KernelTable& avx512_table();
#endif
#if defined(PI_KERNELS_HAVE_NEON)
const KernelTable& neon_table();
#endif
#if defined(PI_KERNELS_HAVE_NEON_DOT)
const KernelTable& neon_dot_table();
#endif

const KernelTable& table_for(Isa isa);

// Aborts with `what` when `ok` is false: kernel preconditions are programming errors.
void require(bool ok, const char* what);

}  // namespace pi::cpu::detail
