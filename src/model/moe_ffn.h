// The mixture-of-experts FFN (Mixtral, Qwen3-MoE, SmallThinker): per token, the router's
// logits (ffn_gate_inp) pick the n_expert_used largest, and the token's output is the sum of
// those experts' gated FFNs (SwiGLU, or ReGLU for SmallThinker) weighted as HParams::gating
// says. Only the chosen experts are computed; a batch's tokens
// are grouped by expert so that each chosen expert's weights are read once per batch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/device.h"
#include "backend/ops.h"
#include "core/error.h"
#include "model/expert_stream.h"
#include "model/ffn.h"
#include "model/model.h"

namespace pi::model {

// Routing of m tokens: ids[i * k + j] is token i's j-th expert and weights[i * k + j] its
// weight, in order of decreasing logit (ties: the lower id first; NaN last, weight 0).
// logits f32 [m, n_expert]. The k chosen logits l_j become gates g_j = exp(l_j - max l)
// (softmax: the same as a softmax over all n_expert renormalized over the k) or sigmoid(l_j),
// in double, and the weights are g_j / sum g. Deterministic: a token's routing depends on its
// logits alone. k <= kMaxExpertsUsed. `scratch` (n_expert ids) saves an allocation per call.
void route_top_k(const float* logits, int64_t m, int64_t n_expert, int64_t k, Gating gating, int32_t* ids,
                 float* weights, std::vector<int32_t>* scratch = nullptr);

class MoeFfn final : public FfnStep {
 public:
  // Computes `weights` (views in dev's memory) on `dev`, with scratch from dev for up to
  // `max_tokens` tokens; `model`, `weights` and `dev` must outlive it. Routing runs on the
  // host: on a device whose memory is not the host's, each layer copies its router logits
  // out (and, for sparse ReGLU experts, each expert's gate values: the row lists are host
  // arrays), one sync each. `dense`: ReGLU experts compute every neuron too (the baseline
  // their sparsity is measured against); ReGLU experts whose down is not stored transposed
  // run dense on such a device.
  static Result<std::unique_ptr<MoeFfn>> create(const Model& model, const ModelWeights& weights,
                                                backend::Device& dev, int64_t max_tokens, bool dense = false);
  void run(int64_t il, const FfnInput& in, float* out) override;
  // Routes layer il's tokens on the layer input (SmallThinker's router before attention).
  void before_attention(int64_t il, const float* x, int64_t m) override;

