// The CPU device's ops: the SIMD kernels of pi::cpu (of the device's ISA) for every weight
// type they support, the scalar reference (pi::ref) split over the pool by rows for the few
// computable types they do not. Row-wise small ops (norms, RoPE)
// are spread over the pool by token; the kernel called inside a task runs on that task's
// thread. Each output element is produced by one task in a fixed order, so results are
// identical for any thread count.
#include "backend/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>

#include "backend/ffn_rows_host.h"
#include "kernels/cpu/kernels.h"
#include "kernels/ref/ref.h"
#include "tensor/quant.h"

namespace pi::backend {
namespace {

constexpr int64_t kRefRowsPerTask = 16;
// Element-wise work below this many elements runs on the calling thread alone: a fork/join
// over the pool costs more than the work (decode-sized vectors), and on a machine shared with
// other processes every join waits for the most delayed thread.
constexpr int64_t kInlineElems = int64_t{1} << 16;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

cpu::RopeMode rope_mode(RopeKind k) {
  return k == RopeKind::NeoX ? cpu::RopeMode::NeoX : cpu::RopeMode::Normal;
}

// Runs fn with `pool` when n is large, else on the calling thread only (a parallel_for of one
// task runs inline, and so does any kernel call nested in it).
template <typename F>
void elementwise(ThreadPool& pool, int64_t n, F&& fn) {
  if (n >= kInlineElems) {
    fn();
  } else {
    pool.parallel_for(1, [&](int64_t, int) { fn(); });
  }
}

}  // namespace

void CpuOps::embed(const Matrix& E, const int32_t* tokens, int64_t m, float* X) {
  for (int64_t i = 0; i < m; ++i) {
    // Token ids are checked by the caller (Forward::eval); the row is a plain dequantize.
    (void)dequantize_row(E.type, E.row(tokens[i]), X + i * E.cols, E.cols);
  }
}

void CpuOps::linear(const Matrix& W, const float* X, int64_t m, float* Y) {
  if (cpu::supports_dense(W.type)) {
    if (m == 1) {
      k_.matvec(pool_, W.type, W.data, W.rows, W.cols, X, Y);
    } else {
      k_.matmul(pool_, W.type, W.data, W.rows, W.cols, X, m, Y);
    }
    return;
  }
  const int64_t n_chunks = ceil_div(W.rows, kRefRowsPerTask);
  pool_.parallel_for(
      n_chunks * m,
      [&](int64_t task, int) {
        const int64_t i = task / n_chunks, r0 = (task % n_chunks) * kRefRowsPerTask;
        const int64_t nr = std::min(kRefRowsPerTask, W.rows - r0);
        ref::matvec(W.type, W.row(r0), nr, W.cols, X + i * W.cols, Y + i * W.rows + r0);
      },
      Schedule::Dynamic, 4);
}

void CpuOps::linear3(const Matrix& A, const Matrix& B, const Matrix& C, const float* X, int64_t m,
                     float* YA, float* YB, float* YC) {
  if (m == 1 && cpu::supports_dense(A.type) && cpu::supports_dense(B.type) && cpu::supports_dense(C.type) &&
      A.cols == B.cols && A.cols == C.cols) {
    const cpu::MatvecPart parts[3] = {
        {A.type, A.data, A.rows, YA}, {B.type, B.data, B.rows, YB}, {C.type, C.data, C.rows, YC}};
    k_.matvec_multi(pool_, parts, 3, A.cols, X);
    return;
  }
  linear(A, X, m, YA);
  linear(B, X, m, YB);
  linear(C, X, m, YC);
}

void CpuOps::linear_each(std::span<const LinearPart> parts) {
  // Runs of parts with the dense kernels and one width go together, up to the kernel's limit.
  size_t at = 0;
  while (at < parts.size()) {
    const Matrix& first = *parts[at].W;
    if (!cpu::supports_dense(first.type)) {
      linear(first, parts[at].x, 1, parts[at].y);
      ++at;
      continue;
    }
    cpu::MatvecPart run[cpu::Kernels::kMaxMatvecParts];
    int n = 0;
    for (; at < parts.size() && n < cpu::Kernels::kMaxMatvecParts; ++at, ++n) {
      const Matrix& W = *parts[at].W;
      if (!cpu::supports_dense(W.type) || W.cols != first.cols) break;
      run[n] = {W.type, W.data, W.rows, parts[at].y, parts[at].x};
    }
    k_.matvec_multi(pool_, run, n, first.cols, parts[at - static_cast<size_t>(n)].x);
  }
}

void CpuOps::linear_t(const Matrix& D, const float* A, int64_t m, std::span<const int32_t> rows,
                      float* Y) {
  std::fill(Y, Y + m * D.cols, 0.0f);
  const auto n_idx = static_cast<int64_t>(rows.size());
  if (cpu::supports_axpy(D.type)) {
    if (m == 1 && n_idx == D.rows) {
      k_.axpy_dense(pool_, D.type, D.data, D.rows, D.cols, A, Y);
    } else {
      k_.axpy_rows_union(pool_, D.type, D.data, D.rows, D.cols, rows.data(), n_idx, A, m, Y);
    }
    return;
  }
  pool_.parallel_for(m, [&](int64_t i, int) {
    ref::axpy_rows(D.type, D.data, D.cols, rows.data(), n_idx, A + i * D.rows, Y + i * D.cols);
  });
}

void CpuOps::linear_rows(const Matrix& W, const float* X, int64_t m, const int32_t* idx,
                         const int64_t* offsets, float* Y) {
  if (cpu::supports(W.type)) {
    if (m == 1) {
      k_.matvec_rows(pool_, W.type, W.data, W.cols, idx + offsets[0], offsets[1] - offsets[0], X,
                     Y);
    } else {
      k_.matvec_rows_batch(pool_, W.type, W.data, W.rows, W.cols, idx, offsets, X, m, Y);
    }
    return;
  }
  pool_.parallel_for(m, [&](int64_t i, int) {
    ref::matvec_rows(W.type, W.data, W.cols, idx + offsets[i], offsets[i + 1] - offsets[i],
                     X + i * W.cols, Y + i * W.rows);
  });
}

void CpuOps::linear_rows_union(const Matrix& W, const float* X, int64_t m,
                               std::span<const int32_t> rows, float* Y) {
  const auto n = static_cast<int64_t>(rows.size());
  if (cpu::supports(W.type)) {
    if (m == 1) {
      k_.matvec_rows(pool_, W.type, W.data, W.cols, rows.data(), n, X, Y);
    } else {
      k_.matvec_rows_union(pool_, W.type, W.data, W.rows, W.cols, rows.data(), n, X, m, Y);
    }
    return;
  }
  pool_.parallel_for(m, [&](int64_t i, int) {
    ref::matvec_rows(W.type, W.data, W.cols, rows.data(), n, X + i * W.cols, Y + i * W.rows);
  });
}

void CpuOps::linear_t_rows(const Matrix& D, const float* A, int64_t m, const int32_t* idx,
                           const int64_t* offsets, float* Y) {
  std::fill(Y, Y + m * D.cols, 0.0f);
  if (cpu::supports_axpy(D.type)) {
    if (m == 1) {
      k_.axpy_rows(pool_, D.type, D.data, D.rows, D.cols, idx + offsets[0], offsets[1] - offsets[0],
                   A, Y);
    } else {
      k_.axpy_rows_batch(pool_, D.type, D.data, D.rows, D.cols, idx, offsets, A, m, Y);
    }
    return;
  }
  pool_.parallel_for(m, [&](int64_t i, int) {
    ref::axpy_rows(D.type, D.data, D.cols, idx + offsets[i], offsets[i + 1] - offsets[i],
                   A + i * D.rows, Y + i * D.cols);
  });
}

void CpuOps::norm(const NormParams& p, const float* X, const Vector& w, const Vector& b, int64_t m,
                  int64_t n, float* Y) {
  pool_.parallel_for(m, [&](int64_t i, int) {
    if (p.kind == NormKind::RMS) {
      k_.rmsnorm(pool_, X + i * n, w.data, n, p.eps, Y + i * n);
    } else {
      k_.layernorm(pool_, X + i * n, w.data, b.data, n, p.eps, Y + i * n);
    }
  });
}

void CpuOps::rope(const RopeParams& p, float* X, int64_t m, int64_t n_heads, const int32_t* pos) {
  pool_.parallel_for(m, [&](int64_t i, int) {
    k_.rope(pool_, X + i * n_heads * p.head_dim, n_heads, p.head_dim, p.n_rot, pos[i], p.base,
            p.freq_scale, rope_mode(p.kind), p.yarn);
  });
}

namespace {

// K, V f32 [n_embd_kv] -> contents of cell c in the layer's types, head by head (on the
// calling thread: one cell is small). Block types are quantized per 32 values by the
// reference quantizer, so every device stores the same bytes.
void store_cell(const cpu::Kernels& k, ThreadPool& pool, const float* K, const float* V,
                int64_t n_embd_kv, int64_t head_dim, const KvLayer& kv, int64_t c) {
  for (int64_t h = 0; h < n_embd_kv / head_dim; ++h) {
    if (kv.k_type == DType::F16)
      k.to_f16(pool, K + h * head_dim, reinterpret_cast<uint16_t*>(kv.k_at(h, c)), head_dim);
    else
      ref::store_kv_row(kv.k_type, K + h * head_dim, head_dim, kv.k_at(h, c));
    if (kv.v_type == DType::F16)
      k.to_f16(pool, V + h * head_dim, reinterpret_cast<uint16_t*>(kv.v_at(h, c)), head_dim);
    else
      ref::store_kv_row(kv.v_type, V + h * head_dim, head_dim, kv.v_at(h, c));
  }
}

}  // namespace

void CpuOps::store_kv(const AttnParams& p, const float* K, const float* V, int64_t m,
                      const KvLayer& kv, const int32_t* cells) {
  const int64_t n = p.n_embd_kv();
  pool_.parallel_for(m, [&](int64_t i, int) {
    store_cell(k_, pool_, K + i * n, V + i * n, n, p.head_dim, kv, cells[i]);
  });
}

void CpuOps::attention(const AttnParams& p, const float* Q, int64_t m, const KvLayer& kv,
                       const KvBatch& b, float* out) {
  cpu::AttentionDims d{p.n_head, p.n_head_kv, p.head_dim, p.scale};
  d.head_stride = kv.head_stride;
  d.cell_stride = kv.cell_stride;
  d.k_type = kv.k_type;
  d.v_type = kv.v_type;
  d.sinks = p.sinks;
  k_.attention_cells(pool_, d, Q, m, b.attn_cells, b.attn_begin, b.attn_len, kv.k, kv.v, out);
}

void CpuOps::activate(Activation act, float* x, int64_t n) {
  elementwise(pool_, n, [&] { activate_all(act, x, n); });
}

void CpuOps::activate_all(Activation act, float* x, int64_t n) {
  switch (act) {
    case Activation::SiLU:
      k_.silu(pool_, x, x, n);
      break;
    case Activation::ReLU:
      k_.relu(pool_, x, x, n);
      break;
    case Activation::GELU:
      k_.gelu(pool_, x, x, n);
      break;
  }
}

void CpuOps::ffn_combine(FfnKind kind, Activation act, float* G, float* U, int64_t m,
                         int64_t n_ff) {
  const int64_t n = m * n_ff;
  elementwise(pool_, n, [&] {
    switch (kind) {
      case FfnKind::Gated:
        activate_all(act, G, n);
        k_.mul(pool_, G, U, G, n);
        break;
      case FfnKind::GatedBoth:
        activate_all(act, G, n);
        activate_all(act, U, n);
        k_.mul(pool_, G, U, G, n);
        break;
      case FfnKind::Plain:
        activate_all(act, U, n);
        std::copy(U, U + n, G);
        break;
      case FfnKind::SwigluOai:
        k_.swiglu_oai(pool_, G, U, G, n);
        break;
    }
  });
}

void CpuOps::add(float* Y, const float* X, int64_t n) {
  elementwise(pool_, n, [&] { k_.add(pool_, Y, X, Y, n); });
}

void CpuOps::add_bias(float* Y, const Vector& b, int64_t m, int64_t n) {
  // One row per task (the kernel inside a task runs on that task's thread); small batches on
  // the calling thread alone, as elementwise() does.
  const auto row = [&](int64_t i, int) { k_.add(pool_, Y + i * n, b.data, Y + i * n, n); };
  if (m * n >= kInlineElems) {
    pool_.parallel_for(m, row);
  } else {
    pool_.parallel_for(1, [&](int64_t, int t) {
      for (int64_t i = 0; i < m; ++i) row(i, t);
    });
  }
}

void CpuOps::copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                       int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(src + r * src_stride, src + r * src_stride + n, dst + r * dst_stride);
  }
}

