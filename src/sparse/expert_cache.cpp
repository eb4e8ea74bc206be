#include "sparse/expert_cache.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace pi::sparse {
namespace {

size_t sz(int64_t n) { return static_cast<size_t>(n); }

// Uniform in [0, 1) from the generator's top 53 bits (the same on every platform).
double uniform(std::mt19937_64& g) { return static_cast<double>(g() >> 11) * 0x1.0p-53; }

// Experts by how often the first `tokens` tokens chose them, most chosen first (ties: lower id).
std::vector<int32_t> by_count(std::span<const int32_t> ids, int64_t n_expert) {
  std::vector<int64_t> count(sz(n_expert), 0);
  for (int32_t e : ids) ++count[sz(e)];
  std::vector<int32_t> order(sz(n_expert));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return count[sz(a)] > count[sz(b)]; });
  return order;
}

}  // namespace

const char* cache_policy_name(CachePolicy p) {
  switch (p) {
    case CachePolicy::Static: return "static";
    case CachePolicy::Lru: return "lru";
    case CachePolicy::StaticLru: return "static+lru";
  }
  return "?";
}

int64_t RoutingTrace::tokens() const {
  return layers.empty() || n_expert_used <= 0 ? 0 : static_cast<int64_t>(layers[0].size()) / n_expert_used;
}

Status check_trace(const RoutingTrace& t) {
  if (t.n_expert <= 0 || t.n_expert_used <= 0 || t.n_expert_used > t.n_expert)
    return err("routing trace: %lld of %lld experts per token", static_cast<long long>(t.n_expert_used),
               static_cast<long long>(t.n_expert));
  if (t.layers.empty()) return err("routing trace: no layers");
  for (size_t l = 0; l < t.layers.size(); ++l) {
    const std::vector<int32_t>& ids = t.layers[l];
    if (ids.size() != t.layers[0].size() || ids.size() % sz(t.n_expert_used) != 0)
      return err("routing trace: layer %zu has %zu choices, layer 0 %zu (%lld per token)", l, ids.size(),
                 t.layers[0].size(), static_cast<long long>(t.n_expert_used));
    for (int32_t e : ids)
      if (e < 0 || e >= t.n_expert) return err("routing trace: layer %zu chooses expert %d of %lld", l, e,
                                              static_cast<long long>(t.n_expert));
  }
  return Status::Ok();
}

Result<CacheScore> score_cache(const RoutingTrace& t, CachePolicy policy, int64_t slots) {
  PI_TRY(check_trace(t));
  if (slots <= 0 || slots > t.n_expert)
    return err("expert cache: %lld slots per layer for %lld experts", static_cast<long long>(slots),
               static_cast<long long>(t.n_expert));
  const int64_t k = t.n_expert_used, n_tok = t.tokens(), half = n_tok / 2;
  if (n_tok - half < 1) return err("routing trace: %lld tokens, too few to score", static_cast<long long>(n_tok));
  int64_t pairs = 0, hits = 0, uploads = 0;
  for (const std::vector<int32_t>& ids : t.layers) {
    const std::vector<int32_t> ranked = by_count(std::span(ids).first(sz(half * k)), t.n_expert);
    std::vector<uint8_t> pinned(sz(t.n_expert), 0), cached(sz(t.n_expert), 0);
    const int64_t n_pinned = policy == CachePolicy::Static ? slots : policy == CachePolicy::StaticLru ? slots / 2 : 0;
    for (int64_t i = 0; i < n_pinned; ++i) pinned[sz(ranked[sz(i)])] = 1;
    const int64_t lru_slots = slots - n_pinned;
    int64_t n_cached = 0;
    std::vector<int64_t> last(sz(t.n_expert), -1);
    std::vector<int32_t> missed;
    for (int64_t tok = 0; tok < n_tok; ++tok) {
      const bool scored = tok >= half;
      missed.clear();
      // Hits against the slots as they were before this token.
      for (int64_t j = 0; j < k; ++j) {
        const int32_t e = ids[sz(tok * k + j)];
        const bool hit = pinned[sz(e)] != 0 || cached[sz(e)] != 0;
        if (scored) {
          ++pairs;
          hits += hit ? 1 : 0;
        }
        if (!hit) missed.push_back(e);
        last[sz(e)] = tok;
      }
      if (lru_slots == 0) continue;
      // Each miss is uploaded for the tokens after it, evicting the least recently used (never
      // one this token chose while another is there).
      for (int32_t e : missed) {
        if (n_cached == lru_slots) {
          int32_t victim = -1;
          for (int32_t c = 0; c < t.n_expert; ++c)
            if (cached[sz(c)] != 0 && (victim < 0 || last[sz(c)] < last[sz(victim)])) victim = c;
          cached[sz(victim)] = 0;
          --n_cached;
        }
        cached[sz(e)] = 1;
        ++n_cached;
        uploads += scored ? 1 : 0;
      }
    }
  }
  const auto scored_tokens = static_cast<double>(n_tok - half);
  CacheScore s;
  s.hit_rate = pairs > 0 ? static_cast<double>(hits) / static_cast<double>(pairs) : 0.0;
  s.misses_per_token = static_cast<double>(pairs - hits) / scored_tokens;
  s.uploads_per_token = static_cast<double>(uploads) / scored_tokens;
  return s;
}