  // ---- run()'s pieces, for a layer whose experts two devices share (HybridMoeFfn) ----
  // A batch's routed slots (token i's j-th choice) grouped by expert: each expert's places,
  // the token of each place, and each token's places with their weights in ascending expert
  // order (so that its sum runs over its experts in id order whatever else is in the batch:
  // the same bits for any batch split).
  struct Groups {
    int64_t m = 0;                   // tokens
    std::vector<int64_t> first;      // [n_expert] expert e's places: first[e] ..
    std::vector<int64_t> count;      // [n_expert]                    .. first[e] + count[e]
    std::vector<int32_t> tokens;     // [m * k] the token of each place
    std::vector<int32_t> comb_rows;  // [m * k] token i's places, experts ascending ...
    std::vector<float> comb_w;       // ... and their weights (combine_rows)
    int64_t n_front = 0;             // places of the experts grouped first
  };
  // The router's choice for m tokens of layer il from its input x (this device's memory).
  void route(int64_t il, const float* x, int64_t m);
  // Groups the m tokens route() chose for layer il: the experts with (*front)[e] != 0 first
  // (their places are 0 .. n_front - 1), each side in ascending expert order; counts the
  // tokens in stats(). Valid until the next call.
  const Groups& group(int64_t il, int64_t m, const std::vector<uint8_t>* front = nullptr);
  // The experts of g (another MoeFfn's grouping, or this one's) on this device: those whose
  // front flag equals `front_side` (every expert when front is nullptr), their tokens' inputs
  // gathered from x (f32 [g.m, n_embd], this device's memory), each output row written to ye
  // at its place (f32 [places, n_embd], this device's memory).
  void compute(int64_t il, const Groups& g, const float* x, const std::vector<uint8_t>* front, bool front_side,
               float* ye);
  // out[i] = sum over token i's places of weight * ye[place], in ascending expert order.
  void combine(const Groups& g, const float* ye, float* out);
  // The experts are read from the file on demand into `stream`'s slots (a host device; nullptr:
  // the stacks hold them). Decode steps then predict the next layer's experts from this
  // layer's input (its router on it) and read them ahead; SmallThinker's router before
  // attention says which without a guess.
  void set_expert_stream(ExpertStream* stream) { stream_ = stream; }
  // This device's stacks of layer il hold only some experts: slot[e] is expert e's position
  // in them, -1 for an expert they lack (compute() must not be asked for it). Default: all
  // n_expert experts in id order.
  void set_expert_slots(int64_t il, std::vector<int32_t> slot);
  // The expert outputs' scratch (this device's memory, f32 [max_tokens * k, n_embd]): the ye
  // a step that owns this MoeFfn may pass to compute() and combine().
  float* outputs() const { return ye_.as<float>(); }
  // The device allocations create() makes, in bytes (logits, one expert's inputs, gate, up,
  // every expert's outputs), and their sum.
  static std::vector<uint64_t> device_allocations(const HParams& hp, int64_t max_tokens);
  static uint64_t device_bytes(const HParams& hp, int64_t max_tokens);
  // Records every token's experts from now on (off by default: it grows with every token):
  // routes()[il] holds layer il's ids as route_top_k writes them, [tokens run, n_expert_used],
  // in the order the tokens ran. For tests and routing statistics.
  void trace_routes(bool on) { trace_ = on; }
  const std::vector<std::vector<int32_t>>& routes() const { return routes_; }
  void clear_routes() { routes_.clear(); }
  // Counts, per layer, the tokens on which each neuron of each expert fired (a positive gate
  // of a ReGLU expert run sparse; nothing otherwise): neuron_counts()[il][e * n_ff_exp + j].
  void count_neurons(bool on);
  const std::vector<std::vector<float>>& neuron_counts() const { return neuron_counts_; }
  // ReGLU experts (relu(gate) * up) compute the up rows and read the down rows of the neurons
  // whose gate is positive only: the rows each token computed, and all it could have, since
  // creation (both 0 for SwiGLU experts or a dense step).
  bool sparse_experts() const { return sparse_; }
  uint64_t rows_computed() const { return rows_computed_; }
  uint64_t rows_possible() const { return rows_possible_; }
  // Per layer since the last reset_stats(): tokens run, the expert rows they computed of those
  // they could have, and the weight bytes read (router, and each chosen expert's gate, up and
  // down: all of them, or the rows of positive gates, a row read once per batch).
  struct LayerStats {
    int64_t tokens = 0;
    int64_t rows_possible = 0, rows_computed = 0;
    uint64_t bytes = 0;
  };
  const std::vector<LayerStats>& stats() const { return stats_; }
  void reset_stats() { stats_.assign(stats_.size(), LayerStats{}); }

 private:
  MoeFfn(const Model& model, const ModelWeights& weights, backend::Device& dev, bool dense);
  // Expert e's FFN of its n tokens (inputs xe) into ye (f32 [n, n_embd]), counted in `st`;
  // gate and up are its scratch (f32 [n, n_ff_exp]). `products_done`: the gate (and, for
  // dense experts, the up) product is in them already.
  void expert(int64_t il, int64_t e, int64_t n, const float* xe, float* gate, float* up, float* ye,
              LayerStats& st, bool products_done = false);
  // compute() for one token (g.m == 1; gate_ and up_ hold a row per selected expert): every
  // expert reads the same input, so their gate and up products are one linear_each (the input
  // prepared once), the gated unit one call, their downs one more. The same bits as expert()
  // one by one; a tenth of the dispatches.
  void compute_one_token(int64_t il, const Groups& g, const float* x, const std::vector<uint8_t>* front,
                         bool front_side, float* ye);
  // Reads ahead the experts the next MoE layers' routers pick on this layer's input (stream_).
  void guess_next(int64_t il, const FfnInput& in);
  static constexpr int64_t kGuessTokens = 4;  // steps of up to this many tokens guess
  static constexpr int kGuessLayers = 2;      // this many MoE layers ahead
  // The host's copy of device memory written by the ops submitted so far (a sync on a device
  // whose memory is not the host's).
  const float* on_host(const float* p, int64_t n, backend::Buffer& host);

