// The expert cache's scoring (sparse/expert_cache.h) on hand-made traces whose hits can be
// counted by hand, on synthetic traces at the two extremes (a few experts chosen by most
// tokens, and tokens that keep their predecessor's experts), and its errors.
#include <gtest/gtest.h>

#include "sparse/expert_cache.h"

namespace pi::sparse {
namespace {

RoutingTrace one_layer(int64_t n_expert, int64_t k, std::vector<int32_t> ids) {
  RoutingTrace t;
  t.n_expert = n_expert;
  t.n_expert_used = k;
  t.layers.push_back(std::move(ids));
  return t;
}

TEST(ExpertCache, HitsCountedByHand) {
  // First half (seen): 0 1 0 1; scored: 2 2 2 2.
  const RoutingTrace t = one_layer(4, 1, {0, 1, 0, 1, 2, 2, 2, 2});
  auto st = score_cache(t, CachePolicy::Static, 1);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(st->hit_rate, 0.0);  // expert 0 (a tie with 1, the lower id) is never chosen again
  EXPECT_EQ(st->misses_per_token, 1.0);
  EXPECT_EQ(st->uploads_per_token, 0.0);
  auto lru = score_cache(t, CachePolicy::Lru, 1);
  ASSERT_TRUE(lru.ok());
  EXPECT_DOUBLE_EQ(lru->hit_rate, 0.75);  // 2 misses once, is uploaded, then hits
  EXPECT_DOUBLE_EQ(lru->uploads_per_token, 0.25);
  // Two slots: one pinned (expert 0), one recent.
  auto both = score_cache(t, CachePolicy::StaticLru, 2);
  ASSERT_TRUE(both.ok());
  EXPECT_DOUBLE_EQ(both->hit_rate, 0.75);
  // Two experts per token: the token's own experts are never evicted for each other.
  const RoutingTrace two = one_layer(4, 2, {0, 1, 0, 1, 2, 3, 2, 3});
  auto l2 = score_cache(two, CachePolicy::Lru, 2);
  ASSERT_TRUE(l2.ok());
  EXPECT_DOUBLE_EQ(l2->hit_rate, 0.5);
  EXPECT_DOUBLE_EQ(l2->uploads_per_token, 1.0);
  EXPECT_DOUBLE_EQ(l2->misses_per_token, 1.0);
}

TEST(ExpertCache, SkewFavoursTheStaticSetReuseFavoursTheCache) {
  const RoutingTrace skewed = synthetic_trace(4, 64, 4, 4000, 1.6, 0.0, 1);
  const RoutingTrace sticky = synthetic_trace(4, 64, 4, 4000, 0.0, 0.8, 2);
  const TraceShape a = trace_shape(skewed), b = trace_shape(sticky);
  EXPECT_GT(a.top_share, 0.3);
  EXPECT_LT(b.top_share, 0.15);
  EXPECT_GT(b.reuse, 0.75);
  EXPECT_LT(a.reuse, b.reuse);
  for (int64_t slots : {8, 16}) {
    auto s_static = score_cache(skewed, CachePolicy::Static, slots);
    auto s_lru = score_cache(skewed, CachePolicy::Lru, slots);
    ASSERT_TRUE(s_static.ok() && s_lru.ok());
    EXPECT_GT(s_static->hit_rate, s_lru->hit_rate) << slots;
    EXPECT_EQ(s_static->uploads_per_token, 0.0);
    auto r_static = score_cache(sticky, CachePolicy::Static, slots);
    auto r_lru = score_cache(sticky, CachePolicy::Lru, slots);
    ASSERT_TRUE(r_static.ok() && r_lru.ok());
    EXPECT_GT(r_lru->hit_rate, r_static->hit_rate + 0.3) << slots;
    // Every miss of the cache is an upload.
    EXPECT_DOUBLE_EQ(r_lru->uploads_per_token, r_lru->misses_per_token);
  }
  // Uniform and independent: both near slots / n_expert; the shape near k / n_expert.
  const RoutingTrace flat = synthetic_trace(2, 32, 2, 6000, 0.0, 0.0, 3);
  const TraceShape f = trace_shape(flat);
  EXPECT_NEAR(f.reuse, 2.0 / 32, 0.02);
  for (CachePolicy p : {CachePolicy::Static, CachePolicy::Lru, CachePolicy::StaticLru}) {
    auto s = score_cache(flat, p, 8);
    ASSERT_TRUE(s.ok());
    EXPECT_NEAR(s->hit_rate, 0.25, 0.04) << cache_policy_name(p);
  }
  // Deterministic for a seed.
  EXPECT_EQ(synthetic_trace(2, 16, 2, 100, 1.0, 0.5, 9).layers, synthetic_trace(2, 16, 2, 100, 1.0, 0.5, 9).layers);
}

TEST(ExpertCache, BadTracesAndSlotsAreErrors) {
  RoutingTrace t = one_layer(4, 1, {0, 1, 5, 1});
  auto r = score_cache(t, CachePolicy::Lru, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("expert 5 of 4"), std::string::npos) << r.error().message;
  t = one_layer(4, 1, {0, 1, 2, 1});
  t.layers.push_back({0, 1});
  r = score_cache(t, CachePolicy::Lru, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("layer 1"), std::string::npos) << r.error().message;
  t.layers.pop_back();
  for (int64_t slots : {0, 5}) {
    r = score_cache(t, CachePolicy::Static, slots);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("slots"), std::string::npos) << r.error().message;
  }
  r = score_cache(one_layer(4, 1, {}), CachePolicy::Lru, 1);
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace pi::sparse
