#include "model/layer_tensors.h"

namespace pi::model {

int64_t dim_size(const HParams& hp, Dim d) {
  switch (d) {
    case Dim::None: return 0;
    case Dim::Embd: return hp.n_embd;
    case Dim::Q: return hp.n_embd_q();
    case Dim::KV: return hp.n_embd_kv();
    case Dim::QKV: return hp.n_embd_q() + 2 * hp.n_embd_kv();
    case Dim::Ff: return hp.n_ff;
    case Dim::Head: return hp.head_dim;
    case Dim::HeadCount: return hp.n_head;
    case Dim::Expert: return hp.n_expert;
    case Dim::FfExp: return hp.n_ff_exp;
  }
  return 0;
}

std::string LayerTensor::name(std::string_view file_stem) const {
  std::string s(file_stem.empty() ? stem : file_stem);
  if (transposed) s += "_t";
  s += role == Role::Bias || role == Role::NormBias ? ".bias" : ".weight";
  return s;
}

const LayerTensor* layout_twin(const LayerTensor& t) {
  if (t.role != Role::Proj) return nullptr;
  for (const LayerTensor* o : kLayerTensors)
    if (o->role == Role::Proj && o->stem == t.stem && o->transposed != t.transposed) return o;
  return nullptr;
}

const LayerTensor* layer_tensor_of(std::string_view tensor_name) {
  if (!tensor_name.starts_with("blk.")) return nullptr;
  const size_t dot = tensor_name.find('.', 4);
  if (dot == std::string_view::npos || dot == 4) return nullptr;
  const std::string_view rest = tensor_name.substr(dot + 1);
  for (const LayerTensor* t : kLayerTensors)
    if (t->name() == rest) return t;
  return nullptr;
}

uint64_t token_bytes(const HParams& hp, const LayerTensor& t, const Matrix& m) {
  if (!m.present()) return 0;
  if (t.stack == Dim::None || hp.n_expert <= 0) return m.nbytes();
  return m.nbytes() / static_cast<uint64_t>(hp.n_expert) * static_cast<uint64_t>(hp.n_expert_used);
}

uint64_t site_matrix_bytes(const LayerWeights& layer, Site site) {
  uint64_t n = 0;
  each_layer_matrix(layer, [&](const LayerTensor& t, const Matrix& m) {
    if (t.site == site && m.present()) n += m.nbytes();
  });
  return n;
}

}  // namespace pi::model
