// Writes tiny random models of every supported architecture (llama, bamboo, falcon, opt,
// qwen2, qwen3, qwen3moe, smallthinker, gpt-oss; any other name gets llama's tensors) with
// gguf::Writer, for tests that need no Python: loading errors (dropped or mis-shaped tensors),
// thread and batch invariance, KV-cache behaviour. Weights are seeded and deterministic. With `vocab`, the file also carries
// a small SentencePiece-style vocabulary (byte fallback pieces plus a few words).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "tensor/dtype.h"
#include "tensor/shape.h"

namespace pi::testing {

struct TinySpec {
  std::string arch = "llama";  // general.architecture (any string, to test rejection)
  bool pwri = false;           // PowerInfer magic; writes ffn_down_t instead of ffn_down
  DType wtype = DType::F32;    // type of the 2-D weights (token_embd included)
  int64_t n_vocab = 300;       // >= 259 when vocab is true (specials + 256 bytes)
  int64_t n_embd = 64;
  int64_t n_ff = 96;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_head_kv = 2;
  int64_t n_ctx_train = 256;
  bool falcon_two_norms = false;  // falcon-40B layout (attn_norm_2)
  int64_t predictor_rank = 0;     // > 0: random predictors blk.N.fc1/fc2 of this rank
  bool tied_output = false;       // no output.weight
  std::string activation;         // <arch>.feed_forward_activation; empty: key absent
  uint64_t seed = 1;
  bool vocab = true;
  std::set<std::string> drop;            // tensors to leave out
  std::map<std::string, Shape> reshape;  // tensors written with another shape
  // Malformed files for the loader's checks:
  int64_t block_count = -1;                // <arch>.block_count written (-1: n_layer)
  int64_t n_vocab_tokens = -1;             // tokens in the vocabulary (-1: n_vocab)
  float norm_eps = 1e-5f;                  // the norm epsilon key
  std::map<std::string, Shape> extra;      // additional f32 tensors no architecture reads
  std::map<std::string, float> poison;     // tensor -> value of its last element (NaN, Inf)
  // qwen3moe, smallthinker: experts per layer, experts per token, an expert's width.
  int64_t n_expert = 4, n_expert_used = 2, n_ff_exp = 32;
  // smallthinker (sigmoid gating, ReGLU experts): attention.sliding_window (0: no key, every
  // layer global), and ffn_down_exps_t instead of ffn_down_exps.
  int64_t n_swa = 0;
  bool down_exps_t = false;
  std::optional<DType> expert_wtype;  // the expert stacks' type (default: wtype), e.g. MXFP4
  std::map<std::string, int64_t> int_keys;  // extra integer keys (u32 >= 0, i32 < 0), e.g. a bad gating
  std::map<std::string, float> float_keys;        // extra f32 keys
  std::map<std::string, std::string> string_keys;  // extra string keys
  std::map<std::string, bool> bool_keys;           // extra bool keys
  // Rows (of the tensor viewed as [rows, cols]) written as 1e30: finite, so a load accepts them,
  // but any product that reads one overflows.
  std::map<std::string, std::vector<int64_t>> huge_rows;
};

// The spec most variant tests use: an architecture, weight type, file kind and KV-head count
// (falcon: two_norms for the 40B layout), no vocabulary, a fixed seed.
inline TinySpec tiny_variant(const char* arch, DType t, bool pwri, int64_t kv, bool two_norms,
                             uint64_t seed) {
  TinySpec s;
  s.arch = arch;
  s.wtype = t;
  s.pwri = pwri;
  s.n_head_kv = kv;
  s.falcon_two_norms = two_norms;
  s.vocab = false;
  s.seed = seed;
  return s;
}

Status write_tiny_model(const TinySpec& spec, const std::string& path);

// A fresh path under the test temp directory: <tmp>/pi_test_<pid>/<name>.
std::string temp_path(const std::string& name);

}  // namespace pi::testing
