#include "sparse/sparse_ffn.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>

namespace pi::sparse {
namespace {

using model::FfnKind;

size_t sz(int64_t n) { return static_cast<size_t>(n); }

using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double>(t1 - t0).count();
}

}  // namespace

Result<std::unique_ptr<SparseFfn>> SparseFfn::create(const model::Model& model,
                                                     const model::ModelWeights& weights,
                                                     backend::Device& dev, int64_t max_tokens,
                                                     SparseConfig cfg) {
  const model::HParams& hp = model.hparams();
  const std::string& path = model.file().path();
  if (!hp.powerinfer)
    return err("%s: sparse inference needs a PowerInfer (PWRI) file", path.c_str());
  if (hp.act != model::Activation::ReLU) {
    return err("%s: the sparse FFN needs a ReLU FFN, the file declares %s (run with --dense)",
               path.c_str(), model::activation_name(hp.act));
  }
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    if (hp.ffn != FfnKind::Plain && !weights.layers[sz(il)].ffn.gate.present()) {
      return err("%s: layer %lld stores ffn_gate transposed (run with --dense)", path.c_str(),
                 static_cast<long long>(il));
    }
    if (!weights.layers[sz(il)].ffn.down_t.present()) {
      return err("%s: layer %lld has ffn_down instead of ffn_down_t (run with --dense)",
                 path.c_str(), static_cast<long long>(il));
    }
  }
  if (std::isnan(cfg.threshold)) return err("sparse threshold must not be NaN");
  auto preds = load_predictors(model);
  if (!preds.ok()) return preds.error();
  if (preds->empty()) {
    return err(
        "%s: the file has no predictors (blk.N.fc1.weight, blk.N.fc2.weight); run with "
        "--dense",
        path.c_str());
  }
  return create(model, weights, dev, max_tokens, std::move(*preds), cfg);
}

Result<std::unique_ptr<SparseFfn>> SparseFfn::create(const model::Model& model,
                                                     const model::ModelWeights& weights,
                                                     backend::Device& dev, int64_t max_tokens,
                                                     std::vector<PredictorWeights> predictors,
                                                     SparseConfig cfg) {
  if (!dev.host_addressable()) {
    return err("the CPU sparse FFN runs on a host device (cpu, ref), not %s (a GPU-like device "
               "runs it through the hybrid executor)",
               dev.name().c_str());
  }
  std::unique_ptr<SparseFfn> f(new SparseFfn(model, weights, dev, max_tokens, cfg));
  PI_TRY(f->allocate(std::move(predictors)));
  return f;
}

SparseFfn::SparseFfn(const model::Model& model, const model::ModelWeights& weights,
                     backend::Device& dev, int64_t max_tokens, SparseConfig cfg)
    : model_(model),
      w_(weights),
      dev_(dev),
      ops_(dev.ops()),
      max_tokens_(std::max<int64_t>(max_tokens, 1)),
      pred_store_(dev),
      cfg_(cfg) {}

uint64_t SparseFfn::scratch_bytes(const model::HParams& hp, int64_t max_tokens, int64_t max_rank,
                                  bool check_predictor) {
  const auto t = static_cast<uint64_t>(std::max<int64_t>(max_tokens, 1));
  const auto f = [](uint64_t n) { return std::max<uint64_t>(n, 1) * sizeof(float); };
  uint64_t n = f(t * static_cast<uint64_t>(max_rank)) + 2 * f(t * static_cast<uint64_t>(hp.n_ff));
  if (check_predictor) n += 2 * f(t * static_cast<uint64_t>(hp.n_ff)) + f(t * static_cast<uint64_t>(hp.n_embd));
  return n;
}

Status SparseFfn::allocate(std::vector<PredictorWeights> predictors) {
  const model::HParams& hp = model_.hparams();
  const int64_t n_ff = hp.n_ff;
  int64_t max_rank = 0;
  for (PredictorWeights& p : predictors) {
    max_rank = std::max(max_rank, p.rank());
    auto fc1 = pred_store_.place(p.fc1);
    if (!fc1.ok()) return fc1.error();
    auto fc2 = pred_store_.place(p.fc2);
    if (!fc2.ok()) return fc2.error();
    predictors_.push_back({std::move(*fc1), std::move(*fc2)});
  }
  const auto floats = [&](backend::Buffer& b, int64_t n, const char* what) -> Status {
    auto buf = dev_.alloc(sz(std::max<int64_t>(n, 1)) * sizeof(float), what);
    if (!buf.ok()) return buf.error();
    b = std::move(*buf);
    return Status::Ok();
  };
  stats_.resize(sz(hp.n_layer));
  lists_.idx.resize(sz(max_tokens_ * n_ff));
  lists_.offsets.assign(sz(max_tokens_ + 1), 0);
  PI_TRY(floats(z_, max_tokens_ * max_rank, "sparse FFN scratch"));
  PI_TRY(floats(g_, max_tokens_ * n_ff, "sparse FFN scratch"));
  PI_TRY(floats(u_, max_tokens_ * n_ff, "sparse FFN scratch"));
  counts_.assign(sz(n_ff), 0);
  union_rows_.resize(sz(n_ff));
  if (cfg_.check_predictor) {
    PI_TRY(floats(dg_, max_tokens_ * n_ff, "predictor check scratch"));
    PI_TRY(floats(du_, max_tokens_ * n_ff, "predictor check scratch"));
    PI_TRY(floats(dense_out_, max_tokens_ * hp.n_embd, "predictor check scratch"));
    all_neurons_.resize(sz(n_ff));
    std::iota(all_neurons_.begin(), all_neurons_.end(), 0);
    predicted_.resize(sz(max_tokens_ * n_ff));
  }
  return Status::Ok();
}

