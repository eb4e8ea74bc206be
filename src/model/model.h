// A loaded model: the file (mapped or read into memory), its hyperparameters and views of its
// weights. Immutable after load(); safe to share between threads and sessions. Weights point
// into the file's memory, so resident memory is the touched part of the file plus a few widened
// 1-D tensors (and the copies of layouts() a device asks for).
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/reader.h"
#include "model/hparams.h"
#include "model/layout_cache.h"
#include "model/layer_tensors.h"

namespace pi::model {

// The key of a file calibrated by `powerinfer calibrate` (sparse/act_sparsity.h).
inline constexpr const char* kCalibrationKey = "powerinfer.act_sparsity.method";

// The layouts a model read into memory holds its dense-only matrices in (Model::load): `of`
// maps a file type to its layout (backend::cpu_dense_layout); the file's by default.
struct DenseLayouts {
  DType (*of)(DType) = nullptr;
  DType layout(DType t) const { return of != nullptr ? of(t) : t; }
};

class Model {
 public:
  // Opens `path`, picks the architecture from general.architecture and loads every weight
  // with shape checks, then the checks of model_checks.h (block count, vocabulary size, norm
  // epsilon, finite values of the small tensors; of every tensor with check_all_tensors) and
  // a warning naming tensors the architecture does not use. Errors name the file and the key
  // or tensor at fault.
  // `transposed_layout`: the layout transposed Q4_0 matrices (attn_*_t, ffn_gate_t,
  // ffn_down_t) are held in when the file is read into memory (LoadMode::Read, or Auto's
  // choice of it): Q4_0_SPLIT converts them in place, after the checks, so that the CPU's
  // layout for them costs no second copy (weights() then has them as Q4_0_SPLIT; a device
  // that wants the file's layout gets a copy from layouts()). A mapped file keeps the file's.
  // `dense_layouts` (the 16-row layouts, tensor/quant.h: the CPU's Device::dense_layout) does
  // the same for the matrices every context on the file reads only through dense products
  // (interleave_in_place says which); a context that reads one otherwise gets the file's
  // layout from layouts().
  static Result<std::unique_ptr<Model>> load(const std::string& path,
                                             LoadMode mode = LoadMode::Map,
                                             bool check_all_tensors = false,
                                             DType transposed_layout = DType::Q4_0,
                                             const DenseLayouts& dense_layouts = {});
  // The same, from an already opened file (tests build files in memory).
  static Result<std::unique_ptr<Model>> from_file(gguf::File file, bool check_all_tensors = false);

  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const gguf::File& file() const { return file_; }
  const HParams& hparams() const { return hp_; }
  const ModelWeights& weights() const { return w_; }
  // Bytes of weights read per generated token (every matrix once, the embedding row aside).
  uint64_t weight_bytes_per_token() const;
  // Copies of weights in device layouts, shared by this model's contexts (place_weights).
  LayoutCache& layouts() const { return layouts_; }
  // Which matrices only dense products read, by the kind of file (what load converts to
  // `dense_layouts` and contexts place in Device::dense_layout): every one of an ordinary GGUF
  // file; the attention and head of a PowerInfer file, whose FFN runs sparse (and with
  // --dense over the same bits, so that sparse equals dense under the true mask); none of a
  // calibrated file (activation thresholds read rows of the projections they skip).
  DenseOnly dense_only() const;
  // Bytes of weights converted in place at load (load's transposed_layout and dense_layout).
  uint64_t repacked_in_place_bytes() const { return repacked_in_place_; }

 private:
  explicit Model(gguf::File file) : file_(std::move(file)) {}
  Status repack_in_place(DType layout);
  Status interleave_in_place(const DenseLayouts& layouts);
  Status convert_in_place(const std::vector<Matrix*>& todo, DType layout, int64_t unit);

  gguf::File file_;
  HParams hp_;
  ModelWeights w_;
  std::deque<std::vector<float>> widened_;  // f32 copies of non-f32 1-D tensors
  std::deque<std::vector<std::byte>> stacks_;  // expert stacks of one-tensor-per-expert files
  mutable LayoutCache layouts_;
  uint64_t repacked_in_place_ = 0;
};

}  // namespace pi::model
