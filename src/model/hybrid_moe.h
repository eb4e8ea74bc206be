// The FFN step of a hybrid mixture of experts: each layer's experts split between a device
// (the hot ones, as the plan chose them by how often the router picks them) and the CPU (the
// rest, read where the model file maps them), computed at the same time.
//
// Routing runs where the layer's attention runs (its router is there); the batch's (token,
// expert) places are grouped with the device's experts first, so that each side's outputs
// are one contiguous range and cross over in one copy:
//
//   attention on the CPU (the FFN input is host memory):
//     CPU: route, group;  hand-off in: the inputs -> device
//     device: its experts' outputs;  hand-off out: those outputs -> host, while
//     CPU: its experts' outputs;  then out = the weighted sum of both (combine_rows)
//   attention on the device:
//     device: route (the logits come out) while the inputs go out: one sync
//     device: its experts, while the CPU computes its own;  hand-off in: the CPU's outputs
//     device: out = the weighted sum of both
//
// A layer whose experts are all on one side skips the other: all on the device, the device's
// MoeFfn runs it whole; none there, the CPU's does (attention on the device: one hand-off each
// way, the sum made on the CPU). --cpu-moe layers are the latter.
//
// Exactness: every token's sum runs over its experts in id order, on whichever side, so the
// output is the CPU engine's bit for bit where the device computes an expert as the CPU does
// (the sim), for any thread count and batch split. Thread-safety: one step per session.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/device.h"
#include "core/error.h"
#include "model/ffn.h"
#include "model/moe_ffn.h"

namespace pi::model {

// Per layer, where its attention runs and which experts the device holds.
struct MoeSplit {
  std::vector<bool> attn_on_device;                  // [n_layer]
  std::vector<bool> route_on_device;                 // [n_layer] its router is on the device
  std::vector<std::vector<int32_t>> device_experts;  // [n_layer] ascending expert ids
  // [n_layer] (empty: no cache) the experts a cache of recently used ones starts with, held in
  // the device's stacks after device_experts: a step's experts that ran on the CPU replace the
  // least recently used of them for the steps after it (at most as many per step as the
  // cache holds, the most chosen first).
  std::vector<std::vector<int32_t>> cache_experts;
};

// Hand-offs and places per layer since creation (HybridFfn's counters for experts).
struct MoeSplitCounters {
  int64_t tokens = 0;
  int64_t device_places = 0, host_places = 0;  // (token, expert) pairs computed on each side
  int64_t copies_in = 0, copies_out = 0;       // hand-offs: host -> device, device -> host
  int64_t uploads = 0;                         // experts copied into the cache
  uint64_t upload_bytes = 0;
};

class HybridMoeFfn final : public FfnStep {
 public:
  // `host_moe` computes on the host from the model's weights; `dev_moe` on `dev` from the
  // placed weights, whose stacks of layer il hold split.device_experts[il] in that order
  // (nullptr only when no layer's attention or expert is on the device). `dev` must outlive
  // the step.
  // With a cache (split.cache_experts), `host_w` are the weights the CPU computes from and
  // `dev_w` the placed ones whose stacks the cache's uploads rewrite; both must outlive the step.
  static Result<std::unique_ptr<HybridMoeFfn>> create(const HParams& hp, std::unique_ptr<MoeFfn> host_moe,
                                                      std::unique_ptr<MoeFfn> dev_moe, backend::Device& dev,
                                                      MoeSplit split, int64_t max_tokens,
                                                      const ModelWeights* host_w = nullptr,
                                                      const ModelWeights* dev_w = nullptr);
  // Device allocations create() makes beyond the MoeFfns': the inputs of CPU layers with
  // device experts.
  static std::vector<uint64_t> device_allocations(const HParams& hp, const MoeSplit& split, int64_t max_tokens);

  void run(int64_t il, const FfnInput& in, float* out) override;
  void before_attention(int64_t il, const float* x, int64_t m) override;

  MoeFfn& host_part() { return *host_; }
  MoeFfn* device_part() { return dev_moe_.get(); }
  const std::vector<MoeSplitCounters>& counters() const { return counters_; }

 private:
  HybridMoeFfn(const HParams& hp, std::unique_ptr<MoeFfn> host_moe, std::unique_ptr<MoeFfn> dev_moe,
               backend::Device& dev, MoeSplit split);
  void run_host_layer(int64_t il, const FfnInput& in, float* out);
  void run_device_layer(int64_t il, const FfnInput& in, float* out);
  // x (device, [m, n_embd]) into x_h_ once the device has computed it; `then_route`: the
  // device's router runs on it first and its sync covers the copy.
  const float* fetch(int64_t il, const float* x, int64_t m, bool then_route);
  // The cache of layer il after a step grouped as g: its hits become the most recent, and the
  // experts the CPU ran replace the least recent (uploaded on the copy queue).
  void refresh_cache(int64_t il, const MoeFfn::Groups& g);
  // Before the device computes layer il: its uploads have landed.
  void await_uploads(int64_t il);

  // Per layer: the expert in each device slot (static ones first), each expert's slot (-1: on
  // the CPU), when each slot was last used, and how many slots are static.
  struct Slots {
    std::vector<int32_t> expert, slot_of;
    std::vector<int64_t> last_use;
    int64_t n_static = 0;
    backend::Event uploaded;
  };

  const HParams& hp_;
  std::unique_ptr<MoeFfn> host_, dev_moe_;
  backend::Device& dev_;
  MoeSplit split_;
  std::vector<std::vector<uint8_t>> on_device_;  // [n_layer][n_expert] flags
  std::vector<MoeSplitCounters> counters_;
  backend::Buffer x_dev_;            // device f32 [max_tokens, n_embd]: CPU layers' inputs
  backend::Buffer x_h_, ye_h_, out_h_;  // pinned host: inputs, expert outputs, sums
  bool copy_pending_ = false;        // a copy in from ye_h_ / out_h_ may still read it
  const ModelWeights* host_w_ = nullptr;
  const ModelWeights* dev_w_ = nullptr;
  std::vector<Slots> slots_;     // [n_layer]
  backend::Buffer staging_;      // pinned: one step's uploads of a layer, in the device's layout
  std::vector<std::pair<int64_t, int32_t>> missed_;  // scratch: (-tokens, expert)
};

}  // namespace pi::model
