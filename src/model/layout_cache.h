// Transposed weights in another layout than the one a model holds them in. Two layouts exist
// for transposed Q4_0 matrices: the file's (Q4_0) and the CPU AVX-512 axpy's (Q4_0_SPLIT,
// tensor/dtype.h), the same bytes rearranged, so either converts to the other exactly.
//
// A model read into memory holds its transposed Q4_0 matrices once, converted in place at load
// to the layout the CPU wants (Model::load); a mapped model holds them as the file does. A
// device that wants the other layout (Device::transposed_layout: the CPU with --no-repack or
// another ISA, the reference and simulated devices, a GPU) gets it here: LayoutCache makes a
// copy once per model and matrix, shared by every context that asks, in transparent-huge-page
// memory (HugeRegion) as long as the model; convert_row converts single rows (the hybrid
// executor's gathers and uploads, which need no lasting copy).
// Thread-safe: contexts of one model may be created from several threads.
#pragma once

#include <map>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "core/huge_region.h"
#include "tensor/view.h"

namespace pi::model {

// The layout a matrix held as `t` has in its file: Q4_0 for Q4_0_SPLIT (transposed matrices)
// and Q4_0_R16, Q8_0 for Q8_0_R16 (matrices only the dense products read:
// Device::dense_layout), else t.
DType file_layout(DType t);

// Whether a matrix of `from` converts to `to` (equal types, Q4_0 <-> Q4_0_SPLIT, or a file type
// <-> its 16-row layout, tensor/quant.h's r16_file_type, for whole groups of 16 rows).
bool converts(DType from, DType to);

// Row r of m written to `out` (row_stride() bytes, not overlapping m) in `layout`; the
// conversion must exist (converts()) and `layout` must be a row layout (not an R16 one; rows of
// an R16 matrix convert out of it).
void convert_row(const Matrix& m, int64_t r, DType layout, std::byte* out);

// m in `layout` as a matrix of its own bytes, converted by rows over a few threads; the
// conversion must exist and m be present.
Status convert_rows(const Matrix& m, DType layout, std::byte* out);

class LayoutCache {
 public:
  // `m` (a view of the model's own weights) in `layout`: m itself when it has that type, else
  // the copy, made on the first request. Fails for a conversion that does not exist
  // (converts()) or when the memory cannot be had.
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
