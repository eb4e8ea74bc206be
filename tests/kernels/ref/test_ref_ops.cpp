// Reference norms, softmax, activations, elementwise ops and rope against values computed
// directly from their definitions, plus NaN/Inf behaviour.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "kernels/ref/ref.h"

namespace pi::ref {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(RefNorm, RmsnormHandComputed) {
  // x = [3, 4]: mean of squares 12.5.
  const float x[2] = {3, 4}, w[2] = {1, 2};
  float y[2];
  rmsnorm(x, w, 2, 0.0f, y);
  EXPECT_FLOAT_EQ(y[0], static_cast<float>(3 / std::sqrt(12.5)));
  EXPECT_FLOAT_EQ(y[1], static_cast<float>(8 / std::sqrt(12.5)));
  rmsnorm(x, w, 2, 1e-5f, y);
  EXPECT_FLOAT_EQ(y[0], static_cast<float>(3 / std::sqrt(12.5 + double{1e-5f})));
}

TEST(RefNorm, LayernormHandComputed) {
  // x = [1, 2, 3, 4]: mean 2.5, population variance 1.25.
  const float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 2}, b[4] = {0, 1, 0, -1};
  float y[4];
  layernorm(x, w, b, 4, 0.0f, y);
  const double s = std::sqrt(1.25);
  EXPECT_FLOAT_EQ(y[0], static_cast<float>(-1.5 / s));
  EXPECT_FLOAT_EQ(y[1], static_cast<float>(-0.5 / s + 1));
  EXPECT_FLOAT_EQ(y[2], static_cast<float>(0.5 / s * 2));
  EXPECT_FLOAT_EQ(y[3], static_cast<float>(1.5 / s * 2 - 1));
  layernorm(x, w, nullptr, 4, 0.0f, y);  // no bias
  EXPECT_FLOAT_EQ(y[1], static_cast<float>(-0.5 / s));
}

TEST(RefNorm, NaNPropagates) {
  const float x[3] = {1, kNaN, 2}, w[3] = {1, 1, 1};
  float y[3];
  rmsnorm(x, w, 3, 1e-6f, y);
  for (float v : y) EXPECT_TRUE(std::isnan(v));
  layernorm(x, w, nullptr, 3, 1e-6f, y);
  for (float v : y) EXPECT_TRUE(std::isnan(v));
}

TEST(RefSoftmax, MatchesDefinition) {
  float x[4] = {1, 2, 3, -1};
  softmax(x, 4);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + std::exp(-1.0);
  EXPECT_FLOAT_EQ(x[0], static_cast<float>(std::exp(1.0) / z));
  EXPECT_FLOAT_EQ(x[2], static_cast<float>(std::exp(3.0) / z));
  EXPECT_FLOAT_EQ(x[3], static_cast<float>(std::exp(-1.0) / z));
}

TEST(RefSoftmax, StableForLargeInputsAndMasks) {
  float big[2] = {1000.0f, 1001.0f};  // exp(1000) overflows without the max shift
  softmax(big, 2);
  EXPECT_FLOAT_EQ(big[0], static_cast<float>(1 / (1 + std::exp(1.0))));
  EXPECT_FLOAT_EQ(big[1], static_cast<float>(std::exp(1.0) / (1 + std::exp(1.0))));
  float masked[3] = {-kInf, 0.0f, -kInf};  // a causal mask
  softmax(masked, 3);
  EXPECT_EQ(masked[0], 0.0f);
  EXPECT_EQ(masked[1], 1.0f);
  EXPECT_EQ(masked[2], 0.0f);
}

TEST(RefSoftmax, UndefinedInputsGiveNaN) {
  float with_nan[3] = {0.0f, kNaN, 1.0f};
  softmax(with_nan, 3);
  for (float v : with_nan) EXPECT_TRUE(std::isnan(v));
  float all_masked[2] = {-kInf, -kInf};
  softmax(all_masked, 2);
  for (float v : all_masked) EXPECT_TRUE(std::isnan(v));
}

