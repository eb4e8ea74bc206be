#include "model/moe_ffn.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <numeric>

namespace pi::model {

void route_top_k(const float* logits, int64_t m, int64_t n_expert, int64_t k, Gating gating, int32_t* ids,
                 float* weights, std::vector<int32_t>* scratch) {
  std::vector<int32_t> own;
  std::vector<int32_t>& order = scratch != nullptr ? *scratch : own;
  order.resize(static_cast<size_t>(n_expert));
  for (int64_t i = 0; i < m; ++i) {
    const float* l = logits + i * n_expert;
    // Both gatings are increasing in the logit: rank by logit, equal logits keep the lower id
    // first, a NaN logit ranks last (with weight 0).
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      const bool na = std::isnan(l[a]), nb = std::isnan(l[b]);
      if (na != nb) return nb;
      return !na && l[a] != l[b] ? l[a] > l[b] : a < b;
    });
    // Unnormalized gates in double: exp(l - max) (the softmax's sum cancels in the
    // renormalization) or sigmoid(l).
    double top = -INFINITY;
    for (int64_t j = 0; j < k; ++j) {
      const float lj = l[order[static_cast<size_t>(j)]];
      if (!std::isnan(lj)) top = std::max(top, static_cast<double>(lj));
    }
    double g[kMaxExpertsUsed];
    double chosen = 0;
    for (int64_t j = 0; j < k; ++j) {
      const double lj = l[order[static_cast<size_t>(j)]];
      g[j] = std::isnan(lj) ? 0.0 : gating == Gating::Softmax ? std::exp(lj - top) : 1.0 / (1.0 + std::exp(-lj));
      chosen += g[j];
    }
    for (int64_t j = 0; j < k; ++j) {
      ids[i * k + j] = order[static_cast<size_t>(j)];
      weights[i * k + j] = chosen > 0 ? static_cast<float>(g[j] / chosen) : 0.0f;
    }
  }
}

MoeFfn::MoeFfn(const Model& model, const ModelWeights& weights, backend::Device& dev, bool dense)
    : model_(model), w_(weights), dev_(dev), ops_(dev.ops()), host_(dev.host_addressable()) {
  const HParams& hp = model.hparams();
  // Off the host, the dense down product would read the gate entries the sparse path leaves
  // unset (the host zeroes them): such experts run dense there.
  const bool down_t = !weights.layers.empty() && weights.layers[0].ffn.down_exps_t.present();
  sparse_ = !dense && hp.sparse_experts() && (host_ || down_t);
  stats_.resize(static_cast<size_t>(hp.n_layer));
  row_seen_.resize(static_cast<size_t>(hp.n_ff_exp));
}

std::vector<uint64_t> MoeFfn::device_allocations(const HParams& hp, int64_t max_tokens) {
  std::vector<uint64_t> sizes;
  for (int64_t per_token : {hp.n_expert, hp.n_embd, hp.n_ff_exp, hp.n_ff_exp, hp.n_expert_used * hp.n_embd})
    sizes.push_back(static_cast<uint64_t>(max_tokens * per_token) * sizeof(float));
  return sizes;
}

uint64_t MoeFfn::device_bytes(const HParams& hp, int64_t max_tokens) {
  const std::vector<uint64_t> sizes = device_allocations(hp, max_tokens);
  return std::accumulate(sizes.begin(), sizes.end(), uint64_t{0});
}

Result<std::unique_ptr<MoeFfn>> MoeFfn::create(const Model& model, const ModelWeights& weights,
                                               backend::Device& dev, int64_t max_tokens, bool dense) {
  const HParams& hp = model.hparams();
  std::unique_ptr<MoeFfn> f(new MoeFfn(model, weights, dev, dense));
  const std::vector<uint64_t> sizes = device_allocations(hp, max_tokens);
  backend::Buffer* bufs[] = {&f->logits_, &f->xe_, &f->gate_, &f->up_, &f->ye_};
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto r = dev.alloc(static_cast<size_t>(sizes[i]), "MoE FFN scratch");
    if (!r.ok()) return r.error();
    *bufs[i] = std::move(*r);
  }
  if (!f->host_) {
    // Pinned host copies of the logits and (sparse experts) of the gate values.
    auto r = dev.alloc_host(static_cast<size_t>(sizes[0]), "MoE routing (host)");
    if (!r.ok()) return r.error();
    f->logits_host_ = std::move(*r);
    if (f->sparse_) {
      r = dev.alloc_host(static_cast<size_t>(sizes[2]), "MoE gate values (host)");
      if (!r.ok()) return r.error();
      f->gate_host_ = std::move(*r);
    }
  }
  f->starts_.resize(static_cast<size_t>(hp.n_expert + 1));
  f->all_rows_.resize(static_cast<size_t>(hp.n_ff_exp));
  std::iota(f->all_rows_.begin(), f->all_rows_.end(), 0);
  f->offsets_.resize(static_cast<size_t>(max_tokens + 1));
  f->idx_.reserve(static_cast<size_t>(max_tokens * hp.n_ff_exp));
  return f;
}

