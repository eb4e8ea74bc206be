#include "model/ffn.h"

#include "model/proj.h"

namespace pi::model {

DenseFfn::DenseFfn(const Model& model, const ModelWeights& weights, backend::Device& dev)
    : model_(model), w_(weights), ops_(dev.ops()) {}

Result<std::unique_ptr<DenseFfn>> DenseFfn::create(const Model& model, const ModelWeights& weights,
                                                   backend::Device& dev, int64_t max_tokens) {
  std::unique_ptr<DenseFfn> f(new DenseFfn(model, weights, dev));
  const auto bytes = static_cast<size_t>(max_tokens * model.hparams().n_ff) * sizeof(float);
  auto g = dev.alloc(bytes, "dense FFN scratch");
  if (!g.ok()) return g.error();
  auto u = dev.alloc(bytes, "dense FFN scratch");
  if (!u.ok()) return u.error();
  f->gate_ = std::move(*g);
  f->up_ = std::move(*u);
  f->all_neurons_ = iota_rows(model.hparams().n_ff);
  f->all_inputs_ = iota_rows(model.hparams().n_embd);
  return f;
}

void DenseFfn::run(int64_t il, const FfnInput& in, float* out) {
  const HParams& hp = model_.hparams();
  const FfnWeights& w = w_.layers[static_cast<size_t>(il)].ffn;
  float* gate = gate_.as<float>();
  float* up = up_.as<float>();
  if (hp.ffn != FfnKind::Plain) linear_any(ops_, w.gate, w.gate_t, in.x, in.m, all_inputs_, gate);
  ops_.linear(w.up, in.x, in.m, up);
  if (w.up_b.present()) ops_.add_bias(up, w.up_b, in.m, hp.n_ff);
  ops_.ffn_combine(hp.ffn, hp.act, gate, up, in.m, hp.n_ff);
  // gate now holds the neuron activations a, f32 [m, n_ff].
  if (w.down_t.present()) {
    ops_.linear_t(w.down_t, gate, in.m, all_neurons_, out);
  } else {
    ops_.linear(w.down, gate, in.m, out);
  }
  if (w.down_b.present()) ops_.add_bias(out, w.down_b, in.m, hp.n_embd);
}

Result<std::unique_ptr<HostFfnBridge>> HostFfnBridge::create(FfnStep& host_step, backend::Device& dev,
                                                             int64_t n_embd, int64_t max_tokens) {
  std::unique_ptr<HostFfnBridge> b(new HostFfnBridge(host_step, dev, n_embd));
  const auto bytes = static_cast<size_t>(max_tokens * n_embd) * sizeof(float);
  for (backend::Buffer* buf : {&b->x_, &b->out_}) {
    auto r = dev.alloc_host(bytes, "FFN hand-off (host)");
    if (!r.ok()) return r.error();
    *buf = std::move(*r);
  }
  return b;
}

const float* HostFfnBridge::fetch(const float* x, int64_t m) {
  dev_.read_back(backend::kCompute, x_.data(), x, static_cast<size_t>(m * n_embd_) * sizeof(float));
  return x_.as<float>();
}

void HostFfnBridge::before_attention(int64_t il, const float* x, int64_t m) {
  host_.before_attention(il, fetch(x, m), m);
}

void HostFfnBridge::run(int64_t il, const FfnInput& in, float* out) {
  const float* x = fetch(in.x, in.m);
  host_.run(il, FfnInput{x, x, in.m}, out_.as<float>());
  // Queued behind the copy out of the next call's sync, so out_ is free again by then.
  dev_.copy_in(backend::kCompute, out, out_.data(), static_cast<size_t>(in.m * n_embd_) * sizeof(float));
}

}  // namespace pi::model
