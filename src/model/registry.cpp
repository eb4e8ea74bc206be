#include <array>

#include "model/arch.h"

namespace pi::model {
namespace {

constexpr std::array<ArchDef, 9> kArchs = {{
    {"llama", Arch::Llama, &load_llama},
    {"bamboo", Arch::Bamboo, &load_bamboo},
    {"falcon", Arch::Falcon, &load_falcon},
    {"opt", Arch::Opt, &load_opt},
    {"qwen2", Arch::Qwen2, &load_qwen2},
    {"qwen3", Arch::Qwen3, &load_qwen3},
    {"qwen3moe", Arch::Qwen3Moe, &load_qwen3moe},
    {"smallthinker", Arch::SmallThinker, &load_smallthinker},
    {"gpt-oss", Arch::GptOss, &load_gpt_oss},
}};

}  // namespace

const ArchDef* find_arch(std::string_view name) {
  for (const ArchDef& a : kArchs)
    if (a.name == name) return &a;
  return nullptr;
}

const char* arch_name(Arch a) {
  for (const ArchDef& d : kArchs)
    if (d.arch == a) return d.name.data();
  return "?";
}

std::string supported_arch_names() {
  std::string s;
  for (const ArchDef& a : kArchs) {
    if (!s.empty()) s += ", ";
    s += a.name;
  }
  return s;
}

std::string blk(int64_t il, const char* suffix) {
  return "blk." + std::to_string(il) + "." + suffix;
}

Status load_matrix(TensorLoader& t, const std::string& name, int64_t rows, int64_t cols,
                   Matrix& out) {
  auto m = t.matrix(name, rows, cols);
  if (!m.ok()) return m.error();
  out = std::move(*m);
  return Status::Ok();
}

Status load_vector(TensorLoader& t, const std::string& name, int64_t n, Vector& out) {
  auto v = t.vector(name, n);
  if (!v.ok()) return v.error();
  out = *v;
  return Status::Ok();
}

Status load_embeddings_and_head(const gguf::File& f, TensorLoader& t, HParams& hp, ModelWeights& w,
                                bool norm_has_bias) {
  const Shape* es = t.shape("token_embd.weight");
  if (es == nullptr) {
    return err("%s: missing tensor 'token_embd.weight' (expected shape [n_vocab, %lld])",
               f.path().c_str(), static_cast<long long>(hp.n_embd));
  }
  if (es->rank != 2 || es->cols() != hp.n_embd || (*es)[0] <= 0) {
    return err("%s: tensor 'token_embd.weight' has shape %s, expected [n_vocab, %lld]",
               f.path().c_str(), es->str().c_str(), static_cast<long long>(hp.n_embd));
  }
  hp.n_vocab = (*es)[0];
  auto embd = t.matrix("token_embd.weight", hp.n_vocab, hp.n_embd);
  if (!embd.ok()) return embd.error();
  w.tok_embd = std::move(*embd);

  auto norm = t.vector("output_norm.weight", hp.n_embd);
  if (!norm.ok()) return norm.error();
  w.out_norm = *norm;
  if (norm_has_bias) {
    auto b = t.vector("output_norm.bias", hp.n_embd);
    if (!b.ok()) return b.error();
    w.out_norm_b = *b;
  }
  auto out = t.optional_matrix("output.weight", hp.n_vocab, hp.n_embd);
  if (!out.ok()) return out.error();
  w.output = out->present() ? std::move(*out) : w.tok_embd;
  return Status::Ok();
}

namespace {

// The row of `u` the file holds: the row itself or, for Need::EitherLayout, its transposed twin.
Result<const LayerTensor*> held_row(const TensorLoader& t, const HParams& hp, int64_t il, const TensorUse& u) {
  const LayerTensor* plain = u.tensor;
  const LayerTensor* twin = u.need == Need::EitherLayout ? layout_twin(*plain) : nullptr;
  if (twin == nullptr) return plain;
  const std::string p = blk(il, plain->name(u.file_stem).c_str()), q = blk(il, twin->name(u.file_stem).c_str());
  if (twin->powerinfer_native) {
    // PowerInfer files store the transposed one; either computes the same.
    return t.has(q) || (hp.powerinfer && !t.has(p)) ? twin : plain;
  }
  if (!t.has(q)) return plain;
  if (t.has(p))
    return err("%s: both %s and %s are present (a projection is stored once)", t.path().c_str(), p.c_str(),
               q.c_str());
  return twin;
}

}  // namespace

Status load_layer(TensorLoader& t, const HParams& hp, int64_t il, LayerWeights& L,
                  std::span<const TensorUse> uses) {
  for (const TensorUse& u : uses) {
    auto row = held_row(t, hp, il, u);
    if (!row.ok()) return row.error();
    const LayerTensor& r = **row;
    const std::string name = blk(il, r.name(u.file_stem).c_str());
    if (r.stack != Dim::None && r.is_matrix()) {
      auto m = t.stacked(name, dim_size(hp, r.stack), dim_size(hp, r.rows), dim_size(hp, r.cols));
      if (!m.ok()) return m.error();
      matrix_in(L, r) = std::move(*m);
    } else if (r.is_matrix()) {
      PI_TRY(load_matrix(t, name, dim_size(hp, r.rows), dim_size(hp, r.cols), matrix_in(L, r)));
    } else if (r.stack != Dim::None) {
      auto v = t.stacked_vector(name, dim_size(hp, r.stack), dim_size(hp, r.rows));
      if (!v.ok()) return v.error();
      vector_in(L, r) = *v;
    } else {
      PI_TRY(load_vector(t, name, dim_size(hp, r.rows), vector_in(L, r)));
    }
  }
  return Status::Ok();
}

Status load_layers(TensorLoader& t, const HParams& hp, ModelWeights& w, std::span<const TensorUse> uses) {
  w.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) PI_TRY(load_layer(t, hp, il, w.layers[static_cast<size_t>(il)], uses));
  return Status::Ok();
}

}  // namespace pi::model
