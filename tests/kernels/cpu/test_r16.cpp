// Q4_0_R16, Q8_0_R16, Q4_K_R16 and MXFP4_R16 (tensor/dtype.h): the interleaving of 16 rows and the dense products
// that read them (kernels/cpu/r16.h), on every ISA: against the reference on the file's bytes, and bit
// for bit across ISAs, thread counts, batch splits and matvec_multi, since every R16 leaf
// follows one order of operations.
#include <algorithm>

#include "kernels/ref/ref.h"
#include "test_util.h"

namespace pi::cpu::test {
namespace {

// The 16-row layout of a file type.
DType r16_of(DType t) {
  switch (t) {
    case DType::Q8_0: return DType::Q8_0_R16;
    case DType::Q4_K: return DType::Q4_K_R16;
    case DType::MXFP4: return DType::MXFP4_R16;
    default: return DType::Q4_0_R16;
  }
}

// w's bytes in its 16-row layout, at an odd offset (no leaf may assume alignment).
struct Interleaved {
  DType type;
  std::vector<uint8_t> storage;
  const void* data() const { return storage.data() + 5; }
};
Interleaved interleave(const Weights& w) {
  Interleaved out{r16_of(w.type), std::vector<uint8_t>(w.row_bytes() * static_cast<size_t>(w.rows) + 5 + 64, 0x5a)};
  interleave_rows(out.type, w.data(), out.storage.data() + 5, w.rows, w.cols);
  return out;
}

constexpr DType kTypes[] = {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::MXFP4};

// Column counts to try: one block, a few, and a 7B-like width that is not a power of two.
std::vector<int64_t> col_counts(DType t) {
  if (t == DType::Q4_K) return {256, 768, 4352};
  return {32, 96, 4128};
}

// Every scale and quant byte at its place (Q8_0's quants as q + 128: the sign bit flipped;
// MXFP4's one exponent byte for a scale), and the round trip back to the file's bytes.
TEST(R16, InterleavingMovesEveryByteAndRoundTrips) {
  for (DType wt : {DType::Q4_0, DType::Q8_0, DType::MXFP4}) {
    const bool q8 = wt == DType::Q8_0, mx = wt == DType::MXFP4;
    const int64_t quant_bytes = q8 ? 32 : 16;
    const size_t block = q8 ? 34 : mx ? 17 : 18;
    const size_t scale = mx ? 1 : 2;
    for (int64_t cols : {32, 96, 4128}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(wt) << " " << cols);
      const Weights w = random_weights(wt, 48, cols, 3);
      const Interleaved r = interleave(w);
      const auto* file = static_cast<const uint8_t*>(w.data());
      const auto* il = static_cast<const uint8_t*>(r.data());
      const size_t group = 16 * w.row_bytes();
      for (int64_t row = 0; row < w.rows; ++row) {
        const uint8_t* g = il + (row / 16) * group;
        const int64_t i = row % 16;
        for (int64_t b = 0; b < cols / 32; ++b) {
          const uint8_t* blk = file + row * w.row_bytes() + block * b;
          const int64_t scale_at = q8 ? q8_0_r16_scale(b, i) : mx ? mxfp4_r16_exponent(b, i) : q4_0_r16_scale(b, i);
          ASSERT_EQ(0, std::memcmp(g + scale_at, blk, scale)) << row << " " << b;
          for (int64_t c = 0; c < quant_bytes; ++c) {
            const int64_t at = q8 ? q8_0_r16_offset(b, i, c) : mx ? mxfp4_r16_offset(b, i, c) : q4_0_r16_offset(b, i, c);
            ASSERT_EQ(g[at], q8 ? blk[scale + c] ^ 0x80 : blk[scale + c]) << row << " " << b << " " << c;
          }
        }
      }
      std::vector<uint8_t> back(w.row_bytes() * static_cast<size_t>(w.rows));
      deinterleave_rows(r.type, r.data(), back.data(), w.rows, cols);
      EXPECT_EQ(0, std::memcmp(back.data(), w.data(), back.size()));
    }
  }
}

// Q4_K_R16: each row's d, dmin, 12 scale bytes and 128 quant bytes per super-block at their
// places, and the round trip.
TEST(R16, Q4KInterleavingMovesEveryByteAndRoundTrips) {
  for (int64_t cols : col_counts(DType::Q4_K)) {
    SCOPED_TRACE(cols);
    const Weights w = random_weights(DType::Q4_K, 48, cols, 4);
    const Interleaved r = interleave(w);
    const auto* file = static_cast<const uint8_t*>(w.data());
    const auto* il = static_cast<const uint8_t*>(r.data());
    const size_t group = 16 * w.row_bytes();
    for (int64_t row = 0; row < w.rows; ++row) {
      const uint8_t* g = il + (row / 16) * group;
      const int64_t i = row % 16;
      for (int64_t s = 0; s < cols / 256; ++s) {
        const uint8_t* blk = file + row * w.row_bytes() + 144 * s;
        ASSERT_EQ(0, std::memcmp(g + q4_k_r16_d(s, i), blk, 2)) << row << " " << s;
        ASSERT_EQ(0, std::memcmp(g + q4_k_r16_d(s, i) + 32, blk + 2, 2)) << row << " " << s;
        for (int64_t w4 = 0; w4 < 3; ++w4)
          ASSERT_EQ(0, std::memcmp(g + q4_k_r16_scales(s, i, w4), blk + 4 + 4 * w4, 4)) << row << " " << s;
        for (int64_t t = 0; t < 128; ++t) ASSERT_EQ(g[q4_k_r16_offset(s, i, t)], blk[16 + t]) << row << " " << s << " " << t;
      }
    }
    std::vector<uint8_t> back(w.row_bytes() * static_cast<size_t>(w.rows));
    deinterleave_rows(r.type, r.data(), back.data(), w.rows, cols);
    EXPECT_EQ(0, std::memcmp(back.data(), w.data(), back.size()));
    EXPECT_EQ(r16_file_type(DType::Q4_K_R16), DType::Q4_K);
  }
}

TEST(Q4_0R16, OnlyTheDenseProductsTakeIt) {
  EXPECT_TRUE(supports_dense(DType::Q4_0_R16));
  EXPECT_FALSE(supports(DType::Q4_0_R16));  // the row-list kernels
  EXPECT_FALSE(supports_axpy(DType::Q4_0_R16));
  EXPECT_EQ(dot_layout(Isa::Avx512, DType::Q4_0, 4096), DType::Q4_0_R16);
  EXPECT_EQ(dot_layout(Isa::Avx512, DType::Q4_0, 40), DType::Q4_0);  // not whole groups
  EXPECT_EQ(dot_layout(Isa::Avx512, DType::Q8_0, 4096), DType::Q8_0_R16);
  EXPECT_EQ(dot_layout(Isa::Avx512, DType::Q4_1, 4096), DType::Q4_1);
  EXPECT_TRUE(supports_dense(DType::Q8_0_R16));
  EXPECT_FALSE(supports(DType::Q8_0_R16));
  EXPECT_EQ(dot_layout(Isa::Avx2, DType::Q4_0, 4096), DType::Q4_0_R16);
  EXPECT_TRUE(supports_dense(DType::Q4_K_R16));
  EXPECT_FALSE(supports(DType::Q4_K_R16));
  EXPECT_EQ(dot_layout(Isa::Avx512, DType::Q4_K, 4096), DType::Q4_K_R16);
  EXPECT_EQ(dot_layout(Isa::Avx2, DType::Q4_K, 4096), DType::Q4_K_R16);
  EXPECT_EQ(dot_layout(Isa::Scalar, DType::Q4_K, 4096), DType::Q4_K);
  EXPECT_EQ(dot_layout(Isa::Scalar, DType::Q4_0, 4096), DType::Q4_0);
  EXPECT_TRUE(supports_dense(DType::MXFP4_R16));
  EXPECT_FALSE(supports(DType::MXFP4_R16));
  EXPECT_EQ(dot_layout(Isa::Avx512, DType::MXFP4, 2880), DType::MXFP4_R16);
  EXPECT_EQ(dot_layout(Isa::Avx2, DType::MXFP4, 2880), DType::MXFP4_R16);
  EXPECT_EQ(dot_layout(Isa::Scalar, DType::MXFP4, 2880), DType::MXFP4);
  EXPECT_EQ(r16_file_type(DType::MXFP4_R16), DType::MXFP4);
  EXPECT_FALSE(quantize_row(DType::Q4_0_R16, nullptr, nullptr, 32).ok());
}

// Every ISA's R16 products against the reference on the Q4_0 bytes: tightly against the
// reference applied to the int8 image of x (every ISA quantizes the activation for R16), and
// within the activation quantization's bound against x itself.
TEST(Q4_0R16, MatvecAndMatmulMatchTheReferenceOnEveryIsa) {
  ThreadPool pool(2);
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (DType wt : kTypes) {
    for (int64_t cols : col_counts(wt)) {
      for (int64_t rows : {16, 48}) {
        SCOPED_TRACE(::testing::Message() << isa_name(isa) << " " << dtype_name(wt) << " " << rows << "x" << cols);
        const Weights w = random_weights(wt, rows, cols, static_cast<uint32_t>(rows + cols));
        const Interleaved r = interleave(w);
        for (int64_t m : {1, 6, 11}) {  // the AVX2 leaves: 1 token, 4 + 2, 4 + 4 + 3
        std::vector<float> X(static_cast<size_t>(m * cols + 1));
        const auto g = gaussian(m * cols, 17);
        std::copy(g.begin(), g.end(), X.begin() + 1);
        Guarded Y(m * rows), y(rows);
        k.matmul(pool, r.type, r.data(), rows, cols, X.data() + 1, m, Y.data());
        k.matvec(pool, r.type, r.data(), rows, cols, X.data() + 1, y.data());
        EXPECT_TRUE(Y.guards_intact());
        EXPECT_TRUE(y.guards_intact());
        for (int64_t i = 0; i < m; ++i) {
          const float* x = X.data() + 1 + i * cols;
          const auto xe = effective_x(wt, Isa::Avx512, x, cols);
          for (int64_t row = 0; row < rows; ++row) {
            const auto* wr = static_cast<const uint8_t*>(w.data()) + row * w.row_bytes();
            float want_e = 0.0f, want = 0.0f;
            ref::matvec(wt, wr, 1, cols, xe.data(), &want_e);
            ref::matvec(wt, wr, 1, cols, x, &want);
            const double tight = dot_bound(w.mag.data() + row * cols, xe.data(), cols);
            ASSERT_NEAR(Y[i * rows + row], want_e, tight) << "token " << i << " row " << row;
            ASSERT_NEAR(Y[i * rows + row], want,
                        tight + act_quant_bound(w.dequant.data() + row * cols, x, cols, act_block(wt, Isa::Avx512)))
                << "token " << i << " row " << row;
          }
        }
        EXPECT_EQ(0, std::memcmp(y.data(), Y.data(), rows * 4)) << "matvec vs matmul token 0";
        }
      }
    }
    }
  }
}

