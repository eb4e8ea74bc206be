// Synthetic models of real shapes (docs/SYNTH.md): random weights whose ReLU activations are
// sparse with a power-law distribution of neuron frequencies and, for PowerInfer files,
// predictors that predict them; mixtures of experts with random routing. The library's
// `powerinfer synth`. The file is streamed (memory O(chunk) whatever the model's size) and
// its bytes do not depend on the thread count.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "powerinfer/error.h"

namespace pi {

// Unset optionals take the preset's value.
struct SynthParams {
  std::string output;
  std::string preset = "tiny";  // tiny, llama2-7b, ... (docs/SYNTH.md)
  std::optional<std::string> arch;
  std::optional<int64_t> layers, embd, ff, heads, kv_heads, vocab, ctx, predictor_rank;
  // Mixture of experts (qwen3moe, or llama as Mixtral): experts per layer, per token, and an
  // expert's width; head_dim: qwen3's head width when it is not embd / heads.
  std::optional<int64_t> experts, experts_used, expert_ff, head_dim;
  // smallthinker: each expert's down projection stored transposed (ffn_down_exps_t), for the
  // sparse expert kernel; smallthinker and gpt-oss: the sliding window (unset: the preset's;
  // 0: none).
  bool transpose_down = false;
  std::optional<int64_t> swa;
  std::string type = "f16";
  bool pwri = false;         // a PowerInfer file (predictors) instead of a GGUF file
  std::string act = "relu";  // relu | silu (llama only: heavy-tailed hidden states, see SYNTH.md)
  double activity = 0.10;
  double hot_fraction = 0.20;
  double hot_share = 0.80;
  double noise = 0.10;   // rho: |gate noise| / |low-rank part| per row
  double margin = 0.10;  // tau: predictor threshold in units of the logit's standard deviation
  std::string activation_dir;  // also write the activation statistics there
  uint64_t seed = 0;
  int threads = 0;  // 0: all hardware threads
  bool progress = true;
};

struct SynthReport {
  std::string name;        // the model's general.name
  bool powerinfer = false;
  int n_tensors = 0;
  uint64_t file_bytes = 0;
  double alpha = 0;              // solved power-law exponent
  double expected_activity = 0;  // mean of the written per-neuron probabilities
  // Mixtures of experts (n_expert > 0): ReGLU experts are sparse inside, SwiGLU ones are not.
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  bool reglu_experts = false;
  double hot_fraction = 0, hot_share = 0;  // as resolved
  int64_t predictor_rank = 0;  // PowerInfer files
  double threshold = 0;
  int n_activation_files = 0;  // DIR/activation_N.npy, and the statistics file below
  std::string activation_dir, stats_file;
};

// Fails with a one-line message naming the flag for a constraint the request breaks
// (quantization block sizes, head counts, ranks, an unreachable power law), or for a file that
// cannot be written.
Result<SynthReport> synthesize(const SynthParams& p);

}  // namespace pi
