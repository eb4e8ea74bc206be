// Reference single-token causal attention over an f16 KV cache, in double:
//   score[t] = scale * q_h . k[t, g]      for t in [0, n_ctx_used), g = h / (n_head / n_kv_head)
//   p = softmax(score)
//   out_h = sum_t p[t] * v[t, g]
// With n_ctx_used == 0 there is nothing to attend to and out is all zeros. n_head must be a
// multiple of n_kv_head. attention_cells() is the same over a list of cells (t -> cells[t]).
#include <cmath>
#include <vector>

#include "kernels/ref/ref.h"
#include "tensor/quant.h"

namespace pi::ref {

void attention_cells(const float* q, const uint16_t* k_cache, const uint16_t* v_cache,
                     const int32_t* cells, int64_t n_cells, int64_t n_head, int64_t n_kv_head,
                     int64_t head_dim, float scale, float* out, int64_t head_stride,
                     int64_t cell_stride) {
  const int64_t n_ctx_used = n_cells;
  const auto cell = [cells](int64_t t) { return cells != nullptr ? int64_t{cells[t]} : t; };
  const int64_t group = n_head / n_kv_head;
  if (head_stride == 0) head_stride = head_dim;
  if (cell_stride == 0) cell_stride = n_kv_head * head_dim;
  std::vector<double> p(static_cast<size_t>(n_ctx_used));
  for (int64_t h = 0; h < n_head; ++h) {
    const float* qh = q + h * head_dim;
    const int64_t g = h / group;

    double max = -INFINITY;
    bool has_nan = false;
    for (int64_t t = 0; t < n_ctx_used; ++t) {
      const uint16_t* k = k_cache + cell(t) * cell_stride + g * head_stride;
      double s = 0.0;
      for (int64_t d = 0; d < head_dim; ++d) s += static_cast<double>(qh[d]) * f16_to_f32(k[d]);
      s *= scale;
      p[static_cast<size_t>(t)] = s;
      has_nan = has_nan || std::isnan(s);
      max = std::fmax(max, s);
    }
    double sum = 0.0;
    for (auto& v : p) {
      v = has_nan ? NAN : std::exp(v - max);
      sum += v;
    }

    float* o = out + h * head_dim;
    for (int64_t d = 0; d < head_dim; ++d) {
      double acc = 0.0;
      for (int64_t t = 0; t < n_ctx_used; ++t) {
        const uint16_t* v = v_cache + cell(t) * cell_stride + g * head_stride;
        acc += p[static_cast<size_t>(t)] / sum * f16_to_f32(v[d]);
      }
      o[d] = static_cast<float>(acc);
    }
  }
}

void attention(const float* q, const uint16_t* k_cache, const uint16_t* v_cache,
               int64_t n_ctx_used, int64_t n_head, int64_t n_kv_head, int64_t head_dim,
               float scale, float* out) {
  attention_cells(q, k_cache, v_cache, nullptr, n_ctx_used, n_head, n_kv_head, head_dim, scale,
                  out);
}

}  // namespace pi::ref
