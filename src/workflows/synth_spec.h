// What `powerinfer synth` builds: the options a user gives, and the fully resolved
// specification (shapes, types and the constants of the construction in docs/SYNTH.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/error.h"
#include "powerinfer/synth.h"
#include "gguf/writer.h"
#include "model/hparams.h"
#include "tensor/dtype.h"

namespace pi::workflows::synth {

// Architectures are the model layer's: synth writes exactly what the loader reads.
using model::Arch;
using model::arch_name;

// As given on the command line (include/powerinfer/synth.h).
using Options = SynthParams;

// Width of the constant "bias block" of the residual stream: one whole quantization block,
// so that the constant survives every block format exactly.
constexpr int64_t kBiasDims = 32;
// Most probable a neuron may be (the power law is clipped here).
constexpr double kMaxProbability = 0.98;
// Bamboo: probability that up·x > 0 for every neuron (ReLU on both gate and up).
constexpr double kBambooUpProbability = 0.995;

struct Spec {
  std::string output, preset, name;
  std::string activation_dir;  // empty: no statistics files
  Arch arch = Arch::Llama;
  DType type = DType::F16;
  bool pwri = false;
  model::Activation act = model::Activation::ReLU;
  int64_t n_layer = 0, n_embd = 0, n_ff = 0, n_head = 0, n_head_kv = 0, n_vocab = 0, n_ctx = 0;
  int64_t head_dim = 0;
  // Mixture of experts: n_expert > 0 replaces each layer's FFN with the router and
  // n_expert stacked experts of width n_ff_exp: SwiGLU with random weights and no neuron
  // sparsity (qwen3moe, Mixtral), or ReGLU (smallthinker, below).
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  bool is_moe() const { return n_expert > 0; }
  // The expert stacks' type: MXFP4 for gpt-oss (as its files ship them), else `type`.
  DType expert_type() const { return arch == Arch::GptOss ? DType::MXFP4 : type; }
  // smallthinker: ReGLU experts whose gates fire as the dense ReLU FFN's do (power law of
  // `activity`), sigmoid gating, down stored transposed or not, the sliding window (0: none).
  bool down_t = false;
  int64_t n_swa = 0;
  float rope_base = 10000.0f;
  float norm_eps = 1e-5f;
  uint64_t seed = 0;

  // Activation statistics.
  double activity = 0, hot_fraction = 0, hot_share = 0;
  // Predictor: rank r = n_bias_rows + 2 * n_pairs (see docs/SYNTH.md).
  int64_t rank = 0, n_bias_rows = 0, n_pairs = 0;
  double noise = 0, margin = 0;

  // Magnitudes (standard deviations of uniform entries) of the construction.
  double sigma_e = 1.0;   // token embedding entries outside the bias block
  double bias_c = 0;      // value of the bias block, c0 = sigma_e * sqrt(n'/D)
  double sigma_w = 0.02;  // q, k, v, gate, up, output, and the gate's random part
  double delta = 0.02;    // each block's output, relative to sigma_e per coordinate
  double sigma_o = 0;     // attn_output entries
  double sigma_d = 0;     // ffn_down entries

  int64_t n_free() const { return n_embd - kBiasDims; }  // n' = columns outside the bias block
  // S: target norm of a gate row's random part (entries of std sigma_w over n' columns).
  double row_norm() const;
  // The predictor threshold, -margin * sigma_e * S (the logit's standard deviation).
  float threshold() const;
  // llama.cpp's general.file_type for the big matrices' type.
  uint32_t file_type() const;
};

// Resolves a preset plus overrides and checks every constraint (quantization block sizes,
// head counts, ranks, reachable power law), failing with a message naming the flag.
Result<Spec> resolve(const Options& opts);

// Writes the architecture keys, the SPM vocabulary and the synth.* record. `alpha` is the
// solved power-law exponent.
Status add_metadata(gguf::Writer& w, const Spec& s, double alpha);

}  // namespace pi::workflows::synth
