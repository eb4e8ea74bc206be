// Builds a PlacementProblem (placement.h) from a loaded model, its activation statistics and
// what the user asked for (budget, context, batch), with the true per-neuron cost: a neuron's
// gate, up and down_t rows of n_embd elements in the file's types (the original's capacity
// formula divides by n_ff where n_embd belongs, and wastes ~31% of the FFN budget at
// n_ff/n_embd = 3.5). Also the model fingerprint the statistics and the index file record.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/reader.h"
#include "model/model.h"
#include "sparse/activation_stats.h"
#include "sparse/placement.h"

namespace pi::sparse {

// The exact per-step device buffers of an executor, by the kind of work that needs them
// (PlacementProblem's scratch_* fields).
struct ScratchBytes {
  uint64_t common = 0, lane = 0, dense = 0, head = 0, neurons = 0;
};

struct PlacementRequest {
  uint64_t budget = 0;       // device bytes
  int64_t n_ctx = 4096;      // KV cells the context holds (already resolved, > 0)
  int64_t n_window = 0;      // ... in a sliding-window layer (runtime's KvCells); 0: n_ctx
  DType kv_type_k = DType::F16;  // the KV cache's key and value types
  DType kv_type_v = DType::F16;
  int64_t n_batch = 512;     // most tokens per step: sizes the per-step scratch
  int64_t n_outputs = 1;     // logit rows per step
  int64_t granularity = 32;  // device neuron rows per tile
  bool allow_neurons = true;
  // false: whole layers even for a PowerInfer file (run --dense).
  bool split = true;
  // Device bytes one allocation of n bytes takes (backend::Device::alloc_footprint): dense
  // blocks and the head are counted tensor by tensor through it. Unset: n.
  std::function<uint64_t(uint64_t)> footprint;
  // Device bytes stored per hot neuron beyond its rows (the executor's neuron id).
  uint64_t neuron_extra_bytes = 0;
  // The executor's exact scratch; unset: the estimate step_scratch_bytes() as the common part.
  std::optional<ScratchBytes> scratch;
  // PowerInfer files without statistics: every neuron gets kUnknownFrequency instead of
  // failing. The dense blocks go first (they save a byte per byte), then any neurons (each is
  // as good as another without statistics: the lowest ids, deterministically).
  bool allow_missing_stats = false;
  // Per layer (empty: none): its FFN group (a mixture's router and experts) stays on the CPU
  // whatever else of the layer is placed (llama.cpp's --cpu-moe, --n-cpu-moe N, -ot ...=CPU).
  std::vector<bool> ffn_on_cpu;
  // A mixture of experts placed expert by expert (--vram-budget): a layer's dense block is its
  // attention, norms, router and KV cache, and each expert (its gate, up and down) is a unit
  // of the split, read per token as often as the router picks it (the statistics' expert
  // counts; n_expert_used / n_expert each without them). Layers in ffn_on_cpu keep theirs on
  // the CPU. false: whole layers (-ngl). The units are experts: use granularity 1.
  bool experts = false;
};

// One expert's bytes of layer `layer`: its slice of each expert stack (gate, up, down).
uint64_t expert_bytes(const model::LayerWeights& layer, int64_t n_expert);

// Whether `mask` (PlacementRequest::ffn_on_cpu) keeps layer il's FFN on the CPU.
inline bool ffn_kept_on_cpu(const std::vector<bool>& mask, int64_t il) {
  return il < static_cast<int64_t>(mask.size()) && mask[static_cast<size_t>(il)];
}

// The firing frequency assumed for every neuron when there are no statistics: the activity
// typical of ReLU-family models (PowerInfer's published ones fire 5-25% of their neurons).
inline constexpr float kUnknownFrequency = 0.1f;

// Keys and values of one layer for n_ctx cells (shared by every sequence), stored as k_type
// and v_type (F16, Q8_0, Q4_0: the KV cache's types).
uint64_t kv_layer_bytes(const model::HParams& hp, int64_t n_ctx, DType k_type = DType::F16,
                        DType v_type = DType::F16);

// The f32 per-step buffers a device step needs for n_batch tokens: residual, norms, q/k/v,
// attention and FFN scratch, and n_outputs rows of head input and logits. An estimate the
// ledger refines; it is counted in the budget, unlike in the original.
uint64_t step_scratch_bytes(const model::HParams& hp, int64_t n_batch, int64_t n_outputs);

// Per layer: dense block = attention weights + norms + predictor + KV cache (and, for a GGUF
// file, the FFN: whole layers as llama.cpp -ngl); neuron rows for PowerInfer files. `stats`
// is required for PowerInfer files (frequencies per token) and ignored for GGUF files; it must
// fit the model (check_stats_fit).
Result<PlacementProblem> placement_problem(const model::Model& m, const ActivationStats* stats,
                                           const PlacementRequest& req);

// "fnv1a64:<16 hex digits>" over general.architecture, the architecture's numeric metadata
// (`<arch>.*`) and every tensor's name, type and shape in file order: equal for the same model
// in the same types, different after requantization or for another model.
std::string model_fingerprint(const gguf::File& f);

}  // namespace pi::sparse
