#include "model/model.h"

#include "model/arch.h"
#include "model/model_checks.h"
#include "model/tensor_loader.h"

namespace pi::model {

Result<std::unique_ptr<Model>> Model::load(const std::string& path, LoadMode mode,
                                           bool check_all_tensors) {
  auto f = gguf::File::open(path, {}, mode);
  if (!f.ok()) return f.error();
  return from_file(std::move(*f), check_all_tensors);
}

Result<std::unique_ptr<Model>> Model::from_file(gguf::File file, bool check_all_tensors) {
  std::unique_ptr<Model> m(new Model(std::move(file)));
  const gguf::File& f = m->file_;
  auto arch_name = f.get_string("general.architecture");
  if (!arch_name.ok()) return arch_name.error();
  const ArchDef* arch = find_arch(*arch_name);
  if (arch == nullptr) {
    return err("%s: unsupported architecture '%s' (supported: %s)", f.path().c_str(),
               arch_name->c_str(), supported_arch_names().c_str());
  }
  HParams& hp = m->hp_;
  hp.arch = arch->arch;
  hp.arch_name = *arch_name;
  hp.powerinfer = f.is_powerinfer();
  PI_TRY(read_common_hparams(f, hp));
  PI_TRY(check_block_count(f, hp));
  TensorLoader loader(f, m->widened_);
  PI_TRY(arch->load(f, loader, hp, m->w_));
  PI_TRY(check_norm_eps(f, hp));
  PI_TRY(check_vocab_size(f, hp));
  PI_TRY(check_tensor_values(f, check_all_tensors));
  warn_unused_tensors(f, loader.used());
  return m;
}

uint64_t Model::weight_bytes_per_token() const {
  uint64_t n = 0;
  auto add = [&n](const Matrix& m) {
    if (m.present()) n += m.nbytes();
  };
  for (const LayerWeights& L : w_.layers) {
    for (const Matrix* m : layer_matrices(L)) add(*m);
  }
  add(w_.output);
  return n;
}

}  // namespace pi::model
