// Hyperparameters of a loaded model, read from the standard GGUF keys of its architecture
// (`<arch>.embedding_length`, `<arch>.attention.head_count`, ...). Plain data; the
// architecture files fill it in and the forward pass only reads it.
#pragma once

#include <cstdint>
#include <string>

#include "backend/op_params.h"
#include "core/error.h"
#include "gguf/reader.h"

namespace pi::model {

enum class Arch { Llama, Bamboo, Falcon, Opt, Qwen2, Qwen3, Qwen3Moe, SmallThinker, GptOss };

// The most experts a token may use (expert_used_count; released models use 2 to 10).
inline constexpr int64_t kMaxExpertsUsed = 64;

// How a mixture-of-experts router's logits become the chosen experts' weights (GGUF
// <arch>.expert_gating_func): the top-k experts by logit either way.
enum class Gating {
  Softmax = 1,  // softmax over the k chosen logits (= over all, renormalized)
  Sigmoid = 2,  // sigmoid of each chosen logit, divided by their sum
};

// The op-level enums are the backend's (backend/op_params.h); the model names them here too.
using backend::Activation;
using backend::FfnKind;
using backend::NormKind;
using backend::RopeKind;

struct HParams {
  Arch arch = Arch::Llama;
  std::string arch_name;    // general.architecture as written in the file
  bool powerinfer = false;  // PWRI magic: ffn_down_t replaces ffn_down, ReLU FFN

  int64_t n_vocab = 0;      // rows of token_embd
  int64_t n_ctx_train = 0;  // <arch>.context_length (0 when absent)
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_ff = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  // n_embd / n_head unless <arch>.attention.key_length says otherwise
  int64_t n_rot = 0;     // rotated dims per head (<arch>.rope.dimension_count)

  NormKind norm = NormKind::RMS;
  float norm_eps = 1e-5f;
  // Positions: RoPE rotates q and k (has_rope), or a learned table is added to the token
  // embeddings: x += position_embd[pos + pos_offset] (has_pos_embd: opt, whose table starts
  // at row 2). n_pos: the positions such a table covers (its rows minus the offset); 0 when
  // positions are unbounded (RoPE).
  bool has_rope = true;
  bool has_pos_embd = false;
  int64_t pos_offset = 0;
  int64_t n_pos = 0;
  RopeKind rope = RopeKind::Normal;
  float rope_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // position multiplier: 1 / rope.scaling.factor (linear, YaRN)
  RopeYarn rope_yarn;             // rope.scaling.type "yarn": ext_factor != 0 (kernels/rope_yarn.h)

  Activation act = Activation::SiLU;
  FfnKind ffn = FfnKind::Gated;
  bool parallel_residual = false;  // falcon: x + attn(n(x)) + ffn(n'(x))

  // Mixture of experts (n_expert == 0: every layer has a dense FFN). A token's router logits
  // (ffn_gate_inp) pick the n_expert_used largest; those experts are computed, weighted as
  // `gating` says (Mixtral, Qwen3-MoE: softmax; SmallThinker: either).
  int64_t n_expert = 0;       // <arch>.expert_count
  int64_t n_expert_used = 0;  // <arch>.expert_used_count (top-k)
  int64_t n_ff_exp = 0;       // an expert's width: <arch>.expert_feed_forward_length, else n_ff
  Gating gating = Gating::Softmax;
  // SmallThinker: the router reads the layer's input before attn_norm (so the experts are
  // known before attention runs), not the normalized FFN input.
  bool router_before_attn = false;
  bool is_moe() const { return n_expert > 0; }
  // ReGLU experts (relu(gate) * up, smallthinker): a zero gate skips its rows of up and down.
  bool sparse_experts() const { return is_moe() && ffn == FfnKind::Gated && act == Activation::ReLU; }

  // Sliding-window attention, with n_swa > 0: a window layer attends only the n_swa latest
  // positions (its own included), the others every position. Which layers, as llama.cpp's
  // set_swa_pattern(n, dense_first) says: with swa_dense_first (SmallThinker) layer il is global
  // where il % swa_pattern == 0, else (gpt-oss, pattern 2) where il % swa_pattern ==
  // swa_pattern - 1. SmallThinker's global layers also skip RoPE (NoPE: swa_nope_global).
  int64_t n_swa = 0;        // <arch>.attention.sliding_window; 0: every layer global
  int64_t swa_pattern = 4;  // <arch>.attention.sliding_window_pattern
  bool swa_dense_first = true;
  bool swa_nope_global = true;
  bool layer_swa(int64_t il) const {
    return n_swa > 0 && (swa_dense_first ? il % swa_pattern != 0 : il % swa_pattern != swa_pattern - 1);
  }
  bool layer_rope(int64_t il) const { return has_rope && !(swa_nope_global && n_swa > 0 && !layer_swa(il)); }

  int64_t n_embd_q() const { return n_head * head_dim; }
  // The parameters of the ops this model runs.
  backend::NormParams norm_params() const { return {norm, norm_eps}; }
  backend::RopeParams rope_params() const {
    return {head_dim, n_rot, rope_base, rope_freq_scale, rope, rope_yarn};
  }
  backend::AttnParams attn_params() const;
  int64_t n_embd_kv() const { return n_head_kv * head_dim; }
  int64_t n_group() const { return n_head / n_head_kv; }  // query heads per kv head
};

const char* arch_name(Arch a);  // its general.architecture, as the registry (arch.h) names it
const char* activation_name(Activation a);

// Reads the attention/rope/FFN keys shared by every architecture into `hp`
// (hp.arch_name and hp.powerinfer must be set). Checks the values for consistency
// (positive sizes, heads dividing evenly, even n_rot <= head_dim) and fails with a message
// naming the file and key.
Status read_common_hparams(const gguf::File& f, HParams& hp);

// The expert keys (<arch>.expert_count, expert_used_count, expert_feed_forward_length,
// expert_gating_func) into `hp`; none of them: a dense model. Errors name the key: a top-k
// of 0 or above the expert count, a gating function other than softmax (1) or sigmoid (2).
Status read_moe_hparams(const gguf::File& f, HParams& hp);

// The sliding-window keys (<arch>.attention.sliding_window, .sliding_window_pattern, a
// number) into hp.n_swa and hp.swa_pattern; no window key: every layer global.
Status read_swa_hparams(const gguf::File& f, HParams& hp);

// The FFN activation: `<arch>.feed_forward_activation` ("relu" | "silu" | "gelu") when
// present; otherwise ReLU for PowerInfer files and `fallback` for plain GGUF files.
Result<Activation> read_activation(const gguf::File& f, const HParams& hp, Activation fallback);

}  // namespace pi::model
