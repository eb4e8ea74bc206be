// The arithmetic of `powerinfer perplexity`: log-softmax of one row of logits, running means
// with their standard error, and the per-token comparison of two distributions (KL
// divergence, same top-1 token). Everything is computed in double from f32 logits.
// Pure functions and plain value types; thread-compatible.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pi::workflows {

// log(sum_i exp(x_i)) of one row, in double, shifted by the row maximum. f32 [n_vocab]
double log_sum_exp(std::span<const float> logits);

// Writes log-probabilities x_i - log_sum_exp(x) of one row into `out` (same length).
void log_softmax(std::span<const float> logits, std::span<double> out);

// Mean of a sample and the standard error of that mean, sqrt(var / (n - 1)) with the
// population variance var = E[x^2] - E[x]^2 (the estimator llama.cpp reports).
class MeanAccumulator {
 public:
  void add(double x) {
    sum_ += x;
    sum2_ += x * x;
    ++n_;
  }
  int64_t count() const { return n_; }
  double mean() const { return n_ > 0 ? sum_ / static_cast<double>(n_) : 0.0; }
  double stderr_of_mean() const;

 private:
  double sum_ = 0, sum2_ = 0;
  int64_t n_ = 0;
};

// Perplexity exp(mean NLL) of the scored tokens and its standard error, propagated from the
// standard error of the mean NLL: d exp(m) = exp(m) dm.
struct PerplexityEstimate {
  double ppl = 0;
  double ppl_err = 0;
};
PerplexityEstimate perplexity_of(const MeanAccumulator& nll);

// Log-probabilities of one row rounded to IEEE half, as --kl-save stores them. f16 [n_vocab]
void log_probs_f16(std::span<const float> logits, std::span<double> scratch,
                   std::span<uint16_t> out);

// Comparison of one token's base distribution with the new one, both given as f16
// log-probabilities (so that a model compared with itself gives exactly 0). Both rows are
// renormalized in double before use. `scratch` holds 2 n_vocab doubles.
struct TokenComparison {
  double kl = 0;           // KL(base || new) = sum_v p_base(v) (log p_base(v) - log p_new(v))
  bool same_top1 = false;  // argmax of both rows agrees (first index on ties)
};
TokenComparison compare_token(std::span<const uint16_t> base, std::span<const uint16_t> now,
                              std::span<double> scratch);

// Summary of the per-token KL divergences of a run against a base.
struct KlSummary {
  int64_t n = 0;
  double mean = 0, mean_err = 0;  // mean KL and the standard error of that mean
  double median = 0, p99 = 0, max = 0;
  double top1 = 0, top1_err = 0;  // fraction of tokens with the same top-1, and its error
};
// `kls` is sorted in place.
KlSummary summarize_kl(std::vector<double>& kls, int64_t n_same_top1);

}  // namespace pi::workflows
