// Front ends of the small ops and attention. Norms and softmax are one reduction over a
// short vector and run on the calling thread (a fork would cost more than the op, and one
// thread keeps the reduction order fixed). Elementwise ops split long vectors into chunks.
// Attention runs one task per (query, head): each task owns its output head.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/scratch.h"

namespace pi::cpu {
namespace {

// Elementwise ops shorter than this run on the calling thread.
constexpr int64_t kParallelElems = int64_t{1} << 16;
constexpr int64_t kElemChunk = int64_t{1} << 14;

template <typename F>
void elementwise(ThreadPool& pool, int64_t n, F f) {
  if (n < kParallelElems || pool.size() == 1) {
    f(0, n);
    return;
  }
  const int64_t n_tasks = (n + kElemChunk - 1) / kElemChunk;
  pool.parallel_for(
      n_tasks,
      [&](int64_t task, int) {
        const int64_t i0 = task * kElemChunk;
        f(i0, std::min(kElemChunk, n - i0));
      },
      Schedule::Dynamic, 1);
}

}  // namespace

void Kernels::rmsnorm(ThreadPool&, const float* x, const float* w, int64_t n, float eps, float* y) const {
  table_->rmsnorm(x, w, n, eps, y);
}

void Kernels::layernorm(ThreadPool&, const float* x, const float* w, const float* b, int64_t n,
               float eps, float* y) const {
  table_->layernorm(x, w, b, n, eps, y);
}

void Kernels::softmax(ThreadPool&, float* x, int64_t n) const { table_->softmax(x, n); }

void Kernels::silu(ThreadPool& pool, const float* x, float* y, int64_t n) const {
  const auto f = table_->silu;
  elementwise(pool, n, [&](int64_t i, int64_t len) { f(x + i, y + i, len); });
}

void Kernels::gelu(ThreadPool& pool, const float* x, float* y, int64_t n) const {
  const auto f = table_->gelu;
  elementwise(pool, n, [&](int64_t i, int64_t len) { f(x + i, y + i, len); });
}

void Kernels::relu(ThreadPool& pool, const float* x, float* y, int64_t n) const {
  const auto f = table_->relu;
  elementwise(pool, n, [&](int64_t i, int64_t len) { f(x + i, y + i, len); });
}

void Kernels::relu_squared(ThreadPool& pool, const float* x, float* y, int64_t n) const {
  const auto f = table_->relu_squared;
  elementwise(pool, n, [&](int64_t i, int64_t len) { f(x + i, y + i, len); });
}

void Kernels::add(ThreadPool& pool, const float* a, const float* b, float* y, int64_t n) const {
  const auto f = table_->add;
  elementwise(pool, n, [&](int64_t i, int64_t len) { f(a + i, b + i, y + i, len); });
}

void Kernels::mul(ThreadPool& pool, const float* a, const float* b, float* y, int64_t n) const {
  const auto f = table_->mul;
  elementwise(pool, n, [&](int64_t i, int64_t len) { f(a + i, b + i, y + i, len); });
}

void Kernels::to_f16(ThreadPool& pool, const float* x, uint16_t* y, int64_t n) const {
  const auto f = table_->to_f16;
  elementwise(pool, n, [&](int64_t i, int64_t len) { f(x + i, y + i, len); });
}

void Kernels::rope(ThreadPool&, float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos,
          float base, float freq_scale, RopeMode mode) const {
  detail::require(n_rot % 2 == 0 && n_rot <= head_dim, "rope: n_rot must be even and <= head_dim");
  const int64_t n_pairs = n_rot / 2;
  if (n_pairs == 0) return;
  detail::Scratch scratch;
  float* cs = scratch.alloc<float>(2 * n_pairs);
  // Angles in double: pos * base^(-2i/n_rot) reaches thousands of radians, where an f32
  // angle would already be off by 1e-4.
  for (int64_t i = 0; i < n_pairs; ++i) {
    const double theta = static_cast<double>(pos) * static_cast<double>(freq_scale) *
                         std::pow(static_cast<double>(base),
                                  -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
    cs[i] = static_cast<float>(std::cos(theta));
    cs[n_pairs + i] = static_cast<float>(std::sin(theta));
  }
  table_->rope(x, n_heads, head_dim, n_pairs, cs, mode == RopeMode::NeoX);
}

namespace {

// Runs n_q * n_head attention heads, one task each. Query i sees n_ctx0 + i cells from cell 0,
// or, with `cells`, the cells[begin[i] .. begin[i] + len[i]).
struct AttnQueries {
  int64_t n_q = 0;
  int64_t n_ctx0 = 0;
  const int32_t* cells = nullptr;
  const int64_t* begin = nullptr;
  const int64_t* len = nullptr;

  int64_t n_ctx(int64_t i) const { return len != nullptr ? len[i] : n_ctx0 + i; }
};

void attention_heads(ThreadPool& pool, const detail::KernelTable& kt, const AttentionDims& d,
                     const float* q, const AttnQueries& qs, const uint16_t* k_cache,
                     const uint16_t* v_cache, float* out) {
  detail::require(d.n_kv_head > 0 && d.n_head % d.n_kv_head == 0,
                  "attention: n_head must be a multiple of n_kv_head");
  const auto head_fn = kt.attn_head;
  const int64_t group = d.n_head / d.n_kv_head;
  const int64_t head_stride = d.head_stride != 0 ? d.head_stride : d.head_dim;
  const int64_t cell_stride = d.cell_stride != 0 ? d.cell_stride : d.n_kv_head * d.head_dim;
  const auto block_ok = [&](DType t) {
    const int64_t bs = dtype_info(t).block_size;
    return (t == DType::F16 || t == DType::Q8_0 || t == DType::Q4_0) && d.head_dim % bs == 0 &&
           head_stride % bs == 0 && cell_stride % bs == 0;
  };
  detail::require(block_ok(d.k_type) && block_ok(d.v_type),
                  "attention: KV types must be F16, Q8_0 or Q4_0 with head_dim and strides "
                  "multiples of their block size");
  const auto* kbytes = reinterpret_cast<const uint8_t*>(k_cache);
  const auto* vbytes = reinterpret_cast<const uint8_t*>(v_cache);
  const auto kb_stride = static_cast<int64_t>(row_bytes(d.k_type, cell_stride));
  const auto vb_stride = static_cast<int64_t>(row_bytes(d.v_type, cell_stride));
  int64_t max_ctx = 1;
  for (int64_t i = 0; i < qs.n_q; ++i) max_ctx = std::max(max_ctx, qs.n_ctx(i));
  detail::Scratch scratch;
  float* scores = scratch.alloc<float>(pool.size() * max_ctx);
  pool.parallel_for(
      qs.n_q * d.n_head,
      [&](int64_t task, int thread) {
        const int64_t i = task / d.n_head;
        const int64_t h = task % d.n_head;
        const int64_t kvh = h / group;
        detail::AttnHeadTask t{};
        t.q = q + (i * d.n_head + h) * d.head_dim;
        t.k = k_cache + kvh * head_stride;
        t.v = v_cache + kvh * head_stride;
        t.kv_stride = cell_stride;
        t.k_type = d.k_type;
        t.v_type = d.v_type;
        t.kb = kbytes + row_bytes(d.k_type, kvh * head_stride);
        t.vb = vbytes + row_bytes(d.v_type, kvh * head_stride);
        t.kb_stride = kb_stride;
        t.vb_stride = vb_stride;
        t.cells = qs.cells != nullptr ? qs.cells + qs.begin[i] : nullptr;
        t.n_ctx = qs.n_ctx(i);
        t.head_dim = d.head_dim;
        t.scale = d.scale;
        t.scores = scores + thread * max_ctx;
        t.out = out + (i * d.n_head + h) * d.head_dim;
        head_fn(t);
      },
      Schedule::Dynamic, 1);
}

}  // namespace

void Kernels::attention(ThreadPool& pool, const AttentionDims& dims, const float* q,
               const uint16_t* k_cache, const uint16_t* v_cache, int64_t n_ctx_used,
               float* out) const {
  attention_heads(pool, *table_, dims, q, AttnQueries{1, n_ctx_used}, k_cache, v_cache, out);
}

void Kernels::attention_batch(ThreadPool& pool, const AttentionDims& dims, const float* q, int64_t n_q,
                     int64_t pos0, const uint16_t* k_cache, const uint16_t* v_cache,
                     float* out) const {
  attention_heads(pool, *table_, dims, q, AttnQueries{n_q, pos0 + 1}, k_cache, v_cache, out);
}

void Kernels::attention_cells(ThreadPool& pool, const AttentionDims& dims, const float* q, int64_t n_q,
                     const int32_t* cells, const int64_t* begin, const int64_t* len,
                     const uint16_t* k_cache, const uint16_t* v_cache, float* out) const {
  detail::require(len != nullptr && (cells == nullptr || begin != nullptr),
                  "attention_cells: len (and begin with cells) are required");
  attention_heads(pool, *table_, dims, q, AttnQueries{n_q, 0, cells, begin, len}, k_cache, v_cache,
                  out);
}

}  // namespace pi::cpu
