// Reference normalisation, softmax, activations and elementwise arithmetic, computed in
// double and rounded once to f32. NaN inputs give NaN outputs everywhere; infinities give the
// mathematical limit (silu(-inf) = 0, relu(inf) = inf, ...).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "kernels/ref/ref.h"

namespace pi::ref {

void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* y) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i] * inv_rms * w[i]);
}

void layernorm(const float* x, const float* w, const float* b, int64_t n, float eps, float* y) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_sq += (x[i] - mean) * (x[i] - mean);
  const double inv_std = 1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) {
    const double shift = b != nullptr ? b[i] : 0.0;
    y[i] = static_cast<float>((x[i] - mean) * inv_std * w[i] + shift);
  }
}

// Softmax subtracts the maximum before exponentiating. A NaN anywhere, a +inf, or a row that
// is all -inf has no defined distribution and yields NaN in every element.
void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  double max = x[0];
  bool has_nan = false;
  for (int64_t i = 0; i < n; ++i) {
    has_nan = has_nan || std::isnan(x[i]);
    max = std::fmax(max, static_cast<double>(x[i]));
  }
  std::vector<double> e(static_cast<size_t>(n));
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    e[static_cast<size_t>(i)] = has_nan ? NAN : std::exp(x[i] - max);
    sum += e[static_cast<size_t>(i)];
  }
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(e[static_cast<size_t>(i)] / sum);
}

// silu(x) = x * sigmoid(x) = x / (1 + e^-x).
void swiglu_oai(const float* gate, const float* up, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double a = gate[i], b = up[i];
    if (std::isnan(a) || std::isnan(b)) {
      y[i] = NAN;
      continue;
    }
    const double g = std::min(a, 7.0), u = std::clamp(b, -7.0, 7.0);
    // g sigmoid(1.702 g) tends to -0 as g -> -inf (as silu's does).
    const double s = std::isinf(g) ? -0.0 : g / (1.0 + std::exp(-1.702 * g));
    y[i] = static_cast<float>(s * (u + 1.0));
  }
}

void silu(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    if (std::isinf(v)) {
      y[i] = v > 0 ? x[i] : 0.0f;
      continue;
    }
    y[i] = static_cast<float>(v / (1.0 + std::exp(-v)));
  }
}

// gelu(x) = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))), the tanh approximation.
void gelu(const float* x, float* y, int64_t n) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    if (std::isinf(v)) {
      y[i] = v > 0 ? x[i] : 0.0f;
      continue;
    }
    y[i] = static_cast<float>(0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v))));
  }
}

void relu(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = (std::isnan(x[i]) || x[i] > 0.0f) ? x[i] : 0.0f;
}

void relu_squared(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double r = (std::isnan(x[i]) || x[i] > 0.0f) ? x[i] : 0.0;
    y[i] = static_cast<float>(r * r);
  }
}

void combine_row(const float* X, int64_t n, const int32_t* rows, const float* w, int64_t k, float* y) {
  if (w == nullptr) {
    std::memcpy(y, X + static_cast<int64_t>(rows[0]) * n, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  for (int64_t c = 0; c < n; ++c) y[c] = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    const float* x = X + static_cast<int64_t>(rows[j]) * n;
    const float wj = w[j];
    for (int64_t c = 0; c < n; ++c) y[c] = y[c] + wj * x[c];
  }
}

void add(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void mul(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

}  // namespace pi::ref
