// The tensors of a synthetic model and the generator of their rows. The maths is in
// docs/SYNTH.md; in short, every layer's "key" matrix (ffn_gate, or ffn_up for falcon) is a
// low-rank matrix plus noise whose rows are biased through a constant block of the residual
// stream so that neuron i fires with probability p_i, and the predictor reproduces the
// low-rank part exactly.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "synth_activity.h"
#include "synth_spec.h"
#include "tensor/shape.h"

namespace pi::workflows::synth {

enum class Kind {
  TokEmbd,     // [n_vocab, n_embd]  bias block = c0, rest uniform sigma_e
  Dense,       // q, k, v, qkv, output, llama's ffn_up: uniform sigma_w
  AttnOut,     // [n_embd, n_q]      rows of the bias block are zero, rest uniform sigma_o
  NormWeight,  // f32 [n_embd] ones
  NormBias,    // f32 [n_embd] zeros
  Key,         // [n_ff, n_embd]     the firing-controlled matrix (gate; falcon: up)
  BiasedUp,    // [n_ff, n_embd]     bamboo's ffn_up: positive with probability 0.995
  DownT,       // [n_ff, n_embd]     one row per neuron; bias block columns zero
  Down,        // [n_embd, n_ff]     exact transpose of DownT
  Fc1,         // [r, n_embd]        predictor layer 1
  Fc2,         // [n_ff, r]          predictor layer 2
  HeadNorm,    // f32 [head_dim] ones (qwen3's per-head q/k norms)
  ExpertDown,  // [n_expert, n_embd, n_ff_exp]  each expert's bias-block rows zero, rest uniform sigma_o
  ExpertKey,   // [n_expert, n_ff_exp, n_embd]  ReGLU experts' gates: row r fires as Key row r % n_ff_exp
  ExpertDownT, // [n_expert, n_ff_exp, n_embd]  ffn_down_exps_t: bias-block columns zero, rest uniform sigma_o
};

struct TensorPlan {
  std::string name;
  DType type = DType::F32;
  Shape shape;  // outermost first
  Kind kind = Kind::Dense;
  int64_t layer = -1;  // -1: not part of a block
  uint64_t key = 0;    // random stream of this tensor (shared by ffn_down and ffn_down_t)
};

// The tensors of the file in writing order: token_embd, output_norm(.bias), output, then per
// block attention, FFN and (PowerInfer files) predictor tensors.
std::vector<TensorPlan> plan_tensors(const Spec& s);

// Generates rows. prepare_layer() sets up one layer's neuron permutation and predictor
// basis (not thread-safe); row() is const and may run concurrently for rows of the prepared
// layer (and for tensors outside blocks).
class Generator {
 public:
  Generator(const Spec& s, const PowerLaw& law);

  void prepare_layer(int64_t layer);
  // Expected firing frequency of each neuron of the prepared layer, in file order.
  std::span<const float> probabilities() const { return p_; }

  // Floats of scratch space row() needs per thread.
  size_t scratch_size() const;
  // Writes row `r` of `t` (t.shape.cols() floats) to out.
  void row(const TensorPlan& t, int64_t r, float* out, float* scratch) const;

 private:
  struct KeyRow {
    float beta;  // bias-block weight
    float su;    // scale of the low-rank coefficients
  };
  // `neuron` picks the firing probability (Key: i; ExpertKey: i's row in its expert).
  KeyRow key_row(int64_t i, float* v, float* u, int64_t neuron) const;
  float bias_for(double t, double v_norm) const;

  const Spec& s_;
  std::vector<double> law_p_;  // firing probability by rank (hottest first)
  std::vector<double> law_t_;  // Phi^{-1} of the key matrix's probability, by rank
  int64_t layer_ = -1;
  std::vector<float> p_;             // [n_ff] firing probability (file order)
  std::vector<float> t_;             // [n_ff] Phi^{-1}(probability that the key row fires)
  std::vector<int32_t> group_;       // [n'] basis row owning each free column
  std::vector<float> bval_;          // [n'] value of that basis row at the column
  std::vector<uint64_t> down_keys_;  // [n_ff] row keys of ffn_down_t, for the transpose
  uint64_t u_key_ = 0, noise_key_ = 0;
};

}  // namespace pi::workflows::synth
