// The FFN of each layer as a swappable step. The forward pass hands a step the normalized
// FFN input and the predictor input of every token in the batch and adds the step's output to
// the residual stream. DenseFfn computes every neuron; the sparse engine supplies a step that
// predicts the active neurons and computes only those.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/model.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "core/error.h"

namespace pi::model {

// Device addresses of the device the step runs on.
struct FfnInput {
  const float* x = nullptr;        // f32 [m, n_embd]  normalized FFN input
  const float* pred_in = nullptr;  // f32 [m, n_embd]  predictor input: the residual stream after
                                   // attention (llama, bamboo) or the layer input (falcon)
  int64_t m = 0;                   // tokens
};

class FfnStep {
 public:
  virtual ~FfnStep() = default;
  // Writes the FFN output of layer `il` for in.m tokens to out, f32 [in.m, n_embd]
  // (overwritten). in.m never exceeds the batch size the step was built for.
  virtual void run(int64_t il, const FfnInput& in, float* out) = 0;
  // Called before layer il's attention with the layer's input (the residual stream, f32
  // [m, n_embd]) when the model routes on it (HParams::router_before_attn); run() for the
  // same layer follows.
  virtual void before_attention(int64_t /*il*/, const float* /*x*/, int64_t /*m*/) {}
};

// Every neuron, with the architecture's FFN kind and activation. PowerInfer files (down_t)
// and calibrated files (down_t, gate_t) run the same maths with the transposed projections.
class DenseFfn final : public FfnStep {
 public:
  // Computes `weights` (views in dev's memory) on `dev`, with scratch from dev for up to
  // `max_tokens` tokens. `model`, `weights` and `dev` must outlive it.
  static Result<std::unique_ptr<DenseFfn>> create(const Model& model, const ModelWeights& weights,
                                                  backend::Device& dev, int64_t max_tokens);
  void run(int64_t il, const FfnInput& in, float* out) override;
  // Device bytes create() allocates.
  static uint64_t device_bytes(const HParams& hp, int64_t max_tokens) {
    return 2 * static_cast<uint64_t>(max_tokens * hp.n_ff) * sizeof(float);
  }

 private:
  DenseFfn(const Model& model, const ModelWeights& weights, backend::Device& dev);

  const Model& model_;
  const ModelWeights& w_;
  backend::Ops& ops_;
  backend::Buffer gate_;              // f32 [max_tokens, n_ff]
  backend::Buffer up_;                // f32 [max_tokens, n_ff]
  std::vector<int32_t> all_neurons_;  // 0 .. n_ff-1: the row list of the dense down_t product
  std::vector<int32_t> all_inputs_;   // 0 .. n_embd-1: the row list of the dense gate_t product
};

// Whole layers on several devices (a hybrid placement of a dense file, as llama.cpp -ngl):
// layer il runs the step of the lane that runs the layer (Forward's LanePlan), whose inputs
// and output are in that lane's memory.
class LaneFfn final : public FfnStep {
 public:
  // steps[k] runs the layers with layer_lane[il] == k; every lane used must have a step.
  LaneFfn(std::vector<std::unique_ptr<FfnStep>> steps, std::vector<int> layer_lane)
      : steps_(std::move(steps)), lane_(std::move(layer_lane)) {}
  void run(int64_t il, const FfnInput& in, float* out) override {
    steps_[static_cast<size_t>(lane_[static_cast<size_t>(il)])]->run(il, in, out);
  }
  void before_attention(int64_t il, const float* x, int64_t m) override {
    steps_[static_cast<size_t>(lane_[static_cast<size_t>(il)])]->before_attention(il, x, m);
  }

 private:
  std::vector<std::unique_ptr<FfnStep>> steps_;
  std::vector<int> lane_;
};

// The FFN of a layer that runs on a device while its FFN weights stay on the host (llama.cpp's
// --cpu-moe: attention on the GPU, experts on the CPU): the input goes out to host memory,
// the host's step computes, the output comes back, one hand-off each way (the input's copy
// is a sync). A router before attention gets the layer input the same way.
class HostFfnBridge final : public FfnStep {
 public:
  // `host_step` runs on host memory; `dev` is the device whose memory the inputs and the
  // output are in; both must outlive the bridge.
  static Result<std::unique_ptr<HostFfnBridge>> create(FfnStep& host_step, backend::Device& dev, int64_t n_embd,
                                                       int64_t max_tokens);
  void run(int64_t il, const FfnInput& in, float* out) override;
  void before_attention(int64_t il, const float* x, int64_t m) override;

 private:
  HostFfnBridge(FfnStep& host_step, backend::Device& dev, int64_t n_embd)
      : host_(host_step), dev_(dev), n_embd_(n_embd) {}
  // x (device, [m, n_embd]) copied into x_ once the device has computed it.
  const float* fetch(const float* x, int64_t m);

  FfnStep& host_;
  backend::Device& dev_;
  int64_t n_embd_;
  backend::Buffer x_, out_;  // pinned host f32 [max_tokens, n_embd]
};

}  // namespace pi::model
