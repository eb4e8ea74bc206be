// Planning a hybrid context (a GPU-like device beside the CPU): what goes on the device under
// the VRAM budget, and the exact ledger of the device's memory, before anything is allocated.
//
//   1. the placement problem with the device's true costs: every tensor of a dense block and
//      of the head at its allocation footprint, the KV cache of each layer for n_ctx, one hot
//      neuron's rows (+ its id), and the executor's exact per-step buffers for n_batch tokens
//      by the kind of work that needs them (sparse/placement_model.h);
//   2. the plan: from the GPU index beside the model when it was solved for exactly this
//      request, else solved (exact) and the index written; `-ngl N` instead fixes N whole
//      layers for a dense placement (llama.cpp's meaning);
//   3. the ledger of every device allocation the plan implies (runtime/ledger.h), checked
//      against the budget.
// Statistics: ContextOptions::stats_path, else <model>.activations.gguf beside the model when
// present. A PowerInfer file without statistics gets the dense blocks and the head only (its
// neurons stay on the CPU), unless a matching index says which neurons are hot.
#pragma once

#include <cstdint>
#include <string>

#include "backend/device.h"
#include "core/error.h"
#include "model/forward.h"
#include "model/hybrid_moe.h"
#include "model/model.h"
#include "runtime/context_options.h"
#include "runtime/ledger.h"
#include "sparse/hybrid_ffn.h"
#include "sparse/placement.h"

namespace pi::runtime {

// Lanes of a hybrid forward pass.
inline constexpr int kHostLane = 0;
inline constexpr int kDeviceLane = 1;

struct HybridSetup {
  sparse::PlacementPlan plan;
  bool split = false;           // neurons split between the devices (a PowerInfer file run sparse)
  std::string origin;           // "loaded from PATH", "solved: REASON" or "-ngl N"
  std::string stats_path;       // the statistics used; empty: none
  uint64_t budget = 0;          // bytes
  model::LanePlan lanes;        // kHostLane / kDeviceLane per part
  sparse::HybridLayout layout;  // split only
  Ledger ledger;
  // Per layer, what the plan expects read per token (the problem's costs): the dense block's
  // weights (its KV cache apart, per cell), and the FFN rows of the device's and the CPU's
  // neurons; the head.
  struct LayerBytes {
    double dense = 0, kv_per_cell = 0, hot = 0, cold = 0;
  };
  std::vector<LayerBytes> layer_bytes;
  double head_bytes = 0;

  std::vector<bool> ffn_on_cpu;  // per layer: its FFN group stays on the CPU (PlacementRequest)
  // A mixture of experts placed expert by expert (--vram-budget): layout.hot[il] are the
  // experts of layer il on the device, and the routers of the device's layers (not kept on
  // the CPU) are there too (PlacementRequest::experts).
  bool experts = false;
  // ContextOptions::expert_cache: per layer, the experts its cache slots start with (the most
  // chosen after the static ones); empty when there is no cache.
  std::vector<std::vector<int32_t>> cache_experts;

  // Whether anything at all runs on the device.
  bool uses_device() const;
  // Whether layer il's FFN weights are on the device: a whole layer placed there (no neuron
  // split) whose experts do not stay on the CPU.
  bool ffn_on_device(int64_t il) const;
  // Whether layer il's router is on the device (experts placed one by one).
  bool router_on_device(int64_t il) const;
  // Device experts in all layers.
  int64_t n_device_experts() const;
};

// The expert split of a plan with experts placed one by one (HybridSetup::experts).
model::MoeSplit moe_split(const HybridSetup& h);

// The device lane's roles in Forward's terms (StepBuffers::Role); 0: no device lane.
unsigned device_lane_roles(const model::LanePlan& lanes);

// The layers whose FFN group stays on the CPU under o.n_cpu_moe (mixtures of experts) and
// o.tensor_overrides (-ot REGEX=CPU); errors name the override at fault.
Result<std::vector<bool>> ffn_on_cpu_layers(const model::Model& m, const ContextOptions& o, bool split);

// `o` must be resolved (Context::create: n_ctx, n_batch); `dev` is not host-addressable;
// `budget` is the device bytes the context may use (the runtime margin included).
Result<HybridSetup> plan_hybrid(const model::Model& m, const ContextOptions& o,
                                backend::Device& dev, uint64_t budget);

// Statistics path for a model: `given` if not empty, else <model>.activations.gguf when that
// file exists, else the original's `activation/` folder beside the model (activation_0.pt or
// .npy in it), as the original finds it; else empty.
std::string find_stats(const std::string& model_path, const std::string& given);

}  // namespace pi::runtime
