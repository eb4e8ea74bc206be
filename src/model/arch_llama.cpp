// llama: LLaMA-1/2/3, Mistral and other models with the same layout, including grouped-query
// attention (head_count_kv < head_count). RMS norms, RoPE on pairs (2i, 2i+1) (GGUF stores
// q/k permuted for this), FFN down( act(gate·x) * (up·x) ) with act = SiLU unless the file
// declares another activation (ReLU for ReluLLaMA / ProSparse and every PowerInfer file).
// Files written by `powerinfer calibrate` store some projections transposed (load_linear).
#include "model/arch.h"

namespace pi::model {

Status load_llama_layout(TensorLoader& t, const HParams& hp, ModelWeights& w) {
  w.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& L = w.layers[static_cast<size_t>(il)];
    auto attn_norm = t.vector(blk(il, "attn_norm.weight"), hp.n_embd);
    if (!attn_norm.ok()) return attn_norm.error();
    L.attn.norm = *attn_norm;
    PI_TRY(load_linear(t, il, "attn_q", hp.n_embd_q(), hp.n_embd, L.attn.q, L.attn.q_t));
    PI_TRY(load_linear(t, il, "attn_k", hp.n_embd_kv(), hp.n_embd, L.attn.k, L.attn.k_t));
    PI_TRY(load_linear(t, il, "attn_v", hp.n_embd_kv(), hp.n_embd, L.attn.v, L.attn.v_t));
    PI_TRY(load_linear(t, il, "attn_output", hp.n_embd, hp.n_embd_q(), L.attn.out, L.attn.out_t));

    auto ffn_norm = t.vector(blk(il, "ffn_norm.weight"), hp.n_embd);
    if (!ffn_norm.ok()) return ffn_norm.error();
    L.ffn.norm = *ffn_norm;
    PI_TRY(load_linear(t, il, "ffn_gate", hp.n_ff, hp.n_embd, L.ffn.gate, L.ffn.gate_t));
    auto up = t.matrix(blk(il, "ffn_up.weight"), hp.n_ff, hp.n_embd);
    if (!up.ok()) return up.error();
    L.ffn.up = std::move(*up);
    PI_TRY(load_ffn_down(t, hp, il, L.ffn));
  }
  return Status::Ok();
}

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
  PI_TRY(load_embeddings_and_head(f, t, hp, w, /*norm_has_bias=*/false));
  return load_llama_layout(t, hp, w);
}

}  // namespace pi::model
