#include "model/ffn.h"

#include <numeric>

namespace pi::model {

DenseFfn::DenseFfn(const Model& model, Ops& ops, int64_t max_tokens) : model_(model), ops_(ops) {
  const auto n = static_cast<size_t>(max_tokens * model.hparams().n_ff);
  gate_.resize(n);
  up_.resize(n);
  all_neurons_.resize(static_cast<size_t>(model.hparams().n_ff));
  std::iota(all_neurons_.begin(), all_neurons_.end(), 0);
}

void DenseFfn::run(int64_t il, const FfnInput& in, float* out) {
  const HParams& hp = model_.hparams();
  const FfnWeights& w = model_.weights().layers[static_cast<size_t>(il)].ffn;
  if (hp.ffn != FfnKind::Plain) ops_.linear(w.gate, in.x, in.m, gate_.data());
  ops_.linear(w.up, in.x, in.m, up_.data());
  ops_.ffn_combine(hp.ffn, hp.act, gate_.data(), up_.data(), in.m, hp.n_ff);
  // gate_ now holds the neuron activations a, f32 [m, n_ff].
  if (w.down_t.present()) {
    ops_.linear_t(w.down_t, gate_.data(), in.m, all_neurons_, out);
  } else {
    ops_.linear(w.down, gate_.data(), in.m, out);
  }
}

}  // namespace pi::model
