// Reference matvec/matmul and the sparse row ops against expectations that are exact by
// construction (small integers and dyadic fractions, whose products and sums are exact in
// f32 and f64) or against each other where the contract says they are equal.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/ref/ref.h"
#include "tensor/quant.h"

namespace pi::ref {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kSentinel = -12345.0f;

// Integers in [-8, 8] scaled by 1/4: every product and partial sum below is exact.
std::vector<float> dyadic(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> v(-8, 8);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& e : x) e = static_cast<float>(v(rng)) * 0.25f;
  return x;
}

std::vector<float> gaussian(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> v(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& e : x) e = v(rng);
  return x;
}

// Rows of type t quantized from f32 [rows, cols].
std::vector<uint8_t> to_type(DType t, const std::vector<float>& w, int64_t rows, int64_t cols) {
  const size_t rb = row_bytes(t, cols);
  std::vector<uint8_t> out(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(quantize_row(t, w.data() + r * cols, out.data() + r * rb, cols).ok());
  }
  return out;
}

std::vector<float> to_f32(DType t, const std::vector<uint8_t>& q, int64_t rows, int64_t cols) {
  const size_t rb = row_bytes(t, cols);
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(dequantize_row(t, q.data() + r * rb, out.data() + r * cols, cols).ok());
  }
  return out;
}

TEST(RefMatvec, F32ExactOnDyadicValuesAtOddSizes) {
  for (int64_t rows : {1, 3, 7}) {
    for (int64_t cols : {1, 5, 37, 130}) {
      const auto W = dyadic(rows * cols, static_cast<uint32_t>(rows * 100 + cols));
      const auto x = dyadic(cols, 7);
      std::vector<float> y(static_cast<size_t>(rows));
      matvec(DType::F32, W.data(), rows, cols, x.data(), y.data());
      for (int64_t r = 0; r < rows; ++r) {
        double want = 0.0;  // exact: every term is a multiple of 1/16 below 2^10
        for (int64_t c = 0; c < cols; ++c) want += double{W[r * cols + c]} * x[c];
        EXPECT_EQ(y[r], static_cast<float>(want)) << rows << "x" << cols << " row " << r;
      }
    }
  }
}

TEST(RefMatvec, F32GaussianWithinRoundingOfDoubleDot) {
  const int64_t rows = 9, cols = 301;
  const auto W = gaussian(rows * cols, 1);
  const auto x = gaussian(cols, 2);
  std::vector<float> y(rows);
  matvec(DType::F32, W.data(), rows, cols, x.data(), y.data());
  for (int64_t r = 0; r < rows; ++r) {
    long double want = 0.0L, mag = 0.0L;
    for (int64_t c = 0; c < cols; ++c) {
      want += static_cast<long double>(W[r * cols + c]) * x[c];
      mag += std::fabs(static_cast<long double>(W[r * cols + c]) * x[c]);
    }
    // One f32 rounding of the result plus double accumulation error (cols * 2^-53 * mag).
    const double bound = std::fabs(static_cast<double>(want)) * 0x1p-24 +
                         static_cast<double>(mag) * cols * 0x1p-53;
    EXPECT_NEAR(y[r], static_cast<double>(want), bound) << r;
  }
}

TEST(RefMatvec, HalfTypesExactWhenWeightsAreRepresentable) {
  const int64_t rows = 4, cols = 19;
  const auto W = dyadic(rows * cols, 3);  // exact in f16 and bf16
  const auto x = dyadic(cols, 4);
  std::vector<float> want(rows), y(rows);
  matvec(DType::F32, W.data(), rows, cols, x.data(), want.data());
  for (DType t : {DType::F16, DType::BF16}) {
    const auto q = to_type(t, W, rows, cols);
    matvec(t, q.data(), rows, cols, x.data(), y.data());
    EXPECT_EQ(y, want) << dtype_name(t);
  }
}

