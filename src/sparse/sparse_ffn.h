// The sparse FFN step of PowerInfer files (model::FfnStep): per layer and token, the
// predictor marks the neurons expected to fire; only those rows of ffn_gate / ffn_up are
// computed, the ReLU product is formed, and only neurons with a nonzero activation are
// accumulated from the transposed down projection ffn_down_t (one contiguous row per neuron):
//
//   llama   (ReGLU)  a_i = ReLU(gate_i · x) * (up_i · x)        up only where gate_i · x > 0
//   bamboo           a_i = ReLU(gate_i · x) * ReLU(up_i · x)    up only where gate_i · x > 0
//   falcon           a_i = ReLU(up_i · x)                       no gate
//   out = sum over predicted i with a_i != 0 of a_i * down_t[i, :]  (+ down_b, when present)
//
// Where the FFN has biases, up_b_i is added to up_i · x before the activation and down_b to
// the output.
//
// A neuron predicted inactive contributes nothing, even if it would have fired.
//
// Prompt batches (m > 1): the predictor runs as a matrix x matrix product; the row lists stay
// per token, and for each of gate and up the cost model of batch_cost.h picks per layer between
// running the tokens one by one, the batched per-token lists, their union and the dense product
// (union and dense results are masked per token, so every path computes the same function).
// The down projection runs token by token (the one-token axpy is the fastest measured).
//
// Determinism: the lists, the path choice and every kernel are independent of the thread
// count, and each output element is accumulated by one thread in a fixed order, so the output
// is bit-identical for any pool size. A token's row list is the same in any batch split; the
// kernels' one-token and many-token forms sum in different orders, so values differ between
// batch splits by rounding only (as in the dense forward pass).
//
// The step runs on one host device (cpu, ref: a GPU-like device gets the hybrid executor's
// HybridFfn, which uses this step for the CPU's cold neurons): the weights it computes (given,
// not taken from the model) and its activation scratch live there; the row lists, the cost
// model and the filters are host work on that memory.
// All scratch is allocated by create() for the largest batch; run() allocates nothing.
// Thread-safety: one SparseFfn per Forward (session).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/error.h"
#include "model/ffn.h"
#include "model/model.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "sparse/batch_cost.h"
#include "sparse/predictor.h"
#include "backend/weight_store.h"

namespace pi::sparse {

struct SparseConfig {
  float threshold = 0.0f;  // neuron i predicted active iff predictor logit_i >= threshold
  // Also compute the dense FFN of every layer (all neurons) to measure the predictor: recall,
  // precision and the deviation of the FFN output. Doubles the FFN work; results unchanged.
  bool check_predictor = false;
};

// Counters of one layer, summed over the tokens run since the last reset_stats().
struct LayerStats {
  int64_t tokens = 0;
  int64_t predicted = 0;  // neurons predicted active, summed over tokens
  int64_t computed = 0;   // neurons with a nonzero activation accumulated from down_t
  uint64_t bytes = 0;     // weight bytes read: predictor + gate/up/down rows (per kernel call)
  int64_t path_calls[kNumRowsPaths] = {};  // gate/up products by RowsPath (batches only)
  double predict_s = 0, rows_s = 0, down_s = 0;   // wall time: predictor, gate/up, down
  // check_predictor only:
  int64_t truly_active = 0;  // neurons with a nonzero activation in the dense FFN
  int64_t caught = 0;        // truly active and predicted
  double max_abs_dev = 0;    // max |sparse - dense| over FFN output elements
  double max_abs_dense = 0;  // max |dense| over FFN output elements
};

// Per-token row lists in CSR form: token i's rows are idx[offsets[i] .. offsets[i+1]),
// ascending, no duplicates.
struct RowLists {
  std::vector<int32_t> idx;      // capacity max_tokens * n_rows
  std::vector<int64_t> offsets;  // [max_tokens + 1]
  int64_t m = 0;

  int64_t size() const { return offsets[static_cast<size_t>(m)]; }
  int64_t count(int64_t i) const {
    return offsets[static_cast<size_t>(i) + 1] - offsets[static_cast<size_t>(i)];
  }
  // Keeps, in place and in order, the rows r of token i for which keep(i, r) holds.
  template <typename Keep>
  void filter(Keep keep) {
    int64_t n = 0, begin = offsets[0];
    for (int64_t i = 0; i < m; ++i) {
      const int64_t end = offsets[static_cast<size_t>(i) + 1];
      for (int64_t k = begin; k < end; ++k) {
        const int32_t r = idx[static_cast<size_t>(k)];
        idx[static_cast<size_t>(n)] = r;
        n += keep(i, r) ? 1 : 0;
      }
      begin = end;
      offsets[static_cast<size_t>(i) + 1] = n;
    }
  }
};

class SparseFfn final : public model::FfnStep {
 public:
  // Loads the predictors of `model` (a PWRI file with ReLU FFN and a predictor per layer),
  // places them on `dev` and allocates scratch there for batches of up to max_tokens. The FFN
  // weights computed are `weights` (views in dev's memory). `model`, `weights` and `dev` must
  // outlive the step.
  static Result<std::unique_ptr<SparseFfn>> create(const model::Model& model,
                                                   const model::ModelWeights& weights,
                                                   backend::Device& dev, int64_t max_tokens,
                                                   SparseConfig cfg);

