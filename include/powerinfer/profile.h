// Profiling a model on a text: how often each FFN neuron fires (and, for a mixture of experts,
// how often each expert is chosen and reused), written as the statistics file that
// `powerinfer plan --stats` and hybrid sessions read. The library's `powerinfer profile` (also
// the C API's pi_model_profile and Python's powerinfer.profile).
//
// The text is tokenized and run in chunks of n_ctx tokens, each from an empty cache with BOS in
// front when the vocabulary adds one: densely (every neuron computed, predictors unused) for a
// dense model, counting per layer and neuron the tokens with a nonzero activation; a mixture of
// experts runs as it always does (ReGLU experts sparse: the positive gates are the neurons
// that fire) and the statistics record, per layer, how often each expert is chosen, how often a
// token reuses an expert of the token before it, and, for ReGLU experts, each expert neuron's
// firing count. The file carries the model's fingerprint.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "powerinfer/error.h"

namespace pi {

struct ProfileParams {
  std::string model;   // the model file (GGUF or PowerInfer)
  std::string output;  // the statistics file written
  int64_t n_ctx = 512;     // tokens per chunk (>= 2)
  int64_t n_batch = 512;   // tokens per forward pass (>= 1)
  int n_threads = 0;       // 0: every hardware thread
  int64_t max_tokens = 0;  // profile at most this many tokens; 0: the whole text
  bool progress = false;   // a progress bar on stderr (when it is a terminal)
  bool keep_routes = false;  // mixtures of experts: return each layer's chosen experts
};

struct ProfileLayer {
  // Models without experts: the mean share of tokens a neuron fires for, and the share of the
  // firings the most active fifth of the neurons accounts for.
  double activity = 0, top20_share = 0;
  // Mixtures of experts: the least and most chosen experts' shares of the tokens, how often a
  // token reuses an expert of the token before it, and the share of the routed experts'
  // neurons that fired (-1: not counted, the experts are not ReGLU).
  double least_chosen = 0, most_chosen = 0, reuse = 0, fired = -1;
};

struct ProfileReport {
  uint64_t n_tokens = 0;
  bool experts = false;  // a mixture of experts
  int64_t n_expert = 0, n_expert_used = 0;
  std::vector<ProfileLayer> layers;
  // keep_routes: per layer, the chosen experts of every token in order (n_expert_used each).
  std::vector<std::vector<int32_t>> routes;
  uint64_t expert_bytes = 0;  // bytes of one expert of layer 0 (what a device slot holds)
};

// Fails with a one-line message for bad sizes, a text without tokens, a model file that does
// not load, or an output that cannot be written.
Result<ProfileReport> profile_model(const ProfileParams& p, std::string_view text);

}  // namespace pi
