// The simulated device's ops: each call names the buffers it reads and writes (for the race
// checker), copies the host index arrays it is given (they may change once the call returns,
// as with a kernel launch), translates handles to the arena and queues the CPU kernel on the
// compute queue.
#include <algorithm>
#include <vector>

#include "backend/sim/sim_impl.h"

namespace pi::backend {
namespace {

template <typename T>
std::vector<T> copy_of(const T* p, int64_t n) {
  return p != nullptr && n > 0 ? std::vector<T>(p, p + n) : std::vector<T>{};
}

class SimOps final : public Ops {
 public:
  explicit SimOps(SimDevice::Impl& im) : im_(im) {}

  void embed(const Matrix& E, const int32_t* tokens, int64_t m, float* X) override {
    run("embed", {{E.data, false}, {X, true}},
        [this, E = dev(E), t = copy_of(tokens, m), m, X = im_.real(X)] {
          im_.cpu.embed(E, t.data(), m, X);
        });
  }
  void linear(const Matrix& W, const float* X, int64_t m, float* Y) override {
    run("linear", {{W.data, false}, {X, false}, {Y, true}},
        [this, W = dev(W), X = im_.real(X), m, Y = im_.real(Y)] { im_.cpu.linear(W, X, m, Y); });
  }
  void linear3(const Matrix& A, const Matrix& B, const Matrix& C, const float* X, int64_t m,
               float* YA, float* YB, float* YC) override {
    run("linear3",
        {{A.data, false},
         {B.data, false},
         {C.data, false},
         {X, false},
         {YA, true},
         {YB, true},
         {YC, true}},
        [this, A = dev(A), B = dev(B), C = dev(C), X = im_.real(X), m, YA = im_.real(YA),
         YB = im_.real(YB), YC = im_.real(YC)] { im_.cpu.linear3(A, B, C, X, m, YA, YB, YC); });
  }
  void linear_t(const Matrix& D, const float* A, int64_t m, std::span<const int32_t> rows,
                float* Y) override {
    run("linear_t", {{D.data, false}, {A, false}, {Y, true}},
        [this, D = dev(D), A = im_.real(A), m, r = std::vector<int32_t>(rows.begin(), rows.end()),
         Y = im_.real(Y)] { im_.cpu.linear_t(D, A, m, r, Y); });
  }
  void linear_rows(const Matrix& W, const float* X, int64_t m, const int32_t* idx,
                   const int64_t* offsets, float* Y) override {
    run("linear_rows", {{W.data, false}, {X, false}, {Y, true}},
        [this, W = dev(W), X = im_.real(X), m, i = copy_of(idx, offsets[m]),
         o = copy_of(offsets, m + 1),
         Y = im_.real(Y)] { im_.cpu.linear_rows(W, X, m, i.data(), o.data(), Y); });
  }
  void linear_rows_union(const Matrix& W, const float* X, int64_t m, std::span<const int32_t> rows,
                         float* Y) override {
    run("linear_rows_union", {{W.data, false}, {X, false}, {Y, true}},
        [this, W = dev(W), X = im_.real(X), m, r = std::vector<int32_t>(rows.begin(), rows.end()),
         Y = im_.real(Y)] { im_.cpu.linear_rows_union(W, X, m, r, Y); });
  }
  void linear_t_rows(const Matrix& D, const float* A, int64_t m, const int32_t* idx,
                     const int64_t* offsets, float* Y) override {
    run("linear_t_rows", {{D.data, false}, {A, false}, {Y, true}},
        [this, D = dev(D), A = im_.real(A), m, i = copy_of(idx, offsets[m]),
         o = copy_of(offsets, m + 1),
         Y = im_.real(Y)] { im_.cpu.linear_t_rows(D, A, m, i.data(), o.data(), Y); });
  }
  void norm(const NormParams& p, const float* X, const Vector& w, const Vector& b, int64_t m,
            int64_t n, float* Y) override {
    run("norm", {{X, false}, {w.data, false}, {b.data, false}, {Y, true}},
        [this, p, X = im_.real(X), w = dev(w), b = dev(b), m, n, Y = im_.real(Y)] {
          im_.cpu.norm(p, X, w, b, m, n, Y);
        });
  }
  void rope(const RopeParams& p, float* X, int64_t m, int64_t n_heads,
            const int32_t* pos) override {
    run("rope", {{X, true}}, [this, p, X = im_.real(X), m, n_heads, ps = copy_of(pos, m)] {
      im_.cpu.rope(p, X, m, n_heads, ps.data());
    });
  }
  void store_kv(const AttnParams& p, const float* K, const float* V, int64_t m, const KvLayer& kv,
                const int32_t* cells) override {
    run("store_kv", {{K, false}, {V, false}, {kv.k, true}, {kv.v, true}},
        [this, p, K = im_.real(K), V = im_.real(V), m, kv = dev(kv), c = copy_of(cells, m)] {
          im_.cpu.store_kv(p, K, V, m, kv, c.data());
        });
  }
  void attention(const AttnParams& p, const float* Q, int64_t m, const KvLayer& kv,
                 const KvBatch& b, float* out) override {
    // The batch's arrays, copied: positions, cells, lengths and (if any) the shared cell lists.
    int64_t n_cells = 0;
    if (b.attn_cells != nullptr)
      for (int64_t i = 0; i < m; ++i) n_cells = std::max(n_cells, b.attn_begin[i] + b.attn_len[i]);
    AttnParams pd = p;
    pd.sinks = im_.real(p.sinks);
    run("attention", {{Q, false}, {kv.k, false}, {kv.v, false}, {p.sinks, false}, {out, true}},
        [this, p = pd, Q = im_.real(Q), m, kv = dev(kv), pos = copy_of(b.pos, m),
         cell = copy_of(b.cell, m), cells = copy_of(b.attn_cells, n_cells),
         begin = copy_of(b.attn_begin, b.attn_cells != nullptr ? m : 0),
         len = copy_of(b.attn_len, m), out = im_.real(out)] {
          const KvBatch local{pos.data(), cell.data(), cells.empty() ? nullptr : cells.data(),
                              begin.empty() ? nullptr : begin.data(), len.data()};
          im_.cpu.attention(p, Q, m, kv, local, out);
        });
  }
  void activate(Activation act, float* x, int64_t n) override {
    run("activate", {{x, true}}, [this, act, x = im_.real(x), n] { im_.cpu.activate(act, x, n); });
  }
  void ffn_combine(FfnKind kind, Activation act, float* G, float* U, int64_t m,
                   int64_t n_ff) override {
    run("ffn_combine", {{G, true}, {U, true}},
        [this, kind, act, G = im_.real(G), U = im_.real(U), m, n_ff] {
          im_.cpu.ffn_combine(kind, act, G, U, m, n_ff);
        });
  }
  void add(float* Y, const float* X, int64_t n) override {
    run("add", {{Y, true}, {X, false}},
        [this, Y = im_.real(Y), X = im_.real(X), n] { im_.cpu.add(Y, X, n); });
  }
  void add_bias(float* Y, const Vector& b, int64_t m, int64_t n) override {
    run("add_bias", {{Y, true}, {b.data, false}},
        [this, Y = im_.real(Y), b = dev(b), m, n] { im_.cpu.add_bias(Y, b, m, n); });
  }
  void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
                 int64_t n) override {
    run("copy_rows", {{src, false}, {dst, true}},
        [this, s = im_.real(src), src_stride, d = im_.real(dst), dst_stride, rows, n] {
          im_.cpu.copy_rows(s, src_stride, d, dst_stride, rows, n);
        });
  }
  void combine_rows(const float* X, int64_t n, const int32_t* rows, const float* w, int64_t m,
                    int64_t k, float* Y) override {
    run("combine_rows", {{X, false}, {Y, true}},
        [this, X = im_.real(X), n, r = copy_of(rows, m * k), wt = copy_of(w, m * k), m, k, Y = im_.real(Y)] {
          im_.cpu.combine_rows(X, n, r.data(), wt.empty() ? nullptr : wt.data(), m, k, Y);
        });
  }
  void threshold_mask(const float* X, int64_t m, int64_t n, float thr, uint32_t* bits) override {
    run("threshold_mask", {{X, false}, {bits, true}},
        [this, X = im_.real(X), m, n, thr, bits = im_.real(bits)] {
          im_.cpu.threshold_mask(X, m, n, thr, bits);
        });
  }
  void compact_rows(const uint32_t* bits, int64_t m, int64_t n, const int32_t* ids, int64_t n_ids,
                    int32_t* idx, int64_t* offsets) override {
    run("compact_rows", {{bits, false}, {ids, false}, {idx, true}, {offsets, true}},
        [this, bits = im_.real(bits), m, n, ids = im_.real(ids), n_ids, idx = im_.real(idx),
         offsets = im_.real(offsets)] {
          im_.cpu.compact_rows(bits, m, n, ids, n_ids, idx, offsets);
        });
  }
  void ffn_rows(FfnKind kind, const FfnRows& w, const float* X, int64_t m, const int32_t* idx,
                const int64_t* offsets, void* work, float* Y) override {
    run("ffn_rows",
        {{w.gate.data, false},
         {w.up.data, false},
         {w.down_t.data, false},
         {X, false},
         {idx, false},
         {offsets, false},
         {work, true},
         {Y, true}},
        [this, kind, w = FfnRows{dev(w.gate), dev(w.up), dev(w.down_t)}, X = im_.real(X), m,
         idx = im_.real(idx), offsets = im_.real(offsets), work = im_.real(work),
         Y = im_.real(Y)] { im_.cpu.ffn_rows(kind, w, X, m, idx, offsets, work, Y); });
  }
  uint64_t ffn_rows_work_bytes(int64_t m, int64_t n_rows, int64_t n_embd) const override {
    return im_.cpu.ffn_rows_work_bytes(m, n_rows, n_embd);
  }

 private:
  template <typename F>
  void run(const char* what, std::initializer_list<Access> acc, F&& fn) {
    ++im_.n_ops;
    im_.submit(kCompute, what, acc, std::forward<F>(fn));
  }
  Matrix dev(const Matrix& m) const {
    Matrix r = m;
    r.data = im_.real(m.data);
    return r;
  }
  Vector dev(const Vector& v) const { return Vector{im_.real(v.data), v.n}; }
  KvLayer dev(const KvLayer& kv) const {
    KvLayer r = kv;
    r.k = im_.real(kv.k);
    r.v = im_.real(kv.v);
    return r;
  }

  SimDevice::Impl& im_;
};

}  // namespace

std::unique_ptr<Ops> make_sim_ops(SimDevice::Impl& impl) { return std::make_unique<SimOps>(impl); }

}  // namespace pi::backend