// One order of operations: the same bits from every ISA, 1..3 threads, any split of the
// batch into matmul calls, matvec per token, and matvec_multi beside other types.
TEST(Q4_0R16, SameBitsOnEveryIsaThreadCountAndBatchSplit) {
  const int64_t rows = 80, m = 13;
  for (DType wt : kTypes) {
  SCOPED_TRACE(dtype_name(wt));
  const int64_t cols = col_counts(wt).back();
  const Weights w = random_weights(wt, rows, cols, 21);
  const Interleaved r = interleave(w);
  const Weights q8 = random_weights(DType::Q8_0, 24, cols, 22);
  auto X = gaussian(m * cols, 23);
  X[5] = 0.0f;  // a few all-zero blocks: amax 0
  std::fill(X.begin() + 64, X.begin() + 96, 0.0f);
  std::vector<float> want;
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (int threads : {1, 2, 3}) {
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " " << threads << " threads");
      ThreadPool pool(threads);
      std::vector<float> Y(static_cast<size_t>(m * rows));
      k.matmul(pool, r.type, r.data(), rows, cols, X.data(), m, Y.data());
      if (want.empty()) want = Y;
      EXPECT_EQ(0, std::memcmp(Y.data(), want.data(), Y.size() * 4)) << "whole batch";
      // Split 5 + 1 + 7.
      std::vector<float> S(Y.size());
      k.matmul(pool, r.type, r.data(), rows, cols, X.data(), 5, S.data());
      k.matvec(pool, r.type, r.data(), rows, cols, X.data() + 5 * cols, S.data() + 5 * rows);
      k.matmul(pool, r.type, r.data(), rows, cols, X.data() + 6 * cols, 7, S.data() + 6 * rows);
      EXPECT_EQ(0, std::memcmp(S.data(), want.data(), S.size() * 4)) << "split batch";
      // matvec_multi: an R16 part, a Q8_0 part and the R16 part again.
      std::vector<float> a(rows), b(24), c(rows), b1(24);
      const MatvecPart parts[3] = {{r.type, r.data(), rows, a.data()},
                                   {DType::Q8_0, q8.data(), 24, b.data()},
                                   {r.type, r.data(), rows, c.data()}};
      k.matvec_multi(pool, parts, 3, cols, X.data());
      k.matvec(pool, DType::Q8_0, q8.data(), 24, cols, X.data(), b1.data());
      EXPECT_EQ(0, std::memcmp(a.data(), want.data(), rows * 4)) << "multi part 0";
      EXPECT_EQ(0, std::memcmp(c.data(), want.data(), rows * 4)) << "multi part 2";
      EXPECT_EQ(0, std::memcmp(b.data(), b1.data(), 24 * 4)) << "multi part 1";
    }
  }
}
}

