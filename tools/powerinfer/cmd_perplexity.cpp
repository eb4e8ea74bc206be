// `powerinfer perplexity`: perplexity of a model on a text file, computed as llama.cpp's
// `perplexity` tool computes it, plus a KL-divergence comparison against a saved base run.
//
// The computation lives in the library (include/powerinfer/perplexity.h, which states the
// method); this file holds the flags and the printing.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_checks.h"
#include "commands.h"
#include "text_file.h"
#include "interrupt.h"
#include "llama_flags.h"
#include "core/log.h"
#include "gen_options.h"
#include "powerinfer/engine.h"
#include "powerinfer/perplexity.h"

namespace pi::cli {
namespace {

struct PerplexityOptions : ModelFlags {
  std::string model;
  std::string text_file;
  int64_t n_ctx = 512;
  int64_t n_batch = 512;
  int n_threads = 1;
  int64_t n_chunks = -1;  // -1: every whole chunk of the text
  bool dense = false;
  ActSparsityFlags act;  // calibrated files: --sparsity, --sparsity-sites
  std::string device = "cpu";
  ModelLoad load = ModelLoad::Auto;  // --mmap, --no-mmap
  std::string kl_save;
  std::string kl_base;
  // llama.cpp's spelling: --kl-divergence-base FILE saves (as --kl-save), and with
  // --kl-divergence compares (as --kl-base).
  std::string kl_divergence_base;
  bool kl_divergence = false;
  bool ctx_given = false;     // -c on the command line (else --kl-base's value wins)
  bool chunks_given = false;  // --chunks on the command line
};

Status validate(const PerplexityOptions& o) {
  if (o.n_ctx < 4 || o.n_ctx % 2 != 0)
    return err("-c must be even and >= 4: the second half of each chunk is scored (got %lld)",
               static_cast<long long>(o.n_ctx));
  if (o.n_batch < 1) return err("-b must be >= 1 (got %lld)", static_cast<long long>(o.n_batch));
  PI_TRY(check_threads("-t", o.n_threads));
  PI_TRY(check_model_flags(o));
  if (o.n_chunks == 0 || o.n_chunks < -1)
    return err("--chunks must be >= 1, or -1 for all (got %lld)",
               static_cast<long long>(o.n_chunks));
  return Status::Ok();
}

void print_kl_summary(const std::string& base_path, const PerplexityReport& r) {
  const KlReport& k = *r.kl;
  std::printf("KL divergence against %s (%lld tokens):\n", base_path.c_str(),
              static_cast<long long>(k.n));
  std::printf("  PPL(base)          = %.4f +/- %.5f\n", k.base_ppl, k.base_ppl_err);
  std::printf("  PPL(this)          = %.4f +/- %.5f\n", r.ppl, r.ppl_err);
  std::printf("  ln(PPL(this/base)) = %.6g +/- %.3g\n", k.ln_ratio, k.ln_ratio_err);
  std::printf("  mean KLD           = %.6g +/- %.3g\n", k.mean, k.mean_err);
  std::printf("  median KLD         = %.6g\n", k.median);
  std::printf("  99%% KLD            = %.6g\n", k.p99);
  std::printf("  max KLD            = %.6g\n", k.max);
  std::printf("  same top-1         = %.3f +/- %.3f %%\n", 100 * k.top1, 100 * k.top1_err);
}

int run_perplexity(PerplexityOptions o) {
  if (Status s = validate(o); !s.ok()) return fail(s.error());
  if (!o.kl_divergence_base.empty()) {
    if (!o.kl_save.empty() || !o.kl_base.empty())
      return fail(err("--kl-divergence-base is llama.cpp's spelling of --kl-save/--kl-base: give "
                      "one of them"));
    (o.kl_divergence ? o.kl_base : o.kl_save) = o.kl_divergence_base;
  } else if (o.kl_divergence) {
    return fail(err("--kl-divergence needs --kl-divergence-base FILE (written by a run without "
                    "--kl-divergence)"));
  }
  if (!o.kl_save.empty() && !o.kl_base.empty())
    return fail(err("--kl-save and --kl-base are mutually exclusive"));

  auto text = read_text_file(o.text_file);
  if (!text.ok()) return fail(text.error());

  const auto t_load = std::chrono::steady_clock::now();
  auto engine = Engine::load(o.model, load_options(o, o.load));
  if (!engine.ok()) return fail(engine.error());
  log_info("model: %s loaded in %.0f ms", o.model.c_str(),
           std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_load).count());

  SessionOptions so = env_session_options();
  so.n_batch = o.n_batch;
  so.n_threads = o.n_threads;
  so.sparse.dense = o.dense;
  if (Status s = apply_act_sparsity(o.act, so.sparse); !s.ok()) return fail(s.error());
  so.device = o.device;
  if (Status h = apply_hybrid_flags(o, so); !h.ok()) return fail(h.error());

