#include "sparsity_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/log.h"

namespace pi::cli {

Result<std::unique_ptr<DenseShadow>> DenseShadow::create(const Engine& engine, SessionOptions so) {
  so.sparse.dense = true;
  so.sparse.check_predictor = false;
  auto s = Session::create(engine, so);
  if (!s.ok()) return s.error();
  return std::unique_ptr<DenseShadow>(new DenseShadow(std::move(*s)));
}

Status DenseShadow::feed(std::span<const int32_t> tokens, std::span<const float> sparse_logits) {
  if (tokens.empty()) return Status::Ok();
  PI_TRY(session_->prompt(tokens));
  const std::span<const float> dense = session_->logits();
  if (dense.size() != sparse_logits.size()) return err("dense shadow: logit count differs");
  size_t am_s = 0, am_d = 0;
  for (size_t j = 0; j < dense.size(); ++j) {
    max_dev_ = std::max(max_dev_, std::fabs(static_cast<double>(sparse_logits[j]) - dense[j]));
    max_logit_ = std::max(max_logit_, std::fabs(static_cast<double>(dense[j])));
    if (sparse_logits[j] > sparse_logits[am_s]) am_s = j;
    if (dense[j] > dense[am_d]) am_d = j;
  }
  ++n_;
  agree_ += am_s == am_d ? 1 : 0;
  return Status::Ok();
}

namespace {

// Calibrated files: per layer and site the share of entries zeroed and the weight bytes read.
void print_site_report(const SparsityReport& r) {
  log_info("activation sparsity report: sparsity %.2f (%s); per layer and site the share of "
           "entries zeroed and the weight MiB its products read, over the whole run",
           r.act_sparsity, r.allocated ? "model-wide, site levels from the file's allocation"
                                       : "every site");
  std::string head = "layer";
  for (const SiteSparsity& s : r.sites) head += "  " + s.site + std::string(18 - s.site.size(), ' ');
  log_info("%s", head.c_str());
  const size_t n_layer = r.sites.empty() ? 0 : r.sites[0].entries.size();
  for (size_t l = 0; l < n_layer; ++l) {
    std::string line;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%5zu", l);
    line += buf;
    for (const SiteSparsity& s : r.sites) {
      const double e = static_cast<double>(std::max<int64_t>(1, s.entries[l]));
      std::snprintf(buf, sizeof buf, "  %5.1f%% %8.3f MiB", 100.0 * (1.0 - static_cast<double>(s.kept[l]) / e),
                    static_cast<double>(s.bytes[l]) / 1048576.0);
      line += buf;
    }
    log_info("%s", line.c_str());
  }
  std::string all = "  all";
  for (const SiteSparsity& s : r.sites) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "  %5.1f%%             ", 100.0 * s.zeroed_fraction());
    all += buf;
  }
  log_info("%s", all.c_str());
  // Where the time goes: per site the weight bytes read and the wall time of its products
  // (masks, lists and the matrix products; prompt and generated tokens together).
  for (const SiteSparsity& s : r.sites) {
    uint64_t bytes = 0;
    double seconds = 0.0;
    for (size_t l = 0; l < s.bytes.size(); ++l) bytes += s.bytes[l], seconds += s.seconds[l];
    const double tokens = static_cast<double>(std::max<int64_t>(1, s.tokens));
    log_info("%-8s %9.3f MiB/token  %8.3f ms/token  %6.1f GB/s", s.site.c_str(),
             static_cast<double>(bytes) / 1048576.0 / tokens, 1e3 * seconds / tokens,
             seconds > 0.0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0);
  }
  log_info("model-wide: %.1f%% of the layers' projection bytes left unread",
           100.0 * r.model_wide_zeroed());
}

}  // namespace

