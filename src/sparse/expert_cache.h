// Which experts a device should hold while a mixture of experts decodes, measured on routing
// traces: a static set (the most chosen experts of a profile, as the planner places them)
// against a cache of recently used experts (a miss runs on the CPU while the expert is
// uploaded for the tokens after it), and the two combined. A trace is what MoeFfn::routes()
// records: per layer, every token's n_expert_used experts, tokens in order.
//
// Per decoded token and layer the device holds `slots` experts; a (token, expert) pair whose
// expert is held is a hit (computed on the device), else a miss (the CPU reads the expert).
// The policies are scored on the trace's second half, having seen the first half (the static
// set is the first half's most chosen; the caches are warm from it), so that neither sees
// the tokens it is scored on.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"

namespace pi::sparse {

enum class CachePolicy {
  Static,     // the first half's most chosen experts, never replaced
  Lru,        // the most recently used experts: each miss is uploaded, evicting the least recent
  StaticLru,  // half the slots static (the most chosen), the other half LRU over the rest
};

const char* cache_policy_name(CachePolicy p);

struct RoutingTrace {
  int64_t n_expert = 0, n_expert_used = 0;
  std::vector<std::vector<int32_t>> layers;  // [n_layer][tokens * n_expert_used]
  int64_t tokens() const;
};

// Checks shapes (every layer the same number of tokens) and ids; errors name the layer.
Status check_trace(const RoutingTrace& t);

struct CacheScore {
  double hit_rate = 0;        // device pairs / all pairs of the scored tokens
  double misses_per_token = 0;  // (token, expert) pairs the CPU computes, summed over layers
  double uploads_per_token = 0;  // experts copied to the device per token, summed over layers
};

// Scores `policy` with `slots` experts per layer (0 < slots <= n_expert) on `t`.
Result<CacheScore> score_cache(const RoutingTrace& t, CachePolicy policy, int64_t slots);

// What a trace looks like, averaged over layers: the share of tokens routed to the layer's
// most chosen expert (n_expert_used / n_expert when uniform; `powerinfer profile`'s "top
// expert") and the reuse rate (of the pairs of every token but the first, the fraction whose
// expert the previous token chose too; n_expert_used / n_expert when independent).
struct TraceShape {
  double top_share = 0;
  double reuse = 0;
};
TraceShape trace_shape(const RoutingTrace& t);

// A synthetic trace: each token keeps each of the previous token's experts with probability
// `keep`, and draws the others from a Zipf law over the experts with exponent `zipf` (0:
// uniform), without repeats; deterministic for a seed.
RoutingTrace synthetic_trace(int64_t n_layer, int64_t n_expert, int64_t n_expert_used, int64_t tokens,
                             double zipf, double keep, uint64_t seed);

}  // namespace pi::sparse
