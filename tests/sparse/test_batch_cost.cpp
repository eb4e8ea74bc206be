// The prompt-batch cost model (sparse/batch_cost.h): the chosen path never costs more than
// running the tokens one by one; the scratch comes back zeroed; union sizes are right; one
// token runs alone; f32 weights batch shared masks (lists, union or dense as sharing grows),
// Q4_0 weights run token by token (the measured kernels' batched dot is no cheaper).
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

PathCosts costs(pi::DType t, int32_t n, const Csr& c, std::vector<int32_t>& counts) {
  return batch_costs(default_cost_params(t), n, c.idx.data(), c.off.data(), c.m, counts.data());
}

TEST(BatchCost, NeverAboveOneByOneAndScratchStaysZero) {
  const int32_t n = 1000;
  std::vector<int32_t> counts(n, 0);
  for (pi::DType t : {pi::DType::F32, pi::DType::F16, pi::DType::Q8_0, pi::DType::Q4_0}) {
    for (int64_t m : {1, 2, 7, 64, 65, 200}) {
      for (double p : {0.01, 0.1, 0.5, 1.0}) {
        const Csr c = random_lists(m, n, p, static_cast<uint32_t>(m * 100 + p * 10));
        const PathCosts pc = costs(t, n, c, counts);
        const double by_path[] = {pc.per_token, pc.lists, pc.union_rows, pc.dense};
        const double best = by_path[static_cast<int>(pc.best)];
        for (double v : by_path) EXPECT_LE(best, v * (1 + 1e-8));  // cheapest, up to the tie margin
        EXPECT_LE(best, pc.per_token);  // never above the tokens one by one
        EXPECT_EQ(pc.per_token, static_cast<double>(c.idx.size()));
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
        if (m == 1) EXPECT_EQ(pc.best, RowsPath::PerToken);
      }
    }
  }
}

TEST(BatchCost, PathsFollowSharingAndDensity) {
  const int32_t n = 1000;
  std::vector<int32_t> counts(n, 0);
  // 10% masks of a few tokens share few rows: one by one.
  EXPECT_EQ(costs(pi::DType::Q4_0, n, random_lists(4, n, 0.1, 3), counts).best, RowsPath::PerToken);
  // 64 tokens of f32 weights with 10% masks share rows: the batched lists. The same rows
  // for all of 48 tokens: their union (every computed entry is listed). Q4_0's batched dots
  // cost more than its streamed rows on the measured machine: token by token in both cases.
  const Csr shared10 = random_lists(64, n, 0.1, 5);
  EXPECT_EQ(costs(pi::DType::F32, n, shared10, counts).best, RowsPath::Lists);
  EXPECT_EQ(costs(pi::DType::Q4_0, n, shared10, counts).best, RowsPath::PerToken);
  std::vector<int32_t> rows;
  for (int32_t r = 0; r < n; r += 7) rows.push_back(r);
  Csr same;
  for (int i = 0; i < 48; ++i) same.add(rows);
  EXPECT_EQ(costs(pi::DType::F32, n, same, counts).best, RowsPath::Union);
  EXPECT_EQ(costs(pi::DType::Q4_0, n, same, counts).best, RowsPath::PerToken);
  // Every row for 32 tokens of f32 weights: the dense product, cheaper than the union.
  std::vector<int32_t> all(n);
  for (int32_t r = 0; r < n; ++r) all[r] = r;
  Csr full;
  for (int i = 0; i < 32; ++i) full.add(all);
  const PathCosts f = costs(pi::DType::F32, n, full, counts);
  EXPECT_EQ(f.best, RowsPath::Dense);
  EXPECT_LT(f.dense, f.union_rows);
}

}  // namespace
