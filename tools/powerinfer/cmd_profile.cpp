// `powerinfer profile -m MODEL -f TEXT -o STATS`: measures how often each FFN neuron fires.
// The text is tokenized and run through the model densely (every neuron computed, predictors
// unused) in chunks of -c tokens, each from an empty cache with BOS in front when the
// vocabulary adds one; per layer and neuron the tokens with a nonzero activation are counted
// (sparse::ProfilingFfn) and written as the statistics file `powerinfer plan --stats` reads,
// with the model's fingerprint. Progress goes to stderr, a per-layer summary to stdout.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_checks.h"
#include "commands.h"
#include "text_file.h"
#include "core/log.h"
#include "core/progress.h"
#include "model/model.h"
#include "runtime/context.h"
#include "sparse/activation_stats.h"
#include "sparse/placement_model.h"
#include "sparse/profile_ffn.h"
#include "tokenizer/tokenizer.h"

namespace pi::cli {
namespace {

struct ProfileOptions {
  std::string model, text_file, output;
  int64_t n_ctx = 512;
  int64_t n_batch = 512;
  int n_threads = 0;  // 0: hardware threads
  int64_t max_tokens = 0;  // 0: the whole text
  bool progress = true;
};

int run_profile(const ProfileOptions& o) {
  if (o.n_ctx < 2) return fail(err("-c must be >= 2 (got %lld)", static_cast<long long>(o.n_ctx)));
  if (o.n_batch < 1) return fail(err("-b must be >= 1 (got %lld)", static_cast<long long>(o.n_batch)));
  if (o.max_tokens < 0) return fail(err("--max-tokens must be >= 0"));
  auto text = read_text_file(o.text_file);
  if (!text.ok()) return fail(text.error());
  auto model = model::Model::load(o.model);
  if (!model.ok()) return fail(model.error());
  const model::Model& m = **model;
  if (m.hparams().is_moe())
    return fail(err("%s: `powerinfer %s` works on dense FFN layers; mixture-of-experts models are not supported "
                    "by it yet (they run with `powerinfer run`)",
                    o.model.c_str(), "profile"));
  auto tok = Tokenizer::from_gguf(m.file());
  if (!tok.ok()) return fail(tok.error());
  std::vector<int32_t> tokens = tok->encode(*text, false, /*parse_special=*/false);
  if (o.max_tokens > 0 && static_cast<int64_t>(tokens.size()) > o.max_tokens) {
    tokens.resize(static_cast<size_t>(o.max_tokens));
  }
  if (tokens.empty()) return fail(err("%s: the text has no tokens", o.text_file.c_str()));

  runtime::ContextOptions co;
  co.n_ctx = o.n_ctx;
  co.n_batch = std::min(o.n_batch, o.n_ctx);
  co.n_threads = o.n_threads > 0 ? o.n_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  co.dense = true;
  auto ctx = runtime::Context::create(m, co);
  if (!ctx.ok()) return fail(ctx.error());
  auto step = sparse::ProfilingFfn::create(m, (*ctx)->weights(), (*ctx)->device(), co.n_batch);
  if (!step.ok()) return fail(step.error());
  sparse::ProfilingFfn* profiler = step->get();
  (*ctx)->forward().set_ffn(std::move(*step));

  // Chunks of n_ctx tokens, the first of each replaced by BOS when the vocabulary adds one.
  const bool bos = tok->add_bos() && tok->bos() >= 0;
  const auto chunk = static_cast<size_t>(o.n_ctx);
  log_info("profile: %s: %zu tokens in chunks of %lld, %d threads", o.text_file.c_str(),
           tokens.size(), static_cast<long long>(o.n_ctx), co.n_threads);
  ProgressBar bar("profile", tokens.size());
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

  sparse::ActivationStats stats = profiler->stats();
  stats.model_fingerprint = sparse::model_fingerprint(m.file());
  if (Status s = sparse::write_activation_stats(o.output, stats); !s.ok()) return fail(s.error());
  std::printf("profiled %llu tokens of %s; wrote %s\n",
              static_cast<unsigned long long>(stats.n_tokens), o.text_file.c_str(), o.output.c_str());
  std::printf("layer  activity  top-20%% share\n");
  for (int64_t l = 0; l < stats.n_layer(); ++l) {
    std::vector<double> f = stats.frequencies(l);
    double sum = 0;
    for (double v : f) sum += v;
    std::sort(f.begin(), f.end(), std::greater<>());
    double top = 0;
    for (size_t i = 0; i < f.size() / 5; ++i) top += f[i];
    std::printf("%5lld  %7.2f%%  %12.1f%%\n", static_cast<long long>(l),
                100.0 * sum / static_cast<double>(f.size()), sum > 0 ? 100.0 * top / sum : 0.0);
  }
  return 0;
}

}  // namespace

Runner add_profile(CLI::App& app) {
  auto o = std::make_shared<ProfileOptions>();
  CLI::App* sub = app.add_subcommand(
      "profile", "Measure how often each FFN neuron fires on a text (input of `plan --stats`)");
  sub->add_option("-m,--model", o->model, "Model file (GGUF or PowerInfer)")->required();
  sub->add_option("-f,--file", o->text_file, "Text to run")->required();
  sub->add_option("-o,--output", o->output, "Statistics file to write")->required();
  sub->add_option("-c,--ctx-size", o->n_ctx, "Tokens per chunk (each from an empty cache)");
  sub->add_option("-b,--batch-size", o->n_batch, "Tokens per forward pass");
  sub->add_option("-t,--threads", o->n_threads, "Threads (0: all hardware threads)");
  sub->add_option("--max-tokens", o->max_tokens, "Profile at most this many tokens (0: all)");
  sub->add_flag("!--no-progress", o->progress, "No progress bar");
  return [o] { return run_profile(*o); };
}

}  // namespace pi::cli
