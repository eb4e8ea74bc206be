// falcon: Falcon-7B and -40B layouts (and ReluFalcon). Layer norms with bias, fused QKV
// (rows: all q heads, then the k heads, then the v heads), NeoX RoPE, multi-/grouped-query
// attention, and a parallel residual: x + attn(norm(x)) + ffn(norm'(x)). The 7B layout has one
// norm per layer shared by attention and FFN; the 40B layout adds attn_norm_2 for the FFN.
// FFN down( act(up·x) ) with act = GELU (tanh form) unless the file declares ReLU.
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
  w.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& L = w.layers[static_cast<size_t>(il)];
    auto norm = t.vector(blk(il, "attn_norm.weight"), hp.n_embd);
    if (!norm.ok()) return norm.error();
    L.attn.norm = *norm;
    auto norm_b = t.vector(blk(il, "attn_norm.bias"), hp.n_embd);
    if (!norm_b.ok()) return norm_b.error();
    L.attn.norm_b = *norm_b;
    if (two_norms) {
      auto n2 = t.vector(blk(il, "attn_norm_2.weight"), hp.n_embd);
      if (!n2.ok()) return n2.error();
      L.ffn.norm = *n2;
      auto n2b = t.vector(blk(il, "attn_norm_2.bias"), hp.n_embd);
      if (!n2b.ok()) return n2b.error();
      L.ffn.norm_b = *n2b;
    }
    auto qkv = t.matrix(blk(il, "attn_qkv.weight"), hp.n_embd_q() + 2 * hp.n_embd_kv(), hp.n_embd);
    if (!qkv.ok()) return qkv.error();
    L.attn.qkv = std::move(*qkv);
    auto o = t.matrix(blk(il, "attn_output.weight"), hp.n_embd, hp.n_embd_q());
    if (!o.ok()) return o.error();
    L.attn.out = std::move(*o);

    auto up = t.matrix(blk(il, "ffn_up.weight"), hp.n_ff, hp.n_embd);
    if (!up.ok()) return up.error();
    L.ffn.up = std::move(*up);
    PI_TRY(load_ffn_down(t, hp, il, L.ffn));
  }
  return Status::Ok();
}

}  // namespace pi::model