const float* MoeFfn::on_host(const float* p, int64_t n, backend::Buffer& host) {
  if (host_) return p;
  dev_.copy_out(backend::kCompute, host.data(), p, static_cast<size_t>(n) * sizeof(float));
  dev_.sync(backend::kCompute);
  return host.as<float>();
}

void MoeFfn::route(int64_t il, const float* x, int64_t m) {
  const HParams& hp = model_.hparams();
  const int64_t k = hp.n_expert_used;
  ops_.linear(w_.layers[static_cast<size_t>(il)].ffn.gate_inp, x, m, logits_.as<float>());
  const float* logits = on_host(logits_.as<float>(), m * hp.n_expert, logits_host_);
  ids_.resize(static_cast<size_t>(m * k));
  weights_.resize(static_cast<size_t>(m * k));
  route_top_k(logits, m, hp.n_expert, k, hp.gating, ids_.data(), weights_.data(), &route_order_);
  if (trace_) {
    routes_.resize(static_cast<size_t>(hp.n_layer));
    routes_[static_cast<size_t>(il)].insert(routes_[static_cast<size_t>(il)].end(), ids_.begin(), ids_.end());
  }
  routed_ = il;
}

void MoeFfn::before_attention(int64_t il, const float* x, int64_t m) { route(il, x, m); }

void MoeFfn::count_neurons(bool on) {
  const HParams& hp = model_.hparams();
  neuron_counts_.clear();
  if (on && sparse_)
    neuron_counts_.assign(static_cast<size_t>(hp.n_layer), std::vector<float>(static_cast<size_t>(hp.n_expert * hp.n_ff_exp)));
}

void MoeFfn::expert(int64_t il, int64_t e, int64_t n, float* ye, LayerStats& st) {
  const FfnWeights& w = w_.layers[static_cast<size_t>(il)].ffn;
  const HParams& hp = model_.hparams();
  const int64_t n_ff = hp.n_ff_exp, n_exp = hp.n_expert;
  const float* xe = xe_.as<float>();
  float* gate = gate_.as<float>();
  float* up = up_.as<float>();
  const Matrix& down = w.down_exps_t.present() ? w.down_exps_t : w.down_exps;
  const uint64_t expert_bytes = (w.gate_exps.nbytes() + w.up_exps.nbytes() + down.nbytes()) / n_exp;
  ops_.linear(expert_rows(w.gate_exps, e, n_exp), xe, n, gate);
  if (!sparse_) {
    st.bytes += expert_bytes;
    ops_.linear(expert_rows(w.up_exps, e, n_exp), xe, n, up);
    ops_.ffn_combine(FfnKind::Gated, hp.act, gate, up, n, n_ff);
    if (w.down_exps_t.present()) {
      ops_.linear_t(expert_rows(w.down_exps_t, e, n_exp), gate, n, all_rows_, ye);
    } else {
      ops_.linear(expert_rows(w.down_exps, e, n_exp), gate, n, ye);
    }
    return;
  }
  // ReGLU: a neuron whose gate is not positive contributes nothing, so each token lists its
  // positive gates and computes those rows of up, and of down when it is stored transposed.
  const float* gate_seen = on_host(gate, n * n_ff, gate_host_);
  idx_.clear();
  offsets_[0] = 0;
  for (int64_t r = 0; r < n; ++r) {
    const float* g = gate_seen + r * n_ff;
    for (int64_t j = 0; j < n_ff; ++j)
      if (g[j] > 0.0f) idx_.push_back(static_cast<int32_t>(j));
    offsets_[static_cast<size_t>(r + 1)] = static_cast<int64_t>(idx_.size());
  }
  if (!neuron_counts_.empty()) {
    float* c = neuron_counts_[static_cast<size_t>(il)].data() + e * n_ff;
    for (int32_t j : idx_) c[j] += 1.0f;
  }
  rows_computed_ += idx_.size();
  rows_possible_ += static_cast<uint64_t>(n * n_ff);
  st.rows_computed += static_cast<int64_t>(idx_.size());
  st.rows_possible += n * n_ff;
  // Bytes: the whole gate, the union of the listed rows of up (and of down_t; a plain down
  // is read whole).
  std::fill(row_seen_.begin(), row_seen_.end(), 0);
  uint64_t n_union = 0;
  for (int32_t j : idx_) {
    uint8_t& seen = row_seen_[static_cast<size_t>(j)];
    n_union += seen == 0 ? 1 : 0;
    seen = 1;
  }
  const auto rows_of = [&](const Matrix& stack) { return stack.nbytes() / n_exp / static_cast<uint64_t>(n_ff) * n_union; };
  st.bytes += w.gate_exps.nbytes() / n_exp + rows_of(w.up_exps) +
              (w.down_exps_t.present() ? rows_of(w.down_exps_t) : down.nbytes() / n_exp);
  ops_.linear_rows(expert_rows(w.up_exps, e, n_exp), xe, n, idx_.data(), offsets_.data(), up);
  if (w.down_exps_t.present()) {
    // relu(g) * u = g * u at the listed entries (the only ones linear_t_rows reads; the others
    // hold whatever up held).
    ops_.ffn_combine(FfnKind::Gated, hp.act, gate, up, n, n_ff);
    ops_.linear_t_rows(expert_rows(w.down_exps_t, e, n_exp), gate, n, idx_.data(), offsets_.data(), ye);
    return;
  }
  // The dense down product reads every entry: the unlisted ones are zero (host memory: the
  // constructor runs such experts dense elsewhere).
  for (int64_t r = 0; r < n; ++r) {
    float* g = gate + r * n_ff;
    const float* u = up + r * n_ff;
    int64_t s = offsets_[static_cast<size_t>(r)];
    const int64_t end = offsets_[static_cast<size_t>(r + 1)];
    for (int64_t j = 0; j < n_ff; ++j) {
      if (s < end && idx_[static_cast<size_t>(s)] == j) {
        g[j] *= u[j];
        ++s;
      } else {
        g[j] = 0.0f;
      }
    }
  }
  ops_.linear(expert_rows(w.down_exps, e, n_exp), gate, n, ye);
}