TEST(RefMatvec, QuantizedEqualsMatvecOverDequantizedWeights) {
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q6_K,
                  DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::MXFP4, DType::F16, DType::BF16}) {
    const int64_t rows = 5, cols = 512;
    const auto q = to_type(t, gaussian(rows * cols, 10), rows, cols);
    const auto Wf = to_f32(t, q, rows, cols);
    const auto x = gaussian(cols, 11);
    std::vector<float> y(rows), want(rows);
    matvec(t, q.data(), rows, cols, x.data(), y.data());
    matvec(DType::F32, Wf.data(), rows, cols, x.data(), want.data());
    EXPECT_EQ(y, want) << dtype_name(t);
  }
}

TEST(RefMatmul, EachOutputRowIsAMatvec) {
  for (DType t : {DType::F32, DType::Q8_0, DType::Q4_1}) {
    const int64_t rows = 6, cols = 64, m = 3;
    const auto q = to_type(t, gaussian(rows * cols, 20), rows, cols);
    const auto X = gaussian(m * cols, 21);
    std::vector<float> Y(static_cast<size_t>(m * rows)), y(rows);
    matmul(t, q.data(), rows, cols, X.data(), m, Y.data());
    for (int64_t i = 0; i < m; ++i) {
      matvec(t, q.data(), rows, cols, X.data() + i * cols, y.data());
      for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(Y[i * rows + r], y[r]) << i << "," << r;
    }
  }
}

TEST(RefMatvecRows, EqualsDenseOnSelectedRowsAndLeavesOthers) {
  for (DType t : {DType::F32, DType::Q4_0, DType::Q6_K}) {
    const int64_t rows = 11, cols = 256;
    const auto q = to_type(t, gaussian(rows * cols, 30), rows, cols);
    const auto x = gaussian(cols, 31);
    std::vector<float> dense(rows);
    matvec(t, q.data(), rows, cols, x.data(), dense.data());
    const std::vector<int32_t> idx = {10, 0, 4, 7};  // unsorted, includes both ends
    std::vector<float> y(rows, kSentinel);
    matvec_rows(t, q.data(), cols, idx.data(), static_cast<int64_t>(idx.size()), x.data(),
                y.data());
    for (int64_t r = 0; r < rows; ++r) {
      const bool selected = r == 10 || r == 0 || r == 4 || r == 7;
      EXPECT_EQ(y[r], selected ? dense[r] : kSentinel) << dtype_name(t) << " row " << r;
    }
    // No rows: nothing written.
    std::vector<float> untouched(rows, kSentinel);
    matvec_rows(t, q.data(), cols, idx.data(), 0, x.data(), untouched.data());
    EXPECT_EQ(untouched, std::vector<float>(rows, kSentinel));
  }
}

TEST(RefAxpy, HandComputed) {
  const float D[3 * 2] = {1, 2, 3, 4, 5, 6};  // f32 [3, 2]
  const float a[3] = {2, 0, -1};
  float y[2] = {10, 20};
  axpy_dense(DType::F32, D, 3, 2, a, y);
  EXPECT_EQ(y[0], 10 + 2 * 1 - 5);
  EXPECT_EQ(y[1], 20 + 2 * 2 - 6);
  const int32_t idx[2] = {2, 1};
  float z[2] = {0.5f, 0.25f};
  axpy_rows(DType::F32, D, 2, idx, 2, a, z);  // row 1 has a = 0: only row 2 counts
  EXPECT_EQ(z[0], 0.5f - 5);
  EXPECT_EQ(z[1], 0.25f - 6);
}

TEST(RefAxpy, RowsOverAllRowsEqualsDense) {
  for (DType t : {DType::F32, DType::F16, DType::Q8_0, DType::Q5_1, DType::Q6_K}) {
    const int64_t rows = 13, cols = 256;
    const auto q = to_type(t, gaussian(rows * cols, 40), rows, cols);
    auto a = gaussian(rows, 41);
    a[3] = 0.0f;
    const auto y0 = gaussian(cols, 42);
    std::vector<int32_t> all(rows);
    for (int64_t r = 0; r < rows; ++r) all[r] = static_cast<int32_t>(r);
    auto y_dense = y0, y_rows = y0;
    axpy_dense(t, q.data(), rows, cols, a.data(), y_dense.data());
    axpy_rows(t, q.data(), cols, all.data(), rows, a.data(), y_rows.data());
    EXPECT_EQ(y_rows, y_dense) << dtype_name(t);
  }
}

