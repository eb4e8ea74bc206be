// The CUDA device's ops: each call stages its host index arrays (cuda_staging.h), realigns a
// weight view that does not start at its type's natural alignment (tests place views at odd
// offsets; the weight store never does), and launches the kernels of src/kernels/cuda on the
// compute stream. Batches of up to kMatvecMaxTokens tokens take the row-product kernels (the
// weights read once per 8 tokens, the integer path for the small-block formats); larger ones
// take cuBLAS on decoded tiles. Work too large for a scratch region of the arena runs in
// chunks of tokens. Nothing here waits for the GPU except the staging ring's reuse.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_impl.h"
#include "kernels/cuda/act_quant.cuh"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/axpy_t.cuh"
#include "kernels/cuda/compact.cuh"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/ffn_rows.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/kv_store.cuh"
#include "kernels/cuda/mask.cuh"
#include "kernels/cuda/matvec.cuh"
#include "kernels/cuda/norm.cuh"
#include "kernels/cuda/rope.cuh"

namespace pi::backend {
namespace {

using cuda::HostArray;
using cuda::StageKey;

// Tokens up to which a product runs on the row kernels; more go to cuBLAS.
constexpr int64_t kMatvecMaxTokens = gpu::kMatvecTokens;

class CudaOps final : public Ops {
 public:
  explicit CudaOps(CudaDevice::Impl& im) : im_(im) {}

  void embed(const Matrix& E, const int32_t* tokens, int64_t m, float* X) override {
    begin();
    gpu::WeightRef w;
    void* dt = nullptr;
    if (!weight(E, "embed", w) || !stage("embed", StageKey::kTokens, {{tokens, bytes(m, 4)}}, &dt))
      return;
    launched(gpu::dequant_rows(w, static_cast<const int32_t*>(dt), 0, m, X, E.cols, s()), "embed");
  }

  void linear(const Matrix& W, const float* X, int64_t m, float* Y) override {
    begin();
    gpu::WeightRef w;
    if (!weight(W, "linear", w)) return;
    if (m <= kMatvecMaxTokens) {
      rows_product(w, nullptr, W.rows, X, m, Y, W.rows, "linear");
    } else {
      gemm_checked(gpu::gemm_linear(im_.cublas, w, X, W.cols, m, Y, W.rows, scratch(), s()),
                   "linear");
    }
  }

  void linear3(const Matrix& A, const Matrix& B, const Matrix& C, const float* X, int64_t m,
               float* YA, float* YB, float* YC) override {
    if (m > kMatvecMaxTokens || A.cols != B.cols || A.cols != C.cols) {
      linear(A, X, m, YA);
      linear(B, X, m, YB);
      linear(C, X, m, YC);
      return;
    }
    begin();
    gpu::WeightRef w[3];
    if (!weight(A, "linear3", w[0]) || !weight(B, "linear3", w[1]) || !weight(C, "linear3", w[2]))
      return;
    float* Y[3] = {YA, YB, YC};
    // One quantization of X serves the three products (the 8-bit activations do not depend
    // on the weight type).
    const bool q8 = gpu::q8_path(w[0].type) || gpu::q8_path(w[1].type) || gpu::q8_path(w[2].type);
    const int64_t chunk = q8 ? q8_chunk(A.cols) : m;
    for (int64_t t0 = 0; t0 < m; t0 += chunk) {
      const int64_t nt = std::min(chunk, m - t0);
      gpu::ActRef a;
      if (!activations(X + t0 * A.cols, nt, A.cols, q8, "linear3", a)) return;
      for (int k = 0; k < 3; ++k)
        if (!launched(gpu::matvec_rows(w[k], nullptr, w[k].rows, a, nt, Y[k] + t0 * w[k].rows,
                                       w[k].rows, s()),
                      "linear3"))
          return;
    }
  }

