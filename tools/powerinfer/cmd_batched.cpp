// `powerinfer batched`: N continuations of one prompt, llama.cpp `batched` style. The prompt is
// evaluated once as sequence 0 and shared with sequences 1..N-1 (their KV cells are the same
// cells); then each step samples one token per still-active sequence and evaluates all of them
// in one forward pass. Sequence i samples with seed S + i, so `powerinfer run ... --seed S+i`
// with the same flags prints exactly sequence i (a sequence's logits do not depend on the
// batch; docs/ARCHITECTURE.md, "Batch invariance"). The continuations are printed to stdout
// at the end, in sequence order; model info, progress and timings go to stderr.
#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli_checks.h"
#include "commands.h"
#include "core/log.h"
#include "gen_options.h"
#include "interrupt.h"
#include "powerinfer/engine.h"
#include "powerinfer/vocabulary.h"

namespace pi::cli {
namespace {

constexpr int kMaxParallel = 64;

struct BatchedOptions : GenOptions {
  int n_parallel = 1;
};

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// One sequence's output: the prompt as printed, then its continuation.
struct Continuation {
  std::unique_ptr<Vocabulary::Decoder> dec;
  std::string shown_prompt;
  std::string text;
  int64_t n_tokens = 0;
  bool active = true;
  size_t entry = 0;  // its entry in the last batch
};

void print_timings(double load_ms, const Timings& t, int64_t n_steps, int n_parallel,
                   double total_ms) {
  auto rate = [](double ms, int64_t n) { return ms > 0 ? 1e3 * static_cast<double>(n) / ms : 0.0; };
  log_info("%s", "");
  log_info("%-17s = %10.2f ms", "load time", load_ms);
  log_info("%-17s = %10.2f ms / %5lld runs   (%9.2f runs per second)", "sample time", t.sample_ms,
           static_cast<long long>(t.n_sample), rate(t.sample_ms, t.n_sample));
  log_info("%-17s = %10.2f ms / %5lld tokens (%8.2f ms per token, %9.2f tokens per second)",
           "prompt eval time", t.prompt_ms, static_cast<long long>(t.n_prompt),
           t.n_prompt > 0 ? t.prompt_ms / static_cast<double>(t.n_prompt) : 0.0,
           rate(t.prompt_ms, t.n_prompt));
  log_info("%-17s = %10.2f ms / %5lld tokens in %lld steps of up to %d sequences "
           "(%8.2f ms per step, %9.2f tokens per second)",
           "decode time", t.eval_ms, static_cast<long long>(t.n_eval),
           static_cast<long long>(n_steps), n_parallel,
           n_steps > 0 ? t.eval_ms / static_cast<double>(n_steps) : 0.0, rate(t.eval_ms, t.n_eval));
  log_info("%-17s = %10.2f ms / %5lld tokens", "total time", total_ms,
           static_cast<long long>(t.n_prompt + t.n_eval));
}

int batched(const BatchedOptions& o_in) {
  BatchedOptions o = o_in;
  auto model = resolve_model(o);
  if (!model.ok()) return fail(model.error());
  o.model = *model;
  if (o.n_parallel < 1 || o.n_parallel > kMaxParallel)
    return fail(err("-np must be 1..%d (got %d)", kMaxParallel, o.n_parallel));
  if (o.n_predict < 0) {
    return fail(err("-n must be >= 0: tokens to generate per sequence (got %lld)",
                    static_cast<long long>(o.n_predict)));
  }
  if (Status s = validate_gen(o); !s.ok()) return fail(s);
  auto text = load_prompt(o);
  if (!text.ok()) return fail(text.error());
  const uint64_t seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();

  install_sigint_flag();

  const auto t_start = std::chrono::steady_clock::now();
  auto engine = Engine::load(o.model, load_options(o, o.load));
  if (!engine.ok()) return fail(engine.error());
  const Vocabulary* tok = (*engine)->vocabulary();
  if (tok == nullptr) {
    return fail(err("%s: the file has no vocabulary (tokenizer.ggml.model), so it cannot run text",
                    o.model.c_str()));
  }
  const std::vector<int32_t> tokens = tok->encode(*text, tok->add_bos(), /*parse_special=*/true);
  if (tokens.empty()) return fail(err("the prompt is empty and the vocabulary has no BOS token: pass -p TEXT"));
  const auto n_prompt = static_cast<int64_t>(tokens.size());
  const int64_t needed = n_prompt + o.n_parallel * o.n_predict;
  if (o.n_ctx > 0 && o.n_ctx < needed) {
    return fail(err("context too small: the prompt (%lld tokens) and %d sequences x %lld tokens "
                    "need %lld cells; pass -c >= %lld (or leave -c out)",
                    static_cast<long long>(n_prompt), o.n_parallel,
                    static_cast<long long>(o.n_predict), static_cast<long long>(needed),
                    static_cast<long long>(needed)));
  }
  auto so = session_options(o, seed);
  if (!so.ok()) return fail(so.error());
  if (!so->sampling.grammar.empty())
    return fail(err("batched does not take a grammar yet: use run (or the server, which "
                    "constrains each request)"));
  so->n_ctx = o.n_ctx > 0 ? o.n_ctx : needed;
  so->n_seq_max = o.n_parallel;
  auto session_r = Session::create(**engine, *so);
  if (!session_r.ok()) return fail(session_r.error());
  Session& session = **session_r;
  if (o.warmup) {
    if (Status s = session.warmup(tok->bos() >= 0 ? tok->bos() : 0); !s.ok()) return fail(s);
  }
  const double load_ms = ms_since(t_start);

  const ModelInfo& info = (*engine)->info();
  log_model_info(o.model, info, session.sparsity().sparse);
  log_info("prompt %lld tokens, %d sequences x %lld tokens, context %lld, batch %lld, threads %d",
           static_cast<long long>(n_prompt), o.n_parallel, static_cast<long long>(o.n_predict),
           static_cast<long long>(session.n_ctx()), static_cast<long long>(session.n_batch()),
           session.n_threads());
  log_info("seeds: sequence i samples with seed %llu + i", static_cast<unsigned long long>(seed));
  if (info.n_ctx_train > 0 && n_prompt + o.n_predict > info.n_ctx_train) {
    log_warn("a sequence of %lld tokens exceeds the model's training context %lld: quality may "
             "degrade", static_cast<long long>(n_prompt + o.n_predict),
             static_cast<long long>(info.n_ctx_train));
  }
  if (o.ignore_eos) session.ban_tokens(tok->eog_tokens());

  std::vector<Continuation> seqs(static_cast<size_t>(o.n_parallel));
  for (Continuation& c : seqs) {
    c.dec = std::make_unique<Vocabulary::Decoder>(*tok);
    for (int32_t t : tokens) c.shown_prompt += c.dec->push(t);
  }

  bool was_interrupted = false;
  int64_t n_steps = 0;
  auto finish = [&](int code) {
    for (size_t i = 0; i < seqs.size(); ++i) {
      Continuation& c = seqs[i];
      c.text += c.dec->flush();
      std::printf("sequence %zu:\n\n%s%s\n\n", i, o.no_display_prompt ? "" : c.shown_prompt.c_str(),
                  c.text.c_str());
    }
    std::fflush(stdout);
    if (was_interrupted) log_info("[interrupted]");
    int64_t generated = 0;
    for (const Continuation& c : seqs) generated += c.n_tokens;
    const double total_ms = ms_since(t_start);
    print_timings(load_ms, session.timings(), n_steps, o.n_parallel, total_ms);
    const double gen_s = (session.timings().eval_ms + session.timings().sample_ms) / 1e3;
    log_info("generated %lld tokens in %d sequences: %.2f tokens per second (decode and sample)",
             static_cast<long long>(generated), o.n_parallel,
             gen_s > 0 ? static_cast<double>(generated) / gen_s : 0.0);
    return code;
  };

  if (Status s = session.prompt(tokens, [] { return interrupted(); }); !s.ok()) {
    if (interrupted()) {
      was_interrupted = true;
      return finish(130);
    }
    log_error("%s", s.error().message.c_str());
    return finish(1);
  }
  for (int i = 1; i < o.n_parallel; ++i) {
    if (Status s = session.fork(0, i); !s.ok()) {
      log_error("%s", s.error().message.c_str());
      return finish(1);
    }
  }

  // Step k samples token k of every active sequence; all but the last are then evaluated
  // together (the last token's logits would not be used).
  std::vector<BatchToken> batch;
  batch.reserve(seqs.size());
  for (int64_t k = 0; k < o.n_predict; ++k) {
    if (interrupted()) {
      was_interrupted = true;
      return finish(130);
    }
    batch.clear();
    for (size_t i = 0; i < seqs.size(); ++i) {
      Continuation& c = seqs[i];
      if (!c.active) continue;
      const auto seq = static_cast<int32_t>(i);
      const std::span<const float> logits =
          k == 0 ? session.logits() : session.batch_logits(c.entry);
      const int32_t t = session.sample(seq, logits);
      if (!o.ignore_eos && tok->is_eog(t)) {
        c.active = false;
        continue;
      }
      c.text += c.dec->push(t);
      ++c.n_tokens;
      if (k + 1 == o.n_predict) continue;
      c.entry = batch.size();
      batch.push_back({t, seq, static_cast<int32_t>(n_prompt + k), true});
    }
    if (batch.empty()) break;
    if (Status s = session.decode(batch); !s.ok()) {
      log_error("%s", s.error().message.c_str());
      return finish(1);
    }
    ++n_steps;
  }
  return finish(0);
}

}  // namespace

Runner add_batched(CLI::App& app) {
  auto o = std::make_shared<BatchedOptions>();
  o->n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  o->n_predict = 32;
  CLI::App* sub = app.add_subcommand(
      "batched",
      "Generate -np continuations of one prompt, all sequences decoded in one forward pass per\n"
      "step (the prompt is evaluated once and its KV cells shared). Sequence i samples with seed\n"
      "S + i: `powerinfer run` with --seed S+i prints the same text. Continuations go to stdout\n"
      "at the end, timings to stderr.");
  add_gen_flags(sub, *o, "Tokens to generate per sequence");
  sub->add_option("-c,--ctx-size", o->n_ctx,
                  "KV cells shared by all sequences (0: prompt + np x n, just enough)")
      ->capture_default_str();
  sub->add_option("--np,--parallel", o->n_parallel,
                  "Sequences to generate (1..64; llama.cpp spelling -np accepted)")
      ->capture_default_str();
  return [o]() -> int { return batched(*o); };
}

}  // namespace pi::cli
