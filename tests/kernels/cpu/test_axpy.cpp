// Axpy kernels (sparse down projection) against pi::ref for every weight type and ISA, with
// guard bytes, zero-coefficient skipping (a NaN row with a == 0 must not leak), and
// bit-identical outputs for 1, 2 and 3 threads (threads own disjoint column slices).
//
// Tolerance: y_c is a sum of n rounded f32 steps y += (a d) q (+ a m for the types with a
// minimum: two roundings of y), each off by at most u (|a| mag + |y|) where mag is the
// magnitude of the element's terms (Weights::mag), so
// |err| <= (2n + 4) u (|y0_c| + sum_k |a_k| mag_kc).
// Q4_0 sums integers over groups of rows (src/kernels/cpu/q4_groups.h): a_k d_kb is rounded to
// an integer multiple of 1/127 of the largest such product in its group, whose rows lie in one
// window of 32, so each term is further off by at most 8 * amax_window / 254.
#include <algorithm>

#include "kernels/ref/ref.h"
#include "tensor/quant.h"
#include "test_util.h"

namespace pi::cpu::test {
namespace {

std::vector<int64_t> col_sizes(DType t) {
  if (k_type(t)) return {256, 768, 4352};
  if (int_type(t)) return {32, 96, 4128};
  return {1, 5, 17, 96, 130, 4128};
}

std::vector<int32_t> subset(int64_t n, double frac, uint32_t seed) {
  std::mt19937 rng(seed);
  std::bernoulli_distribution keep(frac);
  std::vector<int32_t> idx;
  for (int64_t r = 0; r < n; ++r)
    if (keep(rng)) idx.push_back(static_cast<int32_t>(r));
  return idx;
}

void expect_axpy(const Weights& w, const std::vector<int32_t>& idx, const float* a,
                 const float* y0, const float* y, const float* want) {
  for (int64_t c = 0; c < w.cols; ++c) {
    double mag = std::fabs(y0[c]);
    for (int32_t r : idx)
      if (a[r] != 0.0f) mag += std::fabs(static_cast<double>(a[r]) * w.mag[r * w.cols + c]);
    const double tol = (2.0 * static_cast<double>(idx.size()) + 4.0) * kU * mag + q4_axpy_rounding(w, idx, a, c) + 1e-30;
    ASSERT_NEAR(y[c], want[c], tol) << "col " << c;
  }
}

TEST(CpuAxpy, RowsAndDenseMatchReference) {
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (DType t : matrix_types()) {
      for (int64_t cols : col_sizes(t)) {
        for (int64_t rows : {1, 7, 33}) {
          SCOPED_TRACE(::testing::Message() << isa_name(isa) << " " << dtype_name(t) << " "
                                            << rows << "x" << cols);
          const Weights w = random_weights(t, rows, cols, static_cast<uint32_t>(cols + rows));
          auto a = gaussian(rows, 5);
          a[0] = 0.0f;  // skipped
          const auto y0 = gaussian(cols, 6);
          auto idx = subset(rows, 0.5, 7);
          idx.push_back(0);
          std::vector<std::vector<float>> sparse, dense;
          for (int n : {1, 2, 3}) {
            ThreadPool pool(n);
            Guarded ys(cols), yd(cols);
            std::copy(y0.begin(), y0.end(), ys.data());
            std::copy(y0.begin(), y0.end(), yd.data());
            k.axpy_rows(pool, t, w.data(), rows, cols, idx.data(), static_cast<int64_t>(idx.size()), a.data(), ys.data());
            k.axpy_dense(pool, t, w.data(), rows, cols, a.data(), yd.data());
            EXPECT_TRUE(ys.guards_intact());
            EXPECT_TRUE(yd.guards_intact());
            sparse.push_back(ys.values());
            dense.push_back(yd.values());
          }
          for (int k : {1, 2}) {
            EXPECT_EQ(0, std::memcmp(sparse[0].data(), sparse[k].data(), cols * 4)) << "threads";
            EXPECT_EQ(0, std::memcmp(dense[0].data(), dense[k].data(), cols * 4)) << "threads";
          }
          auto want_s = y0, want_d = y0;
          ref::axpy_rows(t, w.data(), cols, idx.data(), static_cast<int64_t>(idx.size()), a.data(), want_s.data());
          ref::axpy_dense(t, w.data(), rows, cols, a.data(), want_d.data());
          expect_axpy(w, idx, a.data(), y0.data(), sparse[0].data(), want_s.data());
          std::vector<int32_t> all(static_cast<size_t>(rows));
          for (int64_t r = 0; r < rows; ++r) all[static_cast<size_t>(r)] = static_cast<int32_t>(r);
          expect_axpy(w, all, a.data(), y0.data(), dense[0].data(), want_d.data());
        }
      }
    }
  }
}

// Exact data: dyadic coefficients and integer weights with block scales 1; every partial sum
// is exact, so the result must equal the reference bit for bit. (Not Q4_0, whose coefficients
// are rounded to 8 bits: see the Q4_0 tests below.)
TEST(CpuAxpy, ExactOnConstructedData) {
  ThreadPool pool(3);
  const std::pair<DType, int> cases[] = {{DType::F32, -8}, {DType::F16, -8}, {DType::BF16, -8},
                                         {DType::Q8_0, -127}, {DType::Q5_0, -16}};
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (auto [t, lo] : cases) {
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " " << dtype_name(t));
      const int64_t rows = 40, cols = 4128;
      std::mt19937 rng(9);
      std::uniform_int_distribution<int> wv(lo, -lo - 1);
      std::vector<float> src(static_cast<size_t>(rows * cols));
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i % 32 == 3 ? lo : wv(rng));
      const Weights w = make_weights(t, rows, cols, src);
      const auto a = dyadic(rows, 10);
      const auto y0 = dyadic(cols, 11);
      const auto idx = subset(rows, 0.6, 12);
      auto y = y0, want = y0;
      k.axpy_rows(pool, t, w.data(), rows, cols, idx.data(), static_cast<int64_t>(idx.size()), a.data(), y.data());
      ref::axpy_rows(t, w.data(), cols, idx.data(), static_cast<int64_t>(idx.size()), a.data(), want.data());
      EXPECT_EQ(y, want);
    }
  }
}