  // Without -c / --chunks a base's own values hold.
  PerplexityParams p;
  const bool from_base = !o.kl_base.empty();
  p.n_ctx = o.ctx_given || !from_base ? o.n_ctx : 0;
  p.n_chunks = o.chunks_given || !from_base ? o.n_chunks : 0;
  p.kl_save = o.kl_save;
  p.kl_base = o.kl_base;
  install_sigint_flag();
  p.stop = [] { return interrupted(); };
  p.on_chunk = [](int64_t i, int64_t, double ppl) {
    std::printf("[%lld]%.4f,", static_cast<long long>(i), ppl);
    std::fflush(stdout);
  };
  auto r = perplexity(**engine, so, *text, p);
  if (!r.ok()) {
    // A text too short for the chunks is the file's fault: name it.
    if (r.error().message.starts_with("the text "))
      return fail(err("%s: %s", o.text_file.c_str(), r.error().message.c_str()));
    return fail(r.error());
  }
  std::printf("\n");
  if (r->stopped) {
    log_info("[interrupted after %lld of %lld chunks]", static_cast<long long>(r->n_done),
             static_cast<long long>(r->n_chunks));
    if (r->n_done == 0) return kInterruptedExit;
  }
  std::printf("Final estimate: PPL = %.4f +/- %.5f\n", r->ppl, r->ppl_err);
  if (const SparsityReport& sr = r->sparsity; sr.thresholded) {
    std::printf("Model-wide sparsity %.1f%% (the layers' projection bytes left unread; site "
                "levels %s)\n",
                100.0 * sr.model_wide_zeroed(),
                sr.allocated ? "from the file's allocation" : "as asked, no allocation");
    std::printf("Activation sparsity %.2f, share zeroed:", sr.act_sparsity);
    for (const SiteSparsity& site : sr.sites)
      std::printf(" %s %.1f%%", site.site.c_str(), 100.0 * site.zeroed_fraction());
    std::printf("\n");
  }
  if (r->kl) print_kl_summary(o.kl_base, *r);
  std::fflush(stdout);

  const Timings& t = r->timings;
  log_info(
      "perplexity: %lld chunks, %lld tokens evaluated (%lld scored) in %.2f s: %.2f tokens/s "
      "(forward passes alone: %.2f tokens/s)",
      static_cast<long long>(r->n_done), static_cast<long long>(t.n_prompt),
      static_cast<long long>(r->n_scored), r->eval_seconds,
      r->eval_seconds > 0 ? static_cast<double>(t.n_prompt) / r->eval_seconds : 0.0,
      t.prompt_ms > 0 ? 1e3 * static_cast<double>(t.n_prompt) / t.prompt_ms : 0.0);
  return r->stopped ? kInterruptedExit : 0;
}

}  // namespace

Runner add_perplexity(CLI::App& app) {
  auto o = std::make_shared<PerplexityOptions>();
  o->n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  CLI::App* sub = app.add_subcommand(
      "perplexity",
      "Perplexity of a model on a text, as llama.cpp computes it: the text is cut into chunks\n"
      "of -c tokens, each evaluated from an empty context, and the second half of each chunk\n"
      "is scored. Prints the running value per chunk and the final estimate with its error.\n"
      "--kl-save/--kl-base compare two models or modes token by token (KL divergence).\n"
      "PowerInfer files run sparse unless --dense; calibrated files (powerinfer calibrate)\n"
      "run with their activation thresholds unless --dense.");
  sub->add_option("-m,--model", o->model, "Model file")->required();
  sub->add_option("-f,--file", o->text_file, "Text file to score")->required();
  CLI::Option* ctx = sub->add_option("-c,--ctx-size", o->n_ctx,
                                     "Tokens per chunk (even, >= 4; with --kl-base: the base's)")
                         ->capture_default_str();
  sub->add_option("-b,--batch-size", o->n_batch, "Tokens per forward pass (at most -c)")
      ->capture_default_str();
  sub->add_option("-t,--threads", o->n_threads, "Threads")->capture_default_str();
  CLI::Option* chunks =
      sub->add_option("--chunks", o->n_chunks,
                      "Evaluate at most this many chunks (-1: all; with --kl-base: the base's)")
          ->capture_default_str();
  add_load_flags(sub, o->load);
  add_device_option(sub, o->device);
  sub->add_flag("--dense", o->dense, kDenseHelp);
  add_act_sparsity_flags(sub, o->act);
  CLI::Option* save = sub->add_option(
      "--kl-save", o->kl_save,
      "Write the scored positions' log-probabilities (f16) to this file, as a base for "
      "--kl-base");
  sub->add_option("--kl-base", o->kl_base,
                  "Compare with a file written by --kl-save: KL divergence per token, same top-1 "
                  "token, both perplexities")
      ->excludes(save);
  sub->add_option("--kl-divergence-base", o->kl_divergence_base,
                  "llama.cpp's spelling: alone, as --kl-save FILE; with --kl-divergence, as "
                  "--kl-base FILE");
  sub->add_flag("--kl-divergence", o->kl_divergence,
                "With --kl-divergence-base FILE: compare with it (llama.cpp's spelling)");
  add_model_flags(sub, *o);
  return [o, ctx, chunks]() -> int {
    o->ctx_given = ctx->count() > 0;
    o->chunks_given = chunks->count() > 0;
    return run_perplexity(*o);
  };
}

}  // namespace pi::cli
