// `powerinfer calibrate -m MODEL -f TEXT --sparsity 0.4 -o OUT`: training-free activation
// sparsity for ordinary (SiLU) models (docs/ACT_SPARSITY.md). The text runs densely through
// the model in chunks of -c tokens (each from an empty cache, BOS in front when the vocabulary
// adds one); per layer and site (act_sparsity.h) the magnitudes of the entries are histogrammed
// and the thresholds that zero a share 0, 0.05, ..., 0.90 (and the target) of them are written
// with the weights laid out for the kernels that skip input channels (calibrate_file.h). Then,
// unless --no-alloc, a greedy search (calibrate_alloc.h) chooses the level of each site for
// model-wide sparsities up to --alloc-max and the file is rewritten with that allocation.
// Progress goes to stderr, a per-layer summary to stdout.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "calibrate_alloc.h"
#include "calibrate_file.h"
#include "cli_checks.h"
#include "commands.h"
#include "core/log.h"
#include "core/progress.h"
#include "model/model.h"
#include "runtime/context.h"
#include "sparse/act_sparsity.h"
#include "sparse/calibrate.h"
#include "sparse/threshold_steps.h"
#include "text_file.h"
#include "tokenizer/tokenizer.h"

namespace pi::cli {
namespace {

struct CalibrateOptions {
  std::string model, text_file, output;
  double sparsity = 0.4;
  std::string sites = "attn_in,attn_out,ffn_in,ffn_gate";
  int64_t n_ctx = 512;
  int64_t n_batch = 512;
  int n_threads = 0;
  int64_t max_tokens = 0;
  bool progress = true;
  // The greedy allocation (calibrate_alloc.h).
  bool alloc = true;
  int64_t alloc_tokens = 2048;
  double alloc_step = 0.05;
  std::optional<double> alloc_max;  // unset: min(0.9, target + 0.2)
};

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

int run_calibrate(const CalibrateOptions& o) {
  if (!(o.sparsity >= 0.0 && o.sparsity <= 0.9))
    return fail(err("--sparsity %g: must be in [0, 0.9] (the share of activations zeroed at each "
                    "site, e.g. 0.4)",
                    o.sparsity));
  if (Status s = check_threads("-t", o.n_threads, 0); !s.ok()) return fail(s.error());
  if (o.n_ctx < 2) return fail(err("-c must be >= 2 (got %lld)", static_cast<long long>(o.n_ctx)));
  if (o.n_batch < 1) return fail(err("-b must be >= 1 (got %lld)", static_cast<long long>(o.n_batch)));
  if (o.max_tokens < 0) return fail(err("--max-tokens must be >= 0"));
  if (o.alloc_tokens < 1) return fail(err("--alloc-tokens must be >= 1"));
  if (!(o.alloc_step >= 0.01 && o.alloc_step <= 0.5))
    return fail(err("--alloc-step %g: must be in [0.01, 0.5]", o.alloc_step));
  const double alloc_max = o.alloc_max.value_or(std::min(0.9, o.sparsity + 0.2));
  if (!(alloc_max >= o.sparsity && alloc_max <= 0.9))
    return fail(err("--alloc-max %g: must be in [--sparsity, 0.9] (= [%g, 0.9])", alloc_max,
                    o.sparsity));
  auto sites = sparse::parse_sites(o.sites, "--sites");
  if (!sites.ok()) return fail(sites.error());
  if (*sites == 0) return fail(err("--sites: name at least one site"));
  auto text = read_text_file(o.text_file);
  if (!text.ok()) return fail(text.error());
  auto model = model::Model::load(o.model);
  if (!model.ok()) return fail(model.error());
  const model::Model& m = **model;
  if (Status s = check_model(m); !s.ok()) return fail(s.error());
  auto tok = Tokenizer::from_gguf(m.file());
  if (!tok.ok()) return fail(tok.error());
  std::vector<int32_t> tokens = tok->encode(*text, false, /*parse_special=*/false);
  if (o.max_tokens > 0 && static_cast<int64_t>(tokens.size()) > o.max_tokens)
    tokens.resize(static_cast<size_t>(o.max_tokens));
  if (tokens.empty()) return fail(err("%s: the text has no tokens", o.text_file.c_str()));

  runtime::ContextOptions co;
  co.n_ctx = o.n_ctx;
  co.n_batch = std::min(o.n_batch, o.n_ctx);
  co.n_threads = o.n_threads > 0 ? o.n_threads
                                 : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  co.dense = true;
  sparse::Calibrator cal(m.hparams().n_layer);
  co.calibrator = &cal;
  auto ctx = runtime::Context::create(m, co);
  if (!ctx.ok()) return fail(ctx.error());

  const bool bos = tok->add_bos() && tok->bos() >= 0;
  const auto chunk = static_cast<size_t>(o.n_ctx);
  log_info("calibrate: %s: %zu tokens in chunks of %lld, %d threads, sites %s", o.text_file.c_str(),
           tokens.size(), static_cast<long long>(o.n_ctx), co.n_threads,
           sparse::site_list(*sites).c_str());
  {
    ProgressBar bar("calibrate", tokens.size());
    std::vector<int32_t> piece;
    for (size_t at = 0; at < tokens.size(); at += chunk) {
      piece.assign(tokens.begin() + static_cast<std::ptrdiff_t>(at),
                   tokens.begin() + static_cast<std::ptrdiff_t>(std::min(tokens.size(), at + chunk)));
      if (bos) piece[0] = tok->bos();
      if (Status s = (*ctx)->truncate(0); !s.ok()) return fail(s.error());
      if (Status s = (*ctx)->decode(piece); !s.ok()) return fail(s.error());
      if (o.progress) bar.update(at + piece.size());
    }
    bar.finish();
  }

  sparse::ActSparsityCalibration c = cal.result(*sites, o.sparsity, calibration_levels(o.sparsity));
  c.text = std::filesystem::path(o.text_file).filename().string();
  auto rep = tools::write_calibrated(m.file(), c, o.output, co.n_threads, o.progress);
  if (!rep.ok()) return fail(rep.error());
  for (const std::string& t : rep->fallbacks)
    log_warn("%s: rows not a multiple of the type's block: written as F16", t.c_str());
  std::vector<tools::AllocPoint> alloc;
  if (o.alloc) {
    // The search runs the written file (its transposed layout) and rewrites it with the path.
    auto written = model::Model::load(o.output);
    if (!written.ok()) return fail(written.error());
    std::vector<std::vector<int32_t>> chunks;
    const size_t n = std::min(tokens.size(), static_cast<size_t>(o.alloc_tokens));
    for (size_t at = 0; at < n; at += chunk) {
      chunks.emplace_back(tokens.begin() + static_cast<std::ptrdiff_t>(at),
                          tokens.begin() + static_cast<std::ptrdiff_t>(std::min(n, at + chunk)));
      if (bos) chunks.back()[0] = tok->bos();
    }
    const std::array<double, sparse::kNumSites> share = sparse::site_bytes(**written).shares();
    log_info("calibrate: allocating sites up to model-wide %.2f (steps of %.2f) on %zu tokens",
             alloc_max, o.alloc_step, n);
    tools::AllocOptions ao;
    ao.n_ctx = o.n_ctx;
    ao.n_threads = co.n_threads;
    ao.step = o.alloc_step;
    ao.max_level = alloc_max;
    ao.progress = o.progress;
    auto path = tools::allocate_greedy(o.output, chunks, *sites, c.levels.back(), share, ao);
    if (!path.ok()) return fail(path.error());
    alloc = std::move(*path);
    if (alloc.back().model_wide < o.sparsity - 1e-6) {
      return fail(err("the sites calibrated (%s) reach model-wide sparsity %.3f, below the target "
                      "%g; calibrate more sites or use --no-alloc",
                      sparse::site_list(*sites).c_str(), alloc.back().model_wide, o.sparsity));
    }
    tools::set_allocation(alloc, c);
    auto again = tools::write_calibrated((*written)->file(), c, o.output, co.n_threads, o.progress);
    if (!again.ok()) return fail(again.error());
  }

  std::printf("calibrated %llu tokens of %s at sparsity %.2f; wrote %s (%d matrices transposed, "
              "%.1f MiB; source %.1f MiB)\n",
              static_cast<unsigned long long>(c.tokens), o.text_file.c_str(), o.sparsity,
              o.output.c_str(), rep->n_transposed, static_cast<double>(rep->file_out) / (1 << 20),
              static_cast<double>(rep->file_in) / (1 << 20));
  const size_t level = static_cast<size_t>(
      std::find_if(c.levels.begin(), c.levels.end(),
                   [&](double l) { return std::fabs(l - o.sparsity) < 1e-9; }) -
      c.levels.begin());
  std::printf("thresholds at sparsity %.2f (layer: one per site)\nlayer", o.sparsity);
  for (sparse::Site s : sparse::kAllSites)
    if (sparse::has_site(*sites, s)) std::printf(" %12s", sparse::site_name(s));
  std::printf("\n");
  for (int64_t l = 0; l < c.n_layer; ++l) {
    std::printf("%5lld", static_cast<long long>(l));
    for (sparse::Site s : sparse::kAllSites)
      if (sparse::has_site(*sites, s)) std::printf(" %12.4g", c.threshold(s, l, level));
    std::printf("\n");
  }
  if (!alloc.empty()) {
    std::printf("allocation (model-wide sparsity: site levels, every layer alike; KL divergence "
                "from no threshold)\nmodel-wide");
    for (sparse::Site s : sparse::kAllSites)
      if (sparse::has_site(*sites, s)) std::printf(" %9s", sparse::site_name(s));
    std::printf("        KL\n");
    for (const tools::AllocPoint& p : alloc) {
      std::printf("%10.4f", p.model_wide);
      for (sparse::Site s : sparse::kAllSites)
        if (sparse::has_site(*sites, s)) std::printf(" %9.2f", p.level[static_cast<size_t>(s)]);
      std::printf(" %9.5f\n", p.kl);
    }
  }
  return 0;
}

}  // namespace

Runner add_calibrate(CLI::App& app) {
  auto o = std::make_shared<CalibrateOptions>();
  CLI::App* sub = app.add_subcommand(
      "calibrate",
      "Measure activation thresholds on a text and write a sparse-ready file (SiLU models)");
  sub->add_option("-m,--model", o->model, "Model file (GGUF, llama-style layers)")->required();
  sub->add_option("-f,--file", o->text_file, "Calibration text")->required();
  sub->add_option("-o,--output", o->output, "Calibrated file to write")->required();
  sub->add_option("--sparsity", o->sparsity,
                  "Target, the file's default: the model-wide sparsity (share of the layers' "
                  "weight bytes left unread) the allocation runs at; with --no-alloc the share "
                  "of activations zeroed at each site (runs may ask for other levels)")
      ->capture_default_str();
  sub->add_option("--sites", o->sites,
                  "Sites to calibrate, comma-separated: attn_in (q/k/v input), attn_out (output "
                  "projection input), ffn_in (gate/up input), ffn_gate (|act(gate)|)")
      ->capture_default_str();
  sub->add_option("-c,--ctx-size", o->n_ctx, "Tokens per chunk (each from an empty cache)")
      ->capture_default_str();
  sub->add_option("-b,--batch-size", o->n_batch, "Tokens per forward pass")->capture_default_str();
  sub->add_option("-t,--threads", o->n_threads, "Threads (0: all hardware threads)");
  sub->add_option("--max-tokens", o->max_tokens, "Use at most this many tokens of the text (0: all)");
  sub->add_flag("!--no-progress", o->progress, "No progress bar");
  sub->add_flag("!--no-alloc", o->alloc,
                "No per-site allocation: --sparsity then means the same level at every site");
  sub->add_option("--alloc-tokens", o->alloc_tokens,
                  "Tokens of the text the allocation search runs (each candidate runs them all)")
      ->capture_default_str();
  sub->add_option("--alloc-step", o->alloc_step, "Site level step of the allocation search")
      ->capture_default_str();
  sub->add_option("--alloc-max", o->alloc_max,
                  "Model-wide sparsity the allocation reaches (default: the target + 0.2, at "
                  "most 0.9)");
  return [o] { return run_calibrate(*o); };
}

}  // namespace pi::cli