// Q4_0's integer sums are defined by the scalar leaf (q4_groups.h): every ISA gives its bits,
// for one token (lists with groups cut by windows, by the window's row cap, by the half split and by
// a list that revisits windows) and per token in the many-token forms, which must also equal
// each token's own one-token call bit for bit (ascending lists, as the model passes).
TEST(CpuAxpy, Q4GroupsSameBitsOnEveryIsaAndBatchSplit) {
  const int64_t n_rows = 100, cols = 4128, m = 5;
  const Weights w = random_weights(DType::Q4_0, n_rows, cols, 61);
  auto A = gaussian(m * n_rows, 62);
  for (size_t i = 0; i < A.size(); i += 4) A[i] = 0.0f;
  A[7] = 1e-30f;  // a product below FLT_MIN next to ordinary ones
  const auto Y0 = gaussian(m * cols, 63);
  std::vector<int32_t> dense(n_rows), revisit;
  for (int32_t r = 0; r < n_rows; ++r) dense[static_cast<size_t>(r)] = r;
  for (int32_t r = 0; r < n_rows; ++r) revisit.push_back((r * 37) % n_rows);
  const std::vector<std::vector<int32_t>> lists = {dense, subset(n_rows, 0.5, 64), subset(n_rows, 0.1, 65), revisit};
  std::vector<float> want_one;  // scalar, one token, per list
  for (Isa isa : isas()) {
    const Kernels k(isa);
    std::vector<float> got;
    for (int n : {1, 2, 3}) {
      ThreadPool pool(n);
      std::vector<float> all;
      for (const auto& idx : lists) {
        for (int64_t i = 0; i < m; ++i) {
          std::vector<float> y(Y0.begin() + i * cols, Y0.begin() + (i + 1) * cols);
          k.axpy_rows(pool, DType::Q4_0, w.data(), n_rows, cols, idx.data(), static_cast<int64_t>(idx.size()),
                      A.data() + i * n_rows, y.data());
          all.insert(all.end(), y.begin(), y.end());
        }
      }
      if (got.empty()) got = all;
      EXPECT_EQ(0, std::memcmp(got.data(), all.data(), got.size() * 4)) << isa_name(isa) << " threads " << n;
    }
    if (want_one.empty()) want_one = got;
    EXPECT_EQ(0, std::memcmp(want_one.data(), got.data(), got.size() * 4)) << isa_name(isa) << " vs scalar";
    // Many tokens: the union form with the ascending lists, and the batch form.
    ThreadPool pool(2);
    for (size_t li = 0; li < 3; ++li) {
      const auto& idx = lists[li];
      std::vector<float> Yu(Y0);
      k.axpy_rows_union(pool, DType::Q4_0, w.data(), n_rows, cols, idx.data(), static_cast<int64_t>(idx.size()),
                        A.data(), m, Yu.data());
      EXPECT_EQ(0, std::memcmp(Yu.data(), want_one.data() + li * m * cols, Yu.size() * 4))
          << isa_name(isa) << " union, list " << li;
    }
    std::vector<int32_t> idx;
    std::vector<int64_t> offsets{0};
    for (int64_t i = 0; i < m; ++i) {
      const auto s = subset(n_rows, 0.3 + 0.1 * static_cast<double>(i), static_cast<uint32_t>(70 + i));
      idx.insert(idx.end(), s.begin(), s.end());
      offsets.push_back(static_cast<int64_t>(idx.size()));
    }
    std::vector<float> Yb(Y0);
    k.axpy_rows_batch(pool, DType::Q4_0, w.data(), n_rows, cols, idx.data(), offsets.data(), A.data(), m, Yb.data());
    for (int64_t i = 0; i < m; ++i) {
      std::vector<float> y(Y0.begin() + i * cols, Y0.begin() + (i + 1) * cols);
      k.axpy_rows(pool, DType::Q4_0, w.data(), n_rows, cols, idx.data() + offsets[i], offsets[i + 1] - offsets[i],
                  A.data() + i * n_rows, y.data());
      EXPECT_EQ(0, std::memcmp(y.data(), Yb.data() + i * cols, cols * 4)) << isa_name(isa) << " batch, token " << i;
    }
  }
}

