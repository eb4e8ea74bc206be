// `powerinfer profile -m MODEL -f TEXT -o STATS`: measures how often each FFN neuron (and, in a
// mixture of experts, each expert) fires on a text and writes the statistics file `powerinfer
// plan --stats` reads. The work is the library's (include/powerinfer/profile.h says how); this
// file holds the flags and the per-layer summary on stdout (and, with --expert-cache, the
// scores of device expert sets on the text's routing).
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
#include "powerinfer/profile.h"
#include "sparse/expert_cache.h"

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
void print_expert_summary(const ProfileReport& r) {
  const double uniform = static_cast<double>(r.n_expert_used) / static_cast<double>(r.n_expert);
  std::printf("experts: %lld per layer, %lld per token (uniform share and chance reuse %.1f%%)\n",
              static_cast<long long>(r.n_expert), static_cast<long long>(r.n_expert_used), 100.0 * uniform);
  std::printf("layer  least chosen  most chosen  reuse  neurons fired\n");
  for (size_t l = 0; l < r.layers.size(); ++l) {
    const ProfileLayer& x = r.layers[l];
    std::string fired = "-";
    if (x.fired >= 0) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.1f%%", 100.0 * x.fired);
      fired = buf;
    }
    std::printf("%5lld  %11.1f%%  %10.1f%%  %4.1f%%  %13s\n", static_cast<long long>(l), 100.0 * x.least_chosen,
                100.0 * x.most_chosen, 100.0 * x.reuse, fired.c_str());
  }
}

int run_profile(const ProfileOptions& o) {
  auto text = read_text_file(o.text_file);
  if (!text.ok()) return fail(text.error());
  ProfileParams p;
  p.model = o.model;
  p.output = o.output;
  p.n_ctx = o.n_ctx;
  p.n_batch = o.n_batch;
  p.n_threads = o.n_threads;
  p.max_tokens = o.max_tokens;
  p.progress = o.progress;
  p.keep_routes = o.expert_cache;
  auto r = profile_model(p, *text);
  if (!r.ok()) {
    if (r.error().message.starts_with("the text "))
      return fail(err("%s: %s", o.text_file.c_str(), r.error().message.c_str()));
    return fail(r.error());
  }
  std::printf("profiled %llu tokens of %s; wrote %s\n", static_cast<unsigned long long>(r->n_tokens),
              o.text_file.c_str(), o.output.c_str());
  if (r->experts) {
    print_expert_summary(*r);
    if (o.expert_cache) {
      sparse::RoutingTrace trace;
      trace.n_expert = r->n_expert;
      trace.n_expert_used = r->n_expert_used;
      trace.layers = std::move(r->routes);
      if (Status st = print_cache_table(trace, r->expert_bytes); !st.ok()) return fail(st.error());
    }
    return 0;
  }
  std::printf("layer  activity  top-20%% share\n");
  for (size_t l = 0; l < r->layers.size(); ++l) {
    std::printf("%5lld  %7.2f%%  %12.1f%%\n", static_cast<long long>(l), 100.0 * r->layers[l].activity,
                100.0 * r->layers[l].top20_share);
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
