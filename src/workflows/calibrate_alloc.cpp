#include "calibrate_alloc.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>

#include "core/progress.h"
#include "powerinfer/engine.h"

namespace pi::workflows {
namespace {

// log-softmax of one row of logits, in double.
void log_softmax(std::span<const float> row, std::vector<double>& out) {
  out.resize(row.size());
  double mx = -INFINITY;
  for (float x : row) mx = std::max(mx, static_cast<double>(x));
  double sum = 0;
  for (float x : row) sum += std::exp(static_cast<double>(x) - mx);
  const double lse = mx + std::log(sum);
  for (size_t i = 0; i < row.size(); ++i) out[i] = static_cast<double>(row[i]) - lse;
}

class Evaluator {
 public:
  Evaluator(const Engine& engine, const std::vector<std::vector<int32_t>>& chunks,
            sparse::SiteSet sites, const AllocOptions& o)
      : engine_(engine), chunks_(chunks), sites_(sites), o_(o) {}

  // The log-probabilities of every position with no threshold (every site at level 0).
  Status reference() {
    std::array<double, sparse::kNumSites> zero{};
    ref_.clear();
    return run(zero, [&](std::span<const float> row) {
      log_softmax(row, lp_);
      ref_.insert(ref_.end(), lp_.begin(), lp_.end());
    });
  }

  // Mean KL(reference || levels) over every position.
  Result<double> kl(const std::array<double, sparse::kNumSites>& level) {
    const size_t nv = static_cast<size_t>(engine_.info().n_vocab);
    size_t pos = 0;
    double sum = 0;
    Status s = run(level, [&](std::span<const float> row) {
      log_softmax(row, lp_);
      const float* r = ref_.data() + pos * nv;
      double k = 0;
      for (size_t v = 0; v < nv; ++v) {
        const double lr = r[v];
        k += std::exp(lr) * (lr - lp_[v]);
      }
      sum += k;
      ++pos;
    });
    if (!s.ok()) return s.error();
    return pos > 0 ? sum / static_cast<double>(pos) : 0.0;
  }

 private:
  template <typename F>
  Status run(const std::array<double, sparse::kNumSites>& level, F&& per_row) {
    SessionOptions so;  // the predictor threshold (threshold_env) is moot: no PowerInfer file is calibrated
    so.n_ctx = o_.n_ctx;
    so.n_batch = o_.n_ctx;
    so.n_threads = o_.n_threads;
    so.all_logits = true;
    std::array<std::optional<double>, sparse::kNumSites> site;
    for (sparse::Site s : sparse::kAllSites)
      if (sparse::has_site(sites_, s)) site[static_cast<size_t>(s)] = level[static_cast<size_t>(s)];
    so.sparse.site_sparsity = sparse::site_levels_string(site);
    so.sparse.sites = sparse::site_list(sites_);
    auto session = Session::create(engine_, so);
    if (!session.ok()) return session.error();
    const size_t nv = static_cast<size_t>(engine_.info().n_vocab);
    for (const std::vector<int32_t>& chunk : chunks_) {
      (*session)->reset();
      logits_.clear();
      PI_TRY((*session)->prompt_logits(chunk, logits_));
      for (size_t p = 0; p < chunk.size(); ++p)
        per_row(std::span<const float>(logits_.data() + p * nv, nv));
    }
    return Status::Ok();
  }

  const Engine& engine_;
  const std::vector<std::vector<int32_t>>& chunks_;
  sparse::SiteSet sites_;
  AllocOptions o_;
  std::vector<float> ref_;     // [positions, n_vocab] log-probabilities with no threshold
  std::vector<float> logits_;  // one chunk's logits
  std::vector<double> lp_;     // one row's log-probabilities
};

}  // namespace

Result<std::vector<AllocPoint>> allocate_greedy(const std::string& path,
                                                const std::vector<std::vector<int32_t>>& chunks,
                                                sparse::SiteSet sites, double last_level,
                                                const std::array<double, sparse::kNumSites>& share,
                                                const AllocOptions& o) {
  if (!(o.step > 0.0)) return err("--alloc-step must be > 0 (got %g)", o.step);
  double reachable = 0;
  for (sparse::Site s : sparse::kAllSites)
    if (sparse::has_site(sites, s)) reachable += share[static_cast<size_t>(s)] * last_level;
  auto engine = Engine::load(path);
  if (!engine.ok()) return engine.error();
  Evaluator ev(**engine, chunks, sites, o);
  PI_TRY(ev.reference());

  std::vector<AllocPoint> out(1);
  AllocPoint cur;
  const double goal = std::min(o.max_level, reachable);
  // Steps the model-wide level needs at least (the largest share's steps), for the bar.
  double max_share = 0;
  for (sparse::Site s : sparse::kAllSites)
    if (sparse::has_site(sites, s)) max_share = std::max(max_share, share[static_cast<size_t>(s)]);
  const auto est = static_cast<uint64_t>(std::ceil(goal / (max_share * o.step)) + 1);
  ProgressBar bar("allocate", std::max<uint64_t>(1, est));
  while (cur.model_wide < goal - 1e-9) {
    AllocPoint best;
    double best_score = INFINITY;
    for (sparse::Site s : sparse::kAllSites) {
      const auto i = static_cast<size_t>(s);
      if (!sparse::has_site(sites, s) || cur.level[i] >= last_level - 1e-9) continue;
      AllocPoint cand = cur;
      cand.level[i] = std::min(last_level, cur.level[i] + o.step);
      cand.model_wide = sparse::model_wide(share, cand.level);
      const double gain = cand.model_wide - cur.model_wide;
      if (!(gain > 0)) continue;
      auto kl = ev.kl(cand.level);
      if (!kl.ok()) return kl.error();
      cand.kl = *kl;
      // Strict: ties keep the earlier site, so the search is deterministic.
      if (const double score = (cand.kl - cur.kl) / gain; score < best_score) {
        best_score = score;
        best = cand;
      }
    }
    if (!std::isfinite(best_score)) break;
    cur = best;
    out.push_back(cur);
    if (o.progress) bar.update(std::min<uint64_t>(est, out.size() - 1));
  }
  bar.finish();
  return out;
}

void set_allocation(const std::vector<AllocPoint>& path, sparse::ActSparsityCalibration& c) {
  c.alloc_levels.clear();
  for (auto& a : c.alloc) a.clear();
  for (const AllocPoint& p : path) {
    c.alloc_levels.push_back(p.model_wide);
    for (sparse::Site s : sparse::kAllSites) {
      if (!sparse::has_site(c.sites, s)) continue;
      for (int64_t l = 0; l < c.n_layer; ++l)
        c.alloc[static_cast<size_t>(s)].push_back(static_cast<float>(p.level[static_cast<size_t>(s)]));
    }
  }
}

}  // namespace pi::workflows
