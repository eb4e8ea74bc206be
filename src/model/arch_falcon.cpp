// falcon: Falcon-7B and -40B layouts (and ReluFalcon). Layer norms with bias, fused QKV
// (rows: all q heads, then the k heads, then the v heads), NeoX RoPE, multi-/grouped-query
// attention, and a parallel residual: x + attn(norm(x)) + ffn(norm'(x)). The 7B layout has one
// norm per layer shared by attention and FFN; the 40B layout adds attn_norm_2 for the FFN.
// FFN down( act(up·x) ) with act = GELU (tanh form) unless the file declares ReLU.
#include <vector>

#include "model/arch.h"

namespace pi::model {

Status load_falcon(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w) {
  hp.norm = NormKind::Layer;
  hp.norm_eps =
      static_cast<float>(f.get_number_or(hp.arch_name + ".attention.layer_norm_epsilon", 1e-5));
  hp.rope = RopeKind::NeoX;
  hp.ffn = FfnKind::Plain;
  hp.parallel_residual = true;
  auto act = read_activation(f, hp, Activation::GELU);
  if (!act.ok()) return act.error();
  hp.act = *act;
  PI_TRY(load_embeddings_and_head(f, t, hp, w, /*norm_has_bias=*/true));

  // The 40B layout is recognised by its second norm; all layers must agree.
  const bool two_norms = t.has(blk(0, "attn_norm_2.weight"));
  // The FFN's own norm is named attn_norm_2.
  std::vector<TensorUse> uses = {{&kAttnNorm}, {&kAttnNormB}};
  if (two_norms) {
    uses.insert(uses.end(),
                {{&kFfnNorm, Need::Required, "attn_norm_2"}, {&kFfnNormB, Need::Required, "attn_norm_2"}});
  }
  uses.insert(uses.end(), {{&kAttnQkv}, {&kAttnOut}, {&kFfnUp}, {&kFfnDown, Need::EitherLayout}});
  return load_layers(t, hp, w, uses);
}

}  // namespace pi::model
