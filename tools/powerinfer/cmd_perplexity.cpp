// `powerinfer perplexity`: perplexity of a model on a text file, computed as llama.cpp's
// `perplexity` tool computes it, plus a KL-divergence comparison against a saved base run.
//
// Method: the whole text is tokenized (BOS prepended when the vocabulary asks for it) and cut
// into n = tokens / c chunks of c tokens (the tail is dropped). Each chunk is evaluated from an
// empty KV cache, its first token replaced by BOS when the vocabulary adds one, and only the
// second half is scored: the logits at positions c/2 .. c-2 predict tokens c/2+1 .. c-1, so
// every scored token sees at least c/2 tokens of context. PPL = exp(mean NLL) over all scored
// tokens; its error is PPL times the standard error of the mean NLL.
//
// --kl-save FILE stores the scored positions' log-probabilities (f16, perplexity_kl_file.h);
// --kl-base FILE compares this run with them: KL(base || this) per token, same top-1 token.
// Results (running values, final estimate, KL summary) go to stdout; diagnostics to stderr.
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
#include "perplexity_kl_file.h"
#include "perplexity_stats.h"
#include "powerinfer/engine.h"
#include "tokenizer/tokenizer.h"

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

// The split of the token stream into chunks and the positions scored in each.
struct Chunking {
  int64_t n_ctx = 0;     // tokens per chunk
  int64_t first = 0;     // first position whose logits are scored: n_ctx / 2
  int64_t n_scored = 0;  // scored positions per chunk: n_ctx - 1 - first
  int64_t n_chunks = 0;
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

// The tokens of every evaluated chunk, back to back, with BOS in front of each chunk when
// the vocabulary adds one (llama.cpp replaces the chunk's first token rather than shifting).
std::vector<int32_t> chunk_tokens(const std::vector<int32_t>& text, const Chunking& c,
                                  const Tokenizer& tok) {
  std::vector<int32_t> out(text.begin(), text.begin() + c.n_chunks * c.n_ctx);
  if (tok.add_bos() && tok.bos() >= 0)
    for (int64_t i = 0; i < c.n_chunks; ++i) out[static_cast<size_t>(i * c.n_ctx)] = tok.bos();
  return out;
}

// Checks that a KL base was made from the same tokens under the same vocabulary and chunking.
Status check_base(const KlBaseReader& base, const Chunking& c, uint64_t vocab,
                  std::span<const int32_t> tokens, const std::string& path, int64_t n_vocab) {
  const KlBaseHeader& h = base.header();
  if (static_cast<int64_t>(h.n_vocab) != n_vocab)
    return err("%s: the base was written for a vocabulary of %u tokens, this model has %lld",
               path.c_str(), h.n_vocab, static_cast<long long>(n_vocab));
  if (h.vocab_hash != vocab)
    return err("%s: the base was written with a different vocabulary (same size, other tokens)",
               path.c_str());
  if (static_cast<int64_t>(h.n_ctx) != c.n_ctx)
    return err("%s: the base used -c %u, this run -c %lld (they must agree)", path.c_str(), h.n_ctx,
               static_cast<long long>(c.n_ctx));
  if (c.n_chunks > static_cast<int64_t>(h.n_chunks))
    return err("%s: the base holds %u chunks, this run asks for %lld", path.c_str(), h.n_chunks,
               static_cast<long long>(c.n_chunks));
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] != base.tokens()[i])
      return err(
          "%s: the base was made from other text or tokenization: token %zu of chunk "
          "%zu is %d there, %d here",
          path.c_str(), i % static_cast<size_t>(c.n_ctx), i / static_cast<size_t>(c.n_ctx) + 1,
          base.tokens()[i], tokens[i]);
  }
  return Status::Ok();
}

// Per-run accumulators: NLL of the scored tokens and, against a base, the base's NLL, the
// per-token NLL difference and KL divergence, and top-1 agreement.
struct Scores {
  MeanAccumulator nll;
  MeanAccumulator base_nll;
  MeanAccumulator nll_diff;  // this - base, per token: ln(PPL ratio) with a paired error
  std::vector<double> kl;
  int64_t same_top1 = 0;
};

