// Perplexity of a model on a text, computed as llama.cpp's `perplexity` tool computes it, and
// the KL-divergence comparison of two runs: the library's `powerinfer perplexity` (also the C
// API's pi_engine_perplexity and Python's Engine.perplexity).
//
// Method: the whole text is tokenized (BOS prepended when the vocabulary asks for it) and cut
// into n = tokens / n_ctx chunks (the tail is dropped). Each chunk is evaluated from an empty
// KV cache, its first token replaced by BOS when the vocabulary adds one, and only its second
// half is scored: the logits at positions n_ctx/2 .. n_ctx-2 predict the tokens after them, so
// every scored token sees at least n_ctx/2 tokens of context. PPL = exp(mean NLL) over all
// scored tokens; its error is PPL times the standard error of the mean NLL.
//
// kl_save writes the scored positions' log-probabilities (f16; the layout is in src/workflows/perplexity_kl_file.h) as a base;
// kl_base compares this run with one: KL(base || this) per token, the same top-1 token, both
// perplexities.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "powerinfer/engine.h"
#include "powerinfer/error.h"
#include "powerinfer/sparsity.h"

namespace pi {

struct PerplexityParams {
  int64_t n_ctx = 0;      // tokens per chunk (even, >= 4); 0: the base's with kl_base, else 512
  int64_t n_chunks = 0;   // chunks evaluated at most; 0: the base's with kl_base, else all
  std::string kl_save;    // write a base here
  std::string kl_base;    // compare with a base written by kl_save (exclusive with it)
  // Asked between chunks; true ends the run early (the report says so; a base being written
  // is then removed, being incomplete).
  std::function<bool()> stop;
  // After each chunk: its number (from 1), the chunks to do, the perplexity so far.
  std::function<void(int64_t chunk, int64_t n_chunks, double ppl)> on_chunk;
};

struct KlReport {
  int64_t n = 0;                       // tokens compared
  double base_ppl = 0, base_ppl_err = 0;
  double ln_ratio = 0, ln_ratio_err = 0;  // ln(PPL(this) / PPL(base)), a paired error
  double mean = 0, mean_err = 0;        // KL(base || this) per token
  double median = 0, p99 = 0, max = 0;
  double top1 = 0, top1_err = 0;        // share of tokens whose most likely token agrees
};

struct PerplexityReport {
  int64_t n_tokens = 0;   // of the text
  int64_t n_ctx = 0;      // tokens per chunk
  int64_t n_chunks = 0;   // chunks to evaluate
  int64_t n_done = 0;     // chunks evaluated (fewer when stopped)
  int64_t n_scored = 0;   // tokens scored
  double ppl = 0, ppl_err = 0;
  std::optional<KlReport> kl;  // with kl_base
  bool stopped = false;        // `stop` ended it early
  SparsityReport sparsity;     // of the session that ran it
  Timings timings;             // its forward passes
  double eval_seconds = 0;     // wall time of the chunks
};

// Evaluates `text` with a session made from `so` (its n_ctx, n_batch (at most n_ctx) and
// all_logits set here; warmed up before the first chunk). Fails with a one-line message for a
// text shorter than two chunks, a model without a vocabulary, bad sizes, or a base that does
// not match this run (vocabulary, -c, chunks or tokens), naming the file.
Result<PerplexityReport> perplexity(const Engine& engine, SessionOptions so, std::string_view text,
                                    const PerplexityParams& p);

}  // namespace pi
