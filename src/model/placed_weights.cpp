#include "model/placed_weights.h"

#include <chrono>
#include <utility>
#include <vector>

#include "backend/host_memory.h"
#include "core/log.h"
#include "core/mapped_file.h"

namespace pi::model {
namespace {

template <typename F>
Status each_view(ModelWeights& w, F&& f) {
  PI_TRY(f(w.tok_embd));
  PI_TRY(f(w.pos_embd));
  PI_TRY(f(w.out_norm));
  PI_TRY(f(w.out_norm_b));
  PI_TRY(f(w.output));
  Status st = Status::Ok();
  const auto visit = [&](const LayerTensor&, auto& v) {
    if (st.ok()) st = f(v);
  };
  for (LayerWeights& L : w.layers) each_layer_tensor(L, visit, visit);
  return st;
}

}  // namespace

uint64_t weight_bytes(const ModelWeights& w) {
  uint64_t n = 0;
  ModelWeights copy = w;
  (void)each_view(copy, [&](const auto& v) {
    n += v.nbytes();
    return Status::Ok();
  });
  return w.output.data == w.tok_embd.data ? n - w.output.nbytes() : n;
}

Result<PlacedWeights> place_weights(backend::Device& dev, const ModelWeights& w, LayoutCache* layouts,
                                    DenseOnly dense) {
  PlacedWeights p{backend::WeightStore(dev), w};
  // The output head is often the token embedding itself: place it once.
  const bool tied = w.output.data == w.tok_embd.data;
  // Transposed weights are read by the axpy alone: the device may keep them in its own layout,
  // a copy `layouts` makes once per model. They are converted first, then placed as the rest.
  // Two kinds of copy: into the device's faster layout (optional: the device reads the file's
  // too) and back into the file's layout from the one the model holds (needed).
  std::vector<std::pair<Matrix*, DType>> convert, restore;
  uint64_t to_copy = 0, to_restore = 0;
  const auto want = [&](Matrix* m, DType layout) {
    if (layouts == nullptr || layout == m->type) return;
    const bool back = layout == file_layout(m->type);
    (back ? restore : convert).emplace_back(m, layout);
    if (!layouts->has(*m, layout)) (back ? to_restore : to_copy) += m->nbytes();
  };
  for (LayerWeights& L : p.weights.layers) {
    each_layer_matrix(L, [&](const LayerTensor& t, Matrix& m) {
      // The device is asked about the file's type: the model may hold the matrix in the CPU's
      // layout already (Model::load), and a device that wants the file's gets a copy back.
      if (t.transposed && m.present()) want(&m, dev.transposed_layout(file_layout(m.type)));
    });
  }
  // Matrices only the dense products read in this context go in the device's dense layout the
  // same way; the others in the file's (a copy back when the model holds another).
  const auto dense_layout = [&](const Matrix& m, bool dense_only) {
    return dense_only ? dev.dense_layout(file_layout(m.type), m.rows) : file_layout(m.type);
  };
  each_dense_candidate(p.weights, dense, [&](Matrix& m, bool dense_only) { want(&m, dense_layout(m, dense_only)); });
  // The copies take RAM: without that much available (and 1 GiB to spare) keep the file's.
  if (const uint64_t avail = mem_available_bytes(); to_copy > 0 && avail != 0 && to_copy + kMemorySpare > avail) {
    log_warn("not repacking weights for the CPU (%.1f GiB, %.1f GiB of memory available): "
             "it reads them as the file lays them out (slower; --no-repack silences this)",
             static_cast<double>(to_copy) / (1 << 30), static_cast<double>(avail) / (1 << 30));
    convert.clear();
  }
  const auto t0 = std::chrono::steady_clock::now();
  convert.insert(convert.end(), restore.begin(), restore.end());
  for (auto& [m, layout] : convert) {
    auto copy = layouts->get(*m, layout);
    if (!copy.ok()) return copy.error();
    *m = *copy;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (to_copy > 0 && !convert.empty()) {
    log_info("copied %.2f GiB of weights into the CPU's layouts for them in %.2f s (--no-repack: none)",
             static_cast<double>(to_copy) / (1 << 30), secs);
  }
  if (to_restore > 0) {
    log_info("copied %.2f GiB of weights back into the file's layout for the %s device in %.2f s "
             "(the model holds them in the CPU's; load with --no-repack to hold the file's)",
             static_cast<double>(to_restore) / (1 << 30), dev.name().c_str(), secs);
  }
  Status st = each_view(p.weights, [&](auto& v) -> Status {
    if (tied && &v == static_cast<const void*>(&p.weights.output)) return Status::Ok();
    auto placed = p.store.place(v);
    if (!placed.ok()) return placed.error();
    v = *placed;
    return Status::Ok();
  });
  if (!st.ok()) return st.error();
  if (tied) p.weights.output.data = p.weights.tok_embd.data;
  return p;
}

}  // namespace pi::model