TraceShape trace_shape(const RoutingTrace& t) {
  TraceShape s;
  const int64_t k = t.n_expert_used, n_tok = t.tokens();
  if (t.layers.empty() || n_tok == 0) return s;
  for (const std::vector<int32_t>& ids : t.layers) {
    std::vector<int64_t> count(sz(t.n_expert), 0);
    for (int32_t e : ids) ++count[sz(e)];
    s.top_share += static_cast<double>(*std::max_element(count.begin(), count.end())) / static_cast<double>(n_tok);
    int64_t kept = 0;
    for (int64_t tok = 1; tok < n_tok; ++tok)
      for (int64_t j = 0; j < k; ++j) {
        const auto prev = ids.begin() + (tok - 1) * k;
        kept += std::find(prev, prev + k, ids[sz(tok * k + j)]) != prev + k ? 1 : 0;
      }
    if (n_tok > 1) s.reuse += static_cast<double>(kept) / static_cast<double>((n_tok - 1) * k);
  }
  s.top_share /= static_cast<double>(t.layers.size());
  s.reuse /= static_cast<double>(t.layers.size());
  return s;
}

RoutingTrace synthetic_trace(int64_t n_layer, int64_t n_expert, int64_t n_expert_used, int64_t tokens,
                             double zipf, double keep, uint64_t seed) {
  RoutingTrace t;
  t.n_expert = n_expert;
  t.n_expert_used = n_expert_used;
  std::mt19937_64 g(seed);
  for (int64_t l = 0; l < n_layer; ++l) {
    // Each layer favours its own experts: a random order of the Zipf ranks.
    std::vector<int32_t> rank(sz(n_expert));
    std::iota(rank.begin(), rank.end(), 0);
    for (int64_t i = n_expert - 1; i > 0; --i) std::swap(rank[sz(i)], rank[sz(static_cast<int64_t>(g() % static_cast<uint64_t>(i + 1)))]);
    std::vector<double> cdf(sz(n_expert));
    double total = 0;
    for (int64_t i = 0; i < n_expert; ++i) cdf[sz(i)] = total += std::pow(static_cast<double>(i + 1), -zipf);
    std::vector<int32_t> ids, prev;
    ids.reserve(sz(tokens * n_expert_used));
    std::vector<int32_t> cur;
    for (int64_t tok = 0; tok < tokens; ++tok) {
      cur.clear();
      for (int32_t e : prev)
        if (uniform(g) < keep) cur.push_back(e);
      while (static_cast<int64_t>(cur.size()) < n_expert_used) {
        const double u = uniform(g) * total;
        const auto i = std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
        const int32_t e = rank[sz(std::min<int64_t>(i, n_expert - 1))];
        if (std::find(cur.begin(), cur.end(), e) == cur.end()) cur.push_back(e);
      }
      ids.insert(ids.end(), cur.begin(), cur.end());
      prev = cur;
    }
    t.layers.push_back(std::move(ids));
  }
  return t;
}

}  // namespace pi::sparse
