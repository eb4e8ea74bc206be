// Tensor shapes, written outermost dimension first (row-major, as torch prints them):
// a weight matrix with one row per output feature is [n_out, n_in]. GGUF stores dimensions
// innermost first (ggml's ne[0]); the GGUF reader and writer reverse them at the file
// boundary, and nothing else in the engine sees ggml order.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace pi {

struct Shape {
  static constexpr int kMaxRank = 4;
  std::array<int64_t, kMaxRank> dims{};  // dims[0] is outermost
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d) {
    for (int64_t v : d) dims[static_cast<size_t>(rank++)] = v;
  }

  int64_t operator[](int i) const { return dims[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return dims[static_cast<size_t>(i)]; }
  // Innermost dimension: elements per row.
  int64_t cols() const { return rank == 0 ? 1 : dims[static_cast<size_t>(rank - 1)]; }
  // Product of all but the innermost dimension.
  int64_t rows() const {
    int64_t r = 1;
    for (int i = 0; i + 1 < rank; ++i) r *= dims[static_cast<size_t>(i)];
    return r;
  }
  int64_t numel() const { return rank == 0 ? 0 : rows() * cols(); }

  bool operator==(const Shape& o) const {
    if (rank != o.rank) return false;
    for (int i = 0; i < rank; ++i)
      if (dims[static_cast<size_t>(i)] != o.dims[static_cast<size_t>(i)]) return false;
    return true;
  }

  std::string str() const {
    std::string s = "[";
    for (int i = 0; i < rank; ++i) {
      if (i) s += ", ";
      s += std::to_string(dims[static_cast<size_t>(i)]);
    }
    return s + "]";
  }
};

}  // namespace pi
