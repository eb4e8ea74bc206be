// Dot-product kernels (matvec, matmul, matvec_rows and the batched sparse forms) against
// pi::ref, for every weight type and every compiled ISA, at odd sizes and misaligned
// pointers, with guard bytes around outputs and bit-identical results for 1, 2, 3 threads.
//
// Tolerances: on the integer paths the kernel multiplies with the per-block int8 image of x
// (effective_x), so it is compared tightly (dot_bound) with the reference applied to that
// image, and loosely with the reference on x itself (dot_bound + act_quant_bound).
#include <algorithm>

#include "kernels/cpu/dispatch.h"
#include "kernels/ref/ref.h"
#include "test_util.h"

namespace pi::cpu::test {
namespace {

std::vector<int64_t> col_sizes(DType t) {
  if (k_type(t)) return {256, 768, 4352};
  if (int_type(t)) return {32, 64, 96, 256, 4128};  // 1, 2, 3, 0, 1 blocks past a multiple of 4
  return {1, 5, 17, 32, 96, 4128};
}

// Checks y (rows of W . x) against the reference on x and on the kernel's effective x.
void expect_dot_rows(const Weights& w, const std::vector<int64_t>& rows, const float* x,
                     const float* y, Isa isa) {
  const auto xe = effective_x(w.type, isa, x, w.cols);
  for (int64_t r : rows) {
    const float* wr = w.dequant.data() + r * w.cols;
    float want_e = 0.0f, want = 0.0f;
    ref::matvec(w.type, static_cast<const uint8_t*>(w.data()) + r * w.row_bytes(), 1, w.cols,
                xe.data(), &want_e);
    ref::matvec(w.type, static_cast<const uint8_t*>(w.data()) + r * w.row_bytes(), 1, w.cols, x,
                &want);
    const double tight = dot_bound(w.mag.data() + r * w.cols, xe.data(), w.cols);
    EXPECT_NEAR(y[r], want_e, tight) << "row " << r << " (vs effective x)";
    const int64_t bs = act_block(w.type, isa);
    EXPECT_NEAR(y[r], want, tight + (bs > 0 ? act_quant_bound(wr, x, w.cols, bs) : 0.0))
        << "row " << r;
  }
}

TEST(CpuMatvec, MatchesReferenceEveryTypeIsaAndSize) {
  ThreadPool pool(2);
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (DType t : matrix_types()) {
      for (int64_t cols : col_sizes(t)) {
        for (int64_t rows : {1, 7, 33}) {
          SCOPED_TRACE(::testing::Message() << isa_name(isa) << " " << dtype_name(t) << " "
                                            << rows << "x" << cols);
          const Weights w = random_weights(t, rows, cols, static_cast<uint32_t>(rows * 7 + cols));
          // x at an odd float offset: no kernel may assume alignment.
          std::vector<float> xs(static_cast<size_t>(cols + 1));
          const auto g = gaussian(cols, 99);
          std::copy(g.begin(), g.end(), xs.begin() + 1);
          Guarded y(rows);
          k.matvec(pool, t, w.data(), rows, cols, xs.data() + 1, y.data());
          EXPECT_TRUE(y.guards_intact());
          std::vector<int64_t> all(static_cast<size_t>(rows));
          for (int64_t r = 0; r < rows; ++r) all[static_cast<size_t>(r)] = r;
          expect_dot_rows(w, all, xs.data() + 1, y.data(), isa);
        }
      }
    }
  }
}

// Weights and activations chosen so that every product and sum is exact in f32 on every path
// (block scales 1, activation blocks whose largest magnitude is 127): results must equal the
// reference bit for bit. This catches any element mis-pairing that a tolerance could hide.
TEST(CpuMatvec, ExactOnConstructedData) {
  ThreadPool pool(2);
  struct Case {
    DType t;
    int lo, hi;  // weight values (integers); blocks contain lo so that the scale is 1
  };
  const Case cases[] = {{DType::F32, -8, 8}, {DType::F16, -8, 8},  {DType::BF16, -8, 8},
                        {DType::Q8_0, -127, 127}, {DType::Q4_0, -8, 7}, {DType::Q5_0, -16, 15}};
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (const Case& c : cases) {
      const int64_t rows = 9, cols = 4128;
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " " << dtype_name(c.t));
      std::mt19937 rng(5);
      std::uniform_int_distribution<int> wv(c.lo, c.hi), xv(-127, 127);
      std::vector<float> src(static_cast<size_t>(rows * cols)), x(static_cast<size_t>(cols));
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i % 32 == 5 ? c.lo : wv(rng));
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 32 == 9 ? 127 : xv(rng));
      const Weights w = make_weights(c.t, rows, cols, src);
      if (int_type(c.t)) ASSERT_EQ(w.dequant, src);  // the scales came out as 1
      std::vector<float> y(rows), want(rows);
      k.matvec(pool, c.t, w.data(), rows, cols, x.data(), y.data());
      ref::matvec(c.t, w.data(), rows, cols, x.data(), want.data());
      EXPECT_EQ(y, want);
    }
  }
}