TEST(RefAxpy, RowsSubsetEqualsDenseWithMaskedActivations) {
  const DType t = DType::Q4_0;
  const int64_t rows = 16, cols = 128;
  const auto q = to_type(t, gaussian(rows * cols, 50), rows, cols);
  const auto a = gaussian(rows, 51);
  const std::vector<int32_t> idx = {1, 2, 5, 9, 15};  // ascending: the same summation order
  std::vector<float> masked(rows, 0.0f);
  for (int32_t r : idx) masked[r] = a[r];
  const auto y0 = gaussian(cols, 52);
  auto y_dense = y0, y_rows = y0;
  axpy_dense(t, q.data(), rows, cols, masked.data(), y_dense.data());
  axpy_rows(t, q.data(), cols, idx.data(), static_cast<int64_t>(idx.size()), a.data(),
            y_rows.data());
  EXPECT_EQ(y_rows, y_dense);
}

TEST(RefAxpy, NothingContributingLeavesYBitIdentical) {
  const float D[4] = {1, 2, 3, 4};
  const float a[2] = {0.0f, 0.0f};
  float y[2] = {-0.0f, 3.0f};
  axpy_dense(DType::F32, D, 2, 2, a, y);
  EXPECT_TRUE(std::signbit(y[0]));
  EXPECT_EQ(y[1], 3.0f);
  const int32_t idx[1] = {1};
  axpy_rows(DType::F32, D, 2, idx, 1, a, y);
  EXPECT_TRUE(std::signbit(y[0]));
}

TEST(RefNaN, PropagatesThroughProducts) {
  const int64_t rows = 3, cols = 4;
  std::vector<float> W = {1, 2, 3, 4, 0, 0, 0, 0, -1, 1, -1, 1};
  std::vector<float> x = {1, 1, kNaN, 1};
  std::vector<float> y(rows);
  matvec(DType::F32, W.data(), rows, cols, x.data(), y.data());
  for (float v : y) EXPECT_TRUE(std::isnan(v));  // 0 * NaN is NaN too

  // Inf * 0 is NaN; Inf alone stays Inf.
  W[0] = std::numeric_limits<float>::infinity();
  x = {0, 1, 1, 1};
  matvec(DType::F32, W.data(), rows, cols, x.data(), y.data());
  EXPECT_TRUE(std::isnan(y[0]));
  x = {1, 1, 1, 1};
  matvec(DType::F32, W.data(), rows, cols, x.data(), y.data());
  EXPECT_EQ(y[0], std::numeric_limits<float>::infinity());

  // A NaN activation poisons the axpy sum; a NaN weight row with a zero activation does not.
  std::vector<float> D = {1, 2, kNaN, kNaN};
  std::vector<float> a = {kNaN, 0.0f};
  std::vector<float> acc = {0, 0};
  axpy_dense(DType::F32, D.data(), 2, 2, a.data(), acc.data());
  EXPECT_TRUE(std::isnan(acc[0]) && std::isnan(acc[1]));
  a = {1.0f, 0.0f};
  acc = {0, 0};
  axpy_dense(DType::F32, D.data(), 2, 2, a.data(), acc.data());
  EXPECT_EQ(acc, (std::vector<float>{1, 2}));
}

TEST(RefPreconditions, ViolationsYieldNaN) {
  std::vector<uint8_t> W(4096, 0);
  std::vector<float> x(64, 1.0f), y(2, 0.0f);
  matvec(DType::IQ4_XS, W.data(), 2, 256, x.data(), y.data());  // no reference for IQ4_XS
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
  y = {0.0f, 0.0f};
  matvec(DType::Q4_0, W.data(), 2, 33, x.data(), y.data());  // 33 % 32 != 0
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
}

}  // namespace
}  // namespace pi::ref
