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
  slots_.resize(static_cast<size_t>(hp.n_layer));
  n_stacked_.assign(static_cast<size_t>(hp.n_layer), hp.n_expert);
}

void MoeFfn::set_expert_slots(int64_t il, std::vector<int32_t> slot) {
  n_stacked_[static_cast<size_t>(il)] =
      std::count_if(slot.begin(), slot.end(), [](int32_t s) { return s >= 0; });
  slots_[static_cast<size_t>(il)] = std::move(slot);
}

std::vector<uint64_t> MoeFfn::device_allocations(const HParams& hp, int64_t max_tokens) {
  // gate and up hold a row per token of an expert, or a row per expert of one token
  // (compute_one_token).
  const int64_t ff_rows = std::max(max_tokens, hp.n_expert_used);
  std::vector<uint64_t> sizes;
  for (int64_t n : {max_tokens * hp.n_expert, max_tokens * hp.n_embd, ff_rows * hp.n_ff_exp, ff_rows * hp.n_ff_exp,
                    max_tokens * hp.n_expert_used * hp.n_embd})
    sizes.push_back(static_cast<uint64_t>(n) * sizeof(float));
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
      r = dev.alloc_host(static_cast<size_t>(sizes[2]), "MoE gate values (host)");  // as gate_
      if (!r.ok()) return r.error();
      f->gate_host_ = std::move(*r);
    }
  }
  f->all_rows_.resize(static_cast<size_t>(hp.n_ff_exp));
  std::iota(f->all_rows_.begin(), f->all_rows_.end(), 0);
  f->offsets_.resize(static_cast<size_t>(max_tokens + 1));
  f->idx_.reserve(static_cast<size_t>(max_tokens * hp.n_ff_exp));
  return f;
}

const float* MoeFfn::on_host(const float* p, int64_t n, backend::Buffer& host) {
  if (host_) return p;
  dev_.read_back(backend::kCompute, host.data(), p, static_cast<size_t>(n) * sizeof(float));
  return host.as<float>();
}

void MoeFfn::route(int64_t il, const float* x, int64_t m) {
  const HParams& hp = model_.hparams();
  const int64_t k = hp.n_expert_used;
  const FfnWeights& fw = w_.layers[static_cast<size_t>(il)].ffn;
  ops_.linear(fw.gate_inp, x, m, logits_.as<float>());
  if (fw.gate_inp_b.present()) ops_.add_bias(logits_.as<float>(), fw.gate_inp_b, m, hp.n_expert);
  const float* logits = on_host(logits_.as<float>(), m * hp.n_expert, logits_host_);
  ids_.resize(static_cast<size_t>(m * k));
  weights_.resize(static_cast<size_t>(m * k));
  route_top_k(logits, m, hp.n_expert, k, hp.gating, ids_.data(), weights_.data(), &route_order_);
  stats_[static_cast<size_t>(il)].bytes += fw.gate_inp.nbytes();
  if (trace_) {
    routes_.resize(static_cast<size_t>(hp.n_layer));
    routes_[static_cast<size_t>(il)].insert(routes_[static_cast<size_t>(il)].end(), ids_.begin(), ids_.end());
  }
  routed_ = il;
}

void MoeFfn::before_attention(int64_t il, const float* x, int64_t m) {
  route(il, x, m);
  if (stream_ != nullptr) stream_->prefetch(il, ids_, false);  // read while attention runs
}

void MoeFfn::count_neurons(bool on) {
  const HParams& hp = model_.hparams();
  neuron_counts_.clear();
  if (on && sparse_)
    neuron_counts_.assign(static_cast<size_t>(hp.n_layer), std::vector<float>(static_cast<size_t>(hp.n_expert * hp.n_ff_exp)));
}

