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
    : model_(model), w_(weights), ops_(dev.ops()) {
  const HParams& hp = model.hparams();
  sparse_ = !dense && hp.sparse_experts();
  stats_.resize(static_cast<size_t>(hp.n_layer));
  row_seen_.resize(static_cast<size_t>(hp.n_ff_exp));
}

uint64_t MoeFfn::device_bytes(const HParams& hp, int64_t max_tokens) {
  const auto per_token = static_cast<uint64_t>(hp.n_expert + 2 * hp.n_embd + 2 * hp.n_ff_exp);
  return static_cast<uint64_t>(max_tokens) * per_token * sizeof(float);
}

Result<std::unique_ptr<MoeFfn>> MoeFfn::create(const Model& model, const ModelWeights& weights,
                                               backend::Device& dev, int64_t max_tokens, bool dense) {
  const HParams& hp = model.hparams();
  if (!dev.host_addressable()) {
    return err("%s: mixture-of-experts models run on the CPU for now (the %s device cannot run "
               "their routing); drop -ngl / --vram-budget or use --device cpu",
               model.file().path().c_str(), dev.name().c_str());
  }
  std::unique_ptr<MoeFfn> f(new MoeFfn(model, weights, dev, dense));
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
  f->all_rows_.resize(static_cast<size_t>(hp.n_ff_exp));
  std::iota(f->all_rows_.begin(), f->all_rows_.end(), 0);
  f->offsets_.resize(static_cast<size_t>(max_tokens + 1));
  f->idx_.reserve(static_cast<size_t>(max_tokens * hp.n_ff_exp));
  return f;
}

void MoeFfn::route(int64_t il, const float* x, int64_t m) {
  const HParams& hp = model_.hparams();
  const int64_t k = hp.n_expert_used;
  float* logits = logits_.as<float>();
  ops_.linear(w_.layers[static_cast<size_t>(il)].ffn.gate_inp, x, m, logits);
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

void MoeFfn::expert(const FfnWeights& w, int64_t e, int64_t n, LayerStats& st) {
  const HParams& hp = model_.hparams();
  const int64_t n_ff = hp.n_ff_exp, n_exp = hp.n_expert;
  const float* xe = xe_.as<float>();
  float* gate = gate_.as<float>();
  float* up = up_.as<float>();
  float* ye = ye_.as<float>();
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
  idx_.clear();
  offsets_[0] = 0;
  for (int64_t r = 0; r < n; ++r) {
    const float* g = gate + r * n_ff;
    for (int64_t j = 0; j < n_ff; ++j)
      if (g[j] > 0.0f) idx_.push_back(static_cast<int32_t>(j));
    offsets_[static_cast<size_t>(r + 1)] = static_cast<int64_t>(idx_.size());
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
  for (int64_t r = 0; r < n; ++r) {
    float* g = gate + r * n_ff;
    const float* u = up + r * n_ff;
    if (w.down_exps_t.present()) {
      // Only the listed entries are read.
      for (int64_t s = offsets_[static_cast<size_t>(r)]; s < offsets_[static_cast<size_t>(r + 1)]; ++s) {
        const int32_t j = idx_[static_cast<size_t>(s)];
        g[j] *= u[j];
      }
    } else {
      // The dense down product reads every entry: the unlisted ones are zero.
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
  }
  if (w.down_exps_t.present()) {
    ops_.linear_t_rows(expert_rows(w.down_exps_t, e, n_exp), gate, n, idx_.data(), offsets_.data(), ye);
  } else {
    ops_.linear(expert_rows(w.down_exps, e, n_exp), gate, n, ye);
  }
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

  std::memset(out, 0, static_cast<size_t>(m * n_embd) * sizeof(float));
  float* xe = xe_.as<float>();
  const float* ye = ye_.as<float>();
  // Experts in ascending id order, so each token's sum runs over its experts in that order
  // whatever else is in the batch (identical output for any batch split).
  for (int64_t e = 0; e < hp.n_expert; ++e) {
    const int64_t first = starts_[static_cast<size_t>(e)], n = starts_[static_cast<size_t>(e) + 1] - first;
    if (n == 0) continue;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t token = order_[static_cast<size_t>(first + r)] / k;
      std::memcpy(xe + r * n_embd, in.x + token * n_embd, static_cast<size_t>(n_embd) * sizeof(float));
    }
    expert(w, e, n, st);
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

uint64_t ffn_device_bytes(const HParams& hp, int64_t max_tokens) {
  return hp.is_moe() ? MoeFfn::device_bytes(hp, max_tokens) : DenseFfn::device_bytes(hp, max_tokens);
}

}  // namespace pi::model