  void linear_t(const Matrix& D, const float* A, int64_t m, std::span<const int32_t> rows,
                float* Y) override {
    begin();
    gpu::WeightRef w;
    if (!weight(D, "linear_t", w)) return;
    const auto n = static_cast<int64_t>(rows.size());
    bool identity = n == D.rows;
    for (int64_t k = 0; identity && k < n; ++k) identity = rows[static_cast<size_t>(k)] == k;
    void* dr = nullptr;
    if (!identity && n > 0 &&
        !stage("linear_t", StageKey::kRows, {{rows.data(), bytes(n, 4)}}, &dr))
      return;
    const auto* drows = static_cast<const int32_t*>(dr);
    if (m > kMatvecMaxTokens) {
      gemm_checked(
          gpu::gemm_linear_t(im_.cublas, w, drows, n, A, D.rows, m, Y, D.cols, scratch(), s()),
          "linear_t");
      return;
    }
    const gpu::TLists l{drows, nullptr, n, A, D.rows};
    transposed(w, l, n, m, Y, "linear_t");
  }

  void linear_rows(const Matrix& W, const float* X, int64_t m, const int32_t* idx,
                   const int64_t* offsets, float* Y) override {
    begin();
    gpu::WeightRef w;
    if (!weight(W, "linear_rows", w)) return;
    const bool q8 = gpu::q8_path(w.type);
    const int64_t max_tokens = q8 ? q8_chunk(W.cols) : m;
    for_csr_chunks(idx, offsets, m, max_tokens, "linear_rows",
                   [&](int64_t c0, int64_t nt, const int32_t* didx, const int64_t* doff,
                       int64_t total, int64_t) {
                     gpu::ActRef a;
                     if (!activations(X + c0 * W.cols, nt, W.cols, q8, "linear_rows", a))
                       return false;
                     return launched(
                         gpu::matvec_csr(w, didx, doff, nt, total, a, Y + c0 * W.rows, W.rows, s()),
                         "linear_rows");
                   });
  }

  void linear_rows_union(const Matrix& W, const float* X, int64_t m, std::span<const int32_t> rows,
                         float* Y) override {
    begin();
    gpu::WeightRef w;
    const auto n = static_cast<int64_t>(rows.size());
    void* dr = nullptr;
    if (!weight(W, "linear_rows_union", w) || n == 0 ||
        !stage("linear_rows_union", StageKey::kRows, {{rows.data(), bytes(n, 4)}}, &dr))
      return;
    rows_product(w, static_cast<const int32_t*>(dr), n, X, m, Y, W.rows, "linear_rows_union");
  }

  void linear_t_rows(const Matrix& D, const float* A, int64_t m, const int32_t* idx,
                     const int64_t* offsets, float* Y) override {
    begin();
    gpu::WeightRef w;
    if (!weight(D, "linear_t_rows", w)) return;
    for_csr_chunks(idx, offsets, m, m, "linear_t_rows",
                   [&](int64_t c0, int64_t nt, const int32_t* didx, const int64_t* doff, int64_t,
                       int64_t max_len) {
                     const gpu::TLists l{didx, doff, 0, A + c0 * D.rows, D.rows};
                     return transposed(w, l, max_len, nt, Y + c0 * D.cols, "linear_t_rows");
                   });
  }

  void norm(const NormParams& p, const float* X, const Vector& w, const Vector& b, int64_t m,
            int64_t n, float* Y) override {
    begin();
    if (p.kind == NormKind::RMS) {
      launched(gpu::rms_norm(X, w.data, m, n, p.eps, Y, s()), "norm");
    } else {
      launched(gpu::layer_norm(X, w.data, b.data, m, n, p.eps, Y, s()), "norm");
    }
  }

  void rope(const RopeParams& p, float* X, int64_t m, int64_t n_heads,
            const int32_t* pos) override {
    begin();
    void* dp = nullptr;
    if (!stage("rope", StageKey::kPositions, {{pos, bytes(m, 4)}}, &dp)) return;
    const gpu::RopeArgs a{p.head_dim, rope_angles(p.n_rot, p.base, p.freq_scale, p.yarn), p.kind == RopeKind::NeoX};
    launched(gpu::rope(a, X, m, n_heads, static_cast<const int32_t*>(dp), s()), "rope");
  }

