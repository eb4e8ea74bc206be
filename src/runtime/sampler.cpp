#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

#include "powerinfer/grammar.h"

namespace pi {

Status validate_sampling(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature))
    return err("temperature must be >= 0 (got %g)", static_cast<double>(p.temperature));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    return err("top-p must be in (0, 1] (got %g)", static_cast<double>(p.top_p));
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    return err("min-p must be in [0, 1] (got %g)", static_cast<double>(p.min_p));
  if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty))
    return err("repeat penalty must be > 0 (got %g)", static_cast<double>(p.repeat_penalty));
  if (p.repeat_last_n < -1) return err("repeat-last-n must be >= -1 (got %d)", p.repeat_last_n);
  if (!std::isfinite(p.presence_penalty)) return err("presence penalty must be finite");
  if (!std::isfinite(p.frequency_penalty)) return err("frequency penalty must be finite");
  if (!p.grammar.empty()) PI_TRY(check_grammar(p.grammar));
  return Status::Ok();
}

namespace runtime {
namespace {

// A uniform double in [0, 1) from the top 53 bits: the same on every platform, unlike
// std::uniform_real_distribution.
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace

Sampler::Sampler(const SamplingParams& p, int64_t n_vocab,
                 std::unique_ptr<grammar::TokenFilter> filter)
    : p_(p), rng_(p.seed), filter_(std::move(filter)) {
  cand_.reserve(static_cast<size_t>(n_vocab));
  probs_.reserve(static_cast<size_t>(n_vocab));
}

void Sampler::reset() {
  window_.clear();
  rng_.seed(p_.seed);
  if (filter_) filter_->reset();
}

void Sampler::copy_window(const Sampler& o) {
  window_ = o.window_;
  if (filter_ && o.filter_) filter_->copy_state(*o.filter_);
}

bool Sampler::accept_generated(int32_t token) { return !filter_ || filter_->accept(token); }

void Sampler::accept(int32_t token) {
  if (p_.repeat_last_n == 0) return;
  window_.push_back(token);
  if (p_.repeat_last_n > 0 && window_.size() > static_cast<size_t>(p_.repeat_last_n))
    window_.pop_front();
}

void Sampler::apply_penalties() {
  const bool on =
      p_.repeat_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f;
  if (!on || window_.empty()) return;
  counted_.assign(window_.begin(), window_.end());
  std::sort(counted_.begin(), counted_.end());
  for (size_t i = 0; i < counted_.size();) {
    size_t j = i;
    while (j < counted_.size() && counted_[j] == counted_[i]) ++j;
    const int32_t id = counted_[i];
    const auto count = static_cast<float>(j - i);
    i = j;
    if (id < 0 || static_cast<size_t>(id) >= cand_.size()) continue;
    float& l = cand_[static_cast<size_t>(id)].logit;
    l = l > 0.0f ? l / p_.repeat_penalty : l * p_.repeat_penalty;
    l -= count * p_.frequency_penalty + p_.presence_penalty;
  }
}

int32_t Sampler::sample(std::span<const float> logits) {
  const size_t n = logits.size();
  if (n == 0) return -1;
  cand_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    // NaN never wins.
    cand_[i] = {static_cast<int32_t>(i), std::isnan(logits[i]) ? -INFINITY : logits[i]};
  }
  apply_penalties();
  for (int32_t id : banned_)
    if (id >= 0 && static_cast<size_t>(id) < n) cand_[static_cast<size_t>(id)].logit = -INFINITY;

  if (filter_) return sample_constrained(n);
  const auto better = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  if (p_.temperature <= 0.0f) return std::min_element(cand_.begin(), cand_.end(), better)->id;

  size_t k = p_.top_k > 0 ? std::min(n, static_cast<size_t>(p_.top_k)) : n;
  std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(k), cand_.end(),
                    better);
  const double max_logit = cand_[0].logit;
  if (!std::isfinite(max_logit)) return cand_[0].id;

  return draw(k);
}