// One evaluated chunk and what goes with it. Row j of `nll`, `rows` and the base's arrays
// belongs to scored position first + j.
struct ChunkData {
  std::span<const float> logits;        // f32 [n_ctx, n_vocab]
  std::span<const int32_t> chunk;       // the n_ctx tokens evaluated
  std::span<double> nll;                // f64 [n_scored], written
  std::span<uint16_t> rows;             // f16 [n_scored, n_vocab], written; empty: not needed
  std::span<const double> base_nll;     // f64 [n_scored]; empty: no base
  std::span<const uint16_t> base_rows;  // f16 [n_scored, n_vocab]; empty: no base
};

// Scores one chunk: the NLL of each scored token from the f32 logits; when rows are wanted
// (saving or comparing) its f16 log-probabilities; with a base, the comparison with it.
void score_chunk(const ChunkData& d, const Chunking& c, int64_t n_vocab,
                 std::vector<double>& scratch, Scores& s) {
  const auto nv = static_cast<size_t>(n_vocab);
  for (int64_t j = 0; j < c.n_scored; ++j) {
    const auto uj = static_cast<size_t>(j);
    const int64_t pos = c.first + j;
    std::span<const float> row = d.logits.subspan(static_cast<size_t>(pos) * nv, nv);
    const int32_t target = d.chunk[static_cast<size_t>(pos + 1)];
    d.nll[uj] = log_sum_exp(row) - static_cast<double>(row[static_cast<size_t>(target)]);
    s.nll.add(d.nll[uj]);
    if (d.rows.empty()) continue;
    std::span<uint16_t> mine = d.rows.subspan(uj * nv, nv);
    log_probs_f16(row, scratch, mine);
    if (d.base_rows.empty()) continue;
    const TokenComparison t = compare_token(d.base_rows.subspan(uj * nv, nv), mine, scratch);
    s.kl.push_back(t.kl);
    s.same_top1 += t.same_top1 ? 1 : 0;
    s.base_nll.add(d.base_nll[uj]);
    s.nll_diff.add(d.nll[uj] - d.base_nll[uj]);
  }
}

