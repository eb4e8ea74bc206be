#include "sparse/threshold_ffn.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "model/proj.h"
#include "sparse/magnitude_mask.h"

namespace pi::sparse {
namespace {

size_t sz(int64_t n) { return static_cast<size_t>(n); }
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

ThresholdFfn::ThresholdFfn(const model::Model& model, const model::ModelWeights& weights,
                           backend::Device& dev, const SiteThresholds& thr)
    : model_(model), w_(weights), dev_(dev), ops_(dev.ops()), thr_(thr) {}

uint64_t ThresholdFfn::scratch_bytes(const model::HParams& hp, int64_t max_tokens) {
  const auto t = static_cast<uint64_t>(std::max<int64_t>(max_tokens, 1));
  return t * static_cast<uint64_t>(hp.n_embd + 2 * hp.n_ff) * sizeof(float);
}

Result<std::unique_ptr<ThresholdFfn>> ThresholdFfn::create(const model::Model& model,
                                                           const model::ModelWeights& weights,
                                                           backend::Device& dev,
                                                           int64_t max_tokens,
                                                           const SiteThresholds& thr) {
  const model::HParams& hp = model.hparams();
  if (hp.ffn != model::FfnKind::Gated || hp.arch == model::Arch::Falcon) {
    return err("%s: activation thresholding needs a gated FFN (gate, up, down) of llama-style "
               "layers",
               model.file().path().c_str());
  }
  std::unique_ptr<ThresholdFfn> f(new ThresholdFfn(model, weights, dev, thr));
  max_tokens = std::max<int64_t>(max_tokens, 1);
  const auto floats = [&](backend::Buffer& b, int64_t n) -> Status {
    auto buf = dev.alloc(sz(n) * sizeof(float), "threshold FFN scratch");
    if (!buf.ok()) return buf.error();
    b = std::move(*buf);
    return Status::Ok();
  };
  PI_TRY(floats(f->xs_, max_tokens * hp.n_embd));
  PI_TRY(floats(f->g_, max_tokens * hp.n_ff));
  PI_TRY(floats(f->u_, max_tokens * hp.n_ff));
  f->inputs_.idx.resize(sz(max_tokens * hp.n_embd));
  f->inputs_.offsets.assign(sz(max_tokens + 1), 0);
  f->neurons_.idx.resize(sz(max_tokens * hp.n_ff));
  f->neurons_.offsets.assign(sz(max_tokens + 1), 0);
  f->counts_.assign(sz(hp.n_ff), 0);
  f->union_rows_.resize(sz(hp.n_ff));
  f->all_inputs_ = model::iota_rows(hp.n_embd);
  f->all_neurons_ = model::iota_rows(hp.n_ff);
  for (Site s : {Site::FfnIn, Site::FfnGate})
    if (thr.on(s)) f->stats_[static_cast<size_t>(s)].resize(sz(hp.n_layer));
  return f;
}

void ThresholdFfn::reset_stats() {
  for (auto& v : stats_) std::fill(v.begin(), v.end(), SiteLayerStats{});
}

uint64_t ThresholdFfn::rows_product(const model::Matrix& W, const float* X, float* Y) {
  const int64_t m = neurons_.m;
  const int32_t* idx = neurons_.idx.data();
  const int64_t* off = neurons_.offsets.data();
  const PathCosts c = batch_costs(default_cost_params(W.type), W.rows, idx, off, m, counts_.data());
  switch (c.best) {
    case RowsPath::PerToken:
      for (int64_t i = 0; i < m; ++i) {
        const int64_t one[2] = {0, off[i + 1] - off[i]};
        ops_.linear_rows(W, X + i * W.cols, 1, idx + off[i], one, Y + i * W.rows);
      }
      return static_cast<uint64_t>(off[m]) * W.row_stride();
    case RowsPath::Lists:
      ops_.linear_rows(W, X, m, idx, off, Y);
      return static_cast<uint64_t>(c.group_rows) * W.row_stride();
    case RowsPath::Union: {
      const int64_t n = union_rows(idx, off[m], W.rows, counts_.data(), union_rows_.data());
      ops_.linear_rows_union(W, X, m, {union_rows_.data(), sz(n)}, Y);
      return static_cast<uint64_t>(n) * W.row_stride();
    }
    case RowsPath::Dense:
      ops_.linear(W, X, m, Y);
      return W.nbytes();
  }
  return 0;
}

void ThresholdFfn::run(int64_t il, const model::FfnInput& in, float* out) {
  const model::HParams& hp = model_.hparams();
  const model::FfnWeights& w = w_.layers[sz(il)].ffn;
  const int64_t m = in.m, n_ff = hp.n_ff, n_embd = hp.n_embd;
  float* g = g_.as<float>();
  float* u = u_.as<float>();

  // Gate, from the masked input over the kept rows of gate_t, or from x.
  const float* x = in.x;
  auto t0 = Clock::now();
  if (thr_.on(Site::FfnIn)) {
    SiteLayerStats& st = stats_[static_cast<size_t>(Site::FfnIn)][sz(il)];
    const size_t bytes = sz(m * n_embd) * sizeof(float);
    const auto* hx = static_cast<const float*>(dev_.map(in.x, bytes));
    auto* hxs = static_cast<float*>(dev_.map(xs_.data(), bytes));
    st.kept += mask_small(hx, m, n_embd, thr_.at(Site::FfnIn, il), hxs, inputs_);
    st.entries += m * n_embd;
    st.tokens += m;
    x = xs_.as<float>();
    st.bytes += masked_product(ops_, w.gate, w.gate_t, x, inputs_, g);
    st.seconds += seconds_since(t0);
  } else {
    model::linear_any(ops_, w.gate, w.gate_t, x, m, all_inputs_, g);
  }

  if (!thr_.on(Site::FfnGate)) {
    ops_.linear(w.up, x, m, u);
    ops_.ffn_combine(hp.ffn, hp.act, g, u, m, n_ff);
    if (w.down_t.present()) {
      ops_.linear_t(w.down_t, g, m, all_neurons_, out);
    } else {
      ops_.linear(w.down, g, m, out);
    }
    return;
  }

  // CATS: keep neuron i where |act(gate_i)| >= t; up and down only for those.
  t0 = Clock::now();
  SiteLayerStats& st = stats_[static_cast<size_t>(Site::FfnGate)][sz(il)];
  ops_.activate(hp.act, g, m * n_ff);
  auto* ha = static_cast<float*>(dev_.map(g, sz(m * n_ff) * sizeof(float)));
  st.kept += mask_small(ha, m, n_ff, thr_.at(Site::FfnGate, il), ha, neurons_);
  st.entries += m * n_ff;
  st.tokens += m;
  st.bytes += rows_product(w.up, x, u);
  auto* hg = static_cast<float*>(dev_.map(g, sz(m * n_ff) * sizeof(float)));
  const auto* hu = static_cast<const float*>(dev_.map(u, sz(m * n_ff) * sizeof(float)));
  neurons_.filter([&](int64_t i, int32_t r) {
    const size_t k = sz(i * n_ff + r);
    hg[k] *= hu[k];
    return hg[k] != 0.0f;
  });
  const int32_t* idx = neurons_.idx.data();
  const int64_t* off = neurons_.offsets.data();
  if (w.down_t.present()) {
    for (int64_t i = 0; i < m; ++i) {
      const int64_t one[2] = {0, off[i + 1] - off[i]};
      ops_.linear_t_rows(w.down_t, g + i * n_ff, 1, idx + off[i], one, out + i * n_embd);
    }
    st.bytes += static_cast<uint64_t>(off[m]) * w.down_t.row_stride();
  } else {
    // The row layout reads every column; the dropped neurons are zero (mask_small wrote 0
    // where |a| < t, and the filter kept the products).
    ops_.linear(w.down, g, m, out);
    st.bytes += w.down.nbytes();
  }
  st.seconds += seconds_since(t0);
}

}  // namespace pi::sparse