// A matrix whose last byte is the last byte before an inaccessible page (as a tensor at the
// end of a mapped file): the SIMD leaves read rows with whole-vector loads where the matrix
// goes on past them, and must not where it ends (an overread faults here, in any build).
// Every ISA gives the scalar bits on such a matrix, for lists ending at the last row.
TEST(CpuAxpy, Q4ReadsStayInsideTheMatrix) {
  for (int64_t cols : {4096, 4128, 64}) {
    const int64_t n_rows = 70;
    const Weights w = random_weights(DType::Q4_0, n_rows, cols, 81);
    const size_t bytes = pi::row_bytes(DType::Q4_0, cols) * static_cast<size_t>(n_rows);
    const GuardedBytes guarded(bytes);
    ASSERT_TRUE(guarded.ok());
    uint8_t* D = guarded.data();
    std::memcpy(D, w.data(), bytes);
    const auto a = gaussian(n_rows, 82);
    std::vector<int32_t> all(n_rows), last = {n_rows - 3, n_rows - 2, n_rows - 1};
    for (int32_t r = 0; r < n_rows; ++r) all[static_cast<size_t>(r)] = r;
    for (const auto& idx : {all, last, subset(n_rows, 0.5, 83)}) {
      std::vector<float> want;
      for (Isa isa : isas()) {
        for (int n : {1, 3}) {
          SCOPED_TRACE(::testing::Message() << isa_name(isa) << " cols " << cols << " threads " << n);
          ThreadPool pool(n);
          std::vector<float> y = gaussian(cols, 84);
          Kernels(isa).axpy_rows(pool, DType::Q4_0, D, n_rows, cols, idx.data(), static_cast<int64_t>(idx.size()),
                                 a.data(), y.data());
          if (want.empty()) want = y;
          EXPECT_EQ(0, std::memcmp(want.data(), y.data(), want.size() * 4));
        }
      }
    }
  }
}