int32_t Sampler::sample_constrained(size_t n) {
  const auto better = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  // The candidates a stage after the grammar sees: the `want` best allowed finite ones.
  const size_t want = p_.temperature <= 0.0f ? 1
                      : p_.top_k > 0         ? std::min(n, static_cast<size_t>(p_.top_k))
                                             : n;
  size_t found = 0;  // allowed candidates moved to cand_[0..found)
  bool walked = false;
  if (const std::vector<int32_t>* ids = filter_->known_allowed();
      ids != nullptr && !always_mask_ && ids->size() <= n / 4) {
    // A state met before whose allowed tokens are few (between JSON values, in a number):
    // rank only them. cand_ is still in id order here.
    picked_.clear();
    for (int32_t id : *ids)
      if (std::isfinite(cand_[static_cast<size_t>(id)].logit))
        picked_.push_back(cand_[static_cast<size_t>(id)]);
    found = std::min(want, picked_.size());
    std::partial_sort(picked_.begin(), picked_.begin() + static_cast<std::ptrdiff_t>(found),
                      picked_.end(), better);
    std::copy(picked_.begin(), picked_.begin() + static_cast<std::ptrdiff_t>(found), cand_.begin());
    walked = true;
  } else if (!always_mask_ && want < n) {
    if (want == 1) {  // greedy: the best candidate is usually allowed; no sorting then
      auto best = std::min_element(cand_.begin(), cand_.end(), better);
      if (std::isfinite(best->logit) && filter_->allows(best->id)) return best->id;
    }
    // Walk the `limit` best candidates in order (one partial sort: a heap of `limit` over the
    // vocabulary, cheaper here than selecting and then sorting), compacting the allowed ones
    // to the front.
    const size_t limit = std::max<size_t>(64, 2 * want);
    const size_t m = std::min(n, limit);
    std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(m), cand_.end(),
                      better);
    bool exhausted = m == n;
    for (size_t i = 0; i < m && found < want; ++i) {
      if (!std::isfinite(cand_[i].logit)) {
        exhausted = true;  // sorted: every later candidate is -inf too
        break;
      }
      if (filter_->allows(cand_[i].id)) std::swap(cand_[found++], cand_[i]);
    }
    walked = found == want || exhausted;
  }
  if (!walked) {
    filter_->allowed(mask_);
    for (size_t i = 0; i < n; ++i)
      if (!mask_[static_cast<size_t>(cand_[i].id)]) cand_[i].logit = -INFINITY;
    std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(want),
                      cand_.end(), better);
    found = 0;
    while (found < want && std::isfinite(cand_[found].logit)) ++found;
  }
  if (found == 0) return -1;
  if (p_.temperature <= 0.0f) return cand_[0].id;
  return draw(found);
}

int32_t Sampler::draw(size_t k) {
  const double max_logit = cand_[0].logit;
  // Unnormalized probabilities at temperature 1, in descending order.
  probs_.resize(k);
  double total = 0.0;
  for (size_t i = 0; i < k; ++i) {
    probs_[i] = std::exp(static_cast<double>(cand_[i].logit) - max_logit);
    total += probs_[i];
  }
  if (p_.top_p < 1.0f) {
    double cum = 0.0;
    size_t keep = k;
    for (size_t i = 0; i < k; ++i) {
      cum += probs_[i];
      if (cum >= static_cast<double>(p_.top_p) * total) {
        keep = i + 1;
        break;
      }
    }
    k = keep;
  }
  if (p_.min_p > 0.0f) {
    const double threshold = static_cast<double>(p_.min_p) * probs_[0];
    size_t keep = 1;
    while (keep < k && probs_[keep] >= threshold) ++keep;
    k = keep;
  }

  double sum = 0.0;
  for (size_t i = 0; i < k; ++i) {
    probs_[i] = std::exp((static_cast<double>(cand_[i].logit) - max_logit) / p_.temperature);
    sum += probs_[i];
  }
  const double u = uniform01(rng_) * sum;
  double cum = 0.0;
  for (size_t i = 0; i < k; ++i) {
    cum += probs_[i];
    if (u < cum) return cand_[i].id;
  }
  return cand_[k - 1].id;
}

}  // namespace runtime
}  // namespace pi
