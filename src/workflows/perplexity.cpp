// Perplexity and the KL comparison (include/powerinfer/perplexity.h): chunking, scoring, the
// base file, the loop over chunks.
#include "powerinfer/perplexity.h"

#include <chrono>
#include <cmath>
#include <optional>
#include <span>
#include <vector>

#include "core/log.h"
#include "runtime/engine_access.h"
#include "tokenizer/tokenizer.h"
#include "workflows/perplexity_kl_file.h"
#include "workflows/perplexity_stats.h"

namespace pi {
namespace {

using workflows::KlBaseHeader;
using workflows::KlBaseReader;
using workflows::KlBaseWriter;
using workflows::MeanAccumulator;

// The split of the token stream into chunks and the positions scored in each.
struct Chunking {
  int64_t n_ctx = 0;     // tokens per chunk
  int64_t first = 0;     // first position whose logits are scored: n_ctx / 2
  int64_t n_scored = 0;  // scored positions per chunk: n_ctx - 1 - first
  int64_t n_chunks = 0;
};

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
    d.nll[uj] = workflows::log_sum_exp(row) - static_cast<double>(row[static_cast<size_t>(target)]);
    s.nll.add(d.nll[uj]);
    if (d.rows.empty()) continue;
    std::span<uint16_t> mine = d.rows.subspan(uj * nv, nv);
    workflows::log_probs_f16(row, scratch, mine);
    if (d.base_rows.empty()) continue;
    const workflows::TokenComparison t =
        workflows::compare_token(d.base_rows.subspan(uj * nv, nv), mine, scratch);
    s.kl.push_back(t.kl);
    s.same_top1 += t.same_top1 ? 1 : 0;
    s.base_nll.add(d.base_nll[uj]);
    s.nll_diff.add(d.nll[uj] - d.base_nll[uj]);
  }
}

KlReport kl_report(Scores& s) {
  const workflows::KlSummary k = workflows::summarize_kl(s.kl, s.same_top1);
  const workflows::PerplexityEstimate base = workflows::perplexity_of(s.base_nll);
  KlReport r;
  r.n = k.n;
  r.base_ppl = base.ppl;
  r.base_ppl_err = base.ppl_err;
  r.ln_ratio = s.nll_diff.mean();
  r.ln_ratio_err = s.nll_diff.stderr_of_mean();
  r.mean = k.mean;
  r.mean_err = k.mean_err;
  r.median = k.median;
  r.p99 = k.p99;
  r.max = k.max;
  r.top1 = k.top1;
  r.top1_err = k.top1_err;
  return r;
}

Error bad_request(Error e) { return with_code(std::move(e), ErrorCode::BadRequest); }

}  // namespace