// Q4_0_SPLIT holds a Q4_0 matrix's bytes with each row's scales first and each four blocks'
// quants transposed by words (tensor/dtype.h): its axpy must give the Q4_0 bits, on every ISA,
// for any thread count (3 and 5 threads cut the columns into slices of whole units, the last
// one ending at the row's partial unit if any), in the one-token, union and batch forms, on
// widths with and without a partial last unit,
// with a non-finite block scale in one row, and without reading past the matrix (the last
// row's last byte before an inaccessible page).
TEST(CpuAxpy, Q4SplitLayoutGivesTheQ4Bits) {
  for (int64_t cols : {4096, 4128, 4160, 96, 640}) {
    const int64_t n_rows = 70, m = 3;
    Weights w = random_weights(DType::Q4_0, n_rows, cols, 91);
    auto* q4 = const_cast<uint8_t*>(static_cast<const uint8_t*>(w.data()));
    const size_t rb = w.row_bytes(), bytes = rb * static_cast<size_t>(n_rows);
    q4[5 * rb + 18 * 2] = 0x00;
    q4[5 * rb + 18 * 2 + 1] = 0x7c;  // row 5, block 2: scale +inf
    const GuardedBytes guarded(bytes);
    ASSERT_TRUE(guarded.ok());
    uint8_t* split = guarded.data();
    for (int64_t r = 0; r < n_rows; ++r) split_q4_0_row(q4 + r * rb, split + r * rb, cols);
    auto A = gaussian(m * n_rows, 92);
    for (size_t i = 0; i < A.size(); i += 5) A[i] = 0.0f;
    A[5] = 0.0f;  // row 5 (non-finite) skipped for token 0, used by the others
    const auto Y0 = gaussian(m * cols, 93);
    std::vector<int32_t> dense(n_rows), revisit;
    for (int32_t r = 0; r < n_rows; ++r) dense[static_cast<size_t>(r)] = r;
    for (int32_t r = 0; r < n_rows; ++r) revisit.push_back((r * 37) % n_rows);
    const std::vector<std::vector<int32_t>> lists = {dense, subset(n_rows, 0.5, 94), subset(n_rows, 0.1, 95),
                                                     {n_rows - 2, n_rows - 1}, revisit};
    // The Q4_0 bits: the scalar leaf, one token at a time.
    ThreadPool one(1);
    std::vector<float> want;
    for (const auto& idx : lists) {
      for (int64_t i = 0; i < m; ++i) {
        std::vector<float> y(Y0.begin() + i * cols, Y0.begin() + (i + 1) * cols);
        Kernels(Isa::Scalar).axpy_rows(one, DType::Q4_0, q4, n_rows, cols, idx.data(), static_cast<int64_t>(idx.size()),
                                       A.data() + i * n_rows, y.data());
        want.insert(want.end(), y.begin(), y.end());
      }
    }
    for (Isa isa : isas()) {
      const Kernels k(isa);
      for (int n : {1, 2, 3, 5}) {
        SCOPED_TRACE(::testing::Message() << isa_name(isa) << " cols " << cols << " threads " << n);
        ThreadPool pool(n);
        std::vector<float> got;
        for (const auto& idx : lists) {
          for (int64_t i = 0; i < m; ++i) {
            std::vector<float> y(Y0.begin() + i * cols, Y0.begin() + (i + 1) * cols);
            k.axpy_rows(pool, DType::Q4_0_SPLIT, split, n_rows, cols, idx.data(), static_cast<int64_t>(idx.size()),
                        A.data() + i * n_rows, y.data());
            got.insert(got.end(), y.begin(), y.end());
          }
        }
        EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4));
        for (size_t li = 0; li < 4; ++li) {  // the union form (ascending lists)
          std::vector<float> Yu(Y0);
          k.axpy_rows_union(pool, DType::Q4_0_SPLIT, split, n_rows, cols, lists[li].data(),
                            static_cast<int64_t>(lists[li].size()), A.data(), m, Yu.data());
          EXPECT_EQ(0, std::memcmp(Yu.data(), want.data() + li * m * cols, Yu.size() * 4)) << "union, list " << li;
        }
        std::vector<int32_t> idx;  // the batch form: each token its own list
        std::vector<int64_t> offsets{0};
        for (int64_t i = 0; i < m; ++i) {
          idx.insert(idx.end(), lists[static_cast<size_t>(i)].begin(), lists[static_cast<size_t>(i)].end());
          offsets.push_back(static_cast<int64_t>(idx.size()));
        }
        std::vector<float> Yb(Y0);
        k.axpy_rows_batch(pool, DType::Q4_0_SPLIT, split, n_rows, cols, idx.data(), offsets.data(), A.data(), m,
                          Yb.data());
        for (int64_t i = 0; i < m; ++i) {
          const float* w_i = want.data() + (static_cast<size_t>(i) * m + static_cast<size_t>(i)) * cols;
          EXPECT_EQ(0, std::memcmp(w_i, Yb.data() + i * cols, cols * 4)) << "batch, token " << i;
        }
      }
    }
  }
}