void print_sparsity_report(const SparsityReport& r, const ModelInfo& info,
                           const DenseShadow* shadow) {
  log_info("%s", "");
  if (r.thresholded) {
    print_site_report(r);
    return;
  }
  if (!r.sparse) {
    log_info("sparsity report: this session runs the dense FFN (%s)",
             info.powerinfer ? "--dense, or a PowerInfer file without predictors"
                             : "not a PowerInfer file");
    return;
  }
  const int64_t tokens = r.layers.empty() ? 0 : r.layers[0].tokens;
  log_info("sparsity report: threshold %g (%s), %lld tokens per layer",
           static_cast<double>(r.threshold), r.threshold_source.c_str(),
           static_cast<long long>(tokens));
  if (r.checked) {
    log_info("%5s %9s %9s %8s %9s %8s %9s %10s  %s", "layer", "predicted", "computed", "recall",
             "precision", "true", "ffn_dev", "ffn_max",
             "batch gate/up paths (per-token/lists/union/dense)");
  } else {
    log_info("%5s %9s %9s  %s", "layer", "predicted", "computed",
             "batch gate/up paths (per-token/lists/union/dense)");
  }
  LayerSparsity all;
  double worst_dev = 0;
  for (size_t il = 0; il < r.layers.size(); ++il) {
    const LayerSparsity& l = r.layers[il];
    const double denom = static_cast<double>(std::max<int64_t>(1, l.tokens * l.n_ff));
    char paths[64];
    std::snprintf(
        paths, sizeof paths, "%lld/%lld/%lld/%lld", static_cast<long long>(l.batch_paths[0]),
        static_cast<long long>(l.batch_paths[1]), static_cast<long long>(l.batch_paths[2]),
        static_cast<long long>(l.batch_paths[3]));
    if (r.checked) {
      const double rel = l.max_abs_dense > 0 ? l.max_abs_dev / l.max_abs_dense : 0.0;
      worst_dev = std::max(worst_dev, rel);
      log_info("%5zu %9.4f %9.4f %8.4f %9.4f %8.4f %9.2e %10.3e  %s", il, l.active_fraction(),
               static_cast<double>(l.computed) / denom, l.recall(), l.precision(),
               static_cast<double>(l.truly_active) / denom, rel, l.max_abs_dense, paths);
    } else {
      log_info("%5zu %9.4f %9.4f  %s", il, l.active_fraction(),
               static_cast<double>(l.computed) / denom, paths);
    }
    all.tokens += l.tokens;
    all.n_ff = l.n_ff;
    all.predicted += l.predicted;
    all.computed += l.computed;
    all.bytes += l.bytes;
    all.truly_active += l.truly_active;
    all.caught += l.caught;
    all.predict_s += l.predict_s;
    all.rows_s += l.rows_s;
    all.down_s += l.down_s;
  }
  const double denom = static_cast<double>(std::max<int64_t>(1, all.tokens * all.n_ff));
  if (r.checked) {
    log_info("%5s %9.4f %9.4f %8.4f %9.4f %8.4f %9.2e", "all", all.active_fraction(),
             static_cast<double>(all.computed) / denom, all.recall(), all.precision(),
             static_cast<double>(all.truly_active) / denom, worst_dev);
    log_info(
        "ffn_dev: max |sparse - dense| FFN output element of the layer over max |dense| "
        "(ffn_max), both FFNs on the same input");
  } else {
    log_info("%5s %9.4f %9.4f", "all", all.active_fraction(),
             static_cast<double>(all.computed) / denom);
  }
  if (tokens > 0) {
    const double mib = 1.0 / 1048576.0;
    const double sparse_bytes = static_cast<double>(all.bytes) / static_cast<double>(tokens);
    const double other = static_cast<double>(info.weight_bytes_per_token - r.ffn_bytes_dense);
    log_info(
        "weight bytes per token: %.1f MiB = attention + output head %.1f MiB + predictors and "
        "FFN rows read %.1f MiB (the dense FFN reads %.1f MiB)",
        (other + sparse_bytes) * mib, other * mib, sparse_bytes * mib,
        static_cast<double>(r.ffn_bytes_dense) * mib);
  }
  if (tokens > 0) {
    const double ms = 1e3 / static_cast<double>(tokens);
    log_info(
        "sparse FFN time per token: predictors %.2f ms, gate/up rows %.2f ms, down rows %.2f ms",
        all.predict_s * ms, all.rows_s * ms, all.down_s * ms);
  }
  if (shadow != nullptr && shadow->positions() > 0) {
    log_info(
        "final logits vs a dense run fed the same tokens (%lld positions): max |diff| %.4g "
        "(max |logit| %.4g, relative %.3g), argmax agrees at %lld/%lld",
        static_cast<long long>(shadow->positions()), shadow->max_abs_dev(), shadow->max_abs_logit(),
        shadow->max_abs_logit() > 0 ? shadow->max_abs_dev() / shadow->max_abs_logit() : 0.0,
        static_cast<long long>(shadow->argmax_agree()),
        static_cast<long long>(shadow->positions()));
  }
}

}  // namespace pi::cli