TEST(CpuMatvec, BitIdenticalForOneTwoThreeThreads) {
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (DType t : matrix_types()) {
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " " << dtype_name(t));
      const int64_t rows = 301, cols = k_type(t) ? 1024 : 1056;
      const Weights w = random_weights(t, rows, cols, 11);
      const auto x = gaussian(cols, 12);
      std::vector<std::vector<float>> outs;
      for (int n : {1, 2, 3}) {
        ThreadPool pool(n);
        std::vector<float> y(rows);
        k.matvec(pool, t, w.data(), rows, cols, x.data(), y.data());
        outs.push_back(y);
      }
      EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[1].data(), rows * 4));
      EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[2].data(), rows * 4));
    }
  }
}

TEST(CpuMatvec, NonFiniteInputsGiveNonFiniteOutputs) {
  ThreadPool pool(2);
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (DType t : matrix_types()) {
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " " << dtype_name(t));
      const int64_t rows = 5, cols = 512;
      const Weights w = random_weights(t, rows, cols, 3);
      for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        auto x = gaussian(cols, 4);
        x[100] = bad;
        std::vector<float> y(rows), want(rows);
        k.matvec(pool, t, w.data(), rows, cols, x.data(), y.data());
        ref::matvec(t, w.data(), rows, cols, x.data(), want.data());
        for (int64_t r = 0; r < rows; ++r) {
          EXPECT_EQ(std::isfinite(y[r]), std::isfinite(want[r])) << "row " << r << " x=" << bad;
          if (std::isnan(want[r])) EXPECT_TRUE(std::isnan(y[r]));
        }
      }
    }
  }
}

TEST(CpuMatmul, MatchesReferenceAndThreadCounts) {
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (DType t : matrix_types()) {
      for (int64_t m : {1, 3, 17, 20}) {
        SCOPED_TRACE(::testing::Message() << isa_name(isa) << " " << dtype_name(t) << " m=" << m);
        const int64_t rows = 13, cols = k_type(t) ? 512 : 160;
        const Weights w = random_weights(t, rows, cols, static_cast<uint32_t>(m));
        const auto X = gaussian(m * cols, 21);
        std::vector<std::vector<float>> outs;
        for (int n : {1, 2, 3}) {
          ThreadPool pool(n);
          Guarded Y(m * rows);
          k.matmul(pool, t, w.data(), rows, cols, X.data(), m, Y.data());
          EXPECT_TRUE(Y.guards_intact());
          outs.push_back(Y.values());
        }
        EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * 4));
        EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[2].data(), outs[0].size() * 4));
        std::vector<int64_t> all(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) all[static_cast<size_t>(r)] = r;
        for (int64_t i = 0; i < m; ++i) {
          SCOPED_TRACE(::testing::Message() << "token " << i);
          expect_dot_rows(w, all, X.data() + i * cols, outs[0].data() + i * rows, isa);
        }
      }
    }
  }
}

// Sorted random subset of [0, n) with about `frac` of the rows.
std::vector<int32_t> subset(int64_t n, double frac, uint32_t seed) {
  std::mt19937 rng(seed);
  std::bernoulli_distribution keep(frac);
  std::vector<int32_t> idx;
  for (int64_t r = 0; r < n; ++r)
    if (keep(rng)) idx.push_back(static_cast<int32_t>(r));
  return idx;
}

