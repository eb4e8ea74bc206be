// `powerinfer batched-bench`: throughput of batched decoding over a grid of prompt length (PP)
// x generation length (TG) x parallel sequences (PL), like llama.cpp's batched-bench. For each
// cell: PL sequences each get a PP-token prompt (all prompts in batches of -b tokens; with
// --pps one prompt, evaluated once and shared), then TG steps decode one token per sequence in
// one forward pass each. Token ids are fixed pseudo-random ids (no sampling), so runs are
// repeatable. Columns as llama.cpp: N_KV cells used, T_PP/S_PP prompt time and speed, T_TG/S_TG
// generation time and speed, T/S the whole cell. The table (md or json) goes to stdout;
// progress, and for sparse runs the gate/up paths the batch cost model chose, go to stderr.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli_checks.h"
#include "commands.h"
#include "core/log.h"
#include "gen_options.h"
#include "interrupt.h"
#include "llama_flags.h"
#include "powerinfer/engine.h"

namespace pi::cli {
namespace {

struct BatchedBenchOptions : ModelFlags {
  std::string model;
  int n_threads = 1;
  int64_t n_ctx = 0;
  int64_t n_batch = 512;
  std::vector<int64_t> npp = {128, 256, 512};
  std::vector<int64_t> ntg = {128, 256};
  std::vector<int64_t> npl = {1, 2, 4, 8, 16, 32};
  bool pps = false;
  bool dense = false;
  std::string device = "cpu";
  ModelLoad load = ModelLoad::Auto;  // --mmap, --no-mmap
  std::string output = "md";
  bool warmup = true;
};

struct Row {
  int64_t pp, tg, pl, n_kv;
  double t_pp, s_pp, t_tg, s_tg, t, s;
};

// KV cells one cell of the grid needs.
int64_t cells_needed(int64_t pp, int64_t tg, int64_t pl, bool pps) {
  return pps ? pp + pl * tg : pl * (pp + tg);
}

// Fixed token ids: a linear congruential sequence over the vocabulary.
struct TokenStream {
  uint32_t x = 12345;
  int64_t n_vocab;
  int32_t next() {
    x = x * 1664525u + 1013904223u;
    return static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(n_vocab));
  }
};

Status check(const BatchedBenchOptions& o) {
  PI_TRY(check_threads("-t", o.n_threads));
  PI_TRY(check_model_flags(o));
  if (o.n_ctx < 0) return err("-c must be >= 0 (got %lld)", static_cast<long long>(o.n_ctx));
  if (o.n_batch < 1) return err("-b must be >= 1 (got %lld)", static_cast<long long>(o.n_batch));
  if (o.output != "md" && o.output != "json")
    return err("-o must be md or json (got '%s')", o.output.c_str());
  const struct {
    const char* flag;
    const std::vector<int64_t>& v;
    int64_t lo;
  } lists[] = {{"-npp", o.npp, 1}, {"-ntg", o.ntg, 0}, {"-npl", o.npl, 1}};
  for (const auto& l : lists) {
    if (l.v.empty()) return err("%s needs at least one value", l.flag);
    for (int64_t x : l.v) {
      if (x < l.lo) {
        return err("%s values must be >= %lld (got %lld)", l.flag, static_cast<long long>(l.lo),
                   static_cast<long long>(x));
      }
    }
  }
  for (int64_t pl : o.npl) {
    if (pl > 64) return err("-npl values must be <= 64 sequences (got %lld)", static_cast<long long>(pl));
  }
  return Status::Ok();
}

// The share of batched gate/up products per path since the last reset, e.g.
// "per-token 100%"; empty when the session runs dense or ran no batch.
std::string path_summary(const SparsityReport& r) {
  if (!r.sparse) return "";
  int64_t n[4] = {};
  for (const LayerSparsity& l : r.layers)
    for (int p = 0; p < 4; ++p) n[p] += l.batch_paths[p];
  const int64_t total = n[0] + n[1] + n[2] + n[3];
  if (total == 0) return "";
  static const char* kNames[4] = {"per-token", "lists", "union", "dense"};
  std::string s;
  for (int p = 0; p < 4; ++p) {
    if (n[p] == 0) continue;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%s %.0f%%", s.empty() ? "" : ", ", kNames[p],
                  100.0 * static_cast<double>(n[p]) / static_cast<double>(total));
    s += buf;
  }
  return s;
}

