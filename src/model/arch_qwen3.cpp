// qwen3: Qwen3 dense models as llama.cpp writes them. qwen2's layout without the q/k/v biases,
// plus a learned RMS norm of every q and k head (attn_q_norm, attn_k_norm: f32 [head_dim])
// applied before RoPE. RoPE on NeoX pairs (the q/k rows in Hugging Face order), SwiGLU FFN
// (SiLU unless the file declares another activation), grouped-query attention, and a head
// width (attention.key_length, 128) that need not be n_embd / n_head. The small models tie
// the output head to token_embd.
#include "model/arch.h"

namespace pi::model {

Status load_qwen3(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w) {
  hp.norm = NormKind::RMS;
  hp.norm_eps =
      static_cast<float>(f.get_number_or(hp.arch_name + ".attention.layer_norm_rms_epsilon", 1e-6));
  hp.rope = RopeKind::NeoX;
  hp.ffn = FfnKind::Gated;
  hp.parallel_residual = false;
  auto act = read_activation(f, hp, Activation::SiLU);
  if (!act.ok()) return act.error();
  hp.act = *act;
  PI_TRY(load_embeddings_and_head(f, t, hp, w, /*norm_has_bias=*/false));
  static constexpr TensorUse kLayer[] = {
      {&kAttnNorm}, {&kAttnQ, Need::EitherLayout},   {&kAttnK, Need::EitherLayout}, {&kAttnV, Need::EitherLayout},
      {&kAttnQNorm}, {&kAttnKNorm}, {&kAttnOut, Need::EitherLayout}, {&kFfnNorm}, {&kFfnGate, Need::EitherLayout},
      {&kFfnUp},     {&kFfnDown, Need::EitherLayout}};
  return load_layers(t, hp, w, kLayer);
}

}  // namespace pi::model