// One dispatch for several matrices (q, k, v): each output equals its own matvec bit for bit,
// also with mixed types, odd row counts and any thread count.
TEST(CpuMatvec, MultiEqualsSeparateMatvecs) {
  for (Isa isa : isas()) {
    const Kernels k(isa);
    const int64_t cols = 4160;
    const Weights a = random_weights(DType::Q4_0, 37, cols, 1), b = random_weights(DType::Q8_0, 5, cols, 2),
                  c = random_weights(DType::Q4_0, 300, cols, 3), d = random_weights(DType::F16, 11, cols, 4);
    const auto x = gaussian(cols, 5);
    const Weights* ws[4] = {&a, &b, &c, &d};
    for (int n : {1, 2, 3}) {
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " threads " << n);
      ThreadPool pool(n);
      std::vector<Guarded> outs;
      std::vector<MatvecPart> parts;
      for (const Weights* w : ws) outs.emplace_back(w->rows);
      for (size_t j = 0; j < 4; ++j) parts.push_back({ws[j]->type, ws[j]->data(), ws[j]->rows, outs[j].data()});
      k.matvec_multi(pool, parts.data(), 4, cols, x.data());
      for (size_t j = 0; j < 4; ++j) {
        std::vector<float> want(static_cast<size_t>(ws[j]->rows));
        k.matvec(pool, ws[j]->type, ws[j]->data(), ws[j]->rows, cols, x.data(), want.data());
        EXPECT_TRUE(outs[j].guards_intact()) << j;
        EXPECT_EQ(outs[j].values(), want) << "part " << j;
      }
    }
  }
}

// A token's experts: more parts than q, k and v, each with its own input or the shared one
// (mixed types, so some share a prepared activation and some do not); each output equals its
// own matvec bit for bit.
TEST(CpuMatvec, MultiWithOwnInputsEqualsSeparateMatvecs) {
  for (Isa isa : isas()) {
    const Kernels k(isa);
    const int64_t cols = 768;
    const int n_parts = Kernels::kMaxMatvecParts;
    std::vector<Weights> ws;
    std::vector<std::vector<float>> xs;
    for (int j = 0; j < n_parts; ++j) {
      ws.push_back(random_weights(j % 3 == 2 ? DType::Q8_0 : DType::Q4_0, 16 + 7 * (j % 5), cols, 10 + j));
      xs.push_back(gaussian(cols, 100 + j));
    }
    const auto shared = gaussian(cols, 99);
    for (int n : {1, 2, 3}) {
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " threads " << n);
      ThreadPool pool(n);
      std::vector<Guarded> outs;
      std::vector<MatvecPart> parts;
      for (const Weights& w : ws) outs.emplace_back(w.rows);
      for (int j = 0; j < n_parts; ++j) {
        const auto u = static_cast<size_t>(j);
        parts.push_back({ws[u].type, ws[u].data(), ws[u].rows, outs[u].data(), j % 4 == 0 ? nullptr : xs[u].data()});
      }
      k.matvec_multi(pool, parts.data(), n_parts, cols, shared.data());
      for (int j = 0; j < n_parts; ++j) {
        const auto u = static_cast<size_t>(j);
        std::vector<float> want(static_cast<size_t>(ws[u].rows));
        k.matvec(pool, ws[u].type, ws[u].data(), ws[u].rows, cols, j % 4 == 0 ? shared.data() : xs[u].data(),
                 want.data());
        EXPECT_TRUE(outs[u].guards_intact()) << j;
        EXPECT_EQ(outs[u].values(), want) << "part " << j;
      }
    }
  }
}