  void store_kv(const AttnParams& p, const float* K, const float* V, int64_t m, const KvLayer& kv,
                const int32_t* cells) override {
    begin();
    if (!known_kv(kv, "store_kv")) return;
    void* dc = nullptr;
    if (!stage("store_kv", StageKey::kCells, {{cells, bytes(m, 4)}}, &dc)) return;
    launched(gpu::store_kv(K, V, m, p.n_head_kv, p.head_dim, kv_ref(kv),
                           static_cast<const int32_t*>(dc), s()),
             "store_kv");
  }

  void attention(const AttnParams& p, const float* Q, int64_t m, const KvLayer& kv,
                 const KvBatch& b, float* out) override {
    begin();
    if (!known_kv(kv, "attention")) return;
    int64_t max_len = 0, n_cells = 0;
    for (int64_t i = 0; i < m; ++i) {
      max_len = std::max(max_len, b.attn_len[i]);
      if (b.attn_cells != nullptr) n_cells = std::max(n_cells, b.attn_begin[i] + b.attn_len[i]);
    }
    if (gpu::attn_chunk_cells(max_len) > gpu::kAttnMaxChunkCells) {
      im_.check(
          err("cuda: attention: a list of %lld cells is longer than this device's attention "
              "takes (%lld)",
              static_cast<long long>(max_len),
              static_cast<long long>(gpu::kAttnMaxChunks * gpu::kAttnMaxChunkCells)));
      return;
    }
    void* d[3] = {};
    const bool lists = b.attn_cells != nullptr;
    if (lists) {
      if (!stage("attention", StageKey::kAttention,
                 {{b.attn_len, bytes(m, 8)},
                  {b.attn_begin, bytes(m, 8)},
                  {b.attn_cells, bytes(n_cells, 4)}},
                 d))
        return;
    } else if (!stage("attention", StageKey::kAttention, {{b.attn_len, bytes(m, 8)}}, d)) {
      return;
    }
    const gpu::AttnArgs a{p.n_head, p.n_head_kv, p.head_dim, p.scale, p.sinks};
    const gpu::CellLists l{lists ? static_cast<const int32_t*>(d[2]) : nullptr,
                           lists ? static_cast<const int64_t*>(d[1]) : nullptr,
                           static_cast<const int64_t*>(d[0])};
    const int64_t per_token = gpu::attention_partial_floats(a, max_len);
    const int64_t group =
        per_token > 0 ? static_cast<int64_t>(CudaArena::kPartial / 4) / per_token : m;
    if (group < 1) {
      im_.check(
          err("cuda: attention: %lld heads of %lld over %lld cells need more scratch than the "
              "arena's %zu bytes",
              static_cast<long long>(p.n_head), static_cast<long long>(p.head_dim),
              static_cast<long long>(max_len), CudaArena::kPartial));
      return;
    }
    for (int64_t t0 = 0; t0 < m; t0 += group) {
      if (!launched(gpu::attention(a, Q, kv_ref(kv), l, max_len, t0, std::min(group, m - t0),
                                   im_.arena.partial, out, s()),
                    "attention"))
        return;
    }
  }

  void activate(Activation act, float* x, int64_t n) override {
    begin();
    launched(gpu::activate(static_cast<int>(act), x, n, s()), "activate");
  }

  void ffn_combine(FfnKind kind, Activation act, float* G, float* U, int64_t m,
                   int64_t n_ff) override {
    begin();
    launched(gpu::ffn_combine(static_cast<int>(kind), static_cast<int>(act), G, U, m * n_ff, s()),
             "ffn_combine");
  }

  void add(float* Y, const float* X, int64_t n) override {
    begin();
    launched(gpu::add(Y, X, n, s()), "add");
  }

  void add_bias(float* Y, const Vector& b, int64_t m, int64_t n) override {
    begin();
    launched(gpu::add_bias(Y, b.data, m, n, s()), "add_bias");
  }

  void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
                 int64_t n) override {
    begin();
    if (rows == 0 || n == 0) return;
    if (src_stride >= n && dst_stride >= n) {
      im_.check(cudaMemcpy2DAsync(dst, static_cast<size_t>(dst_stride) * 4, src,
                                  static_cast<size_t>(src_stride) * 4, static_cast<size_t>(n) * 4,
                                  static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, s()),
                "copy_rows", "cudaMemcpy2DAsync");
    } else {
      launched(gpu::copy_rows(src, src_stride, dst, dst_stride, rows, n, s()), "copy_rows");
    }
  }

