// smallthinker: PowerInfer's own mixture-of-experts family (SmallThinker-21B-A3B, -4B-A0.6B),
// as llama.cpp writes and reads it. Qwen-style attention without biases or q/k norms (NeoX
// RoPE, grouped-query, head width from key_length) and in every layer a mixture of ReGLU
// experts (relu(gate) * up) whose router reads the layer's input before attn_norm, so the
// experts are known before attention runs. Gating by expert_gating_func: softmax over the
// top-k logits or their sigmoids normalized. With attention.sliding_window, layers 0, 4, 8, ...
// attend globally without RoPE and the others through the window with RoPE.
//
// Our converter may store the experts' down projections transposed (ffn_down_exps_t, one row
// per expert neuron), for the sparse expert kernel; llama.cpp's files hold ffn_down_exps.
#include "model/arch.h"

namespace pi::model {

Status load_smallthinker(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w) {
  hp.norm = NormKind::RMS;
  hp.norm_eps = static_cast<float>(f.get_number_or(hp.arch_name + ".attention.layer_norm_rms_epsilon", 1e-6));
  hp.rope = RopeKind::NeoX;
  hp.ffn = FfnKind::Gated;
  hp.parallel_residual = false;
  hp.router_before_attn = true;
  auto act = read_activation(f, hp, Activation::ReLU);
  if (!act.ok()) return act.error();
  hp.act = *act;
  PI_TRY(read_moe_hparams(f, hp));
  if (!hp.is_moe())
    return err("%s: missing metadata key '%s.expert_count' (a smallthinker file has experts)", f.path().c_str(),
               hp.arch_name.c_str());
  PI_TRY(read_swa_hparams(f, hp));
  PI_TRY(load_embeddings_and_head(f, t, hp, w, /*norm_has_bias=*/false));
  static constexpr TensorUse kLayer[] = {{&kAttnNorm},    {&kAttnQ},       {&kAttnK},
                                         {&kAttnV},       {&kAttnOut},     {&kFfnNorm},
                                         {&kFfnGateInp},  {&kFfnGateExps}, {&kFfnUpExps},
                                         {&kFfnDownExps, Need::EitherLayout}};
  return load_layers(t, hp, w, kLayer);
}

}  // namespace pi::model