Result<PerplexityReport> perplexity(const Engine& engine, SessionOptions so, std::string_view text,
                                    const PerplexityParams& p) {
  if (!p.kl_save.empty() && !p.kl_base.empty())
    return bad_request(err("perplexity: kl_save (--kl-save) and kl_base (--kl-base) are mutually exclusive"));
  if (p.n_ctx != 0 && (p.n_ctx < 4 || p.n_ctx % 2 != 0))
    return bad_request(err("perplexity: n_ctx (-c) must be even and >= 4: the second half of each "
                           "chunk is scored (got %lld)",
                           static_cast<long long>(p.n_ctx)));
  if (p.n_chunks < -1)
    return bad_request(err("perplexity: n_chunks (--chunks) must be >= 1, or -1 for all (got %lld)",
                           static_cast<long long>(p.n_chunks)));
  if (so.n_batch < 1)
    return bad_request(err("perplexity: n_batch (-b) must be >= 1 (got %lld)", static_cast<long long>(so.n_batch)));
  const Tokenizer* tok = runtime::EngineAccess::tokenizer(engine);
  const ModelInfo& info = engine.info();
  if (tok == nullptr)
    return err("%s: the file has no vocabulary (tokenizer.ggml.model), so it cannot tokenize text",
               info.path.c_str());

  std::optional<KlBaseReader> base;
  int64_t n_ctx = p.n_ctx != 0 ? p.n_ctx : 512;
  int64_t want_chunks = p.n_chunks;  // 0 or -1: every whole chunk
  if (!p.kl_base.empty()) {
    auto r = KlBaseReader::open(p.kl_base);
    if (!r.ok()) return r.error();
    base = std::move(*r);
    if (p.n_ctx == 0) n_ctx = base->header().n_ctx;
    if (p.n_chunks == 0) want_chunks = base->header().n_chunks;
  }

  const auto t_tok = std::chrono::steady_clock::now();
  const std::vector<int32_t> tokens = tok->encode(text, tok->add_bos(), /*parse_special=*/false);
  const double tok_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_tok).count();
  const auto n_tokens = static_cast<int64_t>(tokens.size());
  if (n_tokens < 2 * n_ctx)
    return err("the text is %lld tokens; perplexity with -c %lld needs at least %lld (two "
               "chunks): use a longer text or a smaller -c",
               static_cast<long long>(n_tokens), static_cast<long long>(n_ctx),
               static_cast<long long>(2 * n_ctx));
  Chunking c;
  c.n_ctx = n_ctx;
  c.first = c.n_ctx / 2;
  c.n_scored = c.n_ctx - 1 - c.first;
  c.n_chunks = n_tokens / c.n_ctx;
  if (want_chunks > 0) {
    if (base && want_chunks > c.n_chunks)
      return err(
          "the text has %lld chunks of %lld tokens, but %lld are compared with the base %s "
          "(holding %u): the base was made from another text",
          static_cast<long long>(c.n_chunks), static_cast<long long>(c.n_ctx),
          static_cast<long long>(want_chunks), p.kl_base.c_str(), base->header().n_chunks);
    c.n_chunks = std::min(c.n_chunks, want_chunks);
  }
  const std::vector<int32_t> chunks = chunk_tokens(tokens, c, *tok);
  const uint64_t vocab = workflows::vocab_hash(*tok);
  if (base) PI_TRY(check_base(*base, c, vocab, chunks, p.kl_base, info.n_vocab));

  const auto t_load = std::chrono::steady_clock::now();
  so.n_ctx = c.n_ctx;
  so.n_batch = std::min(so.n_batch, c.n_ctx);
  so.all_logits = true;
  auto session_r = Session::create(engine, so);
  if (!session_r.ok()) return session_r.error();
  Session& session = **session_r;
  PI_TRY(session.warmup(tok->bos() >= 0 ? tok->bos() : 0));
  const double setup_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_load).count();

  log_info("model: %s (%s%s, %lld layers, n_embd %lld, n_vocab %lld, FFN %s), session ready in %.0f ms",
           info.path.c_str(), info.architecture.c_str(),
           !info.powerinfer            ? ""
           : session.sparsity().sparse ? ", PowerInfer file run sparse"
                                       : ", PowerInfer file run dense",
           static_cast<long long>(info.n_layer), static_cast<long long>(info.n_embd),
           static_cast<long long>(info.n_vocab), info.activation.c_str(), setup_ms);
  log_info(
      "perplexity: %lld tokens (tokenized in %.0f ms); %lld chunks of %lld, batch %lld, "
      "threads %d; scoring positions %lld..%lld of each chunk (%lld tokens per chunk)",
      static_cast<long long>(n_tokens), tok_ms, static_cast<long long>(c.n_chunks),
      static_cast<long long>(c.n_ctx), static_cast<long long>(session.n_batch()),
      session.n_threads(), static_cast<long long>(c.first + 1),
      static_cast<long long>(c.n_ctx - 1), static_cast<long long>(c.n_scored));
  if (info.n_ctx_train > 0 && c.n_ctx > info.n_ctx_train)
    log_warn("-c %lld exceeds the model's training context %lld: the perplexity will suffer",
             static_cast<long long>(c.n_ctx), static_cast<long long>(info.n_ctx_train));

  std::optional<KlBaseWriter> writer;
  if (!p.kl_save.empty()) {
    KlBaseHeader h;
    h.n_vocab = static_cast<uint32_t>(info.n_vocab);
    h.n_ctx = static_cast<uint32_t>(c.n_ctx);
    h.n_chunks = static_cast<uint32_t>(c.n_chunks);
    h.n_scored = static_cast<uint32_t>(c.n_scored);
    h.vocab_hash = vocab;
    auto w = KlBaseWriter::create(p.kl_save, h, chunks);
    if (!w.ok()) return w.error();
    writer = std::move(*w);
    log_info("writing log-probabilities to %s (%.1f MiB)", p.kl_save.c_str(),
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
  PerplexityReport rep;
  rep.n_tokens = n_tokens;
  rep.n_ctx = c.n_ctx;
  rep.n_chunks = c.n_chunks;
  const auto t_eval = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < c.n_chunks; ++i) {
    if (p.stop && p.stop()) {
      rep.stopped = true;
      break;
    }
    std::span<const int32_t> chunk(chunks.data() + i * c.n_ctx, static_cast<size_t>(c.n_ctx));
    session.reset();
    logits.clear();
    PI_TRY(session.prompt_logits(chunk, logits));
    if (base) PI_TRY(base->read_chunk(base_nll, base_rows));
    score_chunk({logits, chunk, nll, rows, base_nll, base_rows}, c, info.n_vocab, scratch, scores);
    if (writer) PI_TRY(writer->append(nll, rows));
    rep.n_done = i + 1;
    if (i == 0) {
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t_eval).count();
      log_info("perplexity: %.2f s per chunk, about %.1f s in all", s,
               s * static_cast<double>(c.n_chunks));
    }
    if (p.on_chunk) p.on_chunk(i + 1, c.n_chunks, std::exp(scores.nll.mean()));
  }
  rep.eval_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_eval).count();
  if (rep.stopped && writer) {
    log_warn("%s is incomplete and cannot serve as a base", p.kl_save.c_str());
    writer.reset();  // removes the incomplete file
  }
  if (writer) PI_TRY(writer->finish());
  const workflows::PerplexityEstimate est = workflows::perplexity_of(scores.nll);
  rep.ppl = est.ppl;
  rep.ppl_err = est.ppl_err;
  rep.n_scored = scores.nll.count();
  if (base) rep.kl = kl_report(scores);
  rep.sparsity = session.sparsity();
  rep.timings = session.timings();
  if (writer) log_info("saved the base log-probabilities to %s", p.kl_save.c_str());
  return rep;
}

}  // namespace pi