// The rows below and above n_rows / 2 are summed apart (so that any thread count gives the
// same bits): an ascending list is split where it is, any other is copied lower rows first,
// each half in list order. Moving the first upper row to the front makes the list take the
// copy while each half keeps its order: same bits.
TEST(CpuAxpy, ListsSplitInPlaceOrCopiedGiveTheSameBits) {
  const int64_t n_rows = 64, cols = 4096;
  for (DType t : {DType::F32, DType::Q8_0, DType::Q4_0}) {
    const Weights w = random_weights(t, n_rows, cols, 71);
    const auto a = gaussian(n_rows, 72);
    const auto y0 = gaussian(cols, 73);
    const std::vector<int32_t> sorted = subset(n_rows, 0.6, 74);
    const auto upper = std::find_if(sorted.begin(), sorted.end(), [&](int32_t r) { return r >= n_rows / 2; });
    ASSERT_NE(upper, sorted.end());
    ASSERT_NE(upper, sorted.begin());
    std::vector<int32_t> moved{*upper};
    for (int32_t r : sorted)
      if (r != *upper) moved.push_back(r);
    for (Isa isa : isas()) {
      for (int n : {1, 2}) {
        SCOPED_TRACE(::testing::Message() << isa_name(isa) << " " << dtype_name(t) << " threads " << n);
        const Kernels k(isa);
        ThreadPool pool(n);
        auto ys = y0, ym = y0;
        k.axpy_rows(pool, t, w.data(), n_rows, cols, sorted.data(), static_cast<int64_t>(sorted.size()), a.data(), ys.data());
        k.axpy_rows(pool, t, w.data(), n_rows, cols, moved.data(), static_cast<int64_t>(moved.size()), a.data(), ym.data());
        EXPECT_EQ(0, std::memcmp(ys.data(), ym.data(), cols * 4));
        EXPECT_NE(0, std::memcmp(ys.data(), y0.data(), cols * 4));
      }
    }
  }
}

TEST(CpuAxpy, ZeroCoefficientSkipsNonFiniteRowsAndNonZeroPropagates) {
  ThreadPool pool(2);
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (DType t : matrix_types()) {
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " " << dtype_name(t));
      const int64_t rows = 4, cols = 512;
      auto src = gaussian(rows * cols, 13);
      src[1 * cols + 7] = std::numeric_limits<float>::quiet_NaN();
      Weights w = make_weights(t, rows, cols, src);
      if (t == DType::MXFP4) {
        // No NaN exponent in MXFP4 as ggml reads it: the largest one (2^127) makes every code
        // of magnitude 2 or more infinite.
        w.storage[w.offset + w.row_bytes()] = 0xff;
      } else if (int_type(t)) {
        // Quantizers drop NaN; poison row 1's first block scale (an f16 NaN) instead.
        uint8_t* row1 = w.storage.data() + w.offset + w.row_bytes();
        const size_t d_at = scale_at(t);
        row1[d_at] = 0x00;
        row1[d_at + 1] = 0x7e;
      }
      const std::vector<int32_t> idx = {0, 1, 2, 3};
      for (float a1 : {0.0f, 1.0f}) {
        const std::vector<float> a = {0.5f, a1, -1.0f, 2.0f};
        std::vector<float> y(cols, 1.0f), want(cols, 1.0f);
        k.axpy_rows(pool, t, w.data(), rows, cols, idx.data(), 4, a.data(), y.data());
        ref::axpy_rows(t, w.data(), cols, idx.data(), 4, a.data(), want.data());
        int non_finite = 0;
        for (int64_t c = 0; c < cols; ++c) {
          ASSERT_EQ(std::isfinite(y[c]), std::isfinite(want[c])) << "col " << c << " a1=" << a1;
          non_finite += !std::isfinite(y[c]);
        }
        EXPECT_EQ(non_finite > 0, a1 != 0.0f);
      }
    }
  }
}

