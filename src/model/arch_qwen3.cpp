// qwen3: Qwen3 dense models as llama.cpp writes them. qwen2's layout without the q/k/v biases,
// plus a learned RMS norm of every q and k head (attn_q_norm, attn_k_norm: f32 [head_dim])
// applied before RoPE. RoPE on NeoX pairs (the q/k rows in Hugging Face order), SwiGLU FFN
// (SiLU unless the file declares another activation), grouped-query attention, and a head
// width (attention.key_length, 128) that need not be n_embd / n_head. The small models tie
// the output head to token_embd.
//
// qwen3moe: Qwen3-MoE (Qwen3-30B-A3B, -235B-A22B): qwen3's attention, and in every layer a
// mixture of SwiGLU experts instead of the dense FFN (no shared expert): the router
// ffn_gate_inp, softmax over all experts, the top expert_used_count renormalized.
#include "model/arch.h"

namespace pi::model {

Status load_qwen3(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w) {
  PI_TRY(read_qwen_hparams(f, hp));
  PI_TRY(load_embeddings_and_head(f, t, hp, w, /*norm_has_bias=*/false));
  static constexpr TensorUse kLayer[] = {{&kAttnNorm},
                                         {&kAttnQ, Need::EitherLayout},
                                         {&kAttnK, Need::EitherLayout},
                                         {&kAttnV, Need::EitherLayout},
                                         {&kAttnQNorm},
                                         {&kAttnKNorm},
                                         {&kAttnOut, Need::EitherLayout},
                                         {&kFfnNorm},
                                         {&kFfnGate, Need::EitherLayout},
                                         {&kFfnUp},
                                         {&kFfnDown, Need::EitherLayout}};
  return load_layers(t, hp, w, kLayer);
}

Status load_qwen3moe(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w) {
  PI_TRY(read_qwen_hparams(f, hp));
  PI_TRY(read_moe_hparams(f, hp));
  if (!hp.is_moe())
    return err("%s: missing metadata key '%s.expert_count' (a qwen3moe file has experts)", f.path().c_str(),
               hp.arch_name.c_str());
  PI_TRY(load_embeddings_and_head(f, t, hp, w, /*norm_has_bias=*/false));
  static constexpr TensorUse kLayer[] = {
      {&kAttnNorm},   {&kAttnQ},   {&kAttnK},       {&kAttnV},        {&kAttnQNorm},  {&kAttnKNorm},
      {&kAttnOut},    {&kFfnNorm}, {&kFfnGateInp},  {&kFfnGateExps},  {&kFfnUpExps},  {&kFfnDownExps}};
  return load_layers(t, hp, w, kLayer);
}

}  // namespace pi::model
