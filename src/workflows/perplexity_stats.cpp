#include "workflows/perplexity_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tensor/quant.h"

namespace pi::workflows {
namespace {

// Decodes f16 log-probabilities into `out` and renormalizes them so that exp(out) sums to 1.
// Returns the index of the largest value (first on ties).
size_t decode_normalized(std::span<const uint16_t> row, std::span<double> out) {
  size_t best = 0;
  double hi = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < row.size(); ++i) {
    out[i] = static_cast<double>(f16_to_f32(row[i]));
    if (out[i] > hi) {
      hi = out[i];
      best = i;
    }
  }
  double sum = 0;
  for (size_t i = 0; i < row.size(); ++i) sum += std::exp(out[i] - hi);
  const double lse = hi + std::log(sum);
  for (size_t i = 0; i < row.size(); ++i) out[i] -= lse;
  return best;
}

// Value at quantile q of sorted data, interpolating linearly between neighbours.
double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double f = pos - static_cast<double>(lo);
  return sorted[lo] * (1 - f) + sorted[hi] * f;
}

}  // namespace

double log_sum_exp(std::span<const float> logits) {
  double hi = -std::numeric_limits<double>::infinity();
  for (float x : logits) hi = std::max(hi, static_cast<double>(x));
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - hi);
  return hi + std::log(sum);
}

void log_softmax(std::span<const float> logits, std::span<double> out) {
  const double lse = log_sum_exp(logits);
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<double>(logits[i]) - lse;
}

double MeanAccumulator::stderr_of_mean() const {
  if (n_ < 2) return 0;
  const double m = mean();
  const double var = sum2_ / static_cast<double>(n_) - m * m;
  return var > 0 ? std::sqrt(var / static_cast<double>(n_ - 1)) : 0.0;
}

PerplexityEstimate perplexity_of(const MeanAccumulator& nll) {
  const double ppl = std::exp(nll.mean());
  return {ppl, ppl * nll.stderr_of_mean()};
}

void log_probs_f16(std::span<const float> logits, std::span<double> scratch,
                   std::span<uint16_t> out) {
  log_softmax(logits, scratch.first(logits.size()));
  for (size_t i = 0; i < logits.size(); ++i) out[i] = f32_to_f16(static_cast<float>(scratch[i]));
}

TokenComparison compare_token(std::span<const uint16_t> base, std::span<const uint16_t> now,
                              std::span<double> scratch) {
  const size_t n = base.size();
  std::span<double> lb = scratch.first(n), ln = scratch.subspan(n, n);
  const size_t top_b = decode_normalized(base, lb);
  const size_t top_n = decode_normalized(now, ln);
  TokenComparison c;
  double kl = 0;
  for (size_t i = 0; i < n; ++i) {
    const double p = std::exp(lb[i]);
    if (p > 0) kl += p * (lb[i] - ln[i]);
  }
  c.kl = std::max(kl, 0.0);  // rounding can leave -1e-17 for identical rows
  c.same_top1 = top_b == top_n;
  return c;
}

KlSummary summarize_kl(std::vector<double>& kls, int64_t n_same_top1) {
  KlSummary s;
  s.n = static_cast<int64_t>(kls.size());
  if (s.n == 0) return s;
  MeanAccumulator acc;
  for (double k : kls) acc.add(k);
  s.mean = acc.mean();
  s.mean_err = acc.stderr_of_mean();
  std::sort(kls.begin(), kls.end());
  s.median = quantile(kls, 0.5);
  s.p99 = quantile(kls, 0.99);
  s.max = kls.back();
  const double n = static_cast<double>(s.n);
  s.top1 = static_cast<double>(n_same_top1) / n;
  s.top1_err = s.n > 1 ? std::sqrt(s.top1 * (1 - s.top1) / (n - 1)) : 0.0;
  return s;
}

}  // namespace pi::workflows
