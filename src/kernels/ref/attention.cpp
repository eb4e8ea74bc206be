// Reference single-token causal attention over an f16 KV cache, in double:
//   score[t] = scale * q_h . k[t, g]      for t in [0, n_ctx_used), g = h / (n_head / n_kv_head)
//   p = softmax(score)                     (with a sink: softmax over score and sink[h])
//   out_h = sum_t p[t] * v[t, g]
// With n_ctx_used == 0 there is nothing to attend to and out is all zeros. n_head must be a
// multiple of n_kv_head. attention_cells() is the same over a list of cells (t -> cells[t]);
// attention_cells_typed() reads keys and values of any KV type, each row dequantized exactly.
#include <cmath>
#include <vector>

#include "kernels/ref/ref.h"
#include "tensor/quant.h"

namespace pi::ref {

namespace {

// Row of n values of a KV type at p, as floats (exact: f16, or d * q per block).
void kv_row(DType t, const uint8_t* p, int64_t n, float* y) {
  if (t == DType::F16) {
    const auto* h = reinterpret_cast<const uint16_t*>(p);
    for (int64_t d = 0; d < n; ++d) y[d] = f16_to_f32(h[d]);
    return;
  }
  if (!dequantize_row(t, p, y, n).ok())
    for (int64_t d = 0; d < n; ++d) y[d] = NAN;
}

}  // namespace

void attention_cells_typed(const float* q, DType k_type, const void* k_cache, DType v_type,
                           const void* v_cache, const int32_t* cells, int64_t n_cells,
                           int64_t n_head, int64_t n_kv_head, int64_t head_dim, float scale,
                           float* out, int64_t head_stride, int64_t cell_stride, const float* sinks) {
  const int64_t n_ctx_used = n_cells;
  const auto cell = [cells](int64_t t) { return cells != nullptr ? int64_t{cells[t]} : t; };
  const int64_t group = n_head / n_kv_head;
  if (head_stride == 0) head_stride = head_dim;
  if (cell_stride == 0) cell_stride = n_kv_head * head_dim;
  const bool blocks_ok = head_dim % dtype_info(k_type).block_size == 0 &&
                         head_dim % dtype_info(v_type).block_size == 0;
  if (!blocks_ok) {
    for (int64_t i = 0; i < n_head * head_dim; ++i) out[i] = NAN;
    return;
  }
  const auto* kb = static_cast<const uint8_t*>(k_cache);
  const auto* vb = static_cast<const uint8_t*>(v_cache);
  const auto k_row = [&](int64_t t, int64_t g) {
    return kb + row_bytes(k_type, cell(t) * cell_stride + g * head_stride);
  };
  const auto v_row = [&](int64_t t, int64_t g) {
    return vb + row_bytes(v_type, cell(t) * cell_stride + g * head_stride);
  };
  std::vector<double> p(static_cast<size_t>(n_ctx_used));
  std::vector<float> row(static_cast<size_t>(head_dim));
  for (int64_t h = 0; h < n_head; ++h) {
    const float* qh = q + h * head_dim;
    const int64_t g = h / group;

    double max = -INFINITY;
    bool has_nan = false;
    for (int64_t t = 0; t < n_ctx_used; ++t) {
      kv_row(k_type, k_row(t, g), head_dim, row.data());
      double s = 0.0;
      for (int64_t d = 0; d < head_dim; ++d) s += static_cast<double>(qh[d]) * row[d];
      s *= scale;
      p[static_cast<size_t>(t)] = s;
      has_nan = has_nan || std::isnan(s);
      max = std::fmax(max, s);
    }
    // A sink is one more logit in the softmax, with no value: it only adds to the sum.
    const double sink = sinks != nullptr ? static_cast<double>(sinks[h]) : -INFINITY;
    has_nan = has_nan || std::isnan(sink);
    max = std::fmax(max, sink);
    double sum = sinks != nullptr ? std::exp(sink - max) : 0.0;
    for (auto& v : p) {
      v = has_nan ? NAN : std::exp(v - max);
      sum += v;
    }

    std::vector<double> acc(static_cast<size_t>(head_dim), 0.0);
    for (int64_t t = 0; t < n_ctx_used; ++t) {
      kv_row(v_type, v_row(t, g), head_dim, row.data());
      for (int64_t d = 0; d < head_dim; ++d)
        acc[static_cast<size_t>(d)] += p[static_cast<size_t>(t)] / sum * row[d];
    }
    float* o = out + h * head_dim;
    for (int64_t d = 0; d < head_dim; ++d) o[d] = static_cast<float>(acc[static_cast<size_t>(d)]);
  }
}

void attention_cells(const float* q, const uint16_t* k_cache, const uint16_t* v_cache,
                     const int32_t* cells, int64_t n_cells, int64_t n_head, int64_t n_kv_head,
                     int64_t head_dim, float scale, float* out, int64_t head_stride,
                     int64_t cell_stride) {
  attention_cells_typed(q, DType::F16, k_cache, DType::F16, v_cache, cells, n_cells, n_head,
                        n_kv_head, head_dim, scale, out, head_stride, cell_stride);
}

bool store_kv_row(DType t, const float* x, int64_t n, void* out) {
  if (t == DType::F16) {
    auto* h = static_cast<uint16_t*>(out);
    for (int64_t d = 0; d < n; ++d) h[d] = f32_to_f16(x[d]);
    return true;
  }
  if (n % dtype_info(t).block_size != 0) return false;
  return quantize_row(t, x, out, n).ok();
}

void attention(const float* q, const uint16_t* k_cache, const uint16_t* v_cache,
               int64_t n_ctx_used, int64_t n_head, int64_t n_kv_head, int64_t head_dim,
               float scale, float* out) {
  attention_cells(q, k_cache, v_cache, nullptr, n_ctx_used, n_head, n_kv_head, head_dim, scale,
                  out);
}

}  // namespace pi::ref
