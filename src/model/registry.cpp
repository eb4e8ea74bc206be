#include <array>

#include "model/arch.h"

namespace pi::model {
namespace {

constexpr std::array<ArchDef, 5> kArchs = {{
    {"llama", Arch::Llama, &load_llama},
    {"bamboo", Arch::Bamboo, &load_bamboo},
    {"falcon", Arch::Falcon, &load_falcon},
    {"opt", Arch::Opt, &load_opt},
    {"qwen2", Arch::Qwen2, &load_qwen2},
}};

}  // namespace

const ArchDef* find_arch(std::string_view name) {
  for (const ArchDef& a : kArchs)
    if (a.name == name) return &a;
  return nullptr;
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

Status load_ffn_down(TensorLoader& t, const HParams& hp, int64_t il, FfnWeights& ffn) {
  const std::string down_t = blk(il, "ffn_down_t.weight"), down = blk(il, "ffn_down.weight");
  // PowerInfer files store the transposed down projection; either computes the same FFN.
  const bool transposed = t.has(down_t) || (hp.powerinfer && !t.has(down));
  auto d = transposed ? t.matrix(down_t, hp.n_ff, hp.n_embd) : t.matrix(down, hp.n_embd, hp.n_ff);
  if (!d.ok()) return d.error();
  (transposed ? ffn.down_t : ffn.down) = std::move(*d);
  return Status::Ok();
}

Status load_linear(TensorLoader& t, int64_t il, const char* name, int64_t n_out, int64_t n_in,
                   Matrix& w, Matrix& w_t) {
  const std::string plain = blk(il, (std::string(name) + ".weight").c_str());
  const std::string transposed = blk(il, (std::string(name) + "_t.weight").c_str());
  if (t.has(transposed)) {
    if (t.has(plain)) {
      return err("%s: both %s and %s are present (a projection is stored once)",
                 t.path().c_str(), plain.c_str(), transposed.c_str());
    }
    auto m = t.matrix(transposed, n_in, n_out);
    if (!m.ok()) return m.error();
    w_t = std::move(*m);
    return Status::Ok();
  }
  auto m = t.matrix(plain, n_out, n_in);
  if (!m.ok()) return m.error();
  w = std::move(*m);
  return Status::Ok();
}

}  // namespace pi::model