void SparseFfn::reset_stats() { std::fill(stats_.begin(), stats_.end(), LayerStats{}); }

void SparseFfn::run(int64_t il, const model::FfnInput& in, float* out) {
  predict(il, in.pred_in, in.m);
  compute(il, in, out);
}

void SparseFfn::run_masked(int64_t il, const model::FfnInput& in, const RowLists& predicted,
                           float* out) {
  lists_.m = in.m;
  const int64_t n = predicted.offsets[sz(in.m)];
  std::copy(predicted.idx.begin(), predicted.idx.begin() + n, lists_.idx.begin());
  std::copy(predicted.offsets.begin(), predicted.offsets.begin() + in.m + 1,
            lists_.offsets.begin());
  compute(il, in, out);
}

const RowLists& SparseFfn::predict(int64_t il, const float* pred_in, int64_t m) {
  const PredictorWeights& p = predictors_[sz(il)];
  const int64_t r = p.rank(), n_ff = model_.hparams().n_ff;
  const auto t0 = Clock::now();
  float* z = z_.as<float>();
  ops_.linear(p.fc1, pred_in, m, z);  // f32 [m, r]
  ops_.activate(model::Activation::ReLU, z, m * r);
  // f32 [m, n_ff]; u_ is free until the up projection
  ops_.linear(p.fc2, z, m, u_.as<float>());
  const float* logits = host(u_.as<float>(), m * n_ff);
  const float thr = cfg_.threshold;
  int64_t n = 0;
  lists_.m = m;
  lists_.offsets[0] = 0;
  int32_t* idx = lists_.idx.data();
  for (int64_t i = 0; i < m; ++i) {
    const float* l = logits + i * n_ff;
    for (int64_t j = 0; j < n_ff; ++j) {
      idx[n] = static_cast<int32_t>(j);
      n += l[j] >= thr ? 1 : 0;  // branch-free compaction
    }
    lists_.offsets[sz(i + 1)] = n;
  }
  stats_[sz(il)].bytes += p.nbytes();
  stats_[sz(il)].predict_s += seconds(t0, Clock::now());
  return lists_;
}

void SparseFfn::rows_product(const model::Matrix& W, const float* X, LayerStats& st, float* Y) {
  const int64_t m = lists_.m;
  const int32_t* idx = lists_.idx.data();
  const int64_t* off = lists_.offsets.data();
  const CostParams params = has_cost_override_ ? cost_override_ : default_cost_params(W.type);
  const PathCosts c = batch_costs(params, W.rows, idx, off, m, counts_.data());
  const RowsPath path = forced_path_ >= 0 && m > 1 ? static_cast<RowsPath>(forced_path_) : c.best;
  switch (path) {
    case RowsPath::PerToken:
      for (int64_t i = 0; i < m; ++i) {
        const int64_t one[2] = {0, off[i + 1] - off[i]};
        ops_.linear_rows(W, X + i * W.cols, 1, idx + off[i], one, Y + i * W.rows);
      }
      st.bytes += static_cast<uint64_t>(off[m]) * W.row_stride();
      break;
    case RowsPath::Lists:
      ops_.linear_rows(W, X, m, idx, off, Y);
      st.bytes += static_cast<uint64_t>(c.group_rows) * W.row_stride();
      break;
    case RowsPath::Union: {
      const int64_t n = union_rows(idx, off[m], W.rows, counts_.data(), union_rows_.data());
      ops_.linear_rows_union(W, X, m, {union_rows_.data(), sz(n)}, Y);
      st.bytes += static_cast<uint64_t>(n) * W.row_stride();
      break;
    }
    case RowsPath::Dense:
      ops_.linear(W, X, m, Y);
      st.bytes += W.nbytes();
      break;
  }
  if (m > 1) ++st.path_calls[static_cast<int>(path)];
}