TEST(RefActivations, MatchDefinitions) {
  const float x[5] = {-3.0f, -0.5f, 0.0f, 0.75f, 4.0f};
  float y[5];
  silu(x, y, 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(y[i], static_cast<float>(x[i] / (1 + std::exp(-double{x[i]}))));
  gelu(x, y, 5);
  const double k = std::sqrt(2 / std::numbers::pi);
  for (int i = 0; i < 5; ++i) {
    const double v = x[i];
    EXPECT_EQ(y[i], static_cast<float>(0.5 * v * (1 + std::tanh(k * (v + 0.044715 * v * v * v)))));
  }
  relu(x, y, 5);
  EXPECT_EQ(std::vector<float>(y, y + 5), (std::vector<float>{0, 0, 0, 0.75f, 4.0f}));
  relu_squared(x, y, 5);
  EXPECT_EQ(std::vector<float>(y, y + 5), (std::vector<float>{0, 0, 0, 0.5625f, 16.0f}));
}

TEST(RefActivations, NaNAndInfinity) {
  const float x[3] = {kNaN, kInf, -kInf};
  float y[3];
  for (auto op : {silu, gelu, relu, relu_squared}) {
    op(x, y, 3);
    EXPECT_TRUE(std::isnan(y[0]));
    EXPECT_EQ(y[1], kInf);
    EXPECT_EQ(y[2], 0.0f);
  }
}

TEST(RefElementwise, AddAndMul) {
  const float a[3] = {1.5f, -2.0f, kNaN}, b[3] = {0.25f, 4.0f, 1.0f};
  float y[3];
  add(a, b, y, 3);
  EXPECT_EQ(y[0], 1.75f);
  EXPECT_EQ(y[1], 2.0f);
  EXPECT_TRUE(std::isnan(y[2]));
  mul(a, b, y, 3);
  EXPECT_EQ(y[0], 0.375f);
  EXPECT_EQ(y[1], -8.0f);
  EXPECT_TRUE(std::isnan(y[2]));
}

// ---- rope --------------------------------------------------------------------------------

std::vector<float> iota_heads(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = 0.5f + 0.25f * static_cast<float>(i);
  return x;
}

TEST(RefRope, NormalRotatesAdjacentPairs) {
  const int64_t n_heads = 2, head_dim = 8, n_rot = 6, pos = 3;
  const float base = 10000.0f, fs = 0.5f;
  const auto x0 = iota_heads(n_heads * head_dim);
  auto x = x0;
  rope(x.data(), n_heads, head_dim, n_rot, pos, base, fs, RopeMode::Normal);
  for (int64_t h = 0; h < n_heads; ++h) {
    const float* in = x0.data() + h * head_dim;
    const float* out = x.data() + h * head_dim;
    for (int64_t i = 0; i < n_rot / 2; ++i) {
      const double theta = pos * double{fs} * std::pow(double{base}, -2.0 * i / n_rot);
      const double a = in[2 * i], b = in[2 * i + 1];
      EXPECT_EQ(out[2 * i], static_cast<float>(a * std::cos(theta) - b * std::sin(theta)));
      EXPECT_EQ(out[2 * i + 1], static_cast<float>(a * std::sin(theta) + b * std::cos(theta)));
    }
    EXPECT_EQ(out[6], in[6]);  // beyond n_rot: untouched
    EXPECT_EQ(out[7], in[7]);
  }
}

TEST(RefRope, NeoXRotatesHalves) {
  const int64_t head_dim = 8, n_rot = 8, pos = 5;
  const auto x0 = iota_heads(head_dim);
  auto x = x0;
  rope(x.data(), 1, head_dim, n_rot, pos, 10000.0f, 1.0f, RopeMode::NeoX);
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const double theta = pos * std::pow(10000.0, -2.0 * i / n_rot);
    const double a = x0[i], b = x0[i + 4];
    EXPECT_EQ(x[i], static_cast<float>(a * std::cos(theta) - b * std::sin(theta)));
    EXPECT_EQ(x[i + 4], static_cast<float>(a * std::sin(theta) + b * std::cos(theta)));
  }
}

TEST(RefRope, PositionZeroIsIdentityAndPairNormsArePreserved) {
  const auto x0 = iota_heads(16);
  auto x = x0;
  rope(x.data(), 2, 8, 8, 0, 10000.0f, 1.0f, RopeMode::Normal);
  EXPECT_EQ(x, x0);
  rope(x.data(), 2, 8, 8, 1234, 10000.0f, 1.0f, RopeMode::Normal);
  for (int i = 0; i < 16; i += 2) {
    EXPECT_NEAR(std::hypot(x[i], x[i + 1]), std::hypot(x0[i], x0[i + 1]), 1e-5);
  }
  // The first pair turns by exactly pos radians (theta_0 = pos).
  const double turned = std::atan2(x[1], x[0]) - std::atan2(x0[1], x0[0]);
  EXPECT_NEAR(std::remainder(turned - 1234.0, 2 * std::numbers::pi), 0.0, 1e-5);
}

TEST(RefRope, NaNStaysInItsPair) {
  std::vector<float> x = {kNaN, 1, 2, 3};
  rope(x.data(), 1, 4, 4, 7, 10000.0f, 1.0f, RopeMode::Normal);
  EXPECT_TRUE(std::isnan(x[0]) && std::isnan(x[1]));
  EXPECT_FALSE(std::isnan(x[2]) || std::isnan(x[3]));
}

}  // namespace
}  // namespace pi::ref