  void combine_rows(const float* X, int64_t n, const int32_t* rows, const float* w, int64_t m, int64_t k,
                    float* Y) override {
    begin();
    // The host lists go through the staging ring in chunks of output rows.
    constexpr int64_t kChunk = 8192;
    for (int64_t i0 = 0; i0 < m; i0 += kChunk) {
      const int64_t mc = std::min(kChunk, m - i0);
      void* d[2] = {};
      if (w != nullptr) {
        if (!stage("combine_rows", StageKey::kNone, {{rows + i0 * k, bytes(mc * k, 4)}, {w + i0 * k, bytes(mc * k, 4)}}, d))
          return;
      } else if (!stage("combine_rows", StageKey::kNone, {{rows + i0 * k, bytes(mc * k, 4)}}, d)) {
        return;
      }
      if (!launched(gpu::combine_rows(X, n, static_cast<const int32_t*>(d[0]), static_cast<const float*>(d[1]), mc, k,
                                      Y + i0 * n, s()),
                    "combine_rows"))
        return;
    }
  }

  void threshold_mask(const float* X, int64_t m, int64_t n, float thr, uint32_t* bits) override {
    begin();
    launched(gpu::threshold_mask(X, m, n, thr, bits, s()), "threshold_mask");
  }

  void compact_rows(const uint32_t* bits, int64_t m, int64_t n, const int32_t* ids, int64_t n_ids,
                    int32_t* idx, int64_t* offsets) override {
    begin();
    launched(gpu::compact_rows(bits, m, n, ids, n_ids, idx, offsets, s()), "compact_rows");
  }

  void ffn_rows(FfnKind kind, const FfnRows& w, const float* X, int64_t m, const int32_t* idx,
                const int64_t* offsets, void* work, float* Y) override {
    begin();
    gpu::FfnRowsArgs a;
    a.kind = static_cast<int>(kind);
    if (!weight(w.up, "ffn_rows", a.up) || !weight(w.down_t, "ffn_rows", a.down)) return;
    if (kind != FfnKind::Plain) {
      if (!weight(w.gate, "ffn_rows", a.gate)) return;
      if (w.gate.type != w.up.type) {
        im_.check(err("cuda: ffn_rows: gate (%s) and up (%s) differ in type; the device takes one",
                      std::string(dtype_name(w.gate.type)).c_str(),
                      std::string(dtype_name(w.up.type)).c_str()));
        return;
      }
    }
    a.X = X;
    a.m = m;
    a.idx = idx;
    a.offsets = offsets;
    launched(gpu::ffn_rows(a, work, Y, s()), "ffn_rows");
  }

  uint64_t ffn_rows_work_bytes(int64_t m, int64_t n_rows, int64_t n_embd) const override {
    return static_cast<uint64_t>(gpu::ffn_rows_work_bytes(m, n_rows, n_embd));
  }

 private:
  cudaStream_t s() const { return im_.streams[kCompute]; }
  static size_t bytes(int64_t n, size_t elem) { return static_cast<size_t>(n) * elem; }

