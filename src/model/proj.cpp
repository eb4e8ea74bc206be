#include "model/proj.h"

namespace pi::model {

void DenseProj::qkv(int64_t, backend::Ops& ops, const AttnWeights& w, const QkvIo& io) {
  const int64_t n_q = hp_.n_embd_q(), n_kv = hp_.n_embd_kv();
  if (w.qkv.present()) {
    ops.linear(w.qkv, io.h, io.m, io.qkv);
    const int64_t stride = n_q + 2 * n_kv;
    ops.copy_rows(io.qkv, stride, io.q, n_q, io.m, n_q);
    ops.copy_rows(io.qkv + n_q, stride, io.k, n_kv, io.m, n_kv);
    ops.copy_rows(io.qkv + n_q + n_kv, stride, io.v, n_kv, io.m, n_kv);
  } else {
    ops.linear3(w.q, w.k, w.v, io.h, io.m, io.q, io.k, io.v);
  }
}

void DenseProj::out(int64_t, backend::Ops& ops, const AttnWeights& w, const float* A, int64_t m,
                    float* Y) {
  ops.linear(w.out, A, m, Y);
}

}  // namespace pi::model
