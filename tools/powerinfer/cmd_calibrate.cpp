// `powerinfer calibrate -m MODEL -f TEXT --sparsity 0.4 -o OUT`: training-free activation
// sparsity for ordinary (SiLU) models (docs/ACT_SPARSITY.md). The work is the library's
// (include/powerinfer/calibrate.h says how); this file holds the flags and prints the
// per-layer thresholds and the allocation on stdout. Progress goes to stderr.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "cli_checks.h"
#include "commands.h"
#include "powerinfer/calibrate.h"
#include "text_file.h"

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
  // The greedy allocation (include/powerinfer/calibrate.h).
  bool alloc = true;
  int64_t alloc_tokens = 2048;
  double alloc_step = 0.05;
  std::optional<double> alloc_max;  // unset: min(0.9, target + 0.2)
};

int run_calibrate(const CalibrateOptions& o) {
  if (Status s = check_threads("-t", o.n_threads, 0); !s.ok()) return fail(s.error());
  auto text = read_text_file(o.text_file);
  if (!text.ok()) return fail(text.error());
  CalibrateParams p;
  p.model = o.model;
  p.output = o.output;
  p.text_name = std::filesystem::path(o.text_file).filename().string();
  p.sparsity = o.sparsity;
  p.sites = o.sites;
  p.n_ctx = o.n_ctx;
  p.n_batch = o.n_batch;
  p.n_threads = o.n_threads;
  p.max_tokens = o.max_tokens;
  p.progress = o.progress;
  p.alloc = o.alloc;
  p.alloc_tokens = o.alloc_tokens;
  p.alloc_step = o.alloc_step;
  p.alloc_max = o.alloc_max.value_or(-1.0);
  auto r = calibrate_model(p, *text);
  if (!r.ok()) {
    if (r.error().message.starts_with("the text "))
      return fail(err("%s: %s", o.text_file.c_str(), r.error().message.c_str()));
    return fail(r.error());
  }
  std::printf("calibrated %llu tokens of %s at sparsity %.2f; wrote %s (%d matrices transposed, "
              "%.1f MiB; source %.1f MiB)\n",
              static_cast<unsigned long long>(r->n_tokens), o.text_file.c_str(), o.sparsity,
              o.output.c_str(), r->n_transposed, static_cast<double>(r->file_out) / (1 << 20),
              static_cast<double>(r->file_in) / (1 << 20));
  std::printf("thresholds at sparsity %.2f (layer: one per site)\nlayer", o.sparsity);
  for (const std::string& s : r->sites) std::printf(" %12s", s.c_str());
  std::printf("\n");
  for (size_t l = 0; l < r->thresholds.size(); ++l) {
    std::printf("%5lld", static_cast<long long>(l));
    for (double t : r->thresholds[l]) std::printf(" %12.4g", t);
    std::printf("\n");
  }
  if (!r->allocation.empty()) {
    std::printf("allocation (model-wide sparsity: site levels, every layer alike; KL divergence "
                "from no threshold)\nmodel-wide");
    for (const std::string& s : r->sites) std::printf(" %9s", s.c_str());
    std::printf("        KL\n");
    for (const CalibrateAllocPoint& a : r->allocation) {
      std::printf("%10.4f", a.model_wide);
      for (double l : a.level) std::printf(" %9.2f", l);
      std::printf(" %9.5f\n", a.kl);
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