  void begin() {
    im_.submitted();
    ++im_.n_ops;
    realign_used_ = 0;
  }
  bool launched(cudaError_t e, const char* op) { return im_.check(e, op, "kernel launch"); }
  void gemm_checked(const gpu::GemmStatus& g, const char* op) {
    if (g.ok()) return;
    im_.check(err("cuda: %s: %s: status %d", op, g.call, g.code));
  }
  bool stage(const char* op, StageKey key, std::initializer_list<HostArray> arrays, void** out) {
    return im_.check(im_.stager->stage(op, key, arrays, out));
  }
  gpu::GemmScratch scratch() const {
    return gpu::GemmScratch{im_.arena.tile, static_cast<int64_t>(CudaArena::kTile / 4),
                            im_.arena.gather, static_cast<int64_t>(CudaArena::kGather / 4)};
  }
  // The KV kernels' kind of a KV type (F16, Q8_0, Q4_0); -1 for any other.
  static int32_t kv_kind(DType t) {
    switch (t) {
      case DType::F16: return gpu::kKvF16;
      case DType::Q8_0: return gpu::kKvQ8_0;
      case DType::Q4_0: return gpu::kKvQ4_0;
      default: return -1;
    }
  }
  // A layer of a type the kernels do not know is refused with the device's error.
  bool known_kv(const KvLayer& kv, const char* op) {
    if (kv_kind(kv.k_type) >= 0 && kv_kind(kv.v_type) >= 0) return true;
    im_.check(err("cuda: %s: a %s/%s KV cache is not supported (f16, q8_0, q4_0)", op,
                  std::string(dtype_name(kv.k_type)).c_str(),
                  std::string(dtype_name(kv.v_type)).c_str()));
    return false;
  }
  static gpu::KvRef kv_ref(const KvLayer& kv) {
    return gpu::KvRef{kv.k, kv.v, kv.head_stride, kv.cell_stride, kv_kind(kv.k_type),
                      kv_kind(kv.v_type)};
  }

  // The kernels' view of a weight; a view off its type's natural alignment (2 bytes; 4 for
  // f32; none for MXFP4, read byte by byte) is copied to the arena's realign region first (in
  // stream order).
  bool weight(const Matrix& m, const char* op, gpu::WeightRef& out) {
    out = gpu::WeightRef{m.type, reinterpret_cast<const uint8_t*>(m.data), m.rows, m.cols,
                         static_cast<int64_t>(m.row_stride())};
    if (!gpu::decodable(m.type)) {
      im_.check(err("cuda: %s: weight %s is %s, which this device does not compute with", op,
                    m.name.c_str(), std::string(dtype_name(m.type)).c_str()));
      return false;
    }
    const uintptr_t align = m.type == DType::F32 ? 4 : m.type == DType::MXFP4 ? 1 : 2;
    if (reinterpret_cast<uintptr_t>(m.data) % align == 0) return true;
    const size_t n = m.nbytes();
    if (realign_used_ + n > CudaArena::kRealign) {
      im_.check(
          err("cuda: %s: weight %s starts at a misaligned address and its %zu bytes do not "
              "fit the realign area (%zu bytes); place device views %zu-byte aligned",
              op, m.name.c_str(), n, CudaArena::kRealign, static_cast<size_t>(align)));
      return false;
    }
    uint8_t* to = im_.arena.realign + realign_used_;
    realign_used_ += (n + 255) / 256 * 256;
    if (!im_.check(cudaMemcpyAsync(to, m.data, n, cudaMemcpyDeviceToDevice, s()), op,
                   "cudaMemcpyAsync (realign)"))
      return false;
    out.data = to;
    return true;
  }

  // Tokens whose 8-bit activations of `cols` fit the arena's q8 region.
  static int64_t q8_chunk(int64_t cols) {
    int64_t n = static_cast<int64_t>(CudaArena::kQ8) / (cols + cols / 4 + 1);
    while (n > 1 && gpu::q8_bytes(n, cols) > static_cast<int64_t>(CudaArena::kQ8)) --n;
    return std::max<int64_t>(n, 1);
  }

  // Activations of nt tokens at X (rows of cols floats), quantized when q8.
  bool activations(const float* X, int64_t nt, int64_t cols, bool q8, const char* op,
                   gpu::ActRef& a) {
    a = gpu::ActRef{X, cols, nullptr, nullptr};
    if (!q8) return true;
    if (gpu::q8_bytes(nt, cols) > static_cast<int64_t>(CudaArena::kQ8)) {
      im_.check(err("cuda: %s: rows of %lld activations are too wide for the 8-bit scratch", op,
                    static_cast<long long>(cols)));
      return false;
    }
    a.q = im_.arena.q8;
    a.s = reinterpret_cast<const gpu::Q8Scale*>(reinterpret_cast<const uint8_t*>(im_.arena.q8) +
                                                (nt * cols + 255) / 256 * 256);
    return launched(
        gpu::quantize_q8(X, cols, nt, cols, im_.arena.q8, const_cast<gpu::Q8Scale*>(a.s), s()), op);
  }

