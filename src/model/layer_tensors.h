// The tensors of one layer, described once. Each row of kLayerTensors names a GGUF tensor
// (after "blk.<il>."), the LayerWeights member that holds it, its role, its shape in
// hyperparameters, the activation mask that skips its work, and how a hybrid placement moves
// it. The loaders (arch_*.cpp), placement, the memory ledger, calibrate and bench iterate this
// table, so a tensor added here is loaded, placed, counted and checked everywhere; a list of a
// layer's tensors written out by hand elsewhere is a bug waiting for the next architecture.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "model/hparams.h"
#include "model/weights.h"

namespace pi::model {

// The four places a layer's activations may be thresholded (sparse/act_sparsity.h): the
// attention input (read by q, k, v), the attention output (read by the output projection),
// the FFN input (read by gate and up) and the gate activation (selects rows of up and down_t).
enum class Site { AttnIn = 0, AttnOut = 1, FfnIn = 2, FfnGate = 3 };
inline constexpr int kNumSites = 4;
inline constexpr std::array<Site, kNumSites> kAllSites = {Site::AttnIn, Site::AttnOut, Site::FfnIn,
                                                          Site::FfnGate};

enum class Role : uint8_t {
  Norm,      // 1-D norm scale, "<stem>.weight"
  NormBias,  // 1-D norm bias, "<stem>.bias"
  Proj,      // matrix, "<stem>.weight" (transposed: "<stem>_t.weight")
  Bias,      // 1-D projection bias, "<stem>.bias" (2-D [n_expert, n] for an expert stack's)
  Param,     // another 1-D parameter, "<stem>.weight" (attention sinks)
};

// How a hybrid placement moves a tensor: with the layer's dense block (attention and both
// norms: whole or not at all), or with the FFN (whole with the layer, or split by neuron).
enum class Group : uint8_t { Dense, Ffn };

// A tensor dimension in hyperparameters.
enum class Dim : uint8_t { None, Embd, Q, KV, QKV, Ff, Head, HeadCount, Expert, FfExp };
int64_t dim_size(const HParams& hp, Dim d);

struct LayerTensor {
  std::string_view stem;   // "attn_q"
  Role role = Role::Proj;
  // One row per input feature ("<stem>_t.weight"): read by the transposed axpy, so that a
  // skipped input skips a contiguous row. Its twin is the row with the same stem, not
  // transposed; a file holds at most one of the two (load_layer: Need::EitherLayout).
  bool transposed = false;
  // PowerInfer's own files store this one transposed (ffn_down_t): preferred when a file has
  // both, and not a sign that `powerinfer calibrate` wrote the file.
  bool powerinfer_native = false;
  // `powerinfer quantize` leaves it in the file's type: a router's few bytes decide every expert
  // (llama.cpp keeps it F32 too).
  bool keep_type = false;
  Group group = Group::Dense;
  std::optional<Site> site = std::nullopt;  // the mask that skips its rows (up, down_t) or inputs (the others)
  Dim rows = Dim::None;      // shape as stored: [rows, cols], or [rows] for 1-D tensors
  Dim cols = Dim::None;
  // 3-D: [stack, rows, cols], held as [stack * rows, cols] (experts); a bias [stack, rows],
  // held as [stack * rows].
  Dim stack = Dim::None;
  // The member that holds it: exactly one of these is set.
  Matrix AttnWeights::*attn_matrix = nullptr;
  Matrix FfnWeights::*ffn_matrix = nullptr;
  Vector AttnWeights::*attn_vector = nullptr;
  Vector FfnWeights::*ffn_vector = nullptr;

