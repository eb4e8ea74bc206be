// MXFP4 (gpt-oss's expert format) dot products on every compiled ISA, beyond the all-type
// sweeps of test_matvec.cpp: the whole range of E8M0 exponent bytes, data on which every path
// must be exact, gpt-oss's row length (90 blocks: a partial last quad on AVX-512 and a partial
// last octet on AVX2), rows ending where an inaccessible page begins, and one-token, many-token,
// row-list and thread-count invariance.
//
// The SIMD leaves take blocks with exponent byte 0 or 1 (values below 12 x 2^-127 in magnitude)
// as zero (avx512_quads.h, avx2_mxfp4.cpp): the bound on those rows allows their whole product.
#include <algorithm>

#include "kernels/ref/ref.h"
#include "test_util.h"

namespace pi::cpu::test {
namespace {

constexpr size_t kBlock = 17;

// MXFP4 weights from raw bytes: block b of row r has exponent byte exps[(r + b) % size] and
// random codes (only 0 and +-1 when small_codes: 2^125 x 12 is not a float).
Weights raw_weights(int64_t rows, int64_t cols, const std::vector<uint8_t>& exps, bool small_codes, uint32_t seed) {
  Weights w{DType::MXFP4, rows, cols, {}, 3, std::vector<float>(static_cast<size_t>(rows * cols)), {}};
  const size_t rb = w.row_bytes();
  w.storage.assign(rb * static_cast<size_t>(rows) + w.offset + 64, 0xa5);
  std::mt19937 rng(seed);
  const uint8_t small[4] = {0, 1, 8, 9};  // codes of 0, 1, -0, -1
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = w.storage.data() + w.offset + r * rb;
    for (int64_t b = 0; b < cols / 32; ++b) {
      uint8_t* blk = row + b * kBlock;
      blk[0] = exps[static_cast<size_t>(r + b) % exps.size()];
      for (int j = 1; j < 17; ++j) {
        const uint32_t v = rng();
        blk[j] = small_codes ? static_cast<uint8_t>(small[v & 3] | small[(v >> 2) & 3] << 4) : static_cast<uint8_t>(v);
      }
    }
    EXPECT_TRUE(dequantize_row(DType::MXFP4, row, w.dequant.data() + r * cols, cols).ok());
  }
  w.mag.resize(w.dequant.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      const double d = e8m0_half(w.storage[w.offset + r * rb + (c / 32) * kBlock]);
      w.mag[i] = static_cast<float>(std::min(std::fabs(w.dequant[i]) + 12.0 * d, 3.0e38));
    }
  return w;
}

// y[r] against the reference on x and on the kernel's effective x (as test_matvec.cpp), with
// the blocks of exponent 0 and 1 allowed to count as zero.
void expect_rows(const Weights& w, const float* x, const float* y, Isa isa) {
  const auto xe = effective_x(w.type, isa, x, w.cols);
  const size_t rb = w.row_bytes();
  for (int64_t r = 0; r < w.rows; ++r) {
    const auto* row = static_cast<const uint8_t*>(w.data()) + r * rb;
    const float* wr = w.dequant.data() + r * w.cols;
    float want_e = 0.0f, want = 0.0f;
    ref::matvec(w.type, row, 1, w.cols, xe.data(), &want_e);
    ref::matvec(w.type, row, 1, w.cols, x, &want);
    double flushed = 0.0;
    for (int64_t c = 0; c < w.cols; ++c)
      if (row[(c / 32) * kBlock] < 2) flushed += std::fabs(static_cast<double>(wr[c]) * xe[c]);
    const double tight = dot_bound(w.mag.data() + r * w.cols, xe.data(), w.cols) + flushed;
    ASSERT_TRUE(std::isfinite(y[r])) << "row " << r;
    EXPECT_NEAR(y[r], want_e, tight) << "row " << r << " (vs effective x)";
    EXPECT_NEAR(y[r], want, tight + (isa == Isa::Scalar ? 0.0 : act_quant_bound(wr, x, w.cols))) << "row " << r;
  }
}

// Every exponent class: subnormal scales (0, 1), the smallest normal ones, around 1, and the
// largest (255: 2^127; codes 0 and +-1 only from 250 on), with activations scaled so that the
// products stay finite.
TEST(CpuMxfp4, EveryExponentByte) {
  ThreadPool pool(2);
  const std::vector<std::vector<uint8_t>> classes = {{0}, {1}, {0, 1, 2, 3}, {2}, {3, 64, 100}, {120, 127, 128, 129, 135},
                                                     {190, 200}, {254}, {255}, {0, 128, 255, 1}};
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (const auto& exps : classes) {
      for (int64_t cols : {160, 2880}) {
        SCOPED_TRACE(::testing::Message() << isa_name(isa) << " exponents " << int{exps[0]} << ".. cols " << cols);
        const uint8_t emax = *std::max_element(exps.begin(), exps.end());
        const Weights w = raw_weights(9, cols, exps, emax >= 250, static_cast<uint32_t>(cols + exps[0]));
        auto x = gaussian(cols, 7);
        if (emax >= 190) {
          for (auto& v : x) v = std::ldexp(v, -100);
        }
        Guarded y(w.rows);
        k.matvec(pool, DType::MXFP4, w.data(), w.rows, cols, x.data(), y.data());
        EXPECT_TRUE(y.guards_intact());
        expect_rows(w, x.data(), y.data(), isa);
      }
    }
  }
}

