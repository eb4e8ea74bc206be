// ProfilingFfn: the dense FFN (every neuron, as model::DenseFfn computes it) that also counts,
// per layer and neuron, the tokens on which the neuron's activation act(gate·x) * (up·x) (or
// act(up·x) without a gate) is nonzero: the true activations `powerinfer profile` records.
// Uses only the Ops calls DenseFfn uses, so its output equals DenseFfn's bit for bit.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/ffn.h"
#include "model/model.h"
#include "backend/device.h"
#include "core/error.h"
#include "sparse/activation_stats.h"

namespace pi::sparse {

class ProfilingFfn final : public model::FfnStep {
 public:
  // Computes `weights` (views in dev's memory) on `dev`, with scratch there for up to
  // `max_tokens` tokens; the counting reads the activations through Device::map. `model`,
  // `weights` and `dev` must outlive it.
  static Result<std::unique_ptr<ProfilingFfn>> create(const model::Model& model,
                                                      const model::ModelWeights& weights,
                                                      backend::Device& dev, int64_t max_tokens);
  void run(int64_t il, const model::FfnInput& in, float* out) override;

  // Tokens seen (counted at layer 0) and the counts so far, as ActivationStats (source
  // "profile"; the caller adds the model fingerprint).
  uint64_t n_tokens() const { return n_tokens_; }
  ActivationStats stats() const;

 private:
  ProfilingFfn(const model::Model& model, const model::ModelWeights& weights,
               backend::Device& dev);

  const model::Model& model_;
  const model::ModelWeights& w_;
  backend::Device& dev_;
  backend::Buffer gate_;                      // f32 [max_tokens, n_ff] (device)
  backend::Buffer up_;                        // f32 [max_tokens, n_ff] (device)
  std::vector<int32_t> all_neurons_;          // 0 .. n_ff-1
  std::vector<int32_t> all_inputs_;           // 0 .. n_embd-1 (a transposed gate, gate_t)
  std::vector<std::vector<uint64_t>> counts_; // [n_layer][n_ff]
  uint64_t n_tokens_ = 0;
};

}  // namespace pi::sparse
