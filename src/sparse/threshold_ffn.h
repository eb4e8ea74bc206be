// The FFN with training-free activation sparsity (model::FfnStep), for llama-style gated FFNs
// (SwiGLU) of files calibrated by `powerinfer calibrate` (act_sparsity.h). Per layer and token:
//
//   ffn_in    xs = x with the entries |x_j| < t_in zeroed; gate = gate_t^T xs over the kept
//             rows of ffn_gate_t only; up reads xs too
//   ffn_gate  a_i = act(gate_i) computed for every neuron; neuron i is kept iff |a_i| >= t_gate
//             (CATS); up rows only of kept neurons; out = sum over kept i of
//             a_i * up_i · xs * ffn_down_t[i, :] (only those rows of ffn_down_t are read)
//
// With ffn_gate off every neuron is computed (dense up and down over either layout); with
// ffn_in off gate and up read x itself. Thresholds of 0 give the dense FFN up to summation
// order. Prompt batches pick the path of the up rows with the cost model of batch_cost.h; the
// down projection runs token by token (as SparseFfn's). Masks, lists and the cost model are
// host work on mapped device memory; all scratch is allocated by create(). Deterministic for
// any thread count. Thread-safety: one ThresholdFfn per Forward.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/device.h"
#include "core/error.h"
#include "model/ffn.h"
#include "model/model.h"
#include "sparse/act_sparsity.h"
#include "sparse/sparse_ffn.h"

namespace pi::sparse {

class ThresholdFfn final : public model::FfnStep {
 public:
  // Computes `weights` (views in dev's memory) on `dev` with thr's ffn_in and ffn_gate
  // thresholds; scratch for batches of up to max_tokens. Fails for FFNs other than the gated
  // one (gate, up, down) of llama-style layers.
  static Result<std::unique_ptr<ThresholdFfn>> create(const model::Model& model,
                                                      const model::ModelWeights& weights,
                                                      backend::Device& dev, int64_t max_tokens,
                                                      const SiteThresholds& thr);
  static uint64_t scratch_bytes(const model::HParams& hp, int64_t max_tokens);

  void run(int64_t il, const model::FfnInput& in, float* out) override;

  // Counters of ffn_in and ffn_gate (the other sites' vectors are empty).
  const SiteStats& stats() const { return stats_; }
  void reset_stats();

 private:
  ThresholdFfn(const model::Model& model, const model::ModelWeights& weights,
               backend::Device& dev, const SiteThresholds& thr);
  // Y[i, r] = W[r, :] · X[i, :] for the entries listed in neurons_, by the cheapest path.
  uint64_t rows_product(const model::Matrix& W, const float* X, float* Y);

  const model::Model& model_;
  const model::ModelWeights& w_;
  backend::Device& dev_;
  backend::Ops& ops_;
  SiteThresholds thr_;
  SiteStats stats_;
  RowLists inputs_;                  // kept FFN input channels per token
  RowLists neurons_;                 // kept neurons per token
  std::vector<int32_t> counts_;      // [n_ff] zero between uses (cost model)
  std::vector<int32_t> union_rows_;  // [n_ff]
  std::vector<int32_t> all_inputs_, all_neurons_;
  // Device scratch:
  backend::Buffer xs_;  // f32 [max_tokens, n_embd]  masked input
  backend::Buffer g_;   // f32 [max_tokens, n_ff]  gate, then the activations
  backend::Buffer u_;   // f32 [max_tokens, n_ff]  up
};

}  // namespace pi::sparse