// Runs one cell of the grid on an empty session.
Result<Row> run_cell(Session& s, int64_t n_vocab, int64_t pp, int64_t tg, int64_t pl, bool pps,
                     std::string& paths) {
  s.reset();
  TokenStream ids{12345, n_vocab};
  std::vector<BatchToken> batch;
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n_prompts = pps ? 1 : pl;
  for (int64_t j = 0; j < n_prompts; ++j) {
    for (int64_t p = 0; p < pp; ++p) {
      batch.push_back({ids.next(), static_cast<int32_t>(j), static_cast<int32_t>(p), p + 1 == pp});
    }
  }
  PI_TRY(s.decode(batch));
  if (pps) {
    for (int64_t j = 1; j < pl; ++j) PI_TRY(s.fork(0, static_cast<int32_t>(j)));
  }
  const double t_pp = seconds_since(t0);

  s.reset_sparsity();
  const auto t1 = std::chrono::steady_clock::now();
  for (int64_t k = 0; k < tg; ++k) {
    batch.clear();
    for (int64_t j = 0; j < pl; ++j)
      batch.push_back({ids.next(), static_cast<int32_t>(j), static_cast<int32_t>(pp + k), true});
    PI_TRY(s.decode(batch));
  }
  const double t_tg = seconds_since(t1);
  paths = path_summary(s.sparsity());

  Row r{};
  r.pp = pp, r.tg = tg, r.pl = pl;
  r.n_kv = cells_needed(pp, tg, pl, pps);
  r.t_pp = t_pp;
  r.s_pp = t_pp > 0 ? static_cast<double>(pps ? pp : pl * pp) / t_pp : 0.0;
  r.t_tg = t_tg;
  r.s_tg = t_tg > 0 ? static_cast<double>(pl * tg) / t_tg : 0.0;
  r.t = t_pp + t_tg;
  r.s = r.t > 0 ? static_cast<double>(r.n_kv) / r.t : 0.0;
  return r;
}

void print_md(const std::vector<Row>& rows) {
  std::printf("|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |\n");
  std::printf("|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|\n");
  for (const Row& r : rows) {
    std::printf("| %5lld | %6lld | %4lld | %6lld | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |\n",
                static_cast<long long>(r.pp), static_cast<long long>(r.tg),
                static_cast<long long>(r.pl), static_cast<long long>(r.n_kv), r.t_pp, r.s_pp,
                r.t_tg, r.s_tg, r.t, r.s);
  }
}

void print_json(const std::vector<Row>& rows) {
  std::printf("[\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::printf("  {\"pp\": %lld, \"tg\": %lld, \"pl\": %lld, \"n_kv\": %lld, \"t_pp\": %.6f, "
                "\"speed_pp\": %.3f, \"t_tg\": %.6f, \"speed_tg\": %.3f, \"t\": %.6f, "
                "\"speed\": %.3f}%s\n",
                static_cast<long long>(r.pp), static_cast<long long>(r.tg),
                static_cast<long long>(r.pl), static_cast<long long>(r.n_kv), r.t_pp, r.s_pp,
                r.t_tg, r.s_tg, r.t, r.s, i + 1 < rows.size() ? "," : "");
  }
  std::printf("]\n");
}

