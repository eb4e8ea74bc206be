// Activation statistics: per layer, how often each FFN neuron fired on a profiling corpus.
// The placement planner (placement.h) reads them as firing frequencies per token.
//
// Sources, all read by read_activation_stats():
//   - our file (written by `powerinfer profile`, `powerinfer synth --activation-dir` and
//     tools/convert/convert_activations.py from the original's activation/activation_N.pt):
//     a GGUF v3 file with general.architecture = "activation_stats",
//       activation_stats.block_count  u32   layers
//       activation_stats.n_tokens     u64   tokens counted; 0 = unknown (counts are relative)
//       activation_stats.source       str   "profile", "synth", "pt", ...
//       activation_stats.model_fingerprint  str (optional; model_fingerprint() of the model)
//     and per layer N a tensor blk.N.activation_counts, f32 [n_ff]: tokens on which neuron i
//     fired (fractional for expected counts). A mixture of experts' profile adds
//       activation_stats.expert_count       u32  experts per layer
//       activation_stats.expert_used_count  u32  experts per token
//       activation_stats.expert_pairs       u64  (token, slot) pairs whose token had a previous
//                                                token in its sequence
//     and per layer blk.N.expert_counts f32 [n_expert] (tokens routed to each expert) and
//     blk.N.expert_reuse f32 [1] (slots whose expert the previous token chose too); its
//     activation_counts, present for ReLU-family (ReGLU) experts only, are [n_expert * n_ff_exp],
//     expert by expert: tokens on which each expert's neuron fired (only tokens routed there);
//   - a directory of activation_N.npy files (1-D float32/float64/int32/int64 arrays, as synth
//     writes them beside its statistics file and numpy users make them), or of the original's
//     activation_N.pt files (one 1-D torch tensor each, read without torch: torch_file.h):
//     values all <= 1 are frequencies per token (n_tokens = 1), otherwise counts over unknown
//     tokens (n_tokens = 0).
// Layers are numbered by N, compared as numbers, never as strings (the original sorts
// "activation_10" before "activation_2", pairing layers with the wrong statistics).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace pi::sparse {

inline constexpr const char* kStatsArch = "activation_stats";

struct ActivationStats {
  uint64_t n_tokens = 0;                   // 0: unknown, counts are relative
  std::vector<std::vector<float>> counts;  // [n_layer][n_ff] firing counts, >= 0 (MoE: see above;
                                           // empty rows when the experts are not ReLU-family)
  std::string source;
  std::string model_fingerprint;  // empty: not recorded
  // Mixture of experts (n_expert > 0): routing per layer.
  int64_t n_expert = 0, n_expert_used = 0;
  uint64_t expert_pairs = 0;
  std::vector<std::vector<float>> expert_counts;  // [n_layer][n_expert]
  std::vector<float> expert_reuse;                // [n_layer]

  bool has_experts() const { return n_expert > 0; }
  // Share of tokens routed to each expert of `layer` (k / n_expert each when uniform).
  std::vector<double> expert_shares(int64_t layer) const;
  // Of the slots whose token had a predecessor, the fraction whose expert the predecessor
  // chose too (k / n_expert for routing independent of the previous token); 0 when none.
  double reuse_rate(int64_t layer) const;

  int64_t n_layer() const { return static_cast<int64_t>(counts.size()); }
  // Counts -> frequency per token: 1 / n_tokens, or when n_tokens is 0, 1 / (largest count),
  // i.e. the hottest neuron is taken to fire on every token (an upper bound). 0 when every
  // count is 0 and n_tokens is unknown.
  double count_scale() const;
  // Firing frequency per token of each neuron of `layer`, in [0, 1] up to rounding.
  std::vector<double> frequencies(int64_t layer) const;
  // Counts of `c` as frequencies per token (count_scale), at most 1.
  std::vector<double> per_token(const std::vector<float>& c) const;
};

// Counts one sequence's routing of layer `layer` into s.expert_counts / expert_reuse /
// expert_pairs (sized by the caller: n_expert, n_expert_used, one row per layer): ids holds
// consecutive tokens' experts, [tokens, n_expert_used] (MoeFfn::routes()); a slot is reused
// when the token before it chose the same expert. Pairs are counted on layer 0's calls only.
// Ids outside [0, n_expert) are an error naming them.
Status count_routes(ActivationStats& s, int64_t layer, std::span<const int32_t> ids);

// Writes `s` as our GGUF statistics file. Fails on an empty or ragged `counts`.
Status write_activation_stats(const std::string& path, const ActivationStats& s);

// Reads our file or a directory of activation_N.npy files (see the header comment). Every
// count must be finite and >= 0 (and, with n_tokens known, at most n_tokens); layers must be
// 0 .. n-1 without gaps. Errors name the file and the layer or key at fault.
Result<ActivationStats> read_activation_stats(const std::string& path);

// Checks that `s` fits a model of n_layer layers of n_ff neurons (and, when both are
// recorded, the same model fingerprint). Errors name `what` (the statistics' path).
Status check_stats_fit(const ActivationStats& s, int64_t n_layer, int64_t n_ff,
                       const std::string& fingerprint, const std::string& what);

// The layer number N of a file named <prefix>N<ext> ("activation_12.npy" -> 12), or nullopt
// for any other name (no digits, a sign, leading zeros other than "0", other suffixes).
std::optional<int64_t> layer_file_number(std::string_view filename, std::string_view prefix,
                                         std::string_view ext);

// Reads a NumPy .npy (format 1.x/2.x) holding a 1-D little-endian f4/f8/i4/i8 array,
// widened to float.
Result<std::vector<float>> read_npy_1d(const std::string& path);

}  // namespace pi::sparse