void SparseFfn::compute(int64_t il, const model::FfnInput& in, float* out) {
  const model::HParams& hp = model_.hparams();
  const model::FfnWeights& w = w_.layers[sz(il)].ffn;
  const int64_t m = in.m, n_ff = hp.n_ff;
  LayerStats& st = stats_[sz(il)];
  st.tokens += m;
  st.predicted += lists_.size();
  if (cfg_.check_predictor) {
    std::memset(predicted_.data(), 0, sz(m * n_ff));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t k = lists_.offsets[sz(i)]; k < lists_.offsets[sz(i + 1)]; ++k)
        predicted_[sz(i * n_ff + lists_.idx[sz(k)])] = 1;
  }

  const auto t0 = Clock::now();
  float* g = g_.as<float>();  // gate, then the activations a (device)
  float* u = u_.as<float>();
  if (hp.ffn == FfnKind::Plain) {
    rows_product(w.up, in.x, st, u);
    // The bias goes over every entry; only the listed ones are read.
    if (w.up_b.present()) ops_.add_bias(u, w.up_b, m, n_ff);
    float* hg = host(g, m * n_ff);
    const float* hu = host(u, m * n_ff);
    lists_.filter([&](int64_t i, int32_t r) {
      const float v = hu[i * n_ff + r];
      hg[i * n_ff + r] = v;
      return v > 0.0f;
    });
  } else {
    rows_product(w.gate, in.x, st, g);
    // ReLU(gate) == 0 zeroes the neuron whatever up is: up is computed only where gate > 0.
    const float* hg0 = host(g, m * n_ff);
    lists_.filter([&](int64_t i, int32_t r) { return hg0[i * n_ff + r] > 0.0f; });
    rows_product(w.up, in.x, st, u);
    if (w.up_b.present()) ops_.add_bias(u, w.up_b, m, n_ff);
    float* hg = host(g, m * n_ff);
    const float* hu = host(u, m * n_ff);
    const bool relu_up = hp.ffn == FfnKind::GatedBoth;
    lists_.filter([&](int64_t i, int32_t r) {
      const size_t k = sz(i * n_ff + r);
      const float up = relu_up ? std::max(hu[k], 0.0f) : hu[k];
      hg[k] *= up;
      return hg[k] != 0.0f;
    });
  }
  st.computed += lists_.size();
  const int32_t* idx = lists_.idx.data();
  const int64_t* off = lists_.offsets.data();
  // The down projection runs token by token: the kernels' many-token axpy costs more per row
  // x token than the one-token axpy at every batch size measured (docs/BENCHMARKS.md).
  const auto t1 = Clock::now();
  for (int64_t i = 0; i < m; ++i) {
    const int64_t one[2] = {0, off[i + 1] - off[i]};
    ops_.linear_t_rows(w.down_t, g + i * n_ff, 1, idx + off[i], one, out + i * hp.n_embd);
  }
  if (w.down_b.present()) ops_.add_bias(out, w.down_b, m, hp.n_embd);
  st.rows_s += seconds(t0, t1);
  st.down_s += seconds(t1, Clock::now());
  st.bytes += static_cast<uint64_t>(off[m]) * w.down_t.row_stride();

  if (cfg_.check_predictor) check_against_dense(il, in, out);
}

void SparseFfn::check_against_dense(int64_t il, const model::FfnInput& in, const float* out) {
  const model::HParams& hp = model_.hparams();
  const model::FfnWeights& w = w_.layers[sz(il)].ffn;
  const int64_t m = in.m, n_ff = hp.n_ff, n_embd = hp.n_embd;
  float* dg = dg_.as<float>();
  float* dense = dense_out_.as<float>();
  if (hp.ffn != FfnKind::Plain) ops_.linear(w.gate, in.x, m, dg);
  ops_.linear(w.up, in.x, m, du_.as<float>());
  if (w.up_b.present()) ops_.add_bias(du_.as<float>(), w.up_b, m, n_ff);
  ops_.ffn_combine(hp.ffn, hp.act, dg, du_.as<float>(), m, n_ff);  // dg_ = activations
  ops_.linear_t(w.down_t, dg, m, all_neurons_, dense);
  if (w.down_b.present()) ops_.add_bias(dense, w.down_b, m, n_embd);
  const float* hdg = host(dg, m * n_ff);
  const float* hdense = host(dense, m * n_embd);
  const float* hout = host(const_cast<float*>(out), m * n_embd);
  LayerStats& st = stats_[sz(il)];
  for (int64_t k = 0; k < m * n_ff; ++k) {
    const bool active = hdg[sz(k)] != 0.0f;
    st.truly_active += active ? 1 : 0;
    st.caught += active && predicted_[sz(k)] != 0 ? 1 : 0;
  }
  for (int64_t k = 0; k < m * n_embd; ++k) {
    const double d = hdense[sz(k)];
    st.max_abs_dense = std::max(st.max_abs_dense, std::fabs(d));
    st.max_abs_dev = std::max(st.max_abs_dev, std::fabs(static_cast<double>(hout[k]) - d));
  }
}

}  // namespace pi::sparse
