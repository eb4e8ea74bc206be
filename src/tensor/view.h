// Non-owning views of weights: a 2-D matrix of any computable type and a 1-D f32 vector.
// They point into memory of some device (the model file's mapping on the CPU, a device
// buffer elsewhere); the view does not know which, and never owns what it points to.
// Shapes are outermost first: a matrix with one row per output feature is [n_out, n_in].
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/dtype.h"

namespace pi {

// A 2-D weight: `rows` rows of `cols` elements of `type`; row r starts at
// data + r * row_bytes(type, cols). An absent optional weight has data == nullptr.
struct Matrix {
  DType type = DType::F32;
  const std::byte* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  std::string name;  // tensor name, for diagnostics
  // Equal matrices stacked along the rows (a 3-D tensor of experts, [stack, rows / stack,
  // cols]); 1 for a plain matrix.
  int64_t stack = 1;

  bool present() const { return data != nullptr; }
  size_t row_stride() const { return row_bytes(type, cols); }
  const std::byte* row(int64_t r) const { return data + static_cast<size_t>(r) * row_stride(); }
  uint64_t nbytes() const { return static_cast<uint64_t>(rows) * row_stride(); }
};

// A 1-D f32 weight (norm scale, bias). Absent when data == nullptr.
struct Vector {
  const float* data = nullptr;
  int64_t n = 0;

  bool present() const { return data != nullptr; }
  uint64_t nbytes() const { return static_cast<uint64_t>(n) * sizeof(float); }
};

}  // namespace pi
