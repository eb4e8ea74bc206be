// qwen2: Qwen1.5, Qwen2 and Qwen2.5 dense models as llama.cpp writes them. llama's tensor
// layout with biases on the q, k and v projections (none on the output projection), RMS
// norms, grouped-query attention, SwiGLU FFN (SiLU unless the file declares another
// activation), and RoPE on NeoX pairs (i, i + n_rot/2): the q/k rows are stored in Hugging
// Face order, not permuted as llama's are. rope.freq_base comes from the file (1e6 for Qwen2).
// The small models tie the output head to token_embd (no output.weight).
#include "model/arch.h"

namespace pi::model {

Status read_qwen_hparams(const gguf::File& f, HParams& hp) {
  hp.norm = NormKind::RMS;
  hp.norm_eps =
      static_cast<float>(f.get_number_or(hp.arch_name + ".attention.layer_norm_rms_epsilon", 1e-6));
  hp.rope = RopeKind::NeoX;
  hp.ffn = FfnKind::Gated;
  hp.parallel_residual = false;
  auto act = read_activation(f, hp, Activation::SiLU);
  if (!act.ok()) return act.error();
  hp.act = *act;
  return Status::Ok();
}

Status load_qwen2(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w) {
  PI_TRY(read_qwen_hparams(f, hp));
  PI_TRY(load_embeddings_and_head(f, t, hp, w, /*norm_has_bias=*/false));
  PI_TRY(load_layers(t, hp, w, kLlamaLayer));
  // After every layer's llama tensors, as the biases were added to that layout.
  static constexpr TensorUse kBiases[] = {{&kAttnQB}, {&kAttnKB}, {&kAttnVB}};
  for (int64_t il = 0; il < hp.n_layer; ++il)
    PI_TRY(load_layer(t, hp, il, w.layers[static_cast<size_t>(il)], kBiases));
  return Status::Ok();
}

}  // namespace pi::model
