// llama: LLaMA-1/2/3, Mistral and other models with the same layout, including grouped-query
// attention (head_count_kv < head_count). RMS norms, RoPE on pairs (2i, 2i+1) (GGUF stores
// q/k permuted for this), FFN down( act(gate·x) * (up·x) ) with act = SiLU unless the file
// declares another activation (ReLU for ReluLLaMA / ProSparse and every PowerInfer file).
// Files written by `powerinfer calibrate` store some projections transposed (Need::EitherLayout).
// With llama.expert_count (Mixtral) the FFN is a mixture of experts stacked in 3-D tensors
// (ffn_{gate,up,down}_exps; llama.cpp's older one-tensor-per-expert files are not read yet).
#include "model/arch.h"

namespace pi::model {

Status load_llama(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w) {
  hp.norm = NormKind::RMS;
  hp.norm_eps =
      static_cast<float>(f.get_number_or(hp.arch_name + ".attention.layer_norm_rms_epsilon", 1e-5));
  hp.rope = RopeKind::Normal;
  hp.ffn = FfnKind::Gated;
  hp.parallel_residual = false;
  auto act = read_activation(f, hp, Activation::SiLU);
  if (!act.ok()) return act.error();
  hp.act = *act;
  PI_TRY(read_moe_hparams(f, hp));
  PI_TRY(load_embeddings_and_head(f, t, hp, w, /*norm_has_bias=*/false));
  if (!hp.is_moe()) return load_layers(t, hp, w, kLlamaLayer);
  // Mixtral: the FFN is a mixture of SwiGLU experts of width feed_forward_length.
  static constexpr TensorUse kMoeLayer[] = {
      {&kAttnNorm}, {&kAttnQ},     {&kAttnK},      {&kAttnV},          {&kAttnOut},
      {&kFfnNorm},  {&kFfnGateInp}, {&kFfnGateExps}, {&kFfnUpExps},    {&kFfnDownExps}};
  return load_layers(t, hp, w, kMoeLayer);
}

}  // namespace pi::model
