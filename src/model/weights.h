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

// Attention block of one layer. Either q/k/v are separate or `qkv` is fused (falcon).
// A projection may be stored transposed instead (`*_t`, one row per input feature, as
// PowerInfer's ffn_down_t): files written by `powerinfer calibrate` do so for the projections
// whose input is thresholded, so that skipping an input channel skips a contiguous row.
// Exactly one of q / q_t (k / k_t, v / v_t, out / out_t) is present, unless qkv is.
struct AttnWeights {
  Vector norm;    // f32 [n_embd]  attn_norm
  Vector norm_b;  // f32 [n_embd]  attn_norm bias (layer norm only)
  Matrix q;       // [n_embd_q, n_embd]
  Matrix k;       // [n_embd_kv, n_embd]
  Matrix v;       // [n_embd_kv, n_embd]
  Matrix qkv;     // [n_embd_q + 2 * n_embd_kv, n_embd]  rows: q, then k, then v (falcon)
  Matrix out;     // [n_embd, n_embd_q]
  Matrix q_t;     // [n_embd, n_embd_q]   attn_q_t
  Matrix k_t;     // [n_embd, n_embd_kv]  attn_k_t
  Matrix v_t;     // [n_embd, n_embd_kv]  attn_v_t
  Matrix out_t;   // [n_embd_q, n_embd]   attn_output_t
};

// FFN block of one layer. `norm` is the FFN's own input norm: ffn_norm for llama/bamboo,
// attn_norm_2 for falcon-40B; absent for falcon-7B, whose FFN reads the attention norm's
// output. Exactly one of down / down_t is present, and at most one of gate / gate_t
// (gate_t: calibrated files whose FFN input is thresholded, see AttnWeights).
struct FfnWeights {
  Vector norm;    // f32 [n_embd]
  Vector norm_b;  // f32 [n_embd]  (layer norm only)
  Matrix gate;    // [n_ff, n_embd]  absent for FfnKind::Plain
  Matrix up;      // [n_ff, n_embd]
  Matrix down;    // [n_embd, n_ff]  GGUF files
  Matrix down_t;  // [n_ff, n_embd]  PowerInfer and calibrated files: one row per neuron
  Matrix gate_t;  // [n_embd, n_ff]  calibrated files: one row per input feature
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
  Vector out_norm;    // f32 [n_embd]
  Vector out_norm_b;  // f32 [n_embd]  (layer norm only)
  Matrix output;      // [n_vocab, n_embd]  token_embd when the file has no output.weight
  std::vector<LayerWeights> layers;
};

// Bytes of every weight view of `w` (what placing them on a device copies).
uint64_t weight_bytes(const ModelWeights& w);

}  // namespace pi::model