void MoeFfn::run(int64_t il, const FfnInput& in, float* out) {
  const HParams& hp = model_.hparams();
  const FfnWeights& w = w_.layers[static_cast<size_t>(il)].ffn;
  const int64_t m = in.m, k = hp.n_expert_used, n_embd = hp.n_embd;
  if (!hp.router_before_attn) route(il, in.x, m);
  assert(routed_ == il);
  routed_ = -1;
  LayerStats& st = stats_[static_cast<size_t>(il)];
  st.tokens += m;
  st.bytes += w.gate_inp.nbytes();

  // Group the (token, slot) pairs by expert, tokens ascending within each (a counting sort).
  std::fill(starts_.begin(), starts_.end(), 0);
  for (int32_t e : ids_) ++starts_[static_cast<size_t>(e) + 1];
  for (size_t e = 0; e + 1 < starts_.size(); ++e) starts_[e + 1] += starts_[e];
  order_.resize(ids_.size());
  next_.assign(starts_.begin(), starts_.end() - 1);
  for (size_t s = 0; s < ids_.size(); ++s) {
    int64_t& at = next_[static_cast<size_t>(ids_[s])];
    order_[static_cast<size_t>(at++)] = static_cast<int32_t>(s);
  }

  // Each grouped place's token; each token's places in ascending expert order with their
  // weights, so that its sum runs over its experts in id order whatever else is in the batch
  // (identical output for any batch split).
  tokens_.resize(order_.size());
  comb_rows_.resize(order_.size());
  comb_w_.resize(order_.size());
  filled_.assign(static_cast<size_t>(m), 0);
  for (size_t p = 0; p < order_.size(); ++p) {
    const int32_t slot = order_[p];
    const int32_t token = slot / static_cast<int32_t>(k);
    tokens_[p] = token;
    const size_t at = static_cast<size_t>(token) * static_cast<size_t>(k) + static_cast<size_t>(filled_[static_cast<size_t>(token)]++);
    comb_rows_[at] = static_cast<int32_t>(p);
    comb_w_[at] = weights_[static_cast<size_t>(slot)];
  }
  float* ye = ye_.as<float>();
  for (int64_t e = 0; e < hp.n_expert; ++e) {
    const int64_t first = starts_[static_cast<size_t>(e)], n = starts_[static_cast<size_t>(e) + 1] - first;
    if (n == 0) continue;
    ops_.combine_rows(in.x, n_embd, tokens_.data() + first, nullptr, n, 1, xe_.as<float>());
    expert(il, e, n, ye + first * n_embd, st);
  }
  ops_.combine_rows(ye, n_embd, comb_rows_.data(), comb_w_.data(), m, k, out);
}

Result<std::unique_ptr<FfnStep>> make_ffn(const Model& model, const ModelWeights& weights, backend::Device& dev,
                                          int64_t max_tokens, bool dense_experts) {
  if (model.hparams().is_moe()) {
    auto f = MoeFfn::create(model, weights, dev, max_tokens, dense_experts);
    if (!f.ok()) return f.error();
    return std::unique_ptr<FfnStep>(std::move(*f));
  }
  auto f = DenseFfn::create(model, weights, dev, max_tokens);
  if (!f.ok()) return f.error();
  return std::unique_ptr<FfnStep>(std::move(*f));
}

std::vector<uint64_t> ffn_device_allocations(const HParams& hp, int64_t max_tokens) {
  if (hp.is_moe()) return MoeFfn::device_allocations(hp, max_tokens);
  const uint64_t b = DenseFfn::device_bytes(hp, max_tokens) / 2;
  return {b, b};  // DenseFfn: gate and up
}

uint64_t ffn_device_bytes(const HParams& hp, int64_t max_tokens) {
  return hp.is_moe() ? MoeFfn::device_bytes(hp, max_tokens) : DenseFfn::device_bytes(hp, max_tokens);
}

}  // namespace pi::model