  // Y[i, r] = W[r, :] · X[i, :] for the n listed rows (device list; null: 0 .. n - 1).
  void rows_product(const gpu::WeightRef& w, const int32_t* rows, int64_t n, const float* X,
                    int64_t m, float* Y, int64_t ldy, const char* op) {
    const bool q8 = gpu::q8_path(w.type);
    const int64_t chunk = q8 ? q8_chunk(w.cols) : m;
    for (int64_t t0 = 0; t0 < m; t0 += chunk) {
      const int64_t nt = std::min(chunk, m - t0);
      gpu::ActRef a;
      if (!activations(X + t0 * w.cols, nt, w.cols, q8, op, a) ||
          !launched(gpu::matvec_rows(w, rows, n, a, nt, Y + t0 * ldy, ldy, s()), op))
        return;
    }
  }

  // The two-stage transposed product for m tokens, as many at once as the partial sums of
  // lists of up to max_len rows fit the arena.
  bool transposed(const gpu::WeightRef& w, const gpu::TLists& l, int64_t max_len, int64_t m,
                  float* Y, const char* op) {
    const int64_t per_token = std::max<int64_t>(gpu::axpy_t_partial_floats(max_len, w.cols), 1);
    const int64_t group = static_cast<int64_t>(CudaArena::kPartial / 4) / per_token;
    if (group < 1) {
      im_.check(err("cuda: %s: rows of %lld columns are too wide for the partial sums", op,
                    static_cast<long long>(w.cols)));
      return false;
    }
    for (int64_t t0 = 0; t0 < m; t0 += group)
      if (!launched(gpu::axpy_t(w, l, max_len, t0, std::min(group, m - t0), im_.arena.partial, Y,
                                w.cols, s()),
                    op))
        return false;
    return true;
  }

  // Stages per-token CSR lists (host) in chunks of at most max_tokens tokens that fit the
  // staging ring, rebased to start at 0, and calls fn(c0, nt, idx, offsets, total, max_len)
  // for each (device pointers); stops at the first false.
  template <typename Fn>
  void for_csr_chunks(const int32_t* idx, const int64_t* offsets, int64_t m, int64_t max_tokens,
                      const char* op, Fn&& fn) {
    const size_t cap = im_.stager->capacity();
    std::vector<int64_t> rebased;
    for (int64_t c0 = 0; c0 < m;) {
      int64_t c1 = c0 + 1;
      const auto need = [&](int64_t end) {
        return cuda::Stager::packed_bytes(
            {{nullptr, bytes(offsets[end] - offsets[c0], 4)}, {nullptr, bytes(end - c0 + 1, 8)}});
      };
      while (c1 < m && c1 - c0 < max_tokens && need(c1 + 1) <= cap) ++c1;
      const int64_t nt = c1 - c0;
      rebased.resize(static_cast<size_t>(nt + 1));
      int64_t max_len = 0;
      for (int64_t i = 0; i <= nt; ++i) {
        rebased[static_cast<size_t>(i)] = offsets[c0 + i] - offsets[c0];
        if (i < nt) max_len = std::max(max_len, offsets[c0 + i + 1] - offsets[c0 + i]);
      }
      const int64_t total = rebased[static_cast<size_t>(nt)];
      void* d[2] = {};
      if (!stage(op, StageKey::kNone,
                 {{idx + offsets[c0], bytes(total, 4)}, {rebased.data(), bytes(nt + 1, 8)}}, d))
        return;
      if (!fn(c0, nt, static_cast<const int32_t*>(d[0]), static_cast<const int64_t*>(d[1]), total,
              max_len))
        return;
      c0 = c1;
    }
  }

  CudaDevice::Impl& im_;
  size_t realign_used_ = 0;
};

}  // namespace

std::unique_ptr<Ops> make_cuda_ops(CudaDevice::Impl& impl) {
  return std::make_unique<CudaOps>(impl);
}

}  // namespace pi::backend
