// Runs the Python oracle (tests/reference/*.py, through the project's venv PI_PYTHON) and our
// engine on the same tiny model, for the reference-agreement tests.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "core/error.h"

namespace pi::testing {

struct TinyPyModel {
  std::string arch = "llama";   // llama | bamboo | falcon | qwen2 | qwen3 | qwen3moe | opt | smallthinker
  std::string outtype = "f32";  // f32 | f16 | q8_0 | q4_0
  bool pwri = false;
  int kv_heads = 2;  // falcon: 1 = 7B layout, more = 40B layout; opt: ignored (MHA)
  std::string act;   // --act for dense files; empty: the architecture's default
  bool tied = false;
  int seed = 1;
  int head_dim = 0;  // --head-dim (qwen3, qwen3moe); 0: n_embd / n_head
  // qwen3moe: --experts, --experts-used, --expert-ff; 0: the script's defaults.
  int experts = 0, experts_used = 0, expert_ff = 0;
  // smallthinker: --gating (empty: the script's default, sigmoid), --swa W (0: no window),
  // --transpose-down.
  std::string gating;
  int swa = 0;
  bool transpose_down = false;
  int yarn = 0;  // --yarn F (0: no RoPE scaling)

  std::string file_name() const;
};
inline void PrintTo(const TinyPyModel& m, std::ostream* os) { *os << m.file_name(); }

// True when PI_PYTHON exists and can import numpy (tests skip otherwise).
bool python_available();

// Writes the model with make_tiny_model.py (cached per process by file name); returns its path.
Result<std::string> make_py_model(const TinyPyModel& m);

// Which oracle to run: reference_forward.py as it is, or with the KV cache's f16 storage of
// keys and values emulated (tests/model/reference_f16kv.py).
enum class Oracle { Exact, F16Kv };

// reference_forward.py --out: float64 maths, logits f32 [tokens.size(), n_vocab].
Result<std::vector<float>> reference_logits(const std::string& path,
                                            const std::vector<int32_t>& tokens,
                                            Oracle oracle = Oracle::Exact);
// reference_forward.py --hidden: float64 maths, the final hidden states after the output norm
// (what embeddings pool), f32 [tokens.size(), n_embd].
Result<std::vector<float>> reference_hidden(const std::string& path,
                                            const std::vector<int32_t>& tokens);
// reference_forward.py --greedy n.
Result<std::vector<int32_t>> reference_greedy(const std::string& path,
                                              const std::vector<int32_t>& tokens, int n);

// Mixture-of-experts models: the oracle computing with `routes` forced (int32 [n_layer,
// n_tokens, K], e.g. the engine's choice) instead of its router's: the logits f32 [n_tokens,
// n_vocab], and the router's probabilities along that pass, f64 [n_layer, n_tokens, n_expert].
struct ForcedRoutes {
  std::vector<float> logits;
  std::vector<double> probs;
};
Result<ForcedRoutes> reference_forced_routes(const std::string& path, const std::vector<int32_t>& tokens,
                                             const std::vector<int32_t>& routes, Oracle oracle = Oracle::Exact);

// Deterministic pseudo-random token ids in [lo, hi).
std::vector<int32_t> test_tokens(int n, int32_t lo, int32_t hi, uint32_t seed);

}  // namespace pi::testing
