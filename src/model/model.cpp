#include "model/model.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/log.h"
#include "model/arch.h"
#include "model/model_checks.h"
#include "model/tensor_loader.h"
#include "tensor/quant.h"

namespace pi::model {

Result<std::unique_ptr<Model>> Model::load(const std::string& path, LoadMode mode,
                                           bool check_all_tensors, DType transposed_layout,
                                           const DenseLayouts& dense_layouts) {
  auto f = gguf::File::open(path, {}, mode);
  if (!f.ok()) return f.error();
  auto m = from_file(std::move(*f), check_all_tensors);
  if (!m.ok()) return m.error();
  if ((*m)->file_.mapping().mode() == LoadMode::Read) {
    if (transposed_layout != DType::Q4_0) PI_TRY((*m)->repack_in_place(transposed_layout));
    PI_TRY((*m)->interleave_in_place(dense_layouts));
  }
  return m;
}

// Each transposed Q4_0 matrix converted row by row, in place: the model's memory holds one
// layout of it (the conversion of a 7B file's 2.3 GB takes ~0.3 s on one core).
Status Model::repack_in_place(DType layout) {
  std::vector<Matrix*> todo;
  for (LayerWeights& L : w_.layers) {
    each_layer_matrix(L, [&](const LayerTensor& t, Matrix& m) {
      if (t.transposed && m.present() && m.type == DType::Q4_0 && converts(m.type, layout)) todo.push_back(&m);
    });
  }
  return convert_in_place(todo, layout, 1);
}

DenseOnly Model::dense_only() const {
  if (file_.find(kCalibrationKey) != nullptr) return DenseOnly::None;
  // ReGLU experts read the rows of their up (and transposed down) projections one by one.
  if (hp_.sparse_experts()) return DenseOnly::AttentionAndHead;
  return hp_.powerinfer ? DenseOnly::AttentionAndHead : DenseOnly::All;
}

// The matrices only dense products read (dense_only) whose type has a 16-row layout, 16 rows
// at a time, in place. A context that reads one otherwise gets a copy back in the file's
// layout (place_weights).
Status Model::interleave_in_place(const DenseLayouts& layouts) {
  std::map<DType, std::vector<Matrix*>> todo;  // by the layout they take
  each_dense_candidate(w_, dense_only(), [&](Matrix& m, bool dense_only) {
    if (!dense_only || m.rows % 16 != 0) return;
    const DType layout = layouts.layout(m.type);
    if (layout != m.type && is_r16(layout)) todo[layout].push_back(&m);
  });
  for (const auto& [layout, matrices] : todo) PI_TRY(convert_in_place(matrices, layout, 16));
  return Status::Ok();
}

// Converts `todo` to `layout` in place, `unit` rows at a time through a buffer of their size;
// the matrices are split over a few threads.
Status Model::convert_in_place(const std::vector<Matrix*>& todo, DType layout, int64_t unit) {
  if (todo.empty()) return Status::Ok();
  const std::byte* base = file_.mapping().data();
  Status failed = Status::Ok();
  std::mutex mu;
  PI_TRY(file_.edit([&](std::span<std::byte> bytes) {
    const auto work = [&](size_t first, size_t step) {
      std::vector<std::byte> buf;
      for (size_t i = first; i < todo.size(); i += step) {
        const Matrix& m = *todo[i];
        // In the file's bytes, or in a copy the model owns (an expert stack gathered at load).
        const auto addr = reinterpret_cast<uintptr_t>(m.data), first = reinterpret_cast<uintptr_t>(base);
        const bool in_file = addr >= first && addr < first + bytes.size();
        std::byte* at = in_file ? bytes.data() + (m.data - base) : const_cast<std::byte*>(m.data);
        const size_t unit_bytes = static_cast<size_t>(unit) * m.row_stride();
        buf.resize(unit_bytes);
        for (int64_t r = 0; r < m.rows; r += unit) {
          Matrix part = m;
          part.data = m.data + static_cast<size_t>(r) * m.row_stride();
          part.rows = unit;
          if (Status s = convert_rows(part, layout, buf.data()); !s.ok()) {
            std::lock_guard<std::mutex> lock(mu);
            failed = s;
            return;
          }
          std::memcpy(at + static_cast<size_t>(r) * m.row_stride(), buf.data(), unit_bytes);
        }
      }
    };
    const size_t n = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, std::min<size_t>(8, todo.size()));
    std::vector<std::thread> workers;
    for (size_t t = 1; t < n; ++t) workers.emplace_back(work, t, n);
    work(0, n);
    for (auto& w : workers) w.join();
  }));
  PI_TRY(failed);
  for (Matrix* m : todo) {
    m->type = layout;
    repacked_in_place_ += m->nbytes();
  }
  return Status::Ok();
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
  TensorLoader loader(f, m->widened_, &m->stacks_);
  PI_TRY(arch->load(f, loader, hp, m->w_));
  PI_TRY(check_norm_eps(f, hp));
  PI_TRY(check_vocab_size(f, hp));
  PI_TRY(check_tensor_values(f, check_all_tensors));
  warn_unused_tensors(f, loader.used());
  if (!m->stacks_.empty()) {
    uint64_t bytes = 0;
    for (const std::vector<std::byte>& b : m->stacks_) bytes += b.size();
    log_info("%s stores one tensor per expert (an older layout): %zu expert stacks copied together, %.1f MiB",
             f.path().c_str(), m->stacks_.size(), static_cast<double>(bytes) / 1048576.0);
  }
  return m;
}

uint64_t Model::weight_bytes_per_token() const {
  uint64_t n = 0;
  auto add = [&n](const Matrix& m) {
    if (m.present()) n += m.nbytes();
  };
  for (const LayerWeights& L : w_.layers) {
    each_layer_matrix(L, [&](const LayerTensor& t, const Matrix& m) { n += token_bytes(hp_, t, m); });
  }
  add(w_.output);
  return n;
}

}  // namespace pi::model