  bool is_matrix() const { return attn_matrix != nullptr || ffn_matrix != nullptr; }
  // "attn_q.weight", "attn_q_t.weight", "attn_norm.bias"; `stem` replaces the table's.
  std::string name(std::string_view file_stem = {}) const;
};

inline constexpr LayerTensor kAttnNorm{.stem = "attn_norm", .role = Role::Norm, .rows = Dim::Embd,
                                       .attn_vector = &AttnWeights::norm};
inline constexpr LayerTensor kAttnNormB{.stem = "attn_norm", .role = Role::NormBias, .rows = Dim::Embd,
                                        .attn_vector = &AttnWeights::norm_b};
inline constexpr LayerTensor kAttnQ{.stem = "attn_q", .site = Site::AttnIn, .rows = Dim::Q, .cols = Dim::Embd,
                                    .attn_matrix = &AttnWeights::q};
inline constexpr LayerTensor kAttnQT{.stem = "attn_q", .transposed = true, .site = Site::AttnIn, .rows = Dim::Embd,
                                     .cols = Dim::Q, .attn_matrix = &AttnWeights::q_t};
inline constexpr LayerTensor kAttnK{.stem = "attn_k", .site = Site::AttnIn, .rows = Dim::KV, .cols = Dim::Embd,
                                    .attn_matrix = &AttnWeights::k};
inline constexpr LayerTensor kAttnKT{.stem = "attn_k", .transposed = true, .site = Site::AttnIn, .rows = Dim::Embd,
                                     .cols = Dim::KV, .attn_matrix = &AttnWeights::k_t};
inline constexpr LayerTensor kAttnV{.stem = "attn_v", .site = Site::AttnIn, .rows = Dim::KV, .cols = Dim::Embd,
                                    .attn_matrix = &AttnWeights::v};
inline constexpr LayerTensor kAttnVT{.stem = "attn_v", .transposed = true, .site = Site::AttnIn, .rows = Dim::Embd,
                                     .cols = Dim::KV, .attn_matrix = &AttnWeights::v_t};
inline constexpr LayerTensor kAttnQkv{.stem = "attn_qkv", .rows = Dim::QKV, .cols = Dim::Embd,
                                      .attn_matrix = &AttnWeights::qkv};
inline constexpr LayerTensor kAttnOut{.stem = "attn_output", .site = Site::AttnOut, .rows = Dim::Embd,
                                      .cols = Dim::Q, .attn_matrix = &AttnWeights::out};
inline constexpr LayerTensor kAttnOutT{.stem = "attn_output", .transposed = true, .site = Site::AttnOut,
                                       .rows = Dim::Q, .cols = Dim::Embd, .attn_matrix = &AttnWeights::out_t};
inline constexpr LayerTensor kAttnQB{.stem = "attn_q", .role = Role::Bias, .rows = Dim::Q,
                                     .attn_vector = &AttnWeights::q_b};
inline constexpr LayerTensor kAttnKB{.stem = "attn_k", .role = Role::Bias, .rows = Dim::KV,
                                     .attn_vector = &AttnWeights::k_b};
inline constexpr LayerTensor kAttnVB{.stem = "attn_v", .role = Role::Bias, .rows = Dim::KV,
                                     .attn_vector = &AttnWeights::v_b};
inline constexpr LayerTensor kAttnOutB{.stem = "attn_output", .role = Role::Bias, .rows = Dim::Embd,
                                       .attn_vector = &AttnWeights::out_b};
inline constexpr LayerTensor kAttnQNorm{.stem = "attn_q_norm", .role = Role::Norm, .rows = Dim::Head,
                                       .attn_vector = &AttnWeights::q_norm};
inline constexpr LayerTensor kAttnKNorm{.stem = "attn_k_norm", .role = Role::Norm, .rows = Dim::Head,
                                       .attn_vector = &AttnWeights::k_norm};
inline constexpr LayerTensor kAttnSinks{.stem = "attn_sinks", .role = Role::Param, .rows = Dim::HeadCount,
                                        .attn_vector = &AttnWeights::sinks};
// The FFN's input norm moves with the dense block: the FFN's device reads its output.
inline constexpr LayerTensor kFfnNorm{.stem = "ffn_norm", .role = Role::Norm, .rows = Dim::Embd,
                                      .ffn_vector = &FfnWeights::norm};
inline constexpr LayerTensor kFfnNormB{.stem = "ffn_norm", .role = Role::NormBias, .rows = Dim::Embd,
                                       .ffn_vector = &FfnWeights::norm_b};
inline constexpr LayerTensor kFfnGate{.stem = "ffn_gate", .group = Group::Ffn, .site = Site::FfnIn, .rows = Dim::Ff,
                                      .cols = Dim::Embd, .ffn_matrix = &FfnWeights::gate};
inline constexpr LayerTensor kFfnGateT{.stem = "ffn_gate", .transposed = true, .group = Group::Ffn,
                                       .site = Site::FfnIn, .rows = Dim::Embd, .cols = Dim::Ff,
                                       .ffn_matrix = &FfnWeights::gate_t};
inline constexpr LayerTensor kFfnUp{.stem = "ffn_up", .group = Group::Ffn, .site = Site::FfnGate, .rows = Dim::Ff,
                                    .cols = Dim::Embd, .ffn_matrix = &FfnWeights::up};
inline constexpr LayerTensor kFfnDown{.stem = "ffn_down", .group = Group::Ffn, .site = Site::FfnGate,
                                      .rows = Dim::Embd, .cols = Dim::Ff, .ffn_matrix = &FfnWeights::down};
inline constexpr LayerTensor kFfnDownT{.stem = "ffn_down", .transposed = true, .powerinfer_native = true,
                                       .group = Group::Ffn, .site = Site::FfnGate, .rows = Dim::Ff,
                                       .cols = Dim::Embd, .ffn_matrix = &FfnWeights::down_t};
inline constexpr LayerTensor kFfnUpB{.stem = "ffn_up", .role = Role::Bias, .group = Group::Ffn, .rows = Dim::Ff,
                                     .ffn_vector = &FfnWeights::up_b};
inline constexpr LayerTensor kFfnDownB{.stem = "ffn_down", .role = Role::Bias, .group = Group::Ffn,
                                       .rows = Dim::Embd, .ffn_vector = &FfnWeights::down_b};

inline constexpr LayerTensor kFfnGateInp{.stem = "ffn_gate_inp", .keep_type = true, .group = Group::Ffn,
                                         .rows = Dim::Expert, .cols = Dim::Embd,
                                         .ffn_matrix = &FfnWeights::gate_inp};
inline constexpr LayerTensor kFfnGateExps{.stem = "ffn_gate_exps", .group = Group::Ffn, .rows = Dim::FfExp,
                                          .cols = Dim::Embd, .stack = Dim::Expert,
                                          .ffn_matrix = &FfnWeights::gate_exps};
inline constexpr LayerTensor kFfnUpExps{.stem = "ffn_up_exps", .group = Group::Ffn, .rows = Dim::FfExp,
                                        .cols = Dim::Embd, .stack = Dim::Expert, .ffn_matrix = &FfnWeights::up_exps};
inline constexpr LayerTensor kFfnDownExps{.stem = "ffn_down_exps", .group = Group::Ffn, .rows = Dim::Embd,
                                          .cols = Dim::FfExp, .stack = Dim::Expert,
                                          .ffn_matrix = &FfnWeights::down_exps};
// SmallThinker's converter stores the experts' down projections transposed, so that a ReGLU
// expert's zero gates skip contiguous rows (as ffn_down_t does for a dense ReLU FFN).
inline constexpr LayerTensor kFfnDownExpsT{.stem = "ffn_down_exps", .transposed = true, .powerinfer_native = true,
                                           .group = Group::Ffn, .rows = Dim::FfExp, .cols = Dim::Embd,
                                           .stack = Dim::Expert, .ffn_matrix = &FfnWeights::down_exps_t};
// gpt-oss: the router's bias and each expert's biases, stacked as the experts.
inline constexpr LayerTensor kFfnGateInpB{.stem = "ffn_gate_inp", .role = Role::Bias, .group = Group::Ffn,
                                          .rows = Dim::Expert, .ffn_vector = &FfnWeights::gate_inp_b};
inline constexpr LayerTensor kFfnGateExpsB{.stem = "ffn_gate_exps", .role = Role::Bias, .group = Group::Ffn,
                                           .rows = Dim::FfExp, .stack = Dim::Expert,
                                           .ffn_vector = &FfnWeights::gate_exps_b};
inline constexpr LayerTensor kFfnUpExpsB{.stem = "ffn_up_exps", .role = Role::Bias, .group = Group::Ffn,
                                         .rows = Dim::FfExp, .stack = Dim::Expert,
                                         .ffn_vector = &FfnWeights::up_exps_b};
inline constexpr LayerTensor kFfnDownExpsB{.stem = "ffn_down_exps", .role = Role::Bias, .group = Group::Ffn,
                                           .rows = Dim::Embd, .stack = Dim::Expert,
                                           .ffn_vector = &FfnWeights::down_exps_b};

// Every tensor a layer may hold, each member once.
inline constexpr std::array kLayerTensors = {
    &kAttnNorm, &kAttnNormB, &kAttnQ,    &kAttnQT,  &kAttnK,    &kAttnKT,   &kAttnV,
    &kAttnVT,   &kAttnQkv,   &kAttnOut,  &kAttnOutT, &kAttnQB,  &kAttnKB,   &kAttnVB,
    &kAttnOutB, &kAttnQNorm, &kAttnKNorm, &kAttnSinks, &kFfnNorm, &kFfnNormB, &kFfnGate, &kFfnGateT, &kFfnUp,
    &kFfnDown,  &kFfnDownT, &kFfnUpB,    &kFfnDownB, &kFfnGateInp, &kFfnGateExps, &kFfnUpExps, &kFfnDownExps,
    &kFfnDownExpsT, &kFfnGateInpB, &kFfnGateExpsB, &kFfnUpExpsB, &kFfnDownExpsB};

// The row with `t`'s stem in the other layout (transposed <-> not), or nullptr.
const LayerTensor* layout_twin(const LayerTensor& t);

// The row a file's tensor "blk.<il>.<name>" holds under the table's naming, or nullptr (a
// tensor outside the layers, or one an architecture names its own way).
const LayerTensor* layer_tensor_of(std::string_view tensor_name);

// The view `t` names in layer `L` (const or not, as L is).
template <typename L>
auto& matrix_in(L& layer, const LayerTensor& t) {
  return t.attn_matrix != nullptr ? layer.attn.*t.attn_matrix : layer.ffn.*t.ffn_matrix;
}
template <typename L>
auto& vector_in(L& layer, const LayerTensor& t) {
  return t.attn_vector != nullptr ? layer.attn.*t.attn_vector : layer.ffn.*t.ffn_vector;
}

// on_matrix(const LayerTensor&, Matrix&) and on_vector(const LayerTensor&, Vector&) for every
// row of the table, present in `layer` or not, in table order.
template <typename L, typename OnMatrix, typename OnVector>
void each_layer_tensor(L& layer, OnMatrix&& on_matrix, OnVector&& on_vector) {
  for (const LayerTensor* t : kLayerTensors) {
    if (t->is_matrix())
      on_matrix(*t, matrix_in(layer, *t));
    else
      on_vector(*t, vector_in(layer, *t));
  }
}

// on_matrix(const LayerTensor&, Matrix&) for every matrix row, present or not.
template <typename L, typename OnMatrix>
void each_layer_matrix(L& layer, OnMatrix&& on_matrix) {
  for (const LayerTensor* t : kLayerTensors)
    if (t->is_matrix()) on_matrix(*t, matrix_in(layer, *t));
}

// The views of a layer's dense block, the part a hybrid placement moves as a whole (the
// planner, the ledger and the placement walk the same list): Group::Dense, and with `with_ffn`
// (whole-layer placements) Group::Ffn too. on_matrix(Matrix&) and on_vector(Vector&) see every
// present view (const or not, as `L` is).
template <typename L, typename OnMatrix, typename OnVector>
void each_dense_view(L& layer, bool with_ffn, OnMatrix&& on_matrix, OnVector&& on_vector) {
  each_layer_tensor(
      layer,
      [&](const LayerTensor& t, auto& m) {
        if (m.present() && (with_ffn || t.group == Group::Dense)) on_matrix(m);
      },
      [&](const LayerTensor& t, auto& v) {
        if (v.present() && (with_ffn || t.group == Group::Dense)) on_vector(v);
      });
}

// The non-transposed matrices that only the dense products (linear, linear3) may read, and
// which of them do for a kind of file (Model::dense_only): none, the attention projections
// and the output head (the FFN runs sparse), or all of them. The token embedding (rows looked
// up one at a time) is never one of them, nor a head that is the token embedding.
enum class DenseOnly { None, AttentionAndHead, All };

// on_matrix(Matrix&, bool dense_only) for every present non-transposed matrix of every layer
// and the untied output head of `w`; dense_only says whether `dense` counts it as read only
// through dense products.
template <typename Weights, typename OnMatrix>
void each_dense_candidate(Weights& w, DenseOnly dense, OnMatrix&& on_matrix) {
  for (auto& L : w.layers) {
    each_layer_matrix(L, [&](const LayerTensor& t, auto& m) {
      if (t.transposed || !m.present()) return;
      // An expert stack only when each expert is whole 16-row groups (no group straddles two).
      if (m.stack > 1 && (m.rows / m.stack) % 16 != 0) return;
      on_matrix(m, t.group == Group::Dense ? dense != DenseOnly::None : dense == DenseOnly::All);
    });
  }
  if (w.output.present() && w.output.data != w.tok_embd.data) on_matrix(w.output, dense != DenseOnly::None);
}

// Bytes of `m` (the view of row `t`) one token reads in a dense step: all of it, or of a stack
// of experts the hp.n_expert_used it routes to.
uint64_t token_bytes(const HParams& hp, const LayerTensor& t, const Matrix& m);

// Bytes of the present matrices of `layer` whose work the mask at `site` skips (the same in
// either layout: calibrate keeps the type where it can).
uint64_t site_matrix_bytes(const LayerWeights& layer, Site site);

}  // namespace pi::model
