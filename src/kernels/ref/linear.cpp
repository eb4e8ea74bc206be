// Reference matrix-vector products and sparse row operations. Each weight row is decoded to
// f32 with the tensor layer's reference dequantizer, then combined in double. Rows of a
// matrix of type t and `cols` columns are row_bytes(t, cols) apart.
//
// Preconditions (the caller's): t is computable and cols is a multiple of its block size. If
// one is violated, the outputs these functions would write are set to NaN instead.
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "kernels/ref/ref.h"
#include "tensor/quant.h"

namespace pi::ref {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Decodes row r of W (t [.., cols]) into `row` (resized to cols). False if t or cols
// violate the preconditions.
bool load_row(DType t, const void* W, int64_t cols, int64_t r, std::vector<float>& row) {
  row.resize(static_cast<size_t>(cols));
  const auto* base = static_cast<const unsigned char*>(W);
  const unsigned char* src = base + static_cast<size_t>(r) * row_bytes(t, cols);
  return dequantize_row(t, src, row.data(), cols).ok();
}

double dot(const std::vector<float>& w, const float* x) {
  double acc = 0.0;
  for (size_t c = 0; c < w.size(); ++c) acc += static_cast<double>(w[c]) * x[c];
  return acc;
}

// acc[:] += a * w[:]
void add_scaled(std::vector<double>& acc, double a, const std::vector<float>& w) {
  for (size_t c = 0; c < w.size(); ++c) acc[c] += a * w[c];
}

}  // namespace

void matvec(DType t, const void* W, int64_t rows, int64_t cols, const float* x, float* y) {
  std::vector<float> w;
  for (int64_t r = 0; r < rows; ++r) {
    y[r] = load_row(t, W, cols, r, w) ? static_cast<float>(dot(w, x)) : kNaN;
  }
}

void matmul(DType t, const void* W, int64_t rows, int64_t cols, const float* X, int64_t m,
            float* Y) {
  std::vector<float> w;
  for (int64_t r = 0; r < rows; ++r) {
    const bool ok = load_row(t, W, cols, r, w);
    for (int64_t i = 0; i < m; ++i) {
      Y[i * rows + r] = ok ? static_cast<float>(dot(w, X + i * cols)) : kNaN;
    }
  }
}

void matvec_rows(DType t, const void* W, int64_t cols, const int32_t* idx, int64_t n_idx,
                 const float* x, float* y) {
  std::vector<float> w;
  for (int64_t k = 0; k < n_idx; ++k) {
    const int64_t r = idx[k];
    y[r] = load_row(t, W, cols, r, w) ? static_cast<float>(dot(w, x)) : kNaN;
  }
}

void axpy_rows(DType t, const void* D, int64_t cols, const int32_t* idx, int64_t n_idx,
               const float* a, float* y) {
  // The sum starts from y so that y is unchanged (bit for bit) when nothing contributes.
  std::vector<double> acc(y, y + cols);
  std::vector<float> w;
  bool ok = true;
  for (int64_t k = 0; k < n_idx; ++k) {
    const int64_t r = idx[k];
    if (a[r] == 0.0f) continue;
    ok = ok && load_row(t, D, cols, r, w);
    if (ok) add_scaled(acc, a[r], w);
  }
  for (int64_t c = 0; c < cols; ++c) y[c] = ok ? static_cast<float>(acc[static_cast<size_t>(c)]) : kNaN;
}

void axpy_dense(DType t, const void* D, int64_t rows, int64_t cols, const float* a, float* y) {
  std::vector<double> acc(y, y + cols);
  std::vector<float> w;
  bool ok = true;
  for (int64_t r = 0; r < rows; ++r) {
    if (a[r] == 0.0f) continue;
    ok = ok && load_row(t, D, cols, r, w);
    if (ok) add_scaled(acc, a[r], w);
  }
  for (int64_t c = 0; c < cols; ++c) y[c] = ok ? static_cast<float>(acc[static_cast<size_t>(c)]) : kNaN;
}

}  // namespace pi::ref