void MoeFfn::expert(int64_t il, int64_t e, int64_t n, const float* xe, float* gate, float* up, float* ye,
                    LayerStats& st, bool products_done) {
  const FfnWeights& w = w_.layers[static_cast<size_t>(il)].ffn;
  const HParams& hp = model_.hparams();
  const int64_t n_ff = hp.n_ff_exp, n_exp = n_stacked_[static_cast<size_t>(il)];
  const std::vector<int32_t>& slot = stream_slots_ != nullptr ? *stream_slots_ : slots_[static_cast<size_t>(il)];
  const int64_t counted = e;  // neuron counts and biases are by expert id
  if (!slot.empty()) e = slot[static_cast<size_t>(e)];
  assert(e >= 0 && (stream_slots_ != nullptr || e < n_exp));
  // Expert e's matrix of a stack: in the stack, or in the stream's slot.
  const auto rows_of_expert = [&](const Matrix& stack, ExpertPart part) {
    return stream_slots_ != nullptr ? stream_->matrix(il, part, static_cast<int32_t>(e)) : expert_rows(stack, e, n_exp);
  };
  const Matrix& down = w.down_exps_t.present() ? w.down_exps_t : w.down_exps;
  const uint64_t expert_bytes = (w.gate_exps.nbytes() + w.up_exps.nbytes() + down.nbytes()) / n_exp;
  if (!products_done) ops_.linear(rows_of_expert(w.gate_exps, ExpertPart::Gate), xe, n, gate);
  if (!sparse_) {
    st.bytes += expert_bytes;
    if (!products_done) ops_.linear(rows_of_expert(w.up_exps, ExpertPart::Up), xe, n, up);
    // gpt-oss's biases, whole on every device: indexed by expert id.
    if (w.gate_exps_b.present()) ops_.add_bias(gate, expert_bias(w.gate_exps_b, counted, hp.n_expert), n, n_ff);
    if (w.up_exps_b.present()) ops_.add_bias(up, expert_bias(w.up_exps_b, counted, hp.n_expert), n, n_ff);
    ops_.ffn_combine(hp.ffn, hp.act, gate, up, n, n_ff);  // gated: SwiGLU/ReGLU, or gpt-oss's clamped one
    if (w.down_exps_t.present()) {
      ops_.linear_t(rows_of_expert(w.down_exps_t, ExpertPart::DownT), gate, n, all_rows_, ye);
    } else {
      ops_.linear(rows_of_expert(w.down_exps, ExpertPart::Down), gate, n, ye);
    }
    if (w.down_exps_b.present()) ops_.add_bias(ye, expert_bias(w.down_exps_b, counted, hp.n_expert), n, hp.n_embd);
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
    float* c = neuron_counts_[static_cast<size_t>(il)].data() + counted * n_ff;
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
  ops_.linear_rows(rows_of_expert(w.up_exps, ExpertPart::Up), xe, n, idx_.data(), offsets_.data(), up);
  if (w.down_exps_t.present()) {
    // relu(g) * u = g * u at the listed entries (the only ones linear_t_rows reads; the others
    // hold whatever up held).
    ops_.ffn_combine(FfnKind::Gated, hp.act, gate, up, n, n_ff);
    ops_.linear_t_rows(rows_of_expert(w.down_exps_t, ExpertPart::DownT), gate, n, idx_.data(), offsets_.data(), ye);
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
  ops_.linear(rows_of_expert(w.down_exps, ExpertPart::Down), gate, n, ye);
}

const MoeFfn::Groups& MoeFfn::group(int64_t il, int64_t m, const std::vector<uint8_t>* front) {
  const HParams& hp = model_.hparams();
  const int64_t k = hp.n_expert_used, n_exp = hp.n_expert;
  assert(routed_ == il);
  routed_ = -1;
  stats_[static_cast<size_t>(il)].tokens += m;
  Groups& g = groups_;
  g.m = m;
  g.count.assign(static_cast<size_t>(n_exp), 0);
  for (int32_t e : ids_) ++g.count[static_cast<size_t>(e)];
  // Places: the front experts in id order, then the others (a counting sort, tokens
  // ascending within each expert).
  g.first.resize(static_cast<size_t>(n_exp));
  int64_t at = 0;
  g.n_front = 0;
  for (int side = 1; side >= 0; --side) {
    for (int64_t e = 0; e < n_exp; ++e) {
      const bool is_front = front != nullptr && (*front)[static_cast<size_t>(e)] != 0;
      if (is_front != (side == 1)) continue;
      g.first[static_cast<size_t>(e)] = at;
      at += g.count[static_cast<size_t>(e)];
    }
    if (side == 1) g.n_front = at;
  }
  next_.assign(g.first.begin(), g.first.end());
  g.tokens.resize(ids_.size());
  std::vector<int32_t>& place_of = g.comb_rows;  // slot -> place, then reordered below
  place_of.resize(ids_.size());
  for (size_t s = 0; s < ids_.size(); ++s) {
    const int64_t p = next_[static_cast<size_t>(ids_[s])]++;
    g.tokens[static_cast<size_t>(p)] = static_cast<int32_t>(s / static_cast<size_t>(k));
    place_of[s] = static_cast<int32_t>(p);
  }
  // Each token's places in ascending expert order with their weights.
  filled_.resize(ids_.size());
  g.comb_w.resize(ids_.size());
  for (int64_t i = 0; i < m; ++i) {
    int32_t* slots = filled_.data() + i * k;
    std::iota(slots, slots + k, static_cast<int32_t>(i * k));
    std::sort(slots, slots + k, [&](int32_t a, int32_t b) { return ids_[static_cast<size_t>(a)] < ids_[static_cast<size_t>(b)]; });
  }
  for (size_t s = 0; s < ids_.size(); ++s) g.comb_w[s] = weights_[static_cast<size_t>(filled_[s])];
  for (size_t s = 0; s < ids_.size(); ++s) filled_[s] = place_of[static_cast<size_t>(filled_[s])];
  g.comb_rows.assign(filled_.begin(), filled_.end());
  return g;
}

void MoeFfn::compute(int64_t il, const Groups& g, const float* x, const std::vector<uint8_t>* front, bool front_side,
                     float* ye) {
  const HParams& hp = model_.hparams();
  if (g.m == 1) {
    compute_one_token(il, g, x, front, front_side, ye);
    return;
  }
  LayerStats& st = stats_[static_cast<size_t>(il)];
  for (int64_t e = 0; e < hp.n_expert; ++e) {
    const int64_t n = g.count[static_cast<size_t>(e)], first = g.first[static_cast<size_t>(e)];
    const bool is_front = front != nullptr && (*front)[static_cast<size_t>(e)] != 0;
    if (n == 0 || (front != nullptr && is_front != front_side)) continue;
    ops_.combine_rows(x, hp.n_embd, g.tokens.data() + first, nullptr, n, 1, xe_.as<float>());
    expert(il, e, n, xe_.as<float>(), gate_.as<float>(), up_.as<float>(), ye + first * hp.n_embd, st);
  }
}

void MoeFfn::compute_one_token(int64_t il, const Groups& g, const float* x, const std::vector<uint8_t>* front,
                               bool front_side, float* ye) {
  const HParams& hp = model_.hparams();
  const FfnWeights& w = w_.layers[static_cast<size_t>(il)].ffn;
  LayerStats& st = stats_[static_cast<size_t>(il)];
  const int64_t n_ff = hp.n_ff_exp, n_exp = n_stacked_[static_cast<size_t>(il)];
  const std::vector<int32_t>& slot = stream_slots_ != nullptr ? *stream_slots_ : slots_[static_cast<size_t>(il)];
  const auto rows_of_expert = [&](const Matrix& stack, ExpertPart part, int64_t e) {
    if (!slot.empty()) e = slot[static_cast<size_t>(e)];
    return stream_slots_ != nullptr ? stream_->matrix(il, part, static_cast<int32_t>(e)) : expert_rows(stack, e, n_exp);
  };
  chosen_.clear();
  for (int64_t e = 0; e < hp.n_expert; ++e) {
    const bool is_front = front != nullptr && (*front)[static_cast<size_t>(e)] != 0;
    if (g.count[static_cast<size_t>(e)] != 0 && (front == nullptr || is_front == front_side)) chosen_.push_back(e);
  }
  if (chosen_.empty()) return;
  const auto n_sel = static_cast<int64_t>(chosen_.size());
  float* gate = gate_.as<float>();
  float* up = up_.as<float>();
  // The gates (and, for dense experts, the ups) of every chosen expert, of the one input.
  parts_w_.clear();
  parts_.clear();
  parts_w_.reserve(static_cast<size_t>(2 * n_sel));  // no reallocation: parts_ points into it
  for (int64_t j = 0; j < n_sel; ++j) {
    parts_w_.push_back(rows_of_expert(w.gate_exps, ExpertPart::Gate, chosen_[static_cast<size_t>(j)]));
    parts_.push_back({&parts_w_.back(), x, gate + j * n_ff});
  }
  if (!sparse_)
    for (int64_t j = 0; j < n_sel; ++j) {
      parts_w_.push_back(rows_of_expert(w.up_exps, ExpertPart::Up, chosen_[static_cast<size_t>(j)]));
      parts_.push_back({&parts_w_.back(), x, up + j * n_ff});
    }
  ops_.linear_each(parts_);
  const auto place_out = [&](int64_t e) { return ye + g.first[static_cast<size_t>(e)] * hp.n_embd; };
  if (sparse_ || w.down_exps_t.present()) {
    // The rest one expert at a time: the rows of positive gates, or the transposed down.
    for (int64_t j = 0; j < n_sel; ++j) {
      const int64_t e = chosen_[static_cast<size_t>(j)];
      expert(il, e, 1, x, gate + j * n_ff, up + j * n_ff, place_out(e), st, true);
    }
    return;
  }
  for (int64_t j = 0; j < n_sel; ++j) {  // gpt-oss's biases, by expert id
    const int64_t e = chosen_[static_cast<size_t>(j)];
    if (w.gate_exps_b.present()) ops_.add_bias(gate + j * n_ff, expert_bias(w.gate_exps_b, e, hp.n_expert), 1, n_ff);
    if (w.up_exps_b.present()) ops_.add_bias(up + j * n_ff, expert_bias(w.up_exps_b, e, hp.n_expert), 1, n_ff);
  }
  ops_.ffn_combine(hp.ffn, hp.act, gate, up, n_sel, n_ff);
  parts_w_.clear();
  parts_.clear();
  for (int64_t j = 0; j < n_sel; ++j) {
    const int64_t e = chosen_[static_cast<size_t>(j)];
    parts_w_.push_back(rows_of_expert(w.down_exps, ExpertPart::Down, e));
    parts_.push_back({&parts_w_.back(), gate + j * n_ff, place_out(e)});
  }
  ops_.linear_each(parts_);
  for (int64_t j = 0; j < n_sel; ++j) {
    const int64_t e = chosen_[static_cast<size_t>(j)];
    if (w.down_exps_b.present()) ops_.add_bias(place_out(e), expert_bias(w.down_exps_b, e, hp.n_expert), 1, hp.n_embd);
  }
  st.bytes += static_cast<uint64_t>(n_sel) * ((w.gate_exps.nbytes() + w.up_exps.nbytes() + w.down_exps.nbytes()) / n_exp);
}

void MoeFfn::combine(const Groups& g, const float* ye, float* out) {
  const HParams& hp = model_.hparams();
  ops_.combine_rows(ye, hp.n_embd, g.comb_rows.data(), g.comb_w.data(), g.m, hp.n_expert_used, out);
}

void MoeFfn::run(int64_t il, const FfnInput& in, float* out) {
  const HParams& hp = model_.hparams();
  if (!hp.router_before_attn) route(il, in.x, in.m);
  if (stream_ != nullptr) {
    stream_slots_ = &stream_->acquire(il, ids_);
    if (in.m <= kGuessTokens) guess_next(il, in);
  }
  const Groups& g = group(il, in.m);
  compute(il, g, in.x, nullptr, false, ye_.as<float>());
  combine(g, ye_.as<float>(), out);
  stream_slots_ = nullptr;
}

// The next MoE layers' routers on this layer's FFN input: the residual stream changes little
// from one layer to the next, so their choice is mostly the same (read ahead while this layer
// and the next compute; a wrong guess costs a read). Two layers ahead keeps the disk busy while
// a layer computes for less time than its misses take to read.
void MoeFfn::guess_next(int64_t il, const FfnInput& in) {
  const HParams& hp = model_.hparams();
  const int64_t k = hp.n_expert_used;
  int64_t next = il;
  for (int ahead = 0; ahead < kGuessLayers; ++ahead) {
    ++next;
    while (next < hp.n_layer && !w_.layers[static_cast<size_t>(next)].ffn.gate_inp.present()) ++next;
    if (next >= hp.n_layer) return;
    const FfnWeights& fw = w_.layers[static_cast<size_t>(next)].ffn;
    ops_.linear(fw.gate_inp, in.x, in.m, logits_.as<float>());
    if (fw.gate_inp_b.present()) ops_.add_bias(logits_.as<float>(), fw.gate_inp_b, in.m, hp.n_expert);
    guess_ids_.resize(static_cast<size_t>(in.m * k));
    guess_w_.resize(static_cast<size_t>(in.m * k));
    route_top_k(logits_.as<float>(), in.m, hp.n_expert, k, hp.gating, guess_ids_.data(), guess_w_.data(),
                &route_order_);
    stream_->prefetch(next, guess_ids_, true);
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

std::vector<uint64_t> ffn_device_allocations(const HParams& hp, int64_t max_tokens) {
  if (hp.is_moe()) return MoeFfn::device_allocations(hp, max_tokens);
  const uint64_t b = DenseFfn::device_bytes(hp, max_tokens) / 2;
  return {b, b};  // DenseFfn: gate and up
}

uint64_t ffn_device_bytes(const HParams& hp, int64_t max_tokens) {
  return hp.is_moe() ? MoeFfn::device_bytes(hp, max_tokens) : DenseFfn::device_bytes(hp, max_tokens);
}

}  // namespace pi::model
