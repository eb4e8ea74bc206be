// The architecture registry. Each supported `general.architecture` has one file
// (arch_<name>.cpp) that reads its hyperparameters beyond the common ones and maps its
// tensors to ModelWeights with shape checks. The forward pass (forward.cpp) is shared and
// driven by the HParams each architecture fills in (norm kind, RoPE kind or learned
// positions, FFN kind, parallel residual) and by the biases its weights have.
#pragma once

#include <array>
#include <span>
#include <string>
#include <string_view>

#include "core/error.h"
#include "gguf/reader.h"
#include "model/hparams.h"
#include "model/layer_tensors.h"
#include "model/tensor_loader.h"
#include "model/weights.h"

namespace pi::model {

// Called with hp.arch_name, hp.powerinfer and the common hparams already filled in
// (read_common_hparams). Completes `hp` and loads every weight into `w`.
using ArchLoadFn = Status (*)(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w);

struct ArchDef {
  std::string_view name;  // general.architecture
  Arch arch;
  ArchLoadFn load;
};

// The registered architecture named `name`, or nullptr.
const ArchDef* find_arch(std::string_view name);
// "llama, bamboo, falcon, opt, qwen2, ...": for error messages.
std::string supported_arch_names();

// Per-architecture entry points (arch_*.cpp).
Status load_llama(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w);
Status load_bamboo(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w);
Status load_falcon(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w);
Status load_opt(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w);
Status load_qwen2(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w);
Status load_qwen3(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w);
Status load_qwen3moe(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w);
Status load_smallthinker(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w);
Status load_gpt_oss(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w);

// How an architecture's layers hold a row of the layer table (layer_tensors.h).
enum class Need : uint8_t {
  Required,
  // The row or its transposed twin, whichever the file holds: calibrated files store some
  // projections transposed, PowerInfer's own ffn_down_t. Both present is an error naming the
  // file, except for a PowerInfer-native twin, which then wins.
  EitherLayout,
};
struct TensorUse {
  const LayerTensor* tensor;
  Need need = Need::Required;
  std::string_view file_stem = {};  // the file's name for it when not the table's ("attn_norm_2")
};

// Loads the tensors `uses` names for layer `il` into `L`, in that order, with the shapes the
// table gives in `hp`'s sizes; the first missing or misshapen tensor is the error.
Status load_layer(TensorLoader& t, const HParams& hp, int64_t il, LayerWeights& L,
                  std::span<const TensorUse> uses);
// load_layer for every layer of `hp` (w.layers resized to hp.n_layer).
Status load_layers(TensorLoader& t, const HParams& hp, ModelWeights& w, std::span<const TensorUse> uses);

// llama's layer (shared by bamboo and qwen2): RMS norms, separate q/k/v, gate/up/down (or
// down_t in PowerInfer files), any projection possibly transposed by calibrate.
inline constexpr std::array<TensorUse, 9> kLlamaLayer = {{
    {&kAttnNorm},
    {&kAttnQ, Need::EitherLayout},
    {&kAttnK, Need::EitherLayout},
    {&kAttnV, Need::EitherLayout},
    {&kAttnOut, Need::EitherLayout},
    {&kFfnNorm},
    {&kFfnGate, Need::EitherLayout},
    {&kFfnUp},
    {&kFfnDown, Need::EitherLayout},
}};

// The hyperparameters qwen2, qwen3 and qwen3moe share: RMS norms (default eps 1e-6), NeoX
// RoPE, a gated FFN with SiLU unless the file declares another activation.
Status read_qwen_hparams(const gguf::File& f, HParams& hp);

// Shared tail of every architecture: token_embd, output norm, output head (tied to
// token_embd when output.weight is absent). Sets hp.n_vocab from token_embd.
Status load_embeddings_and_head(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w,
                                bool norm_has_bias);

// "blk.<il>.<suffix>"
std::string blk(int64_t il, const char* suffix);

// A required matrix [rows, cols] / vector [n] into `out` (TensorLoader::matrix / vector).
Status load_matrix(TensorLoader& t, const std::string& name, int64_t rows, int64_t cols,
                   Matrix& out);
Status load_vector(TensorLoader& t, const std::string& name, int64_t n, Vector& out);

}  // namespace pi::model
