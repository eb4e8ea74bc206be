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

  static constexpr TensorUse kLayer[] = {
      {&kAttnNorm}, {&kAttnNormB}, {&kAttnQ},   {&kAttnQB},   {&kAttnK},  {&kAttnKB},
      {&kAttnV},    {&kAttnVB},    {&kAttnOut}, {&kAttnOutB}, {&kFfnNorm}, {&kFfnNormB},
      {&kFfnUp},    {&kFfnUpB},    {&kFfnDown, Need::EitherLayout}};
  // The down bias is named after the down weight the file holds.
  static constexpr TensorUse kDownB[] = {{&kFfnDownB}};
  static constexpr TensorUse kDownTB[] = {{&kFfnDownB, Need::Required, "ffn_down_t"}};
  w.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& L = w.layers[static_cast<size_t>(il)];
    PI_TRY(load_layer(t, hp, il, L, kLayer));
    PI_TRY(load_layer(t, hp, il, L, L.ffn.down_t.present() ? std::span<const TensorUse>(kDownTB) : kDownB));
  }
  return Status::Ok();
}

}  // namespace pi::model
