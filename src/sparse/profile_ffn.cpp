#include "sparse/profile_ffn.h"

#include "model/proj.h"

namespace pi::sparse {

ProfilingFfn::ProfilingFfn(const model::Model& model, const model::ModelWeights& weights,
                           backend::Device& dev)
    : model_(model), w_(weights), dev_(dev) {}

Result<std::unique_ptr<ProfilingFfn>> ProfilingFfn::create(const model::Model& model,
                                                           const model::ModelWeights& weights,
                                                           backend::Device& dev,
                                                           int64_t max_tokens) {
  const model::HParams& hp = model.hparams();
  std::unique_ptr<ProfilingFfn> f(new ProfilingFfn(model, weights, dev));
  const auto bytes = static_cast<size_t>(max_tokens * hp.n_ff) * sizeof(float);
  auto g = dev.alloc(bytes, "profile FFN scratch");
  if (!g.ok()) return g.error();
  auto u = dev.alloc(bytes, "profile FFN scratch");
  if (!u.ok()) return u.error();
  f->gate_ = std::move(*g);
  f->up_ = std::move(*u);
  f->all_neurons_ = model::iota_rows(hp.n_ff);
  f->all_inputs_ = model::iota_rows(hp.n_embd);
  f->counts_.assign(static_cast<size_t>(hp.n_layer),
                    std::vector<uint64_t>(static_cast<size_t>(hp.n_ff), 0));
  return f;
}

void ProfilingFfn::run(int64_t il, const model::FfnInput& in, float* out) {
  const model::HParams& hp = model_.hparams();
  const model::FfnWeights& w = w_.layers[static_cast<size_t>(il)].ffn;
  backend::Ops& ops = dev_.ops();
  float* gate = gate_.as<float>();
  float* up = up_.as<float>();
  if (hp.ffn != model::FfnKind::Plain)
    model::linear_any(ops, w.gate, w.gate_t, in.x, in.m, all_inputs_, gate);
  ops.linear(w.up, in.x, in.m, up);
  if (w.up_b.present()) ops.add_bias(up, w.up_b, in.m, hp.n_ff);
  ops.ffn_combine(hp.ffn, hp.act, gate, up, in.m, hp.n_ff);
  // gate holds the neuron activations, f32 [m, n_ff].
  auto& c = counts_[static_cast<size_t>(il)];
  const auto n_ff = static_cast<size_t>(hp.n_ff);
  const auto* acts = static_cast<const float*>(dev_.map(gate, sizeof(float) * in.m * n_ff));
  for (int64_t t = 0; t < in.m; ++t) {
    const float* a = acts + static_cast<size_t>(t) * n_ff;
    for (size_t i = 0; i < n_ff; ++i) c[i] += a[i] != 0.0f ? 1 : 0;
  }
  if (il == 0) n_tokens_ += static_cast<uint64_t>(in.m);
  if (w.down_t.present()) {
    ops.linear_t(w.down_t, gate, in.m, all_neurons_, out);
  } else {
    ops.linear(w.down, gate, in.m, out);
  }
  if (w.down_b.present()) ops.add_bias(out, w.down_b, in.m, hp.n_embd);
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