// Batch invariance: a token's outputs do not depend on the other tokens of its batch. The
// many-token forms (matmul, and the batched and union sparse forms) give every (row, token)
// the operations of the one-token form in the same order, so they agree bit for bit; batched
// decoding of several sequences relies on this.
TEST(CpuMatmul, EachTokenBitIdenticalToMatvec) {
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (DType t : matrix_types()) {
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " " << dtype_name(t));
      const int64_t rows = 37, cols = k_type(t) ? 512 : 4160, m = 6;
      const Weights w = random_weights(t, rows, cols, 5);
      const auto X = gaussian(m * cols, 6);
      ThreadPool pool(2);
      std::vector<float> Y(static_cast<size_t>(m * rows)), y(static_cast<size_t>(rows));
      k.matmul(pool, t, w.data(), rows, cols, X.data(), m, Y.data());
      std::vector<int32_t> idx;
      std::vector<int64_t> offsets{0};
      for (int64_t i = 0; i < m; ++i) {
        const auto s = subset(rows, 0.5, static_cast<uint32_t>(60 + i));
        idx.insert(idx.end(), s.begin(), s.end());
        offsets.push_back(static_cast<int64_t>(idx.size()));
      }
      std::vector<float> Yb(static_cast<size_t>(m * rows), 0.0f), yr(static_cast<size_t>(rows), 0.0f);
      k.matvec_rows_batch(pool, t, w.data(), rows, cols, idx.data(), offsets.data(), X.data(), m, Yb.data());
      for (int64_t i = 0; i < m; ++i) {
        k.matvec(pool, t, w.data(), rows, cols, X.data() + i * cols, y.data());
        EXPECT_EQ(0, std::memcmp(y.data(), Y.data() + i * rows, rows * 4)) << "matmul token " << i;
        k.matvec_rows(pool, t, w.data(), cols, idx.data() + offsets[i], offsets[i + 1] - offsets[i],
                    X.data() + i * cols, yr.data());
        for (int64_t k = offsets[i]; k < offsets[i + 1]; ++k) {
          const int32_t r = idx[static_cast<size_t>(k)];
          EXPECT_EQ(0, std::memcmp(&yr[r], &Yb[i * rows + r], 4)) << "batched rows, token " << i << " row " << r;
        }
      }
    }
  }
}

TEST(CpuMatvecRows, WritesOnlyListedRows) {
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (DType t : matrix_types()) {
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " " << dtype_name(t));
      const int64_t rows = 97, cols = k_type(t) ? 512 : 4128;
      const Weights w = random_weights(t, rows, cols, 31);
      const auto x = gaussian(cols, 32);
      auto idx = subset(rows, 0.3, 33);
      std::swap(idx[1], idx[4]);  // order must not matter for correctness
      std::vector<std::vector<float>> outs;
      for (int n : {1, 2, 3}) {
        ThreadPool pool(n);
        Guarded y(rows, -7.0f);
        k.matvec_rows(pool, t, w.data(), cols, idx.data(), static_cast<int64_t>(idx.size()), x.data(), y.data());
        EXPECT_TRUE(y.guards_intact());
        outs.push_back(y.values());
      }
      EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[1].data(), rows * 4));
      EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[2].data(), rows * 4));
      std::vector<int64_t> listed(idx.begin(), idx.end());
      expect_dot_rows(w, listed, x.data(), outs[0].data(), isa);
      for (int64_t r = 0; r < rows; ++r)
        if (std::find(idx.begin(), idx.end(), r) == idx.end()) EXPECT_EQ(outs[0][r], -7.0f) << r;
    }
  }
}

