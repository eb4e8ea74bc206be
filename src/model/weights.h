// Weights of a loaded model: non-owning views (tensor/view.h) into the model file's memory
// map (nothing is copied except 1-D tensors stored in a non-f32 type, which are widened once
// at load), or into a device's buffers once placed there (backend::place_weights).
// Shapes are outermost first: a matrix with one row per output feature is [n_out, n_in].
// Views stay valid as long as the Model that owns the mapping.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/view.h"

namespace pi::model {

using pi::Matrix;
using pi::Vector;

// Attention block of one layer. Either q/k/v are separate or `qkv` is fused (falcon). The
// biases are absent (data == nullptr) unless the architecture has them. A projection may be
// stored transposed instead (`*_t`, one row per input feature, as PowerInfer's ffn_down_t):
// files written by `powerinfer calibrate` do so for the projections whose input is
// thresholded, so that skipping an input channel skips a contiguous row. Exactly one of
// q / q_t (k / k_t, v / v_t, out / out_t) is present, unless qkv is.
struct AttnWeights {
  Vector norm;    // f32 [n_embd]  attn_norm
  Vector norm_b;  // f32 [n_embd]  attn_norm bias (layer norm only)
  Matrix q;       // [n_embd_q, n_embd]
  Matrix k;       // [n_embd_kv, n_embd]
  Matrix v;       // [n_embd_kv, n_embd]
  Matrix qkv;     // [n_embd_q + 2 * n_embd_kv, n_embd]  rows: q, then k, then v (falcon)
  Matrix out;     // [n_embd, n_embd_q]
  Vector q_b;     // f32 [n_embd_q]   (qwen2, opt)
  Vector k_b;     // f32 [n_embd_kv]  (qwen2, opt)
  Vector v_b;     // f32 [n_embd_kv]  (qwen2, opt)
  Vector out_b;   // f32 [n_embd]     (opt)
  Matrix q_t;     // [n_embd, n_embd_q]   attn_q_t
  Matrix k_t;     // [n_embd, n_embd_kv]  attn_k_t
  Matrix v_t;     // [n_embd, n_embd_kv]  attn_v_t
  Matrix out_t;   // [n_embd_q, n_embd]   attn_output_t
};

// FFN block of one layer. `norm` is the FFN's own input norm: ffn_norm for llama/bamboo/opt,
// attn_norm_2 for falcon-40B; absent for falcon-7B, whose FFN reads the attention norm's
// output. Exactly one of down / down_t is present, and at most one of gate / gate_t
// (gate_t: calibrated files whose FFN input is thresholded, see AttnWeights). The biases
// (opt) are absent otherwise: out = down · act(up · x + up_b) + down_b.
struct FfnWeights {
  Vector norm;    // f32 [n_embd]
  Vector norm_b;  // f32 [n_embd]  (layer norm only)
  Matrix gate;    // [n_ff, n_embd]  absent for FfnKind::Plain
  Matrix up;      // [n_ff, n_embd]
  Matrix down;    // [n_embd, n_ff]  GGUF files
  Matrix down_t;  // [n_ff, n_embd]  PowerInfer and calibrated files: one row per neuron
  Matrix gate_t;  // [n_embd, n_ff]  calibrated files: one row per input feature
  Vector up_b;    // f32 [n_ff]
  Vector down_b;  // f32 [n_embd]
};

struct LayerWeights {
  AttnWeights attn;
  FfnWeights ffn;
};

// Every matrix view of a layer (present or not), for code that visits them all.
template <typename L>
auto layer_matrices(L& l) {
  return std::array{&l.attn.q,   &l.attn.k,   &l.attn.v,  &l.attn.qkv, &l.attn.out,
                    &l.attn.q_t, &l.attn.k_t, &l.attn.v_t, &l.attn.out_t, &l.ffn.gate,
                    &l.ffn.up,   &l.ffn.down, &l.ffn.down_t, &l.ffn.gate_t};
}

struct ModelWeights {
  Matrix tok_embd;    // [n_vocab, n_embd]  any computable type; rows are dequantized on use
  Matrix pos_embd;    // [pos_offset + n_pos, n_embd]  learned positions (opt); rows as tok_embd
  Vector out_norm;    // f32 [n_embd]
  Vector out_norm_b;  // f32 [n_embd]  (layer norm only)
  Matrix output;      // [n_vocab, n_embd]  token_embd when the file has no output.weight
  std::vector<LayerWeights> layers;
};

// Bytes of every weight view of `w` (what placing them on a device copies).
uint64_t weight_bytes(const ModelWeights& w);

// The views of a layer's dense block, the part a hybrid placement moves as a whole (the
// planner, the ledger and the placement walk the same list): the attention weights and biases,
// both norms, and with `with_ffn` (whole-layer placements) the FFN matrices and biases.
// on_matrix(Matrix&) and on_vector(Vector&) see every present view (const or not, as `L` is).
template <typename Layer, typename OnMatrix, typename OnVector>
void each_dense_view(Layer& L, bool with_ffn, OnMatrix&& on_matrix, OnVector&& on_vector) {
  for (auto* m : {&L.attn.q, &L.attn.k, &L.attn.v, &L.attn.qkv, &L.attn.out, &L.attn.q_t,
                  &L.attn.k_t, &L.attn.v_t, &L.attn.out_t})
    if (m->present()) on_matrix(*m);
  for (auto* v : {&L.attn.norm, &L.attn.norm_b, &L.attn.q_b, &L.attn.k_b, &L.attn.v_b,
                  &L.attn.out_b, &L.ffn.norm, &L.ffn.norm_b})
    if (v->present()) on_vector(*v);
  if (!with_ffn) return;
  for (auto* m : {&L.ffn.gate, &L.ffn.gate_t, &L.ffn.up, &L.ffn.down, &L.ffn.down_t})
    if (m->present()) on_matrix(*m);
  for (auto* v : {&L.ffn.up_b, &L.ffn.down_b})
    if (v->present()) on_vector(*v);
}

// The non-transposed matrices that only the dense products (linear, linear3) may read, and
// which of them do for a kind of file (Model::dense_only): none, the attention projections
// and the output head (the FFN runs sparse), or all of them. The token embedding (rows looked
// up one at a time) is never one of them, nor a head that is the token embedding.
enum class DenseOnly { None, AttentionAndHead, All };

// on_matrix(Matrix&, bool dense_only) for every present attention projection (q, k, v, qkv,
// out), FFN matrix (gate, up, down) and untied output head of `w`; dense_only says whether
// `dense` counts it as read only through dense products.
template <typename Weights, typename OnMatrix>
void each_dense_candidate(Weights& w, DenseOnly dense, OnMatrix&& on_matrix) {
  for (auto& L : w.layers) {
    for (auto* m : {&L.attn.q, &L.attn.k, &L.attn.v, &L.attn.qkv, &L.attn.out})
      if (m->present()) on_matrix(*m, dense != DenseOnly::None);
    for (auto* m : {&L.ffn.gate, &L.ffn.up, &L.ffn.down})
      if (m->present()) on_matrix(*m, dense == DenseOnly::All);
  }
  if (w.output.present() && w.output.data != w.tok_embd.data) on_matrix(w.output, dense != DenseOnly::None);
}

// The views of the output head: the output matrix and the output norm.
template <typename Weights, typename OnMatrix, typename OnVector>
void each_head_view(Weights& w, OnMatrix&& on_matrix, OnVector&& on_vector) {
  if (w.output.present()) on_matrix(w.output);
  for (auto* v : {&w.out_norm, &w.out_norm_b})
    if (v->present()) on_vector(*v);
}

}  // namespace pi::model