  const Model& model_;
  const ModelWeights& w_;
  backend::Device& dev_;
  backend::Ops& ops_;
  bool host_;               // dev_'s memory is the host's
  backend::Buffer logits_;  // f32 [max_tokens, n_expert]
  backend::Buffer xe_;      // f32 [max_tokens, n_embd]    one expert's tokens' inputs
  backend::Buffer gate_;    // f32 [max(max_tokens, n_expert_used), n_ff_exp]
  backend::Buffer up_;      // f32 [max(max_tokens, n_expert_used), n_ff_exp]
  backend::Buffer ye_;      // f32 [max_tokens * k, n_embd] every expert's outputs, grouped
  backend::Buffer logits_host_, gate_host_;  // pinned host copies (devices off the host)
  std::vector<int32_t> ids_;     // [m, k]
  std::vector<float> weights_;   // [m, k]
  Groups groups_;                 // group()'s result
  std::vector<int32_t> filled_;   // [m] scratch
  std::vector<int64_t> next_;     // [n_expert] the counting sort's next place per expert
  std::vector<std::vector<int32_t>> slots_;  // [n_layer] set_expert_slots (empty: all, in order)
  std::vector<int64_t> n_stacked_;          // [n_layer] experts in this device's stacks
  std::vector<int32_t> route_order_;  // route_top_k's scratch
  int64_t routed_ = -1;           // the layer ids_ / weights_ hold
  bool sparse_ = false;           // ReGLU experts: only the rows of positive gates
  std::vector<int32_t> all_rows_;  // 0 .. n_ff_exp - 1 (a dense ffn_down_exps_t product)
  std::vector<int32_t> idx_;      // the rows of positive gates, per token (CSR) ...
  std::vector<int64_t> offsets_;  // ... [max_tokens + 1]
  uint64_t rows_computed_ = 0, rows_possible_ = 0;
  std::vector<LayerStats> stats_;  // [n_layer]
  std::vector<uint8_t> row_seen_;  // [n_ff_exp] scratch: the union of a batch's rows
  bool trace_ = false;
  ExpertStream* stream_ = nullptr;     // set_expert_stream
  const std::vector<int32_t>* stream_slots_ = nullptr;  // acquire()'s slots of the layer computing
  std::vector<Matrix> parts_w_;            // compute_one_token's matrices ...
  std::vector<backend::LinearPart> parts_;   // ... and products
  std::vector<int64_t> chosen_;              // ... and its experts (place order)
  std::vector<int32_t> guess_ids_;    // [m, k] the next layer's predicted experts
  std::vector<float> guess_w_;
  std::vector<std::vector<float>> neuron_counts_;  // [n_layer][n_expert * n_ff_exp] when counting
  std::vector<std::vector<int32_t>> routes_;  // [n_layer][tokens * n_expert_used] while tracing
};

// The FFN step of a model: MoeFfn for a mixture-of-experts model (`dense_experts`: every
// neuron of ReGLU experts), else DenseFfn.
Result<std::unique_ptr<FfnStep>> make_ffn(const Model& model, const ModelWeights& weights, backend::Device& dev,
                                          int64_t max_tokens, bool dense_experts = false);
// Device bytes make_ffn's step allocates, each allocation and in all.
std::vector<uint64_t> ffn_device_allocations(const HParams& hp, int64_t max_tokens);
uint64_t ffn_device_bytes(const HParams& hp, int64_t max_tokens);

}  // namespace pi::model