// Non-finite activations give non-finite outputs exactly where the reference does.
TEST(Q4_0R16, NonFiniteInputsPropagateOnEveryIsa) {
  ThreadPool pool(2);
  const int64_t rows = 16;
  for (DType wt : kTypes) {
  const int64_t cols = col_counts(wt)[1];
  const Weights w = random_weights(wt, rows, cols, 31);
  const Interleaved r = interleave(w);
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    auto x = gaussian(cols, 32);
    x[40] = bad;
    std::vector<float> want(rows);
    ref::matvec(wt, w.data(), rows, cols, x.data(), want.data());
    for (Isa isa : isas()) {
      std::vector<float> y(rows);
      Kernels(isa).matvec(pool, r.type, r.data(), rows, cols, x.data(), y.data());
      for (int64_t row = 0; row < rows; ++row)
        EXPECT_EQ(std::isfinite(y[row]), std::isfinite(want[row]))
            << isa_name(isa) << " " << dtype_name(wt) << " row " << row << " x=" << bad;
    }
  }
  }
}

TEST(Q4_0R16DeathTest, RowListsAndPartialGroupsAreRefused) {
  const Weights w = random_weights(DType::Q4_0, 32, 64, 41);
  const Interleaved r = interleave(w);
  ThreadPool pool(1);
  const Kernels k(default_isa());
  std::vector<float> x(64, 1.0f), y(32);
  const int32_t idx[2] = {0, 17};
  EXPECT_DEATH(k.matvec_rows(pool, DType::Q4_0_R16, r.data(), 64, idx, 2, x.data(), y.data()),
               "unsupported weight type");
  EXPECT_DEATH(k.matvec(pool, DType::Q4_0_R16, r.data(), 24, 64, x.data(), y.data()), "multiple of 16 rows");
}

}  // namespace
}  // namespace pi::cpu::test