void print_kl_summary(const std::string& base_path, Scores& s) {
  const KlSummary k = summarize_kl(s.kl, s.same_top1);
  const PerplexityEstimate now = perplexity_of(s.nll);
  const PerplexityEstimate base = perplexity_of(s.base_nll);
  std::printf("KL divergence against %s (%lld tokens):\n", base_path.c_str(),
              static_cast<long long>(k.n));
  std::printf("  PPL(base)          = %.4f +/- %.5f\n", base.ppl, base.ppl_err);
  std::printf("  PPL(this)          = %.4f +/- %.5f\n", now.ppl, now.ppl_err);
  std::printf("  ln(PPL(this/base)) = %.6g +/- %.3g\n", s.nll_diff.mean(),
              s.nll_diff.stderr_of_mean());
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

  std::optional<KlBaseReader> base;
  if (!o.kl_base.empty()) {
    auto r = KlBaseReader::open(o.kl_base);
    if (!r.ok()) return fail(r.error());
    base = std::move(*r);
    if (!o.ctx_given) o.n_ctx = base->header().n_ctx;
    if (!o.chunks_given) o.n_chunks = base->header().n_chunks;
  }
  auto text = read_text_file(o.text_file);
  if (!text.ok()) return fail(text.error());

  const auto t_load = std::chrono::steady_clock::now();
  auto engine = Engine::load(o.model, load_options(o, o.load));
  if (!engine.ok()) return fail(engine.error());
  const Tokenizer* tok = (*engine)->tokenizer();
  if (tok == nullptr)
    return fail(
        err("%s: the file has no vocabulary (tokenizer.ggml.model), so it cannot "
            "tokenize text",
            o.model.c_str()));
  const ModelInfo& info = (*engine)->info();

  const auto t_tok = std::chrono::steady_clock::now();
  const std::vector<int32_t> tokens = tok->encode(*text, tok->add_bos(), /*parse_special=*/false);
  const double tok_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_tok).count();
  const auto n_tokens = static_cast<int64_t>(tokens.size());
  if (n_tokens < 2 * o.n_ctx)
    return fail(
        err("%s: the text is %lld tokens; perplexity with -c %lld needs at least "
            "%lld (two chunks): use a longer text or a smaller -c",
            o.text_file.c_str(), static_cast<long long>(n_tokens), static_cast<long long>(o.n_ctx),
            static_cast<long long>(2 * o.n_ctx)));
  Chunking c;
  c.n_ctx = o.n_ctx;
  c.first = c.n_ctx / 2;
  c.n_scored = c.n_ctx - 1 - c.first;
  c.n_chunks = n_tokens / c.n_ctx;
  if (o.n_chunks > 0) {
    if (base && o.n_chunks > c.n_chunks)
      return fail(err(
          "%s: the text has %lld chunks of %lld tokens, but %lld are compared with "
          "the base %s (holding %u): the base was made from another text",
          o.text_file.c_str(), static_cast<long long>(c.n_chunks), static_cast<long long>(c.n_ctx),
          static_cast<long long>(o.n_chunks), o.kl_base.c_str(), base->header().n_chunks));
    c.n_chunks = std::min(c.n_chunks, o.n_chunks);
  }
  const std::vector<int32_t> chunks = chunk_tokens(tokens, c, *tok);
  const uint64_t vocab = vocab_hash(*tok);
  if (base) {
    if (Status s = check_base(*base, c, vocab, chunks, o.kl_base, info.n_vocab); !s.ok())
      return fail(s.error());
  }

  SessionOptions so;
  so.n_ctx = c.n_ctx;
  so.n_batch = std::min(o.n_batch, c.n_ctx);
  so.n_threads = o.n_threads;
  so.sparse.dense = o.dense;
  if (Status s = apply_act_sparsity(o.act, so.sparse); !s.ok()) return fail(s.error());
  so.device = o.device;
  so.all_logits = true;
  if (Status h = apply_hybrid_flags(o, so); !h.ok()) return fail(h.error());
  auto session_r = Session::create(**engine, so);
  if (!session_r.ok()) return fail(session_r.error());
  Session& session = **session_r;
  if (Status s = session.warmup(tok->bos() >= 0 ? tok->bos() : 0); !s.ok()) return fail(s.error());
  const double load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_load).count();

  log_info("model: %s (%s%s, %lld layers, n_embd %lld, n_vocab %lld, FFN %s), loaded in %.0f ms",
           o.model.c_str(), info.architecture.c_str(),
           !info.powerinfer            ? ""
           : session.sparsity().sparse ? ", PowerInfer file run sparse"
                                       : ", PowerInfer file run dense",
           static_cast<long long>(info.n_layer), static_cast<long long>(info.n_embd),
           static_cast<long long>(info.n_vocab), info.activation.c_str(), load_ms);
  log_info(
      "perplexity: %s: %lld tokens (tokenized in %.0f ms); %lld chunks of %lld, batch %lld, "
      "threads %d; scoring positions %lld..%lld of each chunk (%lld tokens per chunk)",
      o.text_file.c_str(), static_cast<long long>(n_tokens), tok_ms,
      static_cast<long long>(c.n_chunks), static_cast<long long>(c.n_ctx),
      static_cast<long long>(session.n_batch()), session.n_threads(),
      static_cast<long long>(c.first + 1), static_cast<long long>(c.n_ctx - 1),
      static_cast<long long>(c.n_scored));
  if (info.n_ctx_train > 0 && c.n_ctx > info.n_ctx_train)
    log_warn("-c %lld exceeds the model's training context %lld: the perplexity will suffer",
             static_cast<long long>(c.n_ctx), static_cast<long long>(info.n_ctx_train));

  std::optional<KlBaseWriter> writer;
  if (!o.kl_save.empty()) {
    KlBaseHeader h;
    h.n_vocab = static_cast<uint32_t>(info.n_vocab);
    h.n_ctx = static_cast<uint32_t>(c.n_ctx);
    h.n_chunks = static_cast<uint32_t>(c.n_chunks);
    h.n_scored = static_cast<uint32_t>(c.n_scored);
    h.vocab_hash = vocab;
    auto w = KlBaseWriter::create(o.kl_save, h, chunks);
    if (!w.ok()) return fail(w.error());
    writer = std::move(*w);
    log_info("writing log-probabilities to %s (%.1f MiB)", o.kl_save.c_str(),
             static_cast<double>(writer->bytes()) / 1048576.0);
  }

  const auto nv = static_cast<size_t>(info.n_vocab);
  const bool keep_rows = writer.has_value() || base.has_value();
  std::vector<float> logits;
  logits.reserve(static_cast<size_t>(c.n_ctx) * nv);
  std::vector<uint16_t> rows(keep_rows ? static_cast<size_t>(c.n_scored) * nv : 0);
  std::vector<uint16_t> base_rows(base ? rows.size() : 0);
  std::vector<double> nll(static_cast<size_t>(c.n_scored));
  std::vector<double> base_nll(base ? nll.size() : 0);
  std::vector<double> scratch(2 * nv);
  Scores scores;
  install_sigint_flag();
  int64_t n_done = 0;
  const auto t_eval = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < c.n_chunks && !interrupted(); ++i, ++n_done) {
    std::span<const int32_t> chunk(chunks.data() + i * c.n_ctx, static_cast<size_t>(c.n_ctx));
    session.reset();
    logits.clear();
    if (Status s = session.prompt_logits(chunk, logits); !s.ok()) return fail(s.error());
    if (base) {
      if (Status s = base->read_chunk(base_nll, base_rows); !s.ok()) return fail(s.error());
    }
    score_chunk({logits, chunk, nll, rows, base_nll, base_rows}, c, info.n_vocab, scratch, scores);
    if (writer) {
      if (Status s = writer->append(nll, rows); !s.ok()) return fail(s.error());
    }
    if (i == 0) {
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t_eval).count();
      log_info("perplexity: %.2f s per chunk, about %.1f s in all", s,
               s * static_cast<double>(c.n_chunks));
    }
    std::printf("[%lld]%.4f,", static_cast<long long>(i + 1), std::exp(scores.nll.mean()));
    std::fflush(stdout);
  }
  const double eval_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_eval).count();
  std::printf("\n");
  if (interrupted()) {
    log_info("[interrupted after %lld of %lld chunks]", static_cast<long long>(n_done),
             static_cast<long long>(c.n_chunks));
    if (writer) log_warn("%s is incomplete and cannot serve as a base", o.kl_save.c_str());
    if (n_done == 0) return kInterruptedExit;
    writer.reset();
  }
  if (writer) {
    if (Status s = writer->finish(); !s.ok()) return fail(s.error());
  }

  const PerplexityEstimate p = perplexity_of(scores.nll);
  std::printf("Final estimate: PPL = %.4f +/- %.5f\n", p.ppl, p.ppl_err);
  if (const SparsityReport r = session.sparsity(); r.thresholded) {
    std::printf("Model-wide sparsity %.1f%% (the layers' projection bytes left unread; site "
                "levels %s)\n",
                100.0 * r.model_wide_zeroed(),
                r.allocated ? "from the file's allocation" : "as asked, no allocation");
    std::printf("Activation sparsity %.2f, share zeroed:", r.act_sparsity);
    for (const SiteSparsity& site : r.sites)
      std::printf(" %s %.1f%%", site.site.c_str(), 100.0 * site.zeroed_fraction());
    std::printf("\n");
  }
  if (base) print_kl_summary(o.kl_base, scores);
  std::fflush(stdout);

  const Timings& t = session.timings();
  log_info(
      "perplexity: %lld chunks, %lld tokens evaluated (%lld scored) in %.2f s: %.2f tokens/s "
      "(forward passes alone: %.2f tokens/s)",
      static_cast<long long>(n_done), static_cast<long long>(t.n_prompt),
      static_cast<long long>(scores.nll.count()), eval_s,
      eval_s > 0 ? static_cast<double>(t.n_prompt) / eval_s : 0.0,
      t.prompt_ms > 0 ? 1e3 * static_cast<double>(t.n_prompt) / t.prompt_ms : 0.0);
  if (writer) log_info("saved the base log-probabilities to %s", o.kl_save.c_str());
  return interrupted() ? kInterruptedExit : 0;
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
