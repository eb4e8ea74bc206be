// `powerinfer profile -m MODEL -f TEXT -o STATS`: measures how often each FFN neuron fires.
// The text is tokenized and run through the model densely (every neuron computed, predictors
// unused) in chunks of -c tokens, each from an empty cache with BOS in front when the
// vocabulary adds one; per layer and neuron the tokens with a nonzero activation are counted
// (sparse::ProfilingFfn) and written as the statistics file `powerinfer plan --stats` reads,
// with the model's fingerprint. Progress goes to stderr, a per-layer summary to stdout.
// A mixture of experts runs as it always does (ReGLU experts sparse: the positive gates are the
// neurons that fire) and the statistics record, per layer, how often each expert is chosen,
// how often a token reuses an expert of the token before it, and, for ReGLU experts, each
// expert neuron's firing count.
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
#include "model/moe_ffn.h"
#include "runtime/context.h"
#include "sparse/activation_stats.h"
#include "sparse/expert_cache.h"
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
  bool expert_cache = false;  // score static / LRU expert sets on the routing (MoE)
};

// A device holding a quarter and a half of each layer's experts, scored on the text's routing
// and on synthetic traces of known skew and reuse (sparse/expert_cache.h): the share of
// (token, expert) pairs it serves as a static set of the most chosen, as an LRU cache, and
// half of each; what the CPU then reads per token, and what the caches upload.
Status print_cache_table(const sparse::RoutingTrace& text, uint64_t expert_bytes) {
  const int64_t n_layer = static_cast<int64_t>(text.layers.size());
  const int64_t tokens = std::max<int64_t>(text.tokens(), 4000);
  struct Row {
    std::string name;
    sparse::RoutingTrace trace;
  };
  std::vector<Row> rows;
  rows.push_back({"this text", text});
  const struct {
    const char* name;
    double zipf, keep;
  } synth[] = {{"uniform", 0.0, 0.0}, {"skewed (zipf 1.2)", 1.2, 0.0}, {"sticky (keep 0.6)", 0.0, 0.6},
               {"skewed + sticky", 1.2, 0.6}};
  for (const auto& sy : synth)
    rows.push_back({sy.name, sparse::synthetic_trace(n_layer, text.n_expert, text.n_expert_used, tokens, sy.zipf,
                                                     sy.keep, 1)});
  const double mib = static_cast<double>(expert_bytes) / 1048576.0;
  std::printf("\ndevice expert sets, scored on each trace's second half having seen its first "
              "(hit: pairs the device serves; CPU and upload MiB per token)\n");
  std::printf("%-18s %6s %6s %6s  %23s  %23s  %15s\n", "trace", "top", "reuse", "slots",
              "hit static/lru/both", "CPU MiB static/lru/both", "upload lru/both");
  constexpr sparse::CachePolicy kPolicies[] = {sparse::CachePolicy::Static, sparse::CachePolicy::Lru,
                                              sparse::CachePolicy::StaticLru};
  for (const Row& r : rows) {
    const sparse::TraceShape shape = sparse::trace_shape(r.trace);
    for (int64_t slots : {text.n_expert / 4, text.n_expert / 2}) {
      if (slots < 1) continue;
      sparse::CacheScore sc[3];
      for (int i = 0; i < 3; ++i) {
        auto x = sparse::score_cache(r.trace, kPolicies[i], slots);
        if (!x.ok()) return x.error();
        sc[i] = *x;
      }
      std::printf("%-18s %5.1f%% %5.1f%% %3lld/%-3lld %6.1f%% %6.1f%% %6.1f%%  %7.3f %7.3f %7.3f  %7.3f %7.3f\n",
                  r.name.c_str(), 100.0 * shape.top_share, 100.0 * shape.reuse, static_cast<long long>(slots),
                  static_cast<long long>(text.n_expert), 100.0 * sc[0].hit_rate, 100.0 * sc[1].hit_rate,
                  100.0 * sc[2].hit_rate, sc[0].misses_per_token * mib, sc[1].misses_per_token * mib,
                  sc[2].misses_per_token * mib, sc[1].uploads_per_token * mib, sc[2].uploads_per_token * mib);
    }
  }
  return Status::Ok();
}

