// opt: Meta's OPT decoders (125M .. 66B) and the original PowerInfer's OPT files. Pre-LN
// layers (HF do_layer_norm_before; OPT-350m's post-LN layout with project_in/out is not
// supported) with layer norms that have biases, learned absolute positions (position_embd,
// whose row p + 2 holds position p: the offset of HF's OPTLearnedPositionalEmbedding) and no
// RoPE, multi-head attention with biased q/k/v/out projections, FFN
// down( ReLU(up·x + up_b) ) + down_b without a gate (HF fc1/fc2), the output head tied to
// token_embd unless output.weight is present. PowerInfer files hold ffn_down_t and name its
// bias ffn_down_t.bias (the original's converter renames both); GGUF files ffn_down(.bias).
#include <algorithm>

#include "model/arch.h"

namespace pi::model {
namespace {

// Row of position_embd that holds position 0.
constexpr int64_t kPositionOffset = 2;

Status load_positions(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w) {
  const char* name = "position_embd.weight";
  const Shape* s = t.shape(name);
  if (s == nullptr) {
    return err("%s: missing tensor '%s' (expected shape [n_positions + %lld, %lld])",
               f.path().c_str(), name, static_cast<long long>(kPositionOffset),
               static_cast<long long>(hp.n_embd));
  }
  if (s->rank != 2 || s->cols() != hp.n_embd || (*s)[0] <= kPositionOffset) {
    return err("%s: tensor '%s' has shape %s, expected [n_positions + %lld, %lld]",
               f.path().c_str(), name, s->str().c_str(), static_cast<long long>(kPositionOffset),
               static_cast<long long>(hp.n_embd));
  }
  hp.has_pos_embd = true;
  hp.pos_offset = kPositionOffset;
  hp.n_pos = (*s)[0] - kPositionOffset;
  // The original writes the table's rows (2050) as context_length; a longer context than the
  // table covers cannot run.
  hp.n_ctx_train = hp.n_ctx_train > 0 ? std::min(hp.n_ctx_train, hp.n_pos) : hp.n_pos;
  return load_matrix(t, name, (*s)[0], hp.n_embd, w.pos_embd);
}

}  // namespace

Status load_opt(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w) {
  hp.norm = NormKind::Layer;
  hp.norm_eps =
      static_cast<float>(f.get_number_or(hp.arch_name + ".attention.layer_norm_epsilon", 1e-5));
  hp.has_rope = false;
  hp.ffn = FfnKind::Plain;
  hp.parallel_residual = false;
  auto act = read_activation(f, hp, Activation::ReLU);
  if (!act.ok()) return act.error();
  hp.act = *act;
  PI_TRY(load_embeddings_and_head(f, t, hp, w, /*norm_has_bias=*/true));
  PI_TRY(load_positions(f, t, hp, w));

  const int64_t n_embd = hp.n_embd, n_q = hp.n_embd_q(), n_kv = hp.n_embd_kv();
  w.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    AttnWeights& a = w.layers[static_cast<size_t>(il)].attn;
    PI_TRY(load_vector(t, blk(il, "attn_norm.weight"), n_embd, a.norm));
    PI_TRY(load_vector(t, blk(il, "attn_norm.bias"), n_embd, a.norm_b));
    PI_TRY(load_matrix(t, blk(il, "attn_q.weight"), n_q, n_embd, a.q));
    PI_TRY(load_vector(t, blk(il, "attn_q.bias"), n_q, a.q_b));
    PI_TRY(load_matrix(t, blk(il, "attn_k.weight"), n_kv, n_embd, a.k));
    PI_TRY(load_vector(t, blk(il, "attn_k.bias"), n_kv, a.k_b));
    PI_TRY(load_matrix(t, blk(il, "attn_v.weight"), n_kv, n_embd, a.v));
    PI_TRY(load_vector(t, blk(il, "attn_v.bias"), n_kv, a.v_b));
    PI_TRY(load_matrix(t, blk(il, "attn_output.weight"), n_embd, n_q, a.out));
    PI_TRY(load_vector(t, blk(il, "attn_output.bias"), n_embd, a.out_b));

    FfnWeights& ffn = w.layers[static_cast<size_t>(il)].ffn;
    PI_TRY(load_vector(t, blk(il, "ffn_norm.weight"), n_embd, ffn.norm));
    PI_TRY(load_vector(t, blk(il, "ffn_norm.bias"), n_embd, ffn.norm_b));
    PI_TRY(load_matrix(t, blk(il, "ffn_up.weight"), hp.n_ff, n_embd, ffn.up));
    PI_TRY(load_vector(t, blk(il, "ffn_up.bias"), hp.n_ff, ffn.up_b));
    PI_TRY(load_ffn_down(t, hp, il, ffn));
    // The down bias is named after the down weight the file holds.
    const char* down_b = ffn.down_t.present() ? "ffn_down_t.bias" : "ffn_down.bias";
    PI_TRY(load_vector(t, blk(il, down_b), n_embd, ffn.down_b));
  }
  return Status::Ok();
}

}  // namespace pi::model
