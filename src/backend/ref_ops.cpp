// The reference device's ops: every op through the scalar reference kernels of src/kernels/ref,
// on the calling thread, token by token. The oracle of the op tests (tests/backend); nothing
// here is optimised.
#include <algorithm>
#include <cmath>
#include <memory>

#include "backend/ffn_rows_host.h"
#include "backend/host_device.h"
#include "kernels/ref/ref.h"
#include "tensor/quant.h"

namespace pi::backend {
namespace {

class RefOps final : public Ops {
 public:
  void embed(const Matrix& E, const int32_t* tokens, int64_t m, float* X) override {
    for (int64_t i = 0; i < m; ++i)
      (void)dequantize_row(E.type, E.row(tokens[i]), X + i * E.cols, E.cols);
  }
  void linear(const Matrix& W, const float* X, int64_t m, float* Y) override {
    ref::matmul(W.type, W.data, W.rows, W.cols, X, m, Y);
  }
  void linear3(const Matrix& A, const Matrix& B, const Matrix& C, const float* X, int64_t m,
               float* YA, float* YB, float* YC) override {
    linear(A, X, m, YA);
    linear(B, X, m, YB);
    linear(C, X, m, YC);
  }
  void linear_t(const Matrix& D, const float* A, int64_t m, std::span<const int32_t> rows,
                float* Y) override {
    std::fill(Y, Y + m * D.cols, 0.0f);
    for (int64_t i = 0; i < m; ++i)
      ref::axpy_rows(D.type, D.data, D.cols, rows.data(), static_cast<int64_t>(rows.size()),
                     A + i * D.rows, Y + i * D.cols);
  }
  void linear_rows(const Matrix& W, const float* X, int64_t m, const int32_t* idx,
                   const int64_t* offsets, float* Y) override {
    for (int64_t i = 0; i < m; ++i)
      ref::matvec_rows(W.type, W.data, W.cols, idx + offsets[i], offsets[i + 1] - offsets[i],
                       X + i * W.cols, Y + i * W.rows);
  }
  void linear_rows_union(const Matrix& W, const float* X, int64_t m, std::span<const int32_t> rows,
                         float* Y) override {
    for (int64_t i = 0; i < m; ++i)
      ref::matvec_rows(W.type, W.data, W.cols, rows.data(), static_cast<int64_t>(rows.size()),
                       X + i * W.cols, Y + i * W.rows);
  }
  void linear_t_rows(const Matrix& D, const float* A, int64_t m, const int32_t* idx,
                     const int64_t* offsets, float* Y) override {
    std::fill(Y, Y + m * D.cols, 0.0f);
    for (int64_t i = 0; i < m; ++i)
      ref::axpy_rows(D.type, D.data, D.cols, idx + offsets[i], offsets[i + 1] - offsets[i],
                     A + i * D.rows, Y + i * D.cols);
  }
  void norm(const NormParams& p, const float* X, const Vector& w, const Vector& b, int64_t m,
            int64_t n, float* Y) override {
    for (int64_t i = 0; i < m; ++i) {
      if (p.kind == NormKind::RMS) {
        ref::rmsnorm(X + i * n, w.data, n, p.eps, Y + i * n);
      } else {
        ref::layernorm(X + i * n, w.data, b.data, n, p.eps, Y + i * n);
      }
    }
  }
  void rope(const RopeParams& p, float* X, int64_t m, int64_t n_heads,
            const int32_t* pos) override {
    const auto mode = p.kind == RopeKind::NeoX ? ref::RopeMode::NeoX : ref::RopeMode::Normal;
    for (int64_t i = 0; i < m; ++i)
      ref::rope(X + i * n_heads * p.head_dim, n_heads, p.head_dim, p.n_rot, pos[i], p.base,
                p.freq_scale, mode, p.yarn);
  }
  void store_kv(const AttnParams& p, const float* K, const float* V, int64_t m, const KvLayer& kv,
                const int32_t* cells) override {
    const int64_t n = p.n_embd_kv();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t h = 0; h < p.n_head_kv; ++h) {
        const int64_t at = i * n + h * p.head_dim;
        ref::store_kv_row(kv.k_type, K + at, p.head_dim, kv.k_at(h, cells[i]));
        ref::store_kv_row(kv.v_type, V + at, p.head_dim, kv.v_at(h, cells[i]));
      }
  }
  void attention(const AttnParams& p, const float* Q, int64_t m, const KvLayer& kv,
                 const KvBatch& b, float* out) override {
    for (int64_t i = 0; i < m; ++i) {
      const int32_t* cells = b.attn_cells != nullptr ? b.attn_cells + b.attn_begin[i] : nullptr;
      ref::attention_cells_typed(Q + i * p.n_embd_q(), kv.k_type, kv.k, kv.v_type, kv.v, cells,
                                 b.attn_len[i], p.n_head, p.n_head_kv, p.head_dim, p.scale,
                                 out + i * p.n_embd_q(), kv.head_stride, kv.cell_stride, p.sinks);
    }
  }
  void activate(Activation act, float* x, int64_t n) override {
    switch (act) {
      case Activation::SiLU:
        return ref::silu(x, x, n);
      case Activation::ReLU:
        return ref::relu(x, x, n);
      case Activation::GELU:
        return ref::gelu(x, x, n);
    }
  }
  void ffn_combine(FfnKind kind, Activation act, float* G, float* U, int64_t m,
                   int64_t n_ff) override {
    const int64_t n = m * n_ff;
    switch (kind) {
      case FfnKind::Gated:
        activate(act, G, n);
        return ref::mul(G, U, G, n);
      case FfnKind::GatedBoth:
        activate(act, G, n);
        activate(act, U, n);
        return ref::mul(G, U, G, n);
      case FfnKind::Plain:
        activate(act, U, n);
        std::copy(U, U + n, G);
        return;
      case FfnKind::SwigluOai:
        return ref::swiglu_oai(G, U, G, n);
    }
  }
  void add(float* Y, const float* X, int64_t n) override { ref::add(Y, X, Y, n); }
  void add_bias(float* Y, const Vector& b, int64_t m, int64_t n) override {
    for (int64_t i = 0; i < m; ++i) ref::add(Y + i * n, b.data, Y + i * n, n);
  }
  void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
                 int64_t n) override {
    for (int64_t r = 0; r < rows; ++r)
      std::copy(src + r * src_stride, src + r * src_stride + n, dst + r * dst_stride);
  }
  void combine_rows(const float* X, int64_t n, const int32_t* rows, const float* w, int64_t m,
                    int64_t k, float* Y) override {
    for (int64_t i = 0; i < m; ++i)
      ref::combine_row(X, n, rows + i * k, w != nullptr ? w + i * k : nullptr, k, Y + i * n);
  }
  void threshold_mask(const float* X, int64_t m, int64_t n, float thr, uint32_t* bits) override {
    host::threshold_mask(X, m, n, thr, bits);
  }
  void compact_rows(const uint32_t* bits, int64_t m, int64_t n, const int32_t* ids, int64_t n_ids,
                    int32_t* idx, int64_t* offsets) override {
    host::compact_rows(bits, m, n, ids, n_ids, idx, offsets);
  }
  void ffn_rows(FfnKind kind, const FfnRows& w, const float* X, int64_t m, const int32_t* idx,
                const int64_t* offsets, void* work, float* Y) override {
    host::ffn_rows(
        kind, w, X, m, idx, offsets, work, Y,
        [](const Matrix& W, const int32_t* rows, int64_t n, const float* x, float* y) {
          ref::matvec_rows(W.type, W.data, W.cols, rows, n, x, y);
        },
        [](const Matrix& D, const int32_t* rows, int64_t n, const float* a, float* y) {
          ref::axpy_rows(D.type, D.data, D.cols, rows, n, a, y);
        });
  }
  uint64_t ffn_rows_work_bytes(int64_t, int64_t n_rows, int64_t) const override {
    return host::ffn_rows_work_bytes(n_rows);
  }
};

}  // namespace

RefDevice::RefDevice(uint64_t budget) : HostDevice(budget), ops_(std::make_unique<RefOps>()) {}
RefDevice::~RefDevice() = default;

// The reference kernels take what the host kernels take (every computable weight type).
bool RefDevice::supports(Op op, DType t) const { return host_kernels_support(op, t); }

}  // namespace pi::backend
