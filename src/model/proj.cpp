#include "model/proj.h"

#include <algorithm>
#include <numeric>

namespace pi::model {

void linear_any(backend::Ops& ops, const Matrix& w, const Matrix& w_t, const float* X, int64_t m,
                std::span<const int32_t> all_rows, float* Y) {
  if (w.present()) {
    ops.linear(w, X, m, Y);
  } else {
    ops.linear_t(w_t, X, m, all_rows.first(static_cast<size_t>(w_t.rows)), Y);
  }
}

std::vector<int32_t> iota_rows(int64_t n) {
  std::vector<int32_t> r(static_cast<size_t>(std::max<int64_t>(n, 0)));
  std::iota(r.begin(), r.end(), 0);
  return r;
}

DenseProj::DenseProj(const HParams& hp)
    : hp_(hp), all_rows_(iota_rows(std::max(hp.n_embd, hp.n_embd_q()))) {}

void DenseProj::qkv(int64_t, backend::Ops& ops, const AttnWeights& w, const QkvIo& io) {
  const int64_t n_q = hp_.n_embd_q(), n_kv = hp_.n_embd_kv();
  if (w.qkv.present()) {
    ops.linear(w.qkv, io.h, io.m, io.qkv);
    const int64_t stride = n_q + 2 * n_kv;
    ops.copy_rows(io.qkv, stride, io.q, n_q, io.m, n_q);
    ops.copy_rows(io.qkv + n_q, stride, io.k, n_kv, io.m, n_kv);
    ops.copy_rows(io.qkv + n_q + n_kv, stride, io.v, n_kv, io.m, n_kv);
  } else if (w.q.present() && w.k.present() && w.v.present()) {
    ops.linear3(w.q, w.k, w.v, io.h, io.m, io.q, io.k, io.v);
  } else {
    linear_any(ops, w.q, w.q_t, io.h, io.m, all_rows_, io.q);
    linear_any(ops, w.k, w.k_t, io.h, io.m, all_rows_, io.k);
    linear_any(ops, w.v, w.v_t, io.h, io.m, all_rows_, io.v);
  }
}

void DenseProj::out(int64_t, backend::Ops& ops, const AttnWeights& w, const float* A, int64_t m,
                    float* Y) {
  linear_any(ops, w.out, w.out_t, A, m, all_rows_, Y);
}

}  // namespace pi::model
