// Token sampler: penalties over a window of recent tokens, then greedy argmax or
// top-k -> top-p -> min-p -> temperature -> a draw from the sampler's own RNG.
//
// Order and definitions (as in llama.cpp's default chain):
// - penalties: for each distinct token t in the last repeat_last_n accepted tokens, with c its
//   count: logit /= repeat_penalty if logit > 0 else logit *= repeat_penalty; then
//   logit -= c * frequency_penalty + presence_penalty.
// - temperature 0: the highest logit wins (lowest id on ties).
// - top-k keeps the k highest logits; top-p keeps the shortest prefix of the sorted candidates
//   whose probability mass (softmax at temperature 1) reaches top_p; min-p keeps candidates
//   with p >= min_p * p_max. Each keeps at least one candidate.
// - the survivors are drawn from softmax(logit / temperature).
// Candidates are ordered by (logit desc, id asc), so results depend only on the logits, the
// accepted tokens and the seed: not on thread counts or platform RNG distributions.
// - with a grammar (a TokenFilter), tokens it refuses count as -inf before top-k. The sampler
//   walks the candidates best first, checking each token, until it has top-k allowed ones
//   (greedy: one); only when many are refused does it mask the whole vocabulary in one walk
//   of the token trie, which the filter keeps for that grammar state: met again, only its
//   allowed tokens are ranked. All give the same candidates, so the result does not depend on
//   which ran. No allowed token: sample() returns -1.
// Thread-safety: a Sampler is used by one thread at a time.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "grammar/token_filter.h"
#include "powerinfer/sampling.h"

namespace pi::runtime {

class Sampler {
 public:
  // n_vocab sizes the scratch up front (no allocation while sampling); 0 sizes it on first use.
  explicit Sampler(const SamplingParams& p, int64_t n_vocab = 0,
                   std::unique_ptr<grammar::TokenFilter> filter = nullptr);

  const SamplingParams& params() const { return p_; }

  // Picks the next token from logits f32 [n_vocab]. Does not record it: call accept().
  int32_t sample(std::span<const float> logits);
  // Records a token in the penalty window (prompt tokens too).
  void accept(int32_t token);
  // Records a generated token in the grammar (not prompt tokens: the grammar constrains what
  // is generated). false when the grammar refuses it; true without a grammar.
  bool accept_generated(int32_t token);
  // The grammar's text is complete: nothing can follow it. false without a grammar.
  bool grammar_done() const { return filter_ && filter_->complete(); }
  bool has_grammar() const { return filter_ != nullptr; }
  // Forgets the window, reseeds the RNG with params().seed and restarts the grammar.
  void reset();
  // Takes o's penalty window (the tokens o accepted) and grammar state in place of its own;
  // the RNG is untouched.
  void copy_window(const Sampler& o);
  // Tests: mask the whole vocabulary on every grammar step instead of walking candidates.
  void set_always_mask(bool on) { always_mask_ = on; }
  // Tokens that are never sampled (their logits count as -inf), e.g. EOS with --ignore-eos.
  void set_banned(std::vector<int32_t> ids) { banned_ = std::move(ids); }

 private:
  struct Candidate {
    int32_t id;
    float logit;
  };
  void apply_penalties();
  // Draws from cand_[0..k) (sorted, cand_[0] finite): top-p, min-p, temperature.
  int32_t draw(size_t k);
  int32_t sample_constrained(size_t n);

  SamplingParams p_;
  std::mt19937_64 rng_;
  std::deque<int32_t> window_;
  std::vector<int32_t> banned_;
  std::vector<Candidate> cand_;   // scratch [n_vocab]
  std::vector<double> probs_;     // scratch
  std::vector<int32_t> counted_;  // scratch: sorted window
  std::unique_ptr<grammar::TokenFilter> filter_;
  std::vector<uint8_t> mask_;  // scratch [n_vocab]: allowed tokens
  std::vector<Candidate> picked_;  // scratch: a known state's allowed candidates
  bool always_mask_ = false;
};

}  // namespace pi::runtime
