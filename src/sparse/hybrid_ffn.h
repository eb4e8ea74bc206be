// The FFN step of the hybrid executor: PowerInfer's split of a layer's neurons between a GPU
// ("hot": their gate, up and ffn_down_t rows copied to the device) and the CPU ("cold": read
// from the model file where they are), run at the same time.
//
// Per layer the plan says where the layer's attention runs (and so where the residual stream,
// the FFN input and output are) and which neurons are hot. The predictor runs where the
// attention runs; its active set is divided into a hot list (device) and a cold list (CPU):
//
//   attention on the device (the FFN input is device memory):
//     device: logits = fc2 · ReLU(fc1 · h); flags = logits >= threshold; hot lists = the
//             flagged hot neurons (compact_rows); out = ffn_rows(hot rows)   -- no host trip
//     hand-off out (one copy): [FFN input | flags] -> host, unless every neuron is hot
//     CPU:    cold lists = flagged and not hot; cold = the sparse FFN over them (SparseFfn)
//     hand-off in (one copy): cold -> device; out += cold
//   attention on the CPU (the FFN input is host memory):
//     CPU:    the predictor (SparseFfn::predict); lists split into hot and cold
//     hand-off in (one copy): [FFN input | hot lists] -> device; device: hot = ffn_rows
//     CPU:    out = the sparse FFN over the cold lists, while the device computes
//     hand-off out (one copy): hot -> host; out += hot
//
// Determinism: both halves are computed in a fixed order whatever the timing and thread
// counts, and the partial sums are added in one way (float addition is commutative:
// hot + cold either side), so the output is bit-identical run to run and for any thread
// count. Against the CPU-only sparse FFN it is bit-identical where a layer's neurons are all
// on one side (the device runs a token exactly as the CPU does: ffn_rows' contract); a split
// layer sums the two halves separately, so it differs by rounding (the reassociation of one
// sum of the active neurons' contributions; tests bound it by the float error of that sum).
//
// Memory: device scratch and pinned host staging are allocated by create() for max_tokens;
// run() allocates nothing. Events order the two queues of the device (compute, copy); the
// host waits only for the copies it needs. Thread-safety: one HybridFfn per session.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/device.h"
#include "backend/ops.h"
#include "backend/weight_store.h"
#include "core/error.h"
#include "model/ffn.h"
#include "model/model.h"
#include "sparse/placement_model.h"
#include "sparse/sparse_ffn.h"

namespace pi::sparse {

// What the plan puts on the device, per layer.
struct HybridLayout {
  std::vector<bool> attn_on_device;        // [n_layer] attention, predictor and residual there
  std::vector<std::vector<int32_t>> hot;   // [n_layer] ascending neuron ids on the device
};

// One device allocation (for the ledger): what it holds and the bytes asked for.
struct DeviceAlloc {
  std::string what;
  uint64_t bytes = 0;
};

// Counters of the split since creation or reset: per layer, tokens and neurons run on each side
// and the hand-offs (copies between host and device).
struct HybridCounters {
  int64_t tokens = 0;
  int64_t hot_rows = 0;    // listed hot neurons, summed over tokens (CPU-attention layers only)
  int64_t cold_rows = 0;   // cold neurons the CPU computed, summed over tokens
  int64_t copies_in = 0;   // host -> device hand-offs
  int64_t copies_out = 0;  // device -> host hand-offs
};

class HybridFfn final : public model::FfnStep {
 public:
  // `host` (host-addressable) computes cold neurons from the model's own weights and runs the
  // predictors of CPU layers; `dev` gets the hot rows of every layer, the predictors of the
  // layers whose attention it runs, and its scratch. The model must be a PowerInfer file with
  // predictors (as for SparseFfn). `model`, both devices must outlive the step.
  static Result<std::unique_ptr<HybridFfn>> create(const model::Model& model,
                                                   backend::Device& host, backend::Device& dev,
                                                   const HybridLayout& layout, int64_t max_tokens,
                                                   SparseConfig cfg);

  // Every device allocation create() makes for this layout, in order.
  static Result<std::vector<DeviceAlloc>> device_allocations(const model::Model& model,
                                                             backend::Device& dev,
                                                             const HybridLayout& layout,
                                                             int64_t max_tokens);
  // The scratch part of those allocations by the kind of work that needs it, as device
  // footprints (the planner's ScratchBytes): `dense` when any layer's attention is on the
  // device, `neurons` when any neuron is.
  static ScratchBytes scratch(const model::Model& model, backend::Device& dev, int64_t max_tokens);
  // Device bytes one hot neuron takes beyond its rows (its id, for compact_rows).
  static constexpr uint64_t kNeuronIdBytes = sizeof(int32_t);

  void run(int64_t il, const model::FfnInput& in, float* out) override;

  // The CPU's share: its predictor (CPU layers) and cold-neuron counters.
  const SparseFfn& cpu_part() const { return *cpu_; }
  SparseFfn& cpu_part() { return *cpu_; }
  const std::vector<HybridCounters>& counters() const { return counters_; }
  void reset_counters();

 private:
  struct DeviceLayer {
    bool attn = false;             // attention (and predictor) on the device
    int64_t n_hot = 0;
    backend::Buffer rows;          // gate | up | down_t rows of the hot neurons | their ids
    backend::FfnRows w;            // views into rows: [n_hot, n_embd] each
    const int32_t* ids = nullptr;  // i32 [n_hot] device, ascending neuron ids
    std::vector<int32_t> local;    // [n_ff] host: neuron -> position among the hot, -1: cold
    std::vector<uint32_t> hot_bits;  // [mask_words(n_ff)] host: hot neurons flagged
    PredictorWeights pred;         // device copies (attention on the device)
  };
  // Byte offsets of one hand-off package of m tokens (see the file comment).
  struct Pack {
    size_t x = 0, second = 0, third = 0, end = 0;
  };

  HybridFfn(const model::Model& model, backend::Device& host, backend::Device& dev,
            int64_t max_tokens);
  Status allocate(const HybridLayout& layout, SparseConfig cfg);
  Status gather_hot(int64_t il, const std::vector<int32_t>& hot);
  void run_device_layer(int64_t il, const model::FfnInput& in, float* out);
  void run_host_layer(int64_t il, const model::FfnInput& in, float* out);
  // [x f32 m*n_embd | offsets i64 m+1 | idx i32 n_idx]: the hot lists' package.
  Pack list_pack(int64_t m, int64_t n_idx) const;
  // [x f32 m*n_embd | flags u32 m*words]: the flags' package.
  Pack flag_pack(int64_t m) const;

  const model::Model& model_;
  backend::Device& host_;
  backend::Device& dev_;
  backend::Ops& dops_;
  int64_t max_tokens_;
  float threshold_ = 0.0f;
  std::unique_ptr<SparseFfn> cpu_;
  backend::WeightStore pred_store_;
  std::vector<DeviceLayer> layers_;
  std::vector<HybridCounters> counters_;
  RowLists cold_;  // host: the cold lists of one call
  // Device scratch (see device_allocations):
  backend::Buffer z_, logits_, flags_pack_, cold_in_;  // attention-on-device layers
  backend::Buffer lists_pack_, hot_out_, work_;        // hot neurons
  // Pinned host staging: the packages and the partial sums crossing over.
  backend::Buffer flags_pack_h_, lists_pack_h_, cold_h_, hot_h_;
};

}  // namespace pi::sparse
