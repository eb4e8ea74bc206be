// The prompt-batch cost model (sparse/batch_cost.h): the chosen path never costs more than
// the per-token lists, which never cost more than running the tokens one by one; the scratch
// comes back zeroed; union sizes are right; full masks go dense, identical masks to the union.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

#include "sparse/batch_cost.h"

namespace {

using namespace pi::sparse;

struct Csr {
  std::vector<int32_t> idx;
  std::vector<int64_t> off{0};
  int64_t m = 0;
  void add(const std::vector<int32_t>& rows) {
    idx.insert(idx.end(), rows.begin(), rows.end());
    off.push_back(static_cast<int64_t>(idx.size()));
    ++m;
  }
};

Csr random_lists(int64_t m, int32_t n_rows, double p, uint32_t seed) {
  std::mt19937 rng(seed);
  std::bernoulli_distribution keep(p);
  Csr c;
  for (int64_t i = 0; i < m; ++i) {
    std::vector<int32_t> rows;
    for (int32_t r = 0; r < n_rows; ++r)
      if (keep(rng)) rows.push_back(r);
    c.add(rows);
  }
  return c;
}

TEST(BatchCost, NeverAboveOneByOneAndScratchStaysZero) {
  const int32_t n = 1000;
  std::vector<int32_t> counts(n, 0);
  for (pi::DType t : {pi::DType::F32, pi::DType::F16, pi::DType::Q4_0}) {
    for (int64_t m : {1, 2, 7, 64, 65, 200}) {
      for (double p : {0.01, 0.1, 0.5, 1.0}) {
        const Csr c = random_lists(m, n, p, static_cast<uint32_t>(m * 100 + p * 10));
        const PathCosts pc =
            batch_costs(default_cost_params(t), n, 144, c.idx.data(), c.off.data(), c.m, counts.data());
        const double best = pc.best == RowsPath::Lists   ? pc.lists
                            : pc.best == RowsPath::Union ? pc.union_rows
                                                         : pc.dense;
        // The pick is the cheapest up to the model's rounding margin (1e-9 relative).
        EXPECT_LE(best, pc.lists * (1 + 1e-8));
        EXPECT_LE(best, pc.union_rows * (1 + 1e-8));
        EXPECT_LE(best, pc.dense * (1 + 1e-8));
        EXPECT_LE(pc.lists, pc.one_by_one + 1e-6) << "m=" << m << " p=" << p;
        for (int32_t v : counts) ASSERT_EQ(v, 0);
        std::set<int32_t> u(c.idx.begin(), c.idx.end());
        EXPECT_EQ(pc.union_size, static_cast<int64_t>(u.size()));
        int64_t group_rows = 0;
        for (int64_t g0 = 0; g0 < m; g0 += 64) {
          const int64_t g1 = std::min<int64_t>(m, g0 + 64);
          std::set<int32_t> ug(c.idx.begin() + c.off[g0], c.idx.begin() + c.off[g1]);
          group_rows += static_cast<int64_t>(ug.size());
        }
        EXPECT_EQ(pc.group_rows, group_rows);
        EXPECT_EQ(group_union_rows(c.idx.data(), c.off.data(), c.m, counts.data()), group_rows);
      }
    }
  }
}

TEST(BatchCost, FullMasksGoDenseSparseMasksUseLists) {
  const int32_t n = 512;
  std::vector<int32_t> counts(n, 0);
  std::vector<int32_t> all(n);
  for (int32_t r = 0; r < n; ++r) all[r] = r;
  for (int64_t m : {1, 4, 100}) {
    Csr full;
    for (int64_t i = 0; i < m; ++i) full.add(all);
    EXPECT_EQ(batch_costs(default_cost_params(pi::DType::Q4_0), n, 144, full.idx.data(),
                          full.off.data(), full.m, counts.data())
                  .best,
              RowsPath::Dense)
        << "m=" << m;
  }
  const Csr sparse = random_lists(4, n, 0.1, 3);
  EXPECT_EQ(batch_costs(default_cost_params(pi::DType::Q4_0), n, 144, sparse.idx.data(),
                        sparse.off.data(), sparse.m, counts.data())
                .best,
            RowsPath::Lists);
}

TEST(BatchCost, IdenticalMasksOfManyTokensUseTheUnion) {
  const int32_t n = 1000;
  std::vector<int32_t> counts(n, 0);
  std::vector<int32_t> rows;
  for (int32_t r = 0; r < n; r += 7) rows.push_back(r);
  Csr c;
  for (int i = 0; i < 48; ++i) c.add(rows);
  const PathCosts pc = batch_costs(default_cost_params(pi::DType::Q4_0), n, 144, c.idx.data(),
                                   c.off.data(), c.m, counts.data());
  EXPECT_EQ(pc.best, RowsPath::Union);
  EXPECT_EQ(pc.union_size, static_cast<int64_t>(rows.size()));
}

}  // namespace