TEST(CpuMatvecRows, BatchAndUnionMatchPerTokenReference) {
  for (Isa isa : isas()) {
    const Kernels k(isa);
    for (DType t : matrix_types()) {
      for (int64_t m : {1, 5, 70}) {  // 70: more tokens than one mask word
        SCOPED_TRACE(::testing::Message() << isa_name(isa) << " " << dtype_name(t) << " m=" << m);
        const int64_t n_rows = 57, cols = k_type(t) ? 256 : 96;
        const Weights w = random_weights(t, n_rows, cols, 41);
        const auto X = gaussian(m * cols, 42);
        std::vector<int32_t> idx;
        std::vector<int64_t> offsets{0};
        for (int64_t i = 0; i < m; ++i) {
          const auto s = subset(n_rows, 0.25, static_cast<uint32_t>(100 + i));
          idx.insert(idx.end(), s.begin(), s.end());
          offsets.push_back(static_cast<int64_t>(idx.size()));
        }
        const auto uni = subset(n_rows, 0.4, 7);
        std::vector<std::vector<float>> batch_outs, union_outs;
        for (int n : {1, 2, 3}) {
          ThreadPool pool(n);
          Guarded Yb(m * n_rows, -3.0f), Yu(m * n_rows, -3.0f);
          k.matvec_rows_batch(pool, t, w.data(), n_rows, cols, idx.data(), offsets.data(), X.data(), m, Yb.data());
          k.matvec_rows_union(pool, t, w.data(), n_rows, cols, uni.data(), static_cast<int64_t>(uni.size()),
                            X.data(), m, Yu.data());
          EXPECT_TRUE(Yb.guards_intact());
          EXPECT_TRUE(Yu.guards_intact());
          batch_outs.push_back(Yb.values());
          union_outs.push_back(Yu.values());
        }
        for (int k : {1, 2}) {
          EXPECT_EQ(0, std::memcmp(batch_outs[0].data(), batch_outs[k].data(), batch_outs[0].size() * 4));
          EXPECT_EQ(0, std::memcmp(union_outs[0].data(), union_outs[k].data(), union_outs[0].size() * 4));
        }
        for (int64_t i = 0; i < m; ++i) {
          const float* x = X.data() + i * cols;
          std::vector<int64_t> mine(idx.begin() + offsets[i], idx.begin() + offsets[i + 1]);
          expect_dot_rows(w, mine, x, batch_outs[0].data() + i * n_rows, isa);
          expect_dot_rows(w, std::vector<int64_t>(uni.begin(), uni.end()), x, union_outs[0].data() + i * n_rows, isa);
          for (int64_t r = 0; r < n_rows; ++r) {
            if (std::find(mine.begin(), mine.end(), r) == mine.end())
              EXPECT_EQ(batch_outs[0][i * n_rows + r], -3.0f);
            if (std::find(uni.begin(), uni.end(), r) == uni.end())
              EXPECT_EQ(union_outs[0][i * n_rows + r], -3.0f);
          }
        }
      }
    }
  }
}

TEST(CpuMatvec, SupportsTheDocumentedTypes) {
  for (DType t : matrix_types()) EXPECT_TRUE(supports(t)) << dtype_name(t);
  EXPECT_FALSE(supports(DType::Q8_K));
  EXPECT_FALSE(supports(DType::I32));
}

// The NEON tables leave the R16 leaves and Q4_0_SPLIT to the scalar ones, so no layout may
// route their products there: the dense products and the axpy of NEON read the file layouts.
TEST(CpuMatvec, NeonReadsTheFileLayouts) {
  for (Isa isa : {Isa::Neon, Isa::NeonDot}) {
    for (DType t : matrix_types()) {
      EXPECT_EQ(dot_layout(isa, t, 4096), t) << isa_name(isa) << " " << dtype_name(t);
      EXPECT_EQ(axpy_layout(isa, t), t) << isa_name(isa) << " " << dtype_name(t);
    }
  }
}

// Every ISA's kernel table sets every entry (the tables are filled by name; an entry left out
// would be null) and names its own ISA.
TEST(CpuKernels, EveryTableIsComplete) {
  for (Isa isa : isas()) {
    const detail::KernelTable& t = detail::table_for(isa);
    SCOPED_TRACE(std::string(isa_name(isa)));
    EXPECT_EQ(t.isa, isa);
    const std::pair<const char*, bool> set[] = {
        {"act_bytes", t.act_bytes != nullptr},   {"prepare_act", t.prepare_act != nullptr},
        {"dot", t.dot != nullptr},               {"axpy", t.axpy != nullptr},
        {"rmsnorm", t.rmsnorm != nullptr},       {"layernorm", t.layernorm != nullptr},
        {"softmax", t.softmax != nullptr},       {"silu", t.silu != nullptr},
        {"gelu", t.gelu != nullptr},             {"relu", t.relu != nullptr},
        {"relu_squared", t.relu_squared != nullptr}, {"add", t.add != nullptr},
        {"mul", t.mul != nullptr},               {"swiglu_oai", t.swiglu_oai != nullptr},
        {"rope", t.rope != nullptr},             {"attn_head", t.attn_head != nullptr},
        {"to_f16", t.to_f16 != nullptr},         {"decode_kv_row", t.decode_kv_row != nullptr},
        {"r16_prepare", t.r16_prepare != nullptr}, {"r16_dot", t.r16_dot != nullptr}};
    for (const auto& [name, ok] : set) EXPECT_TRUE(ok) << name;
  }
}

}  // namespace
}  // namespace pi::cpu::test
