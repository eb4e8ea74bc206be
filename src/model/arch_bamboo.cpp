// bamboo: PowerInfer's Bamboo-7B, a Mistral-like model (grouped-query attention, RMS norms,
// normal RoPE) whose FFN applies ReLU to both projections: down( ReLU(gate·x) * ReLU(up·x) ).
// The tensor layout is llama's.
#include "model/arch.h"

namespace pi::model {

Status load_bamboo(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w) {
  hp.norm = NormKind::RMS;
  hp.norm_eps =
      static_cast<float>(f.get_number_or(hp.arch_name + ".attention.layer_norm_rms_epsilon", 1e-5));
  hp.rope = RopeKind::Normal;
  hp.ffn = FfnKind::GatedBoth;
  hp.parallel_residual = false;
  auto act = read_activation(f, hp, Activation::ReLU);
  if (!act.ok()) return act.error();
  hp.act = *act;
  PI_TRY(load_embeddings_and_head(f, t, hp, w, /*norm_has_bias=*/false));
  return load_layers(t, hp, w, kLlamaLayer);
}

}  // namespace pi::model
