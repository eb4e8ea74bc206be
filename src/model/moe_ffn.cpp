#include "model/moe_ffn.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace pi::model {

void route_top_k(const float* logits, int64_t m, int64_t n_expert, int64_t k, int32_t* ids, float* weights) {
  std::vector<int32_t> order(static_cast<size_t>(n_expert));
  std::vector<double> p(static_cast<size_t>(n_expert));
  for (int64_t i = 0; i < m; ++i) {
    const float* l = logits + i * n_expert;
    float mx = -INFINITY;
    for (int64_t e = 0; e < n_expert; ++e)
      if (!std::isnan(l[e])) mx = std::max(mx, l[e]);
    // Unnormalized probabilities (the softmax's sum cancels in the renormalized weights); a NaN
    // logit ranks last with probability 0.
    for (int64_t e = 0; e < n_expert; ++e)
      p[static_cast<size_t>(e)] = std::isnan(l[e]) ? -1.0 : std::exp(static_cast<double>(l[e]) - mx);
    std::iota(order.begin(), order.end(), 0);
    // Probability order is logit order; equal logits keep the lower id first.
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      const double pa = p[static_cast<size_t>(a)], pb = p[static_cast<size_t>(b)];
      return pa != pb ? pa > pb : a < b;
    });
    double chosen = 0;
    for (int64_t j = 0; j < k; ++j)
      chosen += std::max(0.0, p[static_cast<size_t>(order[static_cast<size_t>(j)])]);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = order[static_cast<size_t>(j)];
      ids[i * k + j] = e;
      const double pe = std::max(0.0, p[static_cast<size_t>(e)]);
      weights[i * k + j] = chosen > 0 ? static_cast<float>(pe / chosen) : 0.0f;
    }
  }
}

MoeFfn::MoeFfn(const Model& model, const ModelWeights& weights, backend::Device& dev)
    : model_(model), w_(weights), ops_(dev.ops()) {}

uint64_t MoeFfn::device_bytes(const HParams& hp, int64_t max_tokens) {
  const auto per_token = static_cast<uint64_t>(hp.n_expert + 2 * hp.n_embd + 2 * hp.n_ff_exp);
  return static_cast<uint64_t>(max_tokens) * per_token * sizeof(float);
}

Result<std::unique_ptr<MoeFfn>> MoeFfn::create(const Model& model, const ModelWeights& weights,
                                               backend::Device& dev, int64_t max_tokens) {
  const HParams& hp = model.hparams();
  if (!dev.host_addressable()) {
    return err("%s: mixture-of-experts models run on the CPU for now (the %s device cannot run "
               "their routing); drop -ngl / --vram-budget or use --device cpu",
               model.file().path().c_str(), dev.name().c_str());
  }
  std::unique_ptr<MoeFfn> f(new MoeFfn(model, weights, dev));
  const auto alloc = [&](int64_t per_token, backend::Buffer& b) -> Status {
    auto r = dev.alloc(static_cast<size_t>(max_tokens * per_token) * sizeof(float), "MoE FFN scratch");
    if (!r.ok()) return r.error();
    b = std::move(*r);
    return Status::Ok();
  };
  PI_TRY(alloc(hp.n_expert, f->logits_));
  PI_TRY(alloc(hp.n_embd, f->xe_));
  PI_TRY(alloc(hp.n_ff_exp, f->gate_));
  PI_TRY(alloc(hp.n_ff_exp, f->up_));
  PI_TRY(alloc(hp.n_embd, f->ye_));
  f->starts_.resize(static_cast<size_t>(hp.n_expert + 1));
  return f;
}

void MoeFfn::run(int64_t il, const FfnInput& in, float* out) {
  const HParams& hp = model_.hparams();
  const FfnWeights& w = w_.layers[static_cast<size_t>(il)].ffn;
  const int64_t m = in.m, k = hp.n_expert_used, n_embd = hp.n_embd;
  float* logits = logits_.as<float>();
  ops_.linear(w.gate_inp, in.x, m, logits);
  ids_.resize(static_cast<size_t>(m * k));
  weights_.resize(static_cast<size_t>(m * k));
  route_top_k(logits, m, hp.n_expert, k, ids_.data(), weights_.data());
  if (trace_) {
    routes_.resize(static_cast<size_t>(hp.n_layer));
    routes_[static_cast<size_t>(il)].insert(routes_[static_cast<size_t>(il)].end(), ids_.begin(), ids_.end());
  }

  // Group the (token, slot) pairs by expert, tokens ascending within each (a counting sort).
  std::fill(starts_.begin(), starts_.end(), 0);
  for (int32_t e : ids_) ++starts_[static_cast<size_t>(e) + 1];
  for (size_t e = 0; e + 1 < starts_.size(); ++e) starts_[e + 1] += starts_[e];
  order_.resize(ids_.size());
  std::vector<int64_t> next(starts_.begin(), starts_.end() - 1);
  for (size_t s = 0; s < ids_.size(); ++s) {
    int64_t& at = next[static_cast<size_t>(ids_[s])];
    order_[static_cast<size_t>(at++)] = static_cast<int32_t>(s);
  }

  std::memset(out, 0, static_cast<size_t>(m * n_embd) * sizeof(float));
  float* xe = xe_.as<float>();
  float* gate = gate_.as<float>();
  float* up = up_.as<float>();
  float* ye = ye_.as<float>();
  // Experts in ascending id order, so each token's sum runs over its experts in that order
  // whatever else is in the batch (identical output for any batch split).
  for (int64_t e = 0; e < hp.n_expert; ++e) {
    const int64_t first = starts_[static_cast<size_t>(e)], n = starts_[static_cast<size_t>(e) + 1] - first;
    if (n == 0) continue;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t token = order_[static_cast<size_t>(first + r)] / k;
      std::memcpy(xe + r * n_embd, in.x + token * n_embd, static_cast<size_t>(n_embd) * sizeof(float));
    }
    ops_.linear(expert_rows(w.gate_exps, e, hp.n_expert), xe, n, gate);
    ops_.linear(expert_rows(w.up_exps, e, hp.n_expert), xe, n, up);
    ops_.ffn_combine(FfnKind::Gated, hp.act, gate, up, n, hp.n_ff_exp);
    ops_.linear(expert_rows(w.down_exps, e, hp.n_expert), gate, n, ye);
    for (int64_t r = 0; r < n; ++r) {
      const int32_t slot = order_[static_cast<size_t>(first + r)];
      const float wt = weights_[static_cast<size_t>(slot)];
      float* y = out + (slot / k) * n_embd;
      const float* src = ye + r * n_embd;
      for (int64_t c = 0; c < n_embd; ++c) y[c] += wt * src[c];
    }
  }
}

Result<std::unique_ptr<FfnStep>> make_ffn(const Model& model, const ModelWeights& weights, backend::Device& dev,
                                          int64_t max_tokens) {
  if (model.hparams().is_moe()) {
    auto f = MoeFfn::create(model, weights, dev, max_tokens);
    if (!f.ok()) return f.error();
    return std::unique_ptr<FfnStep>(std::move(*f));
  }
  auto f = DenseFfn::create(model, weights, dev, max_tokens);
  if (!f.ok()) return f.error();
  return std::unique_ptr<FfnStep>(std::move(*f));
}

uint64_t ffn_device_bytes(const HParams& hp, int64_t max_tokens) {
  return hp.is_moe() ? MoeFfn::device_bytes(hp, max_tokens) : DenseFfn::device_bytes(hp, max_tokens);
}

}  // namespace pi::model
