// gpt-oss: OpenAI's open-weight mixture-of-experts models (gpt-oss-20b, -120b), as llama.cpp
// writes and reads them. Grouped-query attention with biases on q, k, v and the output, a
// head width from key_length (64, not n_embd / n_head), NeoX RoPE with YaRN on every layer, and
// a learned sink per head that joins each head's softmax without a value (attn_sinks). Even
// layers attend through a sliding window (attention.sliding_window), odd layers globally. The
// FFN reads the residual through post_attention_norm and is a mixture of experts: a biased
// router, the top expert_used_count by logit weighted by the softmax over those chosen, and
// experts with biases on gate, up and down whose gated unit is the clamped SwiGLU
// (FfnKind::SwigluOai). The released files store the experts in MXFP4.
#include "model/arch.h"

namespace pi::model {

Status load_gpt_oss(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w) {
  hp.norm = NormKind::RMS;
  hp.norm_eps = static_cast<float>(f.get_number_or(hp.arch_name + ".attention.layer_norm_rms_epsilon", 1e-5));
  hp.rope = RopeKind::NeoX;
  hp.ffn = FfnKind::SwigluOai;
  hp.act = Activation::SiLU;  // (the clamped unit's sigmoid; no activation key)
  hp.parallel_residual = false;
  hp.gating = Gating::Softmax;
  PI_TRY(read_moe_hparams(f, hp));
  if (!hp.is_moe())
    return err("%s: missing metadata key '%s.expert_count' (a gpt-oss file has experts)", f.path().c_str(),
               hp.arch_name.c_str());
  PI_TRY(read_swa_hparams(f, hp));
  // llama.cpp's set_swa_pattern(2): layers 0, 2, 4, ... through the window, every layer with RoPE.
  hp.swa_pattern = 2;
  hp.swa_dense_first = false;
  hp.swa_nope_global = false;
  PI_TRY(load_embeddings_and_head(f, t, hp, w, /*norm_has_bias=*/false));
  static constexpr TensorUse kLayer[] = {
      {&kAttnNorm},   {&kAttnQ},          {&kAttnQB},       {&kAttnK},     {&kAttnKB},
      {&kAttnV},      {&kAttnVB},         {&kAttnOut},      {&kAttnOutB},  {&kAttnSinks},
      {&kFfnNorm, Need::Required, "post_attention_norm"}, {&kFfnGateInp}, {&kFfnGateInpB},
      {&kFfnGateExps}, {&kFfnGateExpsB},  {&kFfnUpExps},    {&kFfnUpExpsB}, {&kFfnDownExps},
      {&kFfnDownExpsB}};
  return load_layers(t, hp, w, kLayer);
}

}  // namespace pi::model