// Per layer: the least and most chosen experts' shares of the tokens (uniform: k / n), how
// often a token reuses an expert of the token before it (chance: k / n), and the share of the
// routed experts' neurons that fired.
void print_expert_summary(const sparse::ActivationStats& s) {
  const double uniform = static_cast<double>(s.n_expert_used) / static_cast<double>(s.n_expert);
  std::printf("experts: %lld per layer, %lld per token (uniform share and chance reuse %.1f%%)\n",
              static_cast<long long>(s.n_expert), static_cast<long long>(s.n_expert_used), 100.0 * uniform);
  std::printf("layer  least chosen  most chosen  reuse  neurons fired\n");
  for (int64_t l = 0; l < s.n_layer(); ++l) {
    const std::vector<double> sh = s.expert_shares(l);
    const auto [lo, hi] = std::minmax_element(sh.begin(), sh.end());
    std::string fired = "-";
    const auto& c = s.counts[static_cast<size_t>(l)];
    if (!c.empty()) {
      // Fired neurons over the neurons of the experts the tokens were routed to.
      const int64_t n_ff_exp = static_cast<int64_t>(c.size()) / s.n_expert;
      double on = 0, routed = 0;
      for (float v : c) on += v;
      for (float v : s.expert_counts[static_cast<size_t>(l)]) routed += static_cast<double>(v) * static_cast<double>(n_ff_exp);
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.1f%%", routed > 0 ? 100.0 * on / routed : 0.0);
      fired = buf;
    }
    std::printf("%5lld  %11.1f%%  %10.1f%%  %4.1f%%  %13s\n", static_cast<long long>(l), 100.0 * *lo,
                100.0 * *hi, 100.0 * s.reuse_rate(l), fired.c_str());
  }
}

int run_profile(const ProfileOptions& o) {
  if (o.n_ctx < 2) return fail(err("-c must be >= 2 (got %lld)", static_cast<long long>(o.n_ctx)));
  if (o.n_batch < 1) return fail(err("-b must be >= 1 (got %lld)", static_cast<long long>(o.n_batch)));
  if (o.max_tokens < 0) return fail(err("--max-tokens must be >= 0"));
  auto text = read_text_file(o.text_file);
  if (!text.ok()) return fail(text.error());
  auto model = model::Model::load(o.model);
  if (!model.ok()) return fail(model.error());
  const model::Model& m = **model;
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
  const model::HParams& hp = m.hparams();
  co.dense = !hp.is_moe();
  co.profile = true;
  auto ctx = runtime::Context::create(m, co);
  if (!ctx.ok()) return fail(ctx.error());
  const sparse::ProfilingFfn* profiler = (*ctx)->profiler();
  model::MoeFfn* moe = (*ctx)->moe_ffn();
  sparse::ActivationStats moe_stats;
  sparse::RoutingTrace trace;  // --expert-cache
  if (hp.is_moe()) {
    if (moe == nullptr) return fail(err("%s: the context runs no mixture-of-experts step", o.model.c_str()));
    moe->trace_routes(true);
    moe->count_neurons(true);
    moe_stats.source = "profile";
    moe_stats.n_expert = hp.n_expert;
    moe_stats.n_expert_used = hp.n_expert_used;
    moe_stats.expert_counts.assign(static_cast<size_t>(hp.n_layer), std::vector<float>(static_cast<size_t>(hp.n_expert)));
    moe_stats.expert_reuse.assign(static_cast<size_t>(hp.n_layer), 0.0f);
    trace.n_expert = hp.n_expert;
    trace.n_expert_used = hp.n_expert_used;
    trace.layers.resize(static_cast<size_t>(hp.n_layer));
  } else {
    if (o.expert_cache) return fail(err("--expert-cache: %s is not a mixture of experts", o.model.c_str()));
  }

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
    if (moe != nullptr) {
      // Each chunk is one sequence from its first token.
      for (int64_t il = 0; il < hp.n_layer; ++il) {
        const std::vector<int32_t>& ids = moe->routes()[static_cast<size_t>(il)];
        if (Status s = sparse::count_routes(moe_stats, il, ids); !s.ok()) return fail(s.error());
        if (o.expert_cache) trace.layers[static_cast<size_t>(il)].insert(trace.layers[static_cast<size_t>(il)].end(), ids.begin(), ids.end());
      }
      moe->clear_routes();
      moe_stats.n_tokens += piece.size();
    }
    if (o.progress) bar.update(at + piece.size());
  }
  bar.finish();

  sparse::ActivationStats stats;
  if (moe != nullptr) {
    stats = std::move(moe_stats);
    stats.counts = moe->neuron_counts();
    stats.counts.resize(static_cast<size_t>(hp.n_layer));  // empty rows: no neuron counts
  } else {
    stats = profiler->stats();
  }
  stats.model_fingerprint = sparse::model_fingerprint(m.file());
  if (Status s = sparse::write_activation_stats(o.output, stats); !s.ok()) return fail(s.error());
  std::printf("profiled %llu tokens of %s; wrote %s\n",
              static_cast<unsigned long long>(stats.n_tokens), o.text_file.c_str(), o.output.c_str());
  if (stats.has_experts()) {
    print_expert_summary(stats);
    if (o.expert_cache) {
      if (Status st = print_cache_table(trace, sparse::expert_bytes(m.weights().layers[0], hp.n_expert)); !st.ok())
        return fail(st.error());
    }
    return 0;
  }
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
  sub->add_flag("--expert-cache", o->expert_cache,
                "Mixtures of experts: also score a device holding 1/4 and 1/2 of each layer's experts as a "
                "static set of the most chosen, an LRU cache, and half of each, on this text's routing and on "
                "synthetic traces");
  return [o] { return run_profile(*o); };
}

}  // namespace pi::cli
