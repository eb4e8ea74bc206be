#include "model/placed_weights.h"

namespace pi::model {
namespace {

template <typename F>
Status each_view(ModelWeights& w, F&& f) {
  PI_TRY(f(w.tok_embd));
  PI_TRY(f(w.pos_embd));
  PI_TRY(f(w.out_norm));
  PI_TRY(f(w.out_norm_b));
  PI_TRY(f(w.output));
  for (LayerWeights& L : w.layers) {
    for (Vector* v : {&L.attn.norm, &L.attn.norm_b, &L.attn.q_b, &L.attn.k_b, &L.attn.v_b,
                      &L.attn.out_b, &L.ffn.norm, &L.ffn.norm_b, &L.ffn.up_b, &L.ffn.down_b})
      PI_TRY(f(*v));
    for (Matrix* m : layer_matrices(L)) PI_TRY(f(*m));
  }
  return Status::Ok();
}

}  // namespace

uint64_t weight_bytes(const ModelWeights& w) {
  uint64_t n = 0;
  ModelWeights copy = w;
  (void)each_view(copy, [&](const auto& v) {
    n += v.nbytes();
    return Status::Ok();
  });
  return w.output.data == w.tok_embd.data ? n - w.output.nbytes() : n;
}

Result<PlacedWeights> place_weights(backend::Device& dev, const ModelWeights& w) {
  PlacedWeights p{backend::WeightStore(dev), w};
  // The output head is often the token embedding itself: place it once.
  const bool tied = w.output.data == w.tok_embd.data;
  Status st = each_view(p.weights, [&](auto& v) -> Status {
    if (tied && &v == static_cast<const void*>(&p.weights.output)) return Status::Ok();
    auto placed = p.store.place(v);
    if (!placed.ok()) return placed.error();
    v = *placed;
    return Status::Ok();
  });
  if (!st.ok()) return st.error();
  if (tied) p.weights.output.data = p.weights.tok_embd.data;
  return p;
}

}  // namespace pi::model
