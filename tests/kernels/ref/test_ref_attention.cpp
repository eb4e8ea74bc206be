// Reference attention against a softmax computed directly in the test, with grouped-query
// head mapping, a single-cell cache, an empty cache and NaN propagation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/ref/ref.h"
#include "tensor/quant.h"

namespace pi::ref {
namespace {

struct Cache {
  int64_t n_ctx, n_kv_head, head_dim;
  std::vector<uint16_t> k, v;  // f16 [n_ctx, n_kv_head, head_dim]

  float key(int64_t t, int64_t g, int64_t d) const { return f16_to_f32(k[index(t, g, d)]); }
  float value(int64_t t, int64_t g, int64_t d) const { return f16_to_f32(v[index(t, g, d)]); }
  size_t index(int64_t t, int64_t g, int64_t d) const {
    return static_cast<size_t>((t * n_kv_head + g) * head_dim + d);
  }
};

Cache random_cache(int64_t n_ctx, int64_t n_kv_head, int64_t head_dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Cache c{n_ctx, n_kv_head, head_dim, {}, {}};
  const size_t n = static_cast<size_t>(n_ctx * n_kv_head * head_dim);
  for (size_t i = 0; i < n; ++i) {
    c.k.push_back(f32_to_f16(normal(rng)));
    c.v.push_back(f32_to_f16(normal(rng)));
  }
  return c;
}

TEST(RefAttention, GroupedQueryMatchesDirectSoftmax) {
  const int64_t n_head = 6, n_kv_head = 2, head_dim = 8, n_ctx = 7;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const Cache c = random_cache(n_ctx, n_kv_head, head_dim, 1);
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(n_head * head_dim));
  for (auto& e : q) e = normal(rng);

  std::vector<float> out(q.size());
  attention(q.data(), c.k.data(), c.v.data(), n_ctx, n_head, n_kv_head, head_dim, scale,
            out.data());

  for (int64_t h = 0; h < n_head; ++h) {
    const int64_t g = h / 3;  // 3 query heads share each kv head
    std::vector<double> w(static_cast<size_t>(n_ctx));
    double z = 0.0;
    for (int64_t t = 0; t < n_ctx; ++t) {
      double s = 0.0;
      for (int64_t d = 0; d < head_dim; ++d) s += double{q[h * head_dim + d]} * c.key(t, g, d);
      w[static_cast<size_t>(t)] = std::exp(s * scale);
      z += w[static_cast<size_t>(t)];
    }
    for (int64_t d = 0; d < head_dim; ++d) {
      double want = 0.0;
      for (int64_t t = 0; t < n_ctx; ++t) want += w[static_cast<size_t>(t)] / z * c.value(t, g, d);
      EXPECT_NEAR(out[h * head_dim + d], want, 1e-6 * (1 + std::fabs(want)))
          << "head " << h << " dim " << d;
    }
  }
}

TEST(RefAttention, SingleCellReturnsItsValue) {
  const int64_t n_head = 4, n_kv_head = 4, head_dim = 16;
  const Cache c = random_cache(1, n_kv_head, head_dim, 3);
  std::vector<float> q(n_head * head_dim, 0.3f), out(q.size());
  attention(q.data(), c.k.data(), c.v.data(), 1, n_head, n_kv_head, head_dim, 0.25f, out.data());
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t d = 0; d < head_dim; ++d) EXPECT_EQ(out[h * head_dim + d], c.value(0, h, d));
  }
}

TEST(RefAttention, EqualScoresAverageTheValues) {
  // Zero query: every score is 0, so the output is the mean of the values.
  const int64_t n_head = 2, n_kv_head = 1, head_dim = 4, n_ctx = 3;
  Cache c{n_ctx, n_kv_head, head_dim, {}, {}};
  for (int64_t i = 0; i < n_ctx * head_dim; ++i) {
    c.k.push_back(f32_to_f16(1.0f));
    c.v.push_back(f32_to_f16(static_cast<float>(i % 7)));
  }
  std::vector<float> q(n_head * head_dim, 0.0f), out(q.size());
  attention(q.data(), c.k.data(), c.v.data(), n_ctx, n_head, n_kv_head, head_dim, 1.0f, out.data());
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t d = 0; d < head_dim; ++d) {
      const double mean = (c.value(0, 0, d) + c.value(1, 0, d) + c.value(2, 0, d)) / 3.0;
      EXPECT_FLOAT_EQ(out[h * head_dim + d], static_cast<float>(mean));
    }
  }
}

TEST(RefAttention, EmptyCacheGivesZeros) {
  std::vector<float> q(8, 1.0f), out(8, 5.0f);
  attention(q.data(), nullptr, nullptr, 0, 2, 1, 4, 0.5f, out.data());
  EXPECT_EQ(out, std::vector<float>(8, 0.0f));
}

TEST(RefAttention, NaNInKeysPoisonsOnlyHeadsThatReadIt) {
  const int64_t n_head = 4, n_kv_head = 2, head_dim = 4, n_ctx = 3;
  Cache c = random_cache(n_ctx, n_kv_head, head_dim, 4);
  c.k[c.index(1, 1, 2)] = 0x7e00;  // NaN in kv head 1, read by query heads 2 and 3
  std::vector<float> q(n_head * head_dim, 0.5f), out(q.size());
  attention(q.data(), c.k.data(), c.v.data(), n_ctx, n_head, n_kv_head, head_dim, 0.5f, out.data());
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t d = 0; d < head_dim; ++d) {
      EXPECT_EQ(std::isnan(out[h * head_dim + d]), h >= 2) << h << "," << d;
    }
  }
}

// Attending a list of cells equals attending a cache holding those cells contiguously.
TEST(RefAttention, ListedCellsEqualGatheredCache) {
  const int64_t n_head = 4, n_kv_head = 2, head_dim = 8, n_ctx = 9;
  const Cache c = random_cache(n_ctx, n_kv_head, head_dim, 5);
  const std::vector<int32_t> cells = {7, 2, 8, 0, 5};
  Cache g{static_cast<int64_t>(cells.size()), n_kv_head, head_dim, {}, {}};
  const int64_t cell = n_kv_head * head_dim;
  for (int32_t t : cells) {
    g.k.insert(g.k.end(), c.k.begin() + t * cell, c.k.begin() + (t + 1) * cell);
    g.v.insert(g.v.end(), c.v.begin() + t * cell, c.v.begin() + (t + 1) * cell);
  }
  std::vector<float> q(n_head * head_dim);
  for (size_t i = 0; i < q.size(); ++i) q[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  std::vector<float> listed(q.size()), gathered(q.size());
  attention_cells(q.data(), c.k.data(), c.v.data(), cells.data(), g.n_ctx, n_head, n_kv_head,
                  head_dim, 0.35f, listed.data());
  attention(q.data(), g.k.data(), g.v.data(), g.n_ctx, n_head, n_kv_head, head_dim, 0.35f,
            gathered.data());
  EXPECT_EQ(listed, gathered);
}

}  // namespace
}  // namespace pi::ref
