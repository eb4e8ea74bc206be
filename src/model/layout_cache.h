// Copies of a model's weights in another layout than the file's, made once per model and
// shared by every context that asks (Device::transposed_layout): today the transposed Q4_0
// matrices of calibrated and PowerInfer files as Q4_0_SPLIT for the CPU's AVX-512 axpy. Each
// copy lives in transparent-huge-page memory (HugeRegion) as long as the model.
// Thread-safe: contexts of one model may be created from several threads.
#pragma once

#include <map>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "core/huge_region.h"
#include "tensor/view.h"

namespace pi::model {

class LayoutCache {
 public:
  // `m` (a view of the model's own weights) in `layout`: the copy, made on the first request.
  // Fails for a conversion that does not exist (only Q4_0 -> Q4_0_SPLIT does) or when the
  // memory cannot be had.
  Result<Matrix> get(const Matrix& m, DType layout);
  // Whether get(m, layout) would return a copy already made.
  bool has(const Matrix& m, DType layout) const;
  // Bytes of all copies made so far.
  uint64_t bytes() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<const std::byte*, DType>, HugeRegion> copies_;
  uint64_t bytes_ = 0;
};

}  // namespace pi::model
