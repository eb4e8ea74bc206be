// Kernel dispatch for the model layer: the SIMD kernels of pi::cpu (which pick the ISA at run
// time) for every weight type they support, the scalar reference (pi::ref) split over the
// pool by rows for the few computable types they do not. Row-wise small ops (norms, RoPE)
// are spread over the pool by token; the kernel called inside a task runs on that task's
// thread. Each output element is produced by one task in a fixed order, so results are
// identical for any thread count.
#include "model/ops.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/kernels.h"
#include "kernels/ref/ref.h"
#include "tensor/quant.h"

namespace pi::model {
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

void Ops::embed(const Matrix& E, const int32_t* tokens, int64_t m, float* X) {
  for (int64_t i = 0; i < m; ++i) {
    // Token ids are checked by the caller (Forward::eval); the row is a plain dequantize.
    (void)dequantize_row(E.type, E.row(tokens[i]), X + i * E.cols, E.cols);
  }
}

void Ops::linear(const Matrix& W, const float* X, int64_t m, float* Y) {
  if (cpu::supports(W.type)) {
    if (m == 1) {
      cpu::matvec(pool_, W.type, W.data, W.rows, W.cols, X, Y);
    } else {
      cpu::matmul(pool_, W.type, W.data, W.rows, W.cols, X, m, Y);
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

void Ops::linear3(const Matrix& A, const Matrix& B, const Matrix& C, const float* X, int64_t m,
                  float* YA, float* YB, float* YC) {
  if (m == 1 && cpu::supports(A.type) && cpu::supports(B.type) && cpu::supports(C.type) &&
      A.cols == B.cols && A.cols == C.cols) {
    const cpu::MatvecPart parts[3] = {
        {A.type, A.data, A.rows, YA}, {B.type, B.data, B.rows, YB}, {C.type, C.data, C.rows, YC}};
    cpu::matvec_multi(pool_, parts, 3, A.cols, X);
    return;
  }
  linear(A, X, m, YA);
  linear(B, X, m, YB);
  linear(C, X, m, YC);
}

void Ops::linear_t(const Matrix& D, const float* A, int64_t m, std::span<const int32_t> rows,
                   float* Y) {
  std::fill(Y, Y + m * D.cols, 0.0f);
  const auto n_idx = static_cast<int64_t>(rows.size());
  if (cpu::supports(D.type)) {
    if (m == 1 && n_idx == D.rows) {
      cpu::axpy_dense(pool_, D.type, D.data, D.rows, D.cols, A, Y);
    } else {
      cpu::axpy_rows_union(pool_, D.type, D.data, D.rows, D.cols, rows.data(), n_idx, A, m, Y);
    }
    return;
  }
  pool_.parallel_for(m, [&](int64_t i, int) {
    ref::axpy_rows(D.type, D.data, D.cols, rows.data(), n_idx, A + i * D.rows, Y + i * D.cols);
  });
}

void Ops::linear_rows(const Matrix& W, const float* X, int64_t m, const int32_t* idx,
                      const int64_t* offsets, float* Y) {
  if (cpu::supports(W.type)) {
    if (m == 1) {
      cpu::matvec_rows(pool_, W.type, W.data, W.cols, idx + offsets[0], offsets[1] - offsets[0], X,
                       Y);
    } else {
      cpu::matvec_rows_batch(pool_, W.type, W.data, W.rows, W.cols, idx, offsets, X, m, Y);
    }
    return;
  }
  pool_.parallel_for(m, [&](int64_t i, int) {
    ref::matvec_rows(W.type, W.data, W.cols, idx + offsets[i], offsets[i + 1] - offsets[i],
                     X + i * W.cols, Y + i * W.rows);
  });
}

void Ops::linear_rows_union(const Matrix& W, const float* X, int64_t m,
                            std::span<const int32_t> rows, float* Y) {
  const auto n = static_cast<int64_t>(rows.size());
  if (cpu::supports(W.type)) {
    if (m == 1) {
      cpu::matvec_rows(pool_, W.type, W.data, W.cols, rows.data(), n, X, Y);
    } else {
      cpu::matvec_rows_union(pool_, W.type, W.data, W.rows, W.cols, rows.data(), n, X, m, Y);
    }
    return;
  }
  pool_.parallel_for(m, [&](int64_t i, int) {
    ref::matvec_rows(W.type, W.data, W.cols, rows.data(), n, X + i * W.cols, Y + i * W.rows);
  });
}

void Ops::linear_t_rows(const Matrix& D, const float* A, int64_t m, const int32_t* idx,
                        const int64_t* offsets, float* Y) {
  std::fill(Y, Y + m * D.cols, 0.0f);
  if (cpu::supports(D.type)) {
    if (m == 1) {
      cpu::axpy_rows(pool_, D.type, D.data, D.rows, D.cols, idx + offsets[0], offsets[1] - offsets[0], A,
                     Y);
    } else {
      cpu::axpy_rows_batch(pool_, D.type, D.data, D.rows, D.cols, idx, offsets, A, m, Y);
    }
    return;
  }
  pool_.parallel_for(m, [&](int64_t i, int) {
    ref::axpy_rows(D.type, D.data, D.cols, idx + offsets[i], offsets[i + 1] - offsets[i],
                   A + i * D.rows, Y + i * D.cols);
  });
}

void Ops::norm(NormKind kind, const float* X, const Vector& w, const Vector& b, int64_t m,
               int64_t n, float eps, float* Y) {
  pool_.parallel_for(m, [&](int64_t i, int) {
    if (kind == NormKind::RMS) {
      cpu::rmsnorm(pool_, X + i * n, w.data, n, eps, Y + i * n);
    } else {
      cpu::layernorm(pool_, X + i * n, w.data, b.data, n, eps, Y + i * n);
    }
  });
}

void Ops::rope(float* X, int64_t m, int64_t n_heads, const HParams& hp, int64_t pos0) {
  pool_.parallel_for(m, [&](int64_t i, int) {
    cpu::rope(pool_, X + i * n_heads * hp.head_dim, n_heads, hp.head_dim, hp.n_rot, pos0 + i,
              hp.rope_base, hp.rope_freq_scale, rope_mode(hp.rope));
  });
}

void Ops::rope_at(float* X, int64_t m, int64_t n_heads, const HParams& hp, const int32_t* pos) {
  pool_.parallel_for(m, [&](int64_t i, int) {
    cpu::rope(pool_, X + i * n_heads * hp.head_dim, n_heads, hp.head_dim, hp.n_rot, pos[i],
              hp.rope_base, hp.rope_freq_scale, rope_mode(hp.rope));
  });
}

namespace {

// K, V f32 [n_embd_kv] -> f16 contents of cell c, head by head (on the calling thread: one
// cell is small).
void store_cell(ThreadPool& pool, const float* K, const float* V, int64_t n_embd_kv,
                int64_t head_dim, const KvLayer& kv, int64_t c) {
  for (int64_t h = 0; h < n_embd_kv / head_dim; ++h) {
    const int64_t at = h * kv.head_stride + c * kv.cell_stride;
    cpu::to_f16(pool, K + h * head_dim, kv.k + at, head_dim);
    cpu::to_f16(pool, V + h * head_dim, kv.v + at, head_dim);
  }
}

cpu::AttentionDims attention_dims(const HParams& hp, const KvLayer& kv) {
  cpu::AttentionDims d{hp.n_head, hp.n_head_kv, hp.head_dim,
                       1.0f / std::sqrt(static_cast<float>(hp.head_dim))};
  d.head_stride = kv.head_stride;
  d.cell_stride = kv.cell_stride;
  return d;
}

}  // namespace

void Ops::store_kv(const float* K, const float* V, int64_t m, const HParams& hp, const KvLayer& kv,
                   int64_t pos0) {
  const int64_t n = hp.n_embd_kv();
  pool_.parallel_for(m, [&](int64_t i, int) {
    store_cell(pool_, K + i * n, V + i * n, n, hp.head_dim, kv, pos0 + i);
  });
}

void Ops::store_kv_cells(const float* K, const float* V, int64_t m, const HParams& hp,
                         const KvLayer& kv, const int32_t* cells) {
  const int64_t n = hp.n_embd_kv();
  pool_.parallel_for(m, [&](int64_t i, int) {
    store_cell(pool_, K + i * n, V + i * n, n, hp.head_dim, kv, cells[i]);
  });
}

void Ops::attention(const float* Q, int64_t m, const KvLayer& kv, const HParams& hp, int64_t pos0,
                    float* out) {
  const cpu::AttentionDims dims = attention_dims(hp, kv);
  if (m == 1) {
    cpu::attention(pool_, dims, Q, kv.k, kv.v, pos0 + 1, out);
  } else {
    cpu::attention_batch(pool_, dims, Q, m, pos0, kv.k, kv.v, out);
  }
}

void Ops::attention_cells(const float* Q, int64_t m, const KvLayer& kv, const HParams& hp,
                          const KvBatch& batch, float* out) {
  cpu::attention_cells(pool_, attention_dims(hp, kv), Q, m, batch.attn_cells, batch.attn_begin,
                       batch.attn_len, kv.k, kv.v, out);
}

void Ops::activate(Activation act, float* x, int64_t n) {
  elementwise(pool_, n, [&] { activate_all(act, x, n); });
}

void Ops::activate_all(Activation act, float* x, int64_t n) {
  switch (act) {
    case Activation::SiLU:
      cpu::silu(pool_, x, x, n);
      break;
    case Activation::ReLU:
      cpu::relu(pool_, x, x, n);
      break;
    case Activation::GELU:
      cpu::gelu(pool_, x, x, n);
      break;
  }
}

void Ops::ffn_combine(FfnKind kind, Activation act, float* G, float* U, int64_t m, int64_t n_ff) {
  const int64_t n = m * n_ff;
  elementwise(pool_, n, [&] {
    switch (kind) {
      case FfnKind::Gated:
        activate_all(act, G, n);
        cpu::mul(pool_, G, U, G, n);
        break;
      case FfnKind::GatedBoth:
        activate_all(act, G, n);
        activate_all(act, U, n);
        cpu::mul(pool_, G, U, G, n);
        break;
      case FfnKind::Plain:
        activate_all(act, U, n);
        std::copy(U, U + n, G);
        break;
    }
  });
}

void Ops::add(float* Y, const float* X, int64_t n) {
  elementwise(pool_, n, [&] { cpu::add(pool_, Y, X, Y, n); });
}

}  // namespace pi::model
