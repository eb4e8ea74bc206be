#include "sparse/profile_ffn.h"

#include <numeric>

namespace pi::sparse {

ProfilingFfn::ProfilingFfn(const model::Model& model, model::Ops& ops, int64_t max_tokens)
    : model_(model), ops_(ops) {
  const model::HParams& hp = model.hparams();
  const auto n = static_cast<size_t>(max_tokens * hp.n_ff);
  gate_.resize(n);
  up_.resize(n);
  all_neurons_.resize(static_cast<size_t>(hp.n_ff));
  std::iota(all_neurons_.begin(), all_neurons_.end(), 0);
  counts_.assign(static_cast<size_t>(hp.n_layer), std::vector<uint64_t>(static_cast<size_t>(hp.n_ff), 0));
}

void ProfilingFfn::run(int64_t il, const model::FfnInput& in, float* out) {
  const model::HParams& hp = model_.hparams();
  const model::FfnWeights& w = model_.weights().layers[static_cast<size_t>(il)].ffn;
  if (hp.ffn != model::FfnKind::Plain) ops_.linear(w.gate, in.x, in.m, gate_.data());
  ops_.linear(w.up, in.x, in.m, up_.data());
  ops_.ffn_combine(hp.ffn, hp.act, gate_.data(), up_.data(), in.m, hp.n_ff);
  // gate_ holds the neuron activations, f32 [m, n_ff].
  auto& c = counts_[static_cast<size_t>(il)];
  const auto n_ff = static_cast<size_t>(hp.n_ff);
  for (int64_t t = 0; t < in.m; ++t) {
    const float* a = gate_.data() + static_cast<size_t>(t) * n_ff;
    for (size_t i = 0; i < n_ff; ++i) c[i] += a[i] != 0.0f ? 1 : 0;
  }
  if (il == 0) n_tokens_ += static_cast<uint64_t>(in.m);
  if (w.down_t.present()) {
    ops_.linear_t(w.down_t, gate_.data(), in.m, all_neurons_, out);
  } else {
    ops_.linear(w.down, gate_.data(), in.m, out);
  }
}

ActivationStats ProfilingFfn::stats() const {
  ActivationStats s;
  s.source = "profile";
  s.n_tokens = n_tokens_;
  s.counts.resize(counts_.size());
  for (size_t l = 0; l < counts_.size(); ++l) {
    s.counts[l].assign(counts_[l].begin(), counts_[l].end());
  }
  return s;
}

}  // namespace pi::sparse