int bench(const BatchedBenchOptions& o_in) {
  BatchedBenchOptions o = o_in;
  GenOptions g;
  g.model = o.model;
  auto model = resolve_model(g);
  if (!model.ok()) return fail(model.error());
  o.model = *model;
  if (Status s = check(o); !s.ok()) return fail(s);

  int64_t max_kv = 0, max_pl = 1;
  for (int64_t pp : o.npp)
    for (int64_t tg : o.ntg)
      for (int64_t pl : o.npl) max_kv = std::max(max_kv, cells_needed(pp, tg, pl, o.pps));
  for (int64_t pl : o.npl) max_pl = std::max(max_pl, pl);
  const int64_t n_ctx = o.n_ctx > 0 ? o.n_ctx : max_kv;

  auto engine = Engine::load(o.model, load_options(o, o.load));
  if (!engine.ok()) return fail(engine.error());
  SessionOptions so = env_session_options();
  so.n_ctx = n_ctx;
  so.n_batch = o.n_batch;
  so.n_threads = o.n_threads;
  so.n_seq_max = static_cast<int>(max_pl);
  so.sparse.dense = o.dense;
  so.device = o.device;
  if (Status h = apply_hybrid_flags(o, so); !h.ok()) return fail(h);
  auto session_r = Session::create(**engine, so);
  if (!session_r.ok()) return fail(session_r.error());
  Session& s = **session_r;
  const ModelInfo& info = (*engine)->info();
  if (o.warmup) {
    if (Status st = s.warmup(static_cast<int32_t>(1 % info.n_vocab)); !st.ok()) return fail(st);
  }
  log_info("model: %s (%s%s), context %lld, batch %lld, threads %d, %s prompts", o.model.c_str(),
           info.architecture.c_str(), !info.powerinfer      ? ""
           : s.sparsity().sparse ? ", PowerInfer file run sparse"
                                 : ", PowerInfer file run dense",
           static_cast<long long>(s.n_ctx()), static_cast<long long>(s.n_batch()), s.n_threads(),
           o.pps ? "shared (--pps)" : "separate");

  std::vector<Row> rows;
  install_sigint_flag();
  const size_t n_cells = o.npp.size() * o.ntg.size() * o.npl.size();
  for (int64_t pp : o.npp) {
    for (int64_t tg : o.ntg) {
      for (int64_t pl : o.npl) {
        if (interrupted()) break;
        const int64_t need = cells_needed(pp, tg, pl, o.pps);
        if (need > s.n_ctx()) {
          log_warn("PP %lld TG %lld PL %lld skipped: needs %lld KV cells, -c is %lld",
                   static_cast<long long>(pp), static_cast<long long>(tg),
                   static_cast<long long>(pl), static_cast<long long>(need),
                   static_cast<long long>(s.n_ctx()));
          continue;
        }
        std::string paths;
        auto r = run_cell(s, info.n_vocab, pp, tg, pl, o.pps, paths);
        if (!r.ok()) return fail(r.error());
        log_info("PP %lld TG %lld PL %lld: prompt %.3f s, generation %.3f s (%.2f t/s)%s%s",
                 static_cast<long long>(pp), static_cast<long long>(tg),
                 static_cast<long long>(pl), r->t_pp, r->t_tg, r->s_tg,
                 paths.empty() ? "" : "; gate/up paths in decode batches: ", paths.c_str());
        rows.push_back(*r);
      }
    }
  }
  if (interrupted()) {
    log_info("[interrupted: %zu of %zu cells finished]", rows.size(), n_cells);
    if (rows.empty()) return kInterruptedExit;
  } else if (rows.empty()) {
    return fail(err("no cell of the grid fits the context of %lld cells (the largest needs %lld)",
                    static_cast<long long>(s.n_ctx()), static_cast<long long>(max_kv)));
  }
  if (o.output == "json") {
    print_json(rows);
  } else {
    print_md(rows);
  }
  std::fflush(stdout);
  return interrupted() ? kInterruptedExit : 0;
}

}  // namespace

Runner add_batched_bench(CLI::App& app) {
  auto o = std::make_shared<BatchedBenchOptions>();
  CLI::App* sub = app.add_subcommand(
      "batched-bench",
      "Batched decoding throughput over a grid of prompt length (-npp) x generation length\n"
      "(-ntg) x parallel sequences (-npl), like llama.cpp's batched-bench. llama.cpp's\n"
      "spellings -npp -ntg -npl -pps are accepted.");
  sub->add_option("-m,--model", o->model,
                  std::string("Model file (default: ") + kDefaultModel + " if present)");
  sub->add_option("-t,--threads", o->n_threads, "Threads")->capture_default_str();
  sub->add_option("-c,--ctx-size", o->n_ctx,
                  "KV cells (0: enough for the largest cell of the grid)")
      ->capture_default_str();
  sub->add_option("-b,--batch-size", o->n_batch, "Most tokens per forward pass")
      ->capture_default_str();
  sub->add_option("--npp", o->npp, "Prompt lengths, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--ntg", o->ntg, "Tokens generated per sequence, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--npl", o->npl, "Parallel sequences (1..64), comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_flag("--pps", o->pps, "One shared prompt, evaluated once and copied to every sequence");
  add_load_flags(sub, o->load);
  add_device_option(sub, o->device);
  sub->add_flag("--dense", o->dense, kDenseHelp);
  sub->add_option("-o,--output", o->output, "Table format: md or json")->capture_default_str();
  sub->add_flag("!--no-warmup", o->warmup, "Skip the warm-up pass that maps the weights");
  add_model_flags(sub, *o);
  return [o]() -> int { return bench(*o); };
}

}  // namespace pi::cli
