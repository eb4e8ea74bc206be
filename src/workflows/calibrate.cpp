// Activation-sparsity calibration (include/powerinfer/calibrate.h): the checks, a measuring
// context (ContextOptions::calibrator) over the text's chunks, the file (calibrate_file.h),
// the allocation search (calibrate_alloc.h) and the file rewritten with its path.
#include "powerinfer/calibrate.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "calibrate_alloc.h"
#include "calibrate_file.h"
#include "core/log.h"
#include "model/model.h"
#include "runtime/context.h"
#include "sparse/act_sparsity.h"
#include "sparse/calibrate.h"
#include "sparse/threshold_steps.h"
#include "text_chunks.h"
#include "tokenizer/tokenizer.h"

namespace pi {
namespace {

Error bad_request(Error e) { return with_code(std::move(e), ErrorCode::BadRequest); }

// 0, 0.05, ..., 0.90 and the target, ascending.
std::vector<double> calibration_levels(double target) {
  std::vector<double> levels;
  for (int i = 0; i <= 18; ++i) levels.push_back(i * 0.05);
  bool on_grid = false;
  for (double l : levels) on_grid = on_grid || std::fabs(l - target) < 1e-9;
  if (!on_grid) levels.push_back(target);
  std::sort(levels.begin(), levels.end());
  return levels;
}

Status check_params(const CalibrateParams& p, double alloc_max) {
  if (!(p.sparsity >= 0.0 && p.sparsity <= 0.9))
    return bad_request(err("--sparsity %g: must be in [0, 0.9] (the share of activations zeroed at each site, "
                           "e.g. 0.4)",
                           p.sparsity));
  if (p.n_threads < 0) return bad_request(err("-t must be >= 0 (0: all hardware threads)"));
  if (p.n_ctx < 2) return bad_request(err("-c must be >= 2 (got %lld)", static_cast<long long>(p.n_ctx)));
  if (p.n_batch < 1) return bad_request(err("-b must be >= 1 (got %lld)", static_cast<long long>(p.n_batch)));
  if (p.max_tokens < 0) return bad_request(err("--max-tokens must be >= 0"));
  if (p.alloc_tokens < 1) return bad_request(err("--alloc-tokens must be >= 1"));
  if (!(p.alloc_step >= 0.01 && p.alloc_step <= 0.5))
    return bad_request(err("--alloc-step %g: must be in [0.01, 0.5]", p.alloc_step));
  if (!(alloc_max >= p.sparsity && alloc_max <= 0.9))
    return bad_request(err("--alloc-max %g: must be in [--sparsity, 0.9] (= [%g, 0.9])", alloc_max, p.sparsity));
  if (p.output.empty()) return bad_request(err("calibrate: no output file"));
  return Status::Ok();
}

Status check_model(const model::Model& m) {
  const model::HParams& hp = m.hparams();
  const std::string& path = m.file().path();
  if (hp.powerinfer)
    return err("%s: PowerInfer files run sparse with their predictors; calibrate an ordinary GGUF",
               path.c_str());
  if (hp.is_moe())
    return err("%s: `powerinfer calibrate` works on dense FFN layers; mixture-of-experts models are not "
               "supported by it yet (they run with `powerinfer run`)",
               path.c_str());
  if (hp.arch == model::Arch::Falcon || hp.ffn != model::FfnKind::Gated)
    return err("%s: calibration needs llama-style layers (q/k/v/output, gate/up/down); %s has "
               "another layout",
               path.c_str(), hp.arch_name.c_str());
  if (sparse::has_act_sparsity(m.file()))
    return err("%s: the file is already calibrated (%s); calibrate the original file",
               path.c_str(), sparse::kMethodKey);
  bool transposed = false;
  for (const model::LayerWeights& L : m.weights().layers) {
    model::each_layer_matrix(L, [&](const model::LayerTensor& t, const model::Matrix& w) {
      transposed = transposed || (t.transposed && !t.powerinfer_native && w.present());
    });
  }
  if (transposed)
    return err("%s: the file stores projections transposed; calibrate the original file", path.c_str());
  return Status::Ok();
}

// The report's per-layer thresholds at the target level.
void report_thresholds(const sparse::ActSparsityCalibration& c, sparse::SiteSet sites, double target,
                       CalibrateReport& r) {
  const size_t level = static_cast<size_t>(
      std::find_if(c.levels.begin(), c.levels.end(), [&](double l) { return std::fabs(l - target) < 1e-9; }) -
      c.levels.begin());
  for (int64_t l = 0; l < c.n_layer; ++l) {
    std::vector<double>& row = r.thresholds.emplace_back();
    for (sparse::Site s : sparse::kAllSites)
      if (sparse::has_site(sites, s)) row.push_back(c.threshold(s, l, level));
  }
}

// The greedy search on the written file, which is then rewritten with its path.
Status allocate(const CalibrateParams& p, double alloc_max, const Tokenizer& tok,
                std::span<const int32_t> tokens, sparse::SiteSet sites, sparse::ActSparsityCalibration& c,
                CalibrateReport& r) {
  // The search runs the written file (its transposed layout).
  auto written = model::Model::load(p.output);
  if (!written.ok()) return written.error();
  const size_t n = std::min(tokens.size(), static_cast<size_t>(p.alloc_tokens));
  const std::vector<std::vector<int32_t>> chunks = workflows::text_chunks(tok, tokens.first(n), p.n_ctx);
  const std::array<double, sparse::kNumSites> share = sparse::site_bytes(**written).shares();
  log_info("calibrate: allocating sites up to model-wide %.2f (steps of %.2f) on %zu tokens", alloc_max,
           p.alloc_step, n);
  workflows::AllocOptions ao;
  ao.n_ctx = p.n_ctx;
  ao.n_threads = r.n_threads;
  ao.step = p.alloc_step;
  ao.max_level = alloc_max;
  ao.progress = p.progress;
  auto path = workflows::allocate_greedy(p.output, chunks, sites, c.levels.back(), share, ao);
  if (!path.ok()) return path.error();
  if (path->back().model_wide < p.sparsity - 1e-6) {
    return bad_request(err("the sites calibrated (%s) reach model-wide sparsity %.3f, below the target %g; "
                           "calibrate more sites or use --no-alloc",
                           sparse::site_list(sites).c_str(), path->back().model_wide, p.sparsity));
  }
  workflows::set_allocation(*path, c);
  for (const workflows::AllocPoint& a : *path) {
    CalibrateAllocPoint& q = r.allocation.emplace_back();
    q.model_wide = a.model_wide;
    q.kl = a.kl;
    for (sparse::Site s : sparse::kAllSites)
      if (sparse::has_site(sites, s)) q.level.push_back(a.level[static_cast<size_t>(s)]);
  }
  auto again = workflows::write_calibrated((*written)->file(), c, p.output, r.n_threads, p.progress);
  return again.ok() ? Status::Ok() : Status(again.error());
}

}  // namespace

Result<CalibrateReport> calibrate_model(const CalibrateParams& p, std::string_view text) {
  const double alloc_max = p.alloc_max >= 0 ? p.alloc_max : std::min(0.9, p.sparsity + 0.2);
  PI_TRY(check_params(p, alloc_max));
  auto sites = sparse::parse_sites(p.sites, "--sites");
  if (!sites.ok()) return bad_request(sites.error());
  if (*sites == 0) return bad_request(err("--sites: name at least one site"));
  auto model = model::Model::load(p.model);
  if (!model.ok()) return model.error();
  const model::Model& m = **model;
  PI_TRY(check_model(m));
  auto tok = Tokenizer::from_gguf(m.file());
  if (!tok.ok()) return tok.error();
  auto tokens = workflows::text_tokens(*tok, text, p.max_tokens);
  if (!tokens.ok()) return tokens.error();

  CalibrateReport r;
  runtime::ContextOptions co;
  co.n_ctx = p.n_ctx;
  co.n_batch = std::min(p.n_batch, p.n_ctx);
  co.n_threads = p.n_threads > 0 ? p.n_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  co.dense = true;
  sparse::Calibrator cal(m.hparams().n_layer);
  co.calibrator = &cal;
  auto ctx = runtime::Context::create(m, co);
  if (!ctx.ok()) return ctx.error();
  r.n_threads = co.n_threads;
  log_info("calibrate: %s%s%zu tokens in chunks of %lld, %d threads, sites %s", p.text_name.c_str(),
           p.text_name.empty() ? "" : ": ", tokens->size(), static_cast<long long>(p.n_ctx), co.n_threads,
           sparse::site_list(*sites).c_str());
  PI_TRY(workflows::run_chunks(**ctx, workflows::text_chunks(*tok, *tokens, p.n_ctx), "calibrate", p.progress));

  sparse::ActSparsityCalibration c = cal.result(*sites, p.sparsity, calibration_levels(p.sparsity));
  c.text = p.text_name;
  auto file = workflows::write_calibrated(m.file(), c, p.output, co.n_threads, p.progress);
  if (!file.ok()) return file.error();
  for (const std::string& t : file->fallbacks)
    log_warn("%s: rows not a multiple of the type's block: written as F16", t.c_str());
  if (p.alloc) PI_TRY(allocate(p, alloc_max, *tok, *tokens, *sites, c, r));

  r.n_tokens = c.tokens;
  for (sparse::Site s : sparse::kAllSites)
    if (sparse::has_site(*sites, s)) r.sites.emplace_back(sparse::site_name(s));
  report_thresholds(c, *sites, p.sparsity, r);
  r.n_transposed = file->n_transposed;
  r.fallbacks = std::move(file->fallbacks);
  r.file_in = file->file_in;
  r.file_out = file->file_out;
  return r;
}

}  // namespace pi