  // The same with given predictors (host views; placed on dev): empty to use only run_masked()
  // (tests of the FFN core).
  static Result<std::unique_ptr<SparseFfn>> create(const model::Model& model,
                                                   const model::ModelWeights& weights,
                                                   backend::Device& dev, int64_t max_tokens,
                                                   std::vector<PredictorWeights> predictors,
                                                   SparseConfig cfg);

  // Device bytes create() allocates beyond the predictors: the scratch for max_tokens tokens
  // with predictors of rank up to max_rank.
  static uint64_t scratch_bytes(const model::HParams& hp, int64_t max_tokens, int64_t max_rank,
                                bool check_predictor);

  // Predicts, then computes the sparse FFN: out f32 [in.m, n_embd] (overwritten).
  void run(int64_t il, const model::FfnInput& in, float* out) override;

  // The sparse FFN with the predicted lists given (ascending per token, values < n_ff):
  // token i computes the neurons listed for it and no other. in.pred_in is not read.
  void run_masked(int64_t il, const model::FfnInput& in, const RowLists& predicted, float* out);

  // The predicted lists of layer il for m tokens of predictor input (f32 [m, n_embd]): token
  // i's list holds the neurons whose logit is >= the threshold. Valid until the next call.
  const RowLists& predict(int64_t il, const float* pred_in, int64_t m);

  const SparseConfig& config() const { return cfg_; }
  const std::vector<PredictorWeights>& predictors() const { return predictors_; }
  const std::vector<LayerStats>& stats() const { return stats_; }
  void reset_stats();

  // Cost-model parameters per weight type (tests and benchmarks may override).
  void set_cost_params(const CostParams& p) { cost_override_ = p, has_cost_override_ = true; }
  // Forces one path for every batched gate/up product (tests: paths must agree).
  void force_path(RowsPath p) { forced_path_ = static_cast<int>(p); }

 private:
  SparseFfn(const model::Model& model, const model::ModelWeights& weights, backend::Device& dev,
            int64_t max_tokens, SparseConfig cfg);
  Status allocate(std::vector<PredictorWeights> predictors);
  // The host's view of n floats of device scratch at p (valid until the next op).
  float* host(float* p, int64_t n) { return static_cast<float*>(dev_.map(p, sizeof(float) * n)); }
  void compute(int64_t il, const model::FfnInput& in, float* out);
  // Y[i, r] = W[r,:] · X[i,:] for the listed (i, r), by the path the cost model picks.
  void rows_product(const model::Matrix& W, const float* X, LayerStats& st, float* Y);
  void check_against_dense(int64_t il, const model::FfnInput& in, const float* out);

  const model::Model& model_;
  const model::ModelWeights& w_;
  backend::Device& dev_;
  backend::Ops& ops_;
  int64_t max_tokens_;
  backend::WeightStore pred_store_;          // the predictors' device copies
  std::vector<PredictorWeights> predictors_;  // views in dev's memory
  SparseConfig cfg_;
  CostParams cost_override_;
  bool has_cost_override_ = false;
  int forced_path_ = -1;

  std::vector<LayerStats> stats_;
  RowLists lists_;                   // predicted, then filtered to gate > 0, then to a != 0
  // Device scratch:
  backend::Buffer z_;                // f32 [max_tokens, max rank]  ReLU(fc1 · h)
  backend::Buffer g_;                // f32 [max_tokens, n_ff]  gate, then the activations a
  backend::Buffer u_;                // f32 [max_tokens, n_ff]  predictor logits, then up
  std::vector<int32_t> counts_;      // [n_ff] zero between uses (cost model)
  std::vector<int32_t> union_rows_;  // [n_ff]
  // check_predictor only:
  backend::Buffer dg_, du_;           // f32 [max_tokens, n_ff]  dense gate / activations, up
  backend::Buffer dense_out_;         // f32 [max_tokens, n_embd]
  std::vector<int32_t> all_neurons_;  // 0 .. n_ff-1
  std::vector<uint8_t> predicted_;    // [max_tokens, n_ff]  1 where predicted (before filters)
};

}  // namespace pi::sparse