void CpuOps::combine_rows(const float* X, int64_t n, const int32_t* rows, const float* w, int64_t m,
                          int64_t k, float* Y) {
  // The reference's rows (each row's arithmetic is fixed), one row per task above the inline
  // threshold.
  const auto row = [&](int64_t i, int) {
    ref::combine_row(X, n, rows + i * k, w != nullptr ? w + i * k : nullptr, k, Y + i * n);
  };
  if (m * k * n >= kInlineElems) {
    pool_.parallel_for(m, row);
  } else {
    for (int64_t i = 0; i < m; ++i) row(i, 0);
  }
}

void CpuOps::threshold_mask(const float* X, int64_t m, int64_t n, float thr, uint32_t* bits) {
  host::threshold_mask(X, m, n, thr, bits);
}

void CpuOps::compact_rows(const uint32_t* bits, int64_t m, int64_t n, const int32_t* ids,
                          int64_t n_ids, int32_t* idx, int64_t* offsets) {
  host::compact_rows(bits, m, n, ids, n_ids, idx, offsets);
}

void CpuOps::ffn_rows(FfnKind kind, const FfnRows& w, const float* X, int64_t m,
                      const int32_t* idx, const int64_t* offsets, void* work, float* Y) {
  // The one-token kernels the sparse FFN runs a token with (linear_rows / linear_t_rows with
  // m = 1), the reference for the types the SIMD kernels lack.
  const auto dot = [&](const Matrix& W, const int32_t* rows, int64_t n, const float* x, float* y) {
    if (n == 0) return;
    if (cpu::supports(W.type)) {
      k_.matvec_rows(pool_, W.type, W.data, W.cols, rows, n, x, y);
    } else {
      ref::matvec_rows(W.type, W.data, W.cols, rows, n, x, y);
    }
  };
  const auto axpy = [&](const Matrix& D, const int32_t* rows, int64_t n, const float* a, float* y) {
    if (n == 0) return;
    if (cpu::supports_axpy(D.type)) {
      k_.axpy_rows(pool_, D.type, D.data, D.rows, D.cols, rows, n, a, y);
    } else {
      ref::axpy_rows(D.type, D.data, D.cols, rows, n, a, y);
    }
  };
  host::ffn_rows(kind, w, X, m, idx, offsets, work, Y, dot, axpy);
}

uint64_t CpuOps::ffn_rows_work_bytes(int64_t, int64_t n_rows, int64_t) const {
  return host::ffn_rows_work_bytes(n_rows);
}

}  // namespace pi::backend
