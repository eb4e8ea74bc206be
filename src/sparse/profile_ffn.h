// ProfilingFfn: the dense FFN (every neuron, as model::DenseFfn computes it) that also counts,
// per layer and neuron, the tokens on which the neuron's activation act(gate·x) * (up·x) (or
// act(up·x) without a gate) is nonzero: the true activations `powerinfer profile` records.
// Uses only the Ops calls DenseFfn uses, so its output equals DenseFfn's bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "model/ffn.h"
#include "model/model.h"
#include "model/ops.h"
#include "sparse/activation_stats.h"

namespace pi::sparse {

class ProfilingFfn final : public model::FfnStep {
 public:
  // Scratch for up to `max_tokens` tokens. `model` and `ops` must outlive it.
  ProfilingFfn(const model::Model& model, model::Ops& ops, int64_t max_tokens);
  void run(int64_t il, const model::FfnInput& in, float* out) override;

  // Tokens seen (counted at layer 0) and the counts so far, as ActivationStats (source
  // "profile"; the caller adds the model fingerprint).
  uint64_t n_tokens() const { return n_tokens_; }
  ActivationStats stats() const;

 private:
  const model::Model& model_;
  model::Ops& ops_;
  std::vector<float> gate_;                   // f32 [max_tokens, n_ff]
  std::vector<float> up_;                     // f32 [max_tokens, n_ff]
  std::vector<int32_t> all_neurons_;          // 0 .. n_ff-1
  std::vector<std::vector<uint64_t>> counts_; // [n_layer][n_ff]
  uint64_t n_tokens_ = 0;
};

}  // namespace pi::sparse
