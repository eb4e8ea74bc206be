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

void Kernels::swiglu_oai(ThreadPool& pool, const float* gate, const float* up, float* y, int64_t n) const {
  const auto f = table_->swiglu_oai;
  elementwise(pool, n, [&](int64_t i, int64_t len) { f(gate + i, up + i, y + i, len); });
}

void Kernels::to_f16(ThreadPool& pool, const float* x, uint16_t* y, int64_t n) const {
  const auto f = table_->to_f16;
  elementwise(pool, n, [&](int64_t i, int64_t len) { f(x + i, y + i, len); });
}

void Kernels::rope(ThreadPool&, float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos,
          float base, float freq_scale, RopeMode mode, const RopeYarn& yarn) const {
  detail::require(n_rot % 2 == 0 && n_rot <= head_dim, "rope: n_rot must be even and <= head_dim");
  const int64_t n_pairs = n_rot / 2;
  if (n_pairs == 0) return;
  detail::Scratch scratch;
  float* cs = scratch.alloc<float>(2 * n_pairs);
  // Angles in double (rope_yarn.h): pos * base^(-2i/n_rot) reaches thousands of radians,
  // where an f32 angle would already be off by 1e-4.
  const RopeAngles a = rope_angles(n_rot, base, freq_scale, yarn);
  for (int64_t i = 0; i < n_pairs; ++i) {
    const double theta = rope_theta(a, pos, i);
    cs[i] = static_cast<float>(std::cos(theta) * a.mscale);
    cs[n_pairs + i] = static_cast<float>(std::sin(theta) * a.mscale);
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
  // The head task of query i, head h, reading KV head kvh's rows from kb / vb.
  const auto run = [&](int64_t i, int64_t h, int thread, DType k_type, const uint8_t* kb, int64_t kbs,
                       DType v_type, const uint8_t* vb, int64_t vbs) {
    detail::AttnHeadTask t{};
    t.q = q + (i * d.n_head + h) * d.head_dim;
    t.k_type = k_type;
    t.v_type = v_type;
    t.kb = kb;
    t.vb = vb;
    t.kb_stride = kbs;
    t.vb_stride = vbs;
    t.cells = qs.cells != nullptr ? qs.cells + qs.begin[i] : nullptr;
    t.n_ctx = qs.n_ctx(i);
    t.head_dim = d.head_dim;
    t.scale = d.scale;
    t.sink = d.sinks != nullptr ? d.sinks[h] : -INFINITY;
    t.scores = scores + thread * max_ctx;
    t.out = out + (i * d.n_head + h) * d.head_dim;
    head_fn(t);
  };
  const auto is_block = [](DType t) { return t == DType::Q8_0 || t == DType::Q4_0; };
  // A batch over a Q8_0 / Q4_0 cache: every query of a KV head would decode the same blocks
  // again (prompt processing turns compute-bound). There each KV head's rows are decoded once
  // to f32 (decode_kv_row: the floats the blocks read as), and its queries run over the copy:
  // the same bits as one query over the blocks, so the batch split still changes nothing.
  // One KV head at a time: its copy (cells x head_dim x 4 bytes for K and for V) stays small
  // and hot in cache.
  constexpr int64_t kDecodeMinQueries = 8;  // queries per KV head that repay the copy
  if ((is_block(d.k_type) || is_block(d.v_type)) && qs.n_q * group >= kDecodeMinQueries) {
    // The cells read: [0, max_ctx) or every listed one.
    int64_t n_cells = max_ctx;
    uint8_t* used = nullptr;  // listed cells: which to decode
    if (qs.cells != nullptr) {
      n_cells = 1;
      for (int64_t i = 0; i < qs.n_q; ++i)
        for (int64_t j = 0; j < qs.len[i]; ++j) n_cells = std::max<int64_t>(n_cells, qs.cells[qs.begin[i] + j] + 1);
      used = scratch.alloc<uint8_t>(n_cells);
      std::fill(used, used + n_cells, uint8_t{0});
      for (int64_t i = 0; i < qs.n_q; ++i)
        for (int64_t j = 0; j < qs.len[i]; ++j) used[qs.cells[qs.begin[i] + j]] = 1;
    }
    const int64_t hd = d.head_dim;
    float* kdec = is_block(d.k_type) ? scratch.alloc<float>(n_cells * hd) : nullptr;
    float* vdec = is_block(d.v_type) ? scratch.alloc<float>(n_cells * hd) : nullptr;
    constexpr int64_t kCellsPerTask = 64;
    for (int64_t kvh = 0; kvh < d.n_kv_head; ++kvh) {
      const uint8_t* kb = kbytes + row_bytes(d.k_type, kvh * head_stride);
      const uint8_t* vb = vbytes + row_bytes(d.v_type, kvh * head_stride);
      pool.parallel_for(
          (n_cells + kCellsPerTask - 1) / kCellsPerTask,
          [&](int64_t task, int) {
            const int64_t c1 = std::min(n_cells, (task + 1) * kCellsPerTask);
            for (int64_t c = task * kCellsPerTask; c < c1; ++c) {
              if (used != nullptr && used[c] == 0) continue;
              if (kdec != nullptr) kt.decode_kv_row(d.k_type, kb + c * kb_stride, kdec + c * hd, hd);
              if (vdec != nullptr) kt.decode_kv_row(d.v_type, vb + c * vb_stride, vdec + c * hd, hd);
            }
          },
          Schedule::Static, 1);
      const auto* kd = reinterpret_cast<const uint8_t*>(kdec);
      const auto* vd = reinterpret_cast<const uint8_t*>(vdec);
      pool.parallel_for(
          qs.n_q * group,
          [&](int64_t task, int thread) {
            run(task / group, kvh * group + task % group, thread,
                kdec != nullptr ? DType::F32 : d.k_type, kdec != nullptr ? kd : kb,
                kdec != nullptr ? hd * 4 : kb_stride, vdec != nullptr ? DType::F32 : d.v_type,
                vdec != nullptr ? vd : vb, vdec != nullptr ? hd * 4 : vb_stride);
          },
          Schedule::Dynamic, 1);
    }
    return;
  }
  pool.parallel_for(
      qs.n_q * d.n_head,
      [&](int64_t task, int thread) {
        const int64_t i = task / d.n_head;
        const int64_t h = task % d.n_head;
        const int64_t kvh = h / group;
        run(i, h, thread, d.k_type, kbytes + row_bytes(d.k_type, kvh * head_stride), kb_stride,
            d.v_type, vbytes + row_bytes(d.v_type, kvh * head_stride), vb_stride);
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
