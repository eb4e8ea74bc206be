// The architecture registry. Each supported `general.architecture` has one file
// (arch_<name>.cpp) that reads its hyperparameters beyond the common ones and maps its
// tensors to ModelWeights with shape checks. The forward pass (forward.cpp) is shared and
// driven by the HParams each architecture fills in (norm kind, RoPE kind or learned
// positions, FFN kind, parallel residual) and by the biases its weights have.
#pragma once

#include <string>
#include <string_view>

#include "core/error.h"
#include "gguf/reader.h"
#include "model/hparams.h"
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
// "llama, bamboo, falcon, opt, qwen2": for error messages.
std::string supported_arch_names();

// Per-architecture entry points (arch_*.cpp).
Status load_llama(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w);
Status load_bamboo(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w);
Status load_falcon(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w);
Status load_opt(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w);
Status load_qwen2(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w);

// Shared by llama and bamboo, which have the same tensor layout: separate q/k/v, RMS norms,
// gate/up/down (or down_t in PowerInfer files).
Status load_llama_layout(TensorLoader& t, const HParams& hp, ModelWeights& w);

// Shared tail of every architecture: token_embd, output norm, output head (tied to
// token_embd when output.weight is absent). Sets hp.n_vocab from token_embd.
Status load_embeddings_and_head(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w,
                                bool norm_has_bias);

// FFN down projection of layer `il`: ffn_down_t [n_ff, n_embd] when present (PowerInfer),
// else ffn_down [n_embd, n_ff].
Status load_ffn_down(TensorLoader& t, const HParams& hp, int64_t il, FfnWeights& ffn);

// The projection blk.<il>.<name>.weight [n_out, n_in] into `w`, or its transpose
// blk.<il>.<name>_t.weight [n_in, n_out] into `w_t` when the file stores that instead (files
// written by `powerinfer calibrate`); both present is an error naming the file.
Status load_linear(TensorLoader& t, int64_t il, const char* name, int64_t n_out, int64_t n_in,
                   Matrix& w, Matrix& w_t);

// "blk.<il>.<suffix>"
std::string blk(int64_t il, const char* suffix);

// A required matrix [rows, cols] / vector [n] into `out` (TensorLoader::matrix / vector).
Status load_matrix(TensorLoader& t, const std::string& name, int64_t rows, int64_t cols,
                   Matrix& out);
Status load_vector(TensorLoader& t, const std::string& name, int64_t n, Vector& out);

}  // namespace pi::model