// Values of the doubled E2M1 set with a 12 in every block (so the quantizer writes e = 128,
// scale 1) against integer activations with a 127 in every block (activation scale 1): every
// product and sum is exact in f32, so every ISA must give the reference's bits.
TEST(CpuMxfp4, ExactOnConstructedData) {
  ThreadPool pool(2);
  const int64_t rows = 7, cols = 4128;
  std::mt19937 rng(17);
  std::uniform_int_distribution<int> code(0, 15), xv(-127, 127);
  std::vector<float> src(static_cast<size_t>(rows * cols)), x(static_cast<size_t>(cols));
  for (size_t i = 0; i < src.size(); ++i) src[i] = i % 32 == 5 ? 12.0f : static_cast<float>(kMxfp4Values[code(rng)]);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 32 == 9 ? 127 : xv(rng));
  const Weights w = make_weights(DType::MXFP4, rows, cols, src);
  ASSERT_EQ(w.dequant, src);
  std::vector<float> want(rows);
  ref::matvec(DType::MXFP4, w.data(), rows, cols, x.data(), want.data());
  for (Isa isa : isas()) {
    SCOPED_TRACE(isa_name(isa));
    const Kernels k(isa);
    std::vector<float> y(rows), Y(3 * rows);
    k.matvec(pool, DType::MXFP4, w.data(), rows, cols, x.data(), y.data());
    EXPECT_EQ(y, want);
    std::vector<float> X;
    for (int i = 0; i < 3; ++i) X.insert(X.end(), x.begin(), x.end());
    k.matmul(pool, DType::MXFP4, w.data(), rows, cols, X.data(), 3, Y.data());
    for (int i = 0; i < 3; ++i) EXPECT_EQ(std::vector<float>(Y.begin() + i * rows, Y.begin() + (i + 1) * rows), want) << i;
  }
}

// gpt-oss's expert rows (2880 columns), an odd row count: matmul's tokens, the row-list
// products and matvec give the same bits, for 1, 2 and 3 threads, and match the reference.
TEST(CpuMxfp4, ExpertRowsOneAndManyTokensAgree) {
  const int64_t rows = 45, cols = 2880;
  const Weights w = random_weights(DType::MXFP4, rows, cols, 23);
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (int64_t m : {2, 7}) {
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " m=" << m);
      const auto X = gaussian(m * cols, static_cast<uint32_t>(30 + m));
      std::vector<int32_t> idx;
      for (int32_t r = 1; r < rows; r += 3) idx.push_back(r);
      std::vector<float> first;
      for (int n : {1, 2, 3}) {
        ThreadPool pool(n);
        Guarded Y(m * rows);
        k.matmul(pool, DType::MXFP4, w.data(), rows, cols, X.data(), m, Y.data());
        ASSERT_TRUE(Y.guards_intact());
        if (first.empty()) first = Y.values();
        EXPECT_EQ(0, std::memcmp(first.data(), Y.data(), first.size() * 4)) << "threads " << n;
        for (int64_t i = 0; i < m; ++i) {
          Guarded y(rows), yr(rows, -5.0f);
          k.matvec(pool, DType::MXFP4, w.data(), rows, cols, X.data() + i * cols, y.data());
          k.matvec_rows(pool, DType::MXFP4, w.data(), cols, idx.data(), static_cast<int64_t>(idx.size()),
                        X.data() + i * cols, yr.data());
          ASSERT_TRUE(y.guards_intact() && yr.guards_intact());
          EXPECT_EQ(0, std::memcmp(y.data(), Y.data() + i * rows, rows * 4)) << "token " << i;
          for (int32_t r : idx) EXPECT_EQ(0, std::memcmp(yr.data() + r, y.data() + r, 4)) << "token " << i << " row " << r;
          if (n == 1) expect_rows(w, X.data() + i * cols, y.data(), isa);
        }
      }
    }
  }
}

// A matrix whose last row ends where an inaccessible page begins: the leaves' partial quads,
// pairs and octets (1 to 9 blocks, and 90) never read past the row, one token or several.
TEST(CpuMxfp4, ReadsNothingPastTheLastRow) {
  ThreadPool pool(1);
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (int64_t nb : {1, 2, 3, 4, 5, 6, 7, 8, 9, 90}) {
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " blocks " << nb);
      const int64_t rows = 5, cols = 32 * nb;
      const Weights w = random_weights(DType::MXFP4, rows, cols, static_cast<uint32_t>(nb));
      const size_t bytes = w.row_bytes() * rows;
      const GuardedBytes g(bytes);
      ASSERT_TRUE(g.ok());
      std::memcpy(g.data(), w.data(), bytes);
      const auto X = gaussian(3 * cols, 8);
      std::vector<float> y(rows), Y(3 * rows), yr(rows);
      const int32_t last[1] = {static_cast<int32_t>(rows - 1)};
      k.matvec(pool, DType::MXFP4, g.data(), rows, cols, X.data(), y.data());
      k.matmul(pool, DType::MXFP4, g.data(), rows, cols, X.data(), 3, Y.data());
      k.matvec_rows(pool, DType::MXFP4, g.data(), cols, last, 1, X.data(), yr.data());
      EXPECT_EQ(0, std::memcmp(y.data(), Y.data(), rows * 4));
      EXPECT_EQ(0, std::memcmp(&yr[rows - 1], &y[rows - 1], 4));
    }
  }
}

}  // namespace
}  // namespace pi::cpu::test
