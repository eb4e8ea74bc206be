// Weights of a loaded model: non-owning views (tensor/view.h) into the model file's memory
// map (nothing is copied except 1-D tensors stored in a non-f32 type, which are widened once
// at load), or into a device's buffers once placed there (backend::place_weights).
// Shapes are outermost first: a matrix with one row per output feature is [n_out, n_in].
// Views stay valid as long as the Model that owns the mapping.
#pragma once

#include <cstddef>
#include <array>
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
  Vector q_norm;  // f32 [head_dim]   RMS norm of each q head before RoPE (qwen3)
  Vector k_norm;  // f32 [head_dim]   RMS norm of each k head before RoPE (qwen3)
  Vector sinks;   // f32 [n_head]     learned attention sinks: a logit per head (gpt-oss)
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
  // Mixture of experts (instead of gate/up/down): the router and the experts' matrices stacked
  // as the file stores them (3-D [n_expert, rows, cols] viewed as [n_expert * rows, cols]);
  // expert_rows() is expert e's matrix.
  Matrix gate_inp;     // [n_expert, n_embd]  ffn_gate_inp: the router's logits
  Matrix gate_exps;    // [n_expert * n_ff_exp, n_embd]
  Matrix up_exps;      // [n_expert * n_ff_exp, n_embd]
  Matrix down_exps;    // [n_expert * n_embd, n_ff_exp]
  Matrix down_exps_t;  // [n_expert * n_ff_exp, n_embd]  ffn_down_exps_t: one row per expert neuron
  // gpt-oss's biases: the router's, and each expert's gate, up and down (stacked as the
  // matrices: expert e's is expert_bias(v, e, n_expert)).
  Vector gate_inp_b;   // f32 [n_expert]
  Vector gate_exps_b;  // f32 [n_expert * n_ff_exp]
  Vector up_exps_b;    // f32 [n_expert * n_ff_exp]
  Vector down_exps_b;  // f32 [n_expert * n_embd]
};

// Expert e's matrix of a stack of n_expert equal matrices ([n_expert * rows, cols]).
inline Matrix expert_rows(const Matrix& stack, int64_t e, int64_t n_expert) {
  Matrix m = stack;
  m.rows = stack.rows / n_expert;
  m.stack = 1;
  m.data = stack.data + static_cast<size_t>(e * m.rows) * stack.row_stride();
  return m;
}

// Expert e's part of a stack of n_expert equal bias vectors; absent when `stack` is.
inline Vector expert_bias(const Vector& stack, int64_t e, int64_t n_expert) {
  if (!stack.present()) return stack;
  const int64_t n = stack.n / n_expert;
  return Vector{stack.data + e * n, n};
}

// The four expert stacks of `ffn`, present or not, in this order: gate, up, down, down_t
// (ExpertStream's ExpertPart indexes it); const or not as ffn is.
template <typename Ffn>
auto expert_parts(Ffn& ffn) {
  return std::array{&ffn.gate_exps, &ffn.up_exps, &ffn.down_exps, &ffn.down_exps_t};
}

// on_stack(Matrix&) for each expert stack `ffn` holds (gate, up, down or down_t; const or not
// as ffn is).
template <typename Ffn, typename OnStack>
void each_expert_stack(Ffn& ffn, OnStack&& on_stack) {
  for (auto* m : expert_parts(ffn))
    if (m->present()) on_stack(*m);
}

// on_bias(Vector&) for each expert-stacked bias `ffn` holds (gpt-oss's gate, up and down;
// const or not as ffn is).
template <typename Ffn, typename OnBias>
void each_expert_bias(Ffn& ffn, OnBias&& on_bias) {
  for (auto* v : {&ffn.gate_exps_b, &ffn.up_exps_b, &ffn.down_exps_b})
    if (v->present()) on_bias(*v);
}

// One layer's views. Every member has a row in layer_tensors.h (kLayerTensors), through which
// loading, placement and the ledger reach it: a member added here needs its row there.
struct LayerWeights {
  AttnWeights attn;
  FfnWeights ffn;
};

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

// The views of the output head: the output matrix and the output norm.
template <typename Weights, typename OnMatrix, typename OnVector>
void each_head_view(Weights& w, OnMatrix&& on_matrix, OnVector&& on_vector) {
  if (w.output.present()) on_matrix(w.output);
  for (auto* v : {&w.out_norm, &w.out_norm_b})
    if (v->present()) on_vector(*v);
}

}  // namespace pi::model
