// The mixture-of-experts FFN (Mixtral, Qwen3-MoE): per token, the router's logits
// (ffn_gate_inp) pick the n_expert_used most probable experts under a softmax over all of
// them, and the token's output is the sum of those experts' SwiGLU FFNs weighted by their
// probabilities renormalized to sum 1. Only the chosen experts are computed; a batch's tokens
// are grouped by expert so that each chosen expert's weights are read once per batch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/device.h"
#include "backend/ops.h"
#include "core/error.h"
#include "model/ffn.h"
#include "model/model.h"

namespace pi::model {

// Routing of m tokens: ids[i * k + j] is token i's j-th expert and weights[i * k + j] its
// weight, in order of decreasing probability (ties: the lower id first). logits f32 [m, n_expert].
// The softmax is taken over all n_expert logits (max subtracted, sums in double), the weights
// are the k probabilities divided by their sum. Deterministic: a token's routing depends on its
// logits alone.
void route_top_k(const float* logits, int64_t m, int64_t n_expert, int64_t k, int32_t* ids, float* weights);

class MoeFfn final : public FfnStep {
 public:
  // Computes `weights` (views in dev's memory) on `dev`, with scratch from dev for up to
  // `max_tokens` tokens. The device must address host memory (routing reads the router's
  // logits on the host); `model`, `weights` and `dev` must outlive it.
  static Result<std::unique_ptr<MoeFfn>> create(const Model& model, const ModelWeights& weights,
                                                backend::Device& dev, int64_t max_tokens);
  void run(int64_t il, const FfnInput& in, float* out) override;
  // Device bytes create() allocates.
  static uint64_t device_bytes(const HParams& hp, int64_t max_tokens);
  // Records every token's experts from now on (off by default: it grows with every token):
  // routes()[il] holds layer il's ids as route_top_k writes them, [tokens run, n_expert_used],
  // in the order the tokens ran. For tests and routing statistics.
  void trace_routes(bool on) { trace_ = on; }
  const std::vector<std::vector<int32_t>>& routes() const { return routes_; }

 private:
  MoeFfn(const Model& model, const ModelWeights& weights, backend::Device& dev);

  const Model& model_;
  const ModelWeights& w_;
  backend::Ops& ops_;
  backend::Buffer logits_;  // f32 [max_tokens, n_expert]
  backend::Buffer xe_;      // f32 [max_tokens, n_embd]    one expert's tokens' inputs
  backend::Buffer gate_;    // f32 [max_tokens, n_ff_exp]
  backend::Buffer up_;      // f32 [max_tokens, n_ff_exp]
  backend::Buffer ye_;      // f32 [max_tokens, n_embd]    one expert's outputs
  std::vector<int32_t> ids_;     // [m, k]
  std::vector<float> weights_;   // [m, k]
  std::vector<int32_t> order_;   // slots i * k + j grouped by expert, tokens ascending
  std::vector<int64_t> starts_;  // [n_expert + 1] each expert's range in order_
  bool trace_ = false;
  std::vector<std::vector<int32_t>> routes_;  // [n_layer][tokens * n_expert_used] while tracing
};

// The FFN step of a model: MoeFfn for a mixture-of-experts model, else DenseFfn.
Result<std::unique_ptr<FfnStep>> make_ffn(const Model& model, const ModelWeights& weights, backend::Device& dev,
                                          int64_t max_tokens);
// Device bytes make_ffn's step allocates.
uint64_t ffn_device_bytes(const HParams& hp, int64_t max_tokens);

}  // namespace pi::model