TEST(CpuAxpy, BatchAndUnionMatchPerTokenReference) {
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (DType t : matrix_types()) {
      for (int64_t m : {1, 4, 70}) {
        SCOPED_TRACE(::testing::Message() << isa_name(isa) << " " << dtype_name(t) << " m=" << m);
        const int64_t n_rows = 45, cols = k_type(t) ? 512 : 160;
        const Weights w = random_weights(t, n_rows, cols, 51);
        auto A = gaussian(m * n_rows, 52);
        for (size_t i = 0; i < A.size(); i += 3) A[i] = 0.0f;  // ReLU-like zeros
        const auto Y0 = gaussian(m * cols, 53);
        std::vector<int32_t> idx;
        std::vector<int64_t> offsets{0};
        for (int64_t i = 0; i < m; ++i) {
          const auto s = subset(n_rows, 0.3, static_cast<uint32_t>(200 + i));
          idx.insert(idx.end(), s.begin(), s.end());
          offsets.push_back(static_cast<int64_t>(idx.size()));
        }
        const auto uni = subset(n_rows, 0.5, 54);
        std::vector<std::vector<float>> bo, uo;
        for (int n : {1, 2, 3}) {
          ThreadPool pool(n);
          Guarded Yb(m * cols), Yu(m * cols);
          std::copy(Y0.begin(), Y0.end(), Yb.data());
          std::copy(Y0.begin(), Y0.end(), Yu.data());
          k.axpy_rows_batch(pool, t, w.data(), n_rows, cols, idx.data(), offsets.data(), A.data(), m, Yb.data());
          k.axpy_rows_union(pool, t, w.data(), n_rows, cols, uni.data(), static_cast<int64_t>(uni.size()), A.data(),
                          m, Yu.data());
          EXPECT_TRUE(Yb.guards_intact());
          EXPECT_TRUE(Yu.guards_intact());
          bo.push_back(Yb.values());
          uo.push_back(Yu.values());
        }
        for (int k : {1, 2}) {
          EXPECT_EQ(0, std::memcmp(bo[0].data(), bo[k].data(), bo[0].size() * 4));
          EXPECT_EQ(0, std::memcmp(uo[0].data(), uo[k].data(), uo[0].size() * 4));
        }
        for (int64_t i = 0; i < m; ++i) {
          const float* a = A.data() + i * n_rows;
          const std::vector<int32_t> mine(idx.begin() + offsets[i], idx.begin() + offsets[i + 1]);
          std::vector<float> wb(Y0.begin() + i * cols, Y0.begin() + (i + 1) * cols), wu = wb;
          ref::axpy_rows(t, w.data(), cols, mine.data(), static_cast<int64_t>(mine.size()), a, wb.data());
          ref::axpy_rows(t, w.data(), cols, uni.data(), static_cast<int64_t>(uni.size()), a, wu.data());
          expect_axpy(w, mine, a, Y0.data() + i * cols, bo[0].data() + i * cols, wb.data());
          expect_axpy(w, uni, a, Y0.data() + i * cols, uo[0].data() + i * cols, wu.data());
        }
      }
    }
  }
}

}  // namespace
}  // namespace pi::cpu::test
