// Sampler: greedy, top-k/top-p/min-p truncation, temperature, penalties, banned tokens,
// seeded reproducibility, and parameter validation.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "runtime/sampler.h"

namespace {

using pi::SamplingParams;
using pi::runtime::Sampler;

SamplingParams plain(float temp) {
  SamplingParams p;
  p.temperature = temp;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  p.seed = 42;
  return p;
}

std::map<int32_t, int> histogram(Sampler& s, const std::vector<float>& logits, int n) {
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) h[s.sample(logits)]++;
  return h;
}

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  Sampler s(plain(0.0f));
  EXPECT_EQ(s.sample(std::vector<float>{0.1f, 2.0f, -1.0f, 1.9f}), 1);
  EXPECT_EQ(s.sample(std::vector<float>{3.0f, 1.0f, 3.0f}), 0);
  EXPECT_EQ(s.sample(std::vector<float>{NAN, 1.0f, 0.5f}), 1);
}

TEST(Sampler, TopKRestrictsToKBest) {
  SamplingParams p = plain(1.0f);
  p.top_k = 2;
  Sampler s(p);
  auto h = histogram(s, {1.0f, 3.0f, 2.9f, 0.5f, 2.0f}, 2000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_GT(h[1], 0);
  EXPECT_GT(h[2], 0);
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingMass) {
  // Probabilities (T=1) 0.5, 0.3, 0.2 after softmax of log-probabilities.
  const std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SamplingParams p = plain(1.0f);
  p.top_p = 0.75f;  // 0.5 < 0.75 <= 0.8: tokens 0 and 1
  Sampler s(p);
  auto h = histogram(s, l, 3000);
  EXPECT_EQ(h.count(2), 0u);
  EXPECT_NEAR(h[0] / 3000.0, 0.5 / 0.8, 0.04);
  p.top_p = 0.4f;  // the first token alone reaches it
  Sampler s1(p);
  EXPECT_EQ(histogram(s1, l, 200).size(), 1u);
}

TEST(Sampler, MinPDropsTokensBelowFractionOfBest) {
  const std::vector<float> l = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  SamplingParams p = plain(1.0f);
  p.min_p = 0.2f;  // threshold 0.12: drops token 2
  Sampler s(p);
  auto h = histogram(s, l, 3000);
  EXPECT_EQ(h.count(2), 0u);
  EXPECT_NEAR(h[0] / 3000.0, 2.0 / 3.0, 0.04);
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  const std::vector<float> l = {1.0f, 0.0f};
  // p0 = e^(1/T) / (e^(1/T) + 1)
  Sampler cold(plain(0.25f));
  Sampler hot(plain(4.0f));
  auto hc = histogram(cold, l, 4000), hh = histogram(hot, l, 4000);
  EXPECT_NEAR(hc[0] / 4000.0, std::exp(4.0) / (std::exp(4.0) + 1), 0.03);
  EXPECT_NEAR(hh[0] / 4000.0, std::exp(0.25) / (std::exp(0.25) + 1), 0.03);
}

TEST(Sampler, SameSeedSameTokensAndResetReseeds) {
  const std::vector<float> l = {0.3f, 0.1f, 0.2f, 0.25f, 0.0f, 0.15f};
  Sampler a(plain(1.0f)), b(plain(1.0f));
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 50; ++i) {
    ta.push_back(a.sample(l));
    tb.push_back(b.sample(l));
  }
  EXPECT_EQ(ta, tb);
  a.reset();
  std::vector<int32_t> again;
  for (int i = 0; i < 50; ++i) again.push_back(a.sample(l));
  EXPECT_EQ(again, ta);
  SamplingParams other = plain(1.0f);
  other.seed = 43;
  Sampler c(other);
  std::vector<int32_t> tc;
  for (int i = 0; i < 50; ++i) tc.push_back(c.sample(l));
  EXPECT_NE(tc, ta);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveMultipliesNegative) {
  SamplingParams p = plain(0.0f);
  p.repeat_penalty = 2.0f;
  Sampler s(p);
  // Token 0 leads (3.0) until it is penalised to 1.5 < 2.0.
  const std::vector<float> l = {3.0f, 2.0f, -1.0f};
  EXPECT_EQ(s.sample(l), 0);
  s.accept(0);
  EXPECT_EQ(s.sample(l), 1);
  // Negative logits get more negative: -0.5 * 2 = -1.0 < -0.9.
  Sampler n(p);
  n.accept(0);
  EXPECT_EQ(n.sample(std::vector<float>{-0.5f, -0.9f}), 1);
}

TEST(Sampler, PenaltyWindowForgetsOldTokens) {
  SamplingParams p = plain(0.0f);
  p.repeat_penalty = 10.0f;
  p.repeat_last_n = 2;
  Sampler s(p);
  const std::vector<float> l = {3.0f, 2.0f, 1.0f, 0.0f};
  s.accept(0);
  EXPECT_EQ(s.sample(l), 1);
  s.accept(5);
  s.accept(6);  // token 0 has left the 2-token window
  EXPECT_EQ(s.sample(l), 0);

  p.repeat_last_n = 0;  // penalties off
  Sampler off(p);
  off.accept(0);
  EXPECT_EQ(off.sample(l), 0);
}

TEST(Sampler, PresenceAndFrequencyPenalties) {
  SamplingParams p = plain(0.0f);
  p.frequency_penalty = 0.4f;
  Sampler f(p);
  const std::vector<float> l = {2.0f, 1.5f};
  f.accept(0);
  EXPECT_EQ(f.sample(l), 0);  // 2.0 - 0.4 = 1.6 > 1.5
  f.accept(0);
  EXPECT_EQ(f.sample(l), 1);  // 2.0 - 0.8 = 1.2 < 1.5

  p.frequency_penalty = 0.0f;
  p.presence_penalty = 0.6f;
  Sampler pr(p);
  pr.accept(0);
  EXPECT_EQ(pr.sample(l), 1);  // 2.0 - 0.6 = 1.4 < 1.5, once however often seen
}

TEST(Sampler, BannedTokensAreNeverSampled) {
  Sampler g(plain(0.0f));
  g.set_banned({1});
  EXPECT_EQ(g.sample(std::vector<float>{0.0f, 5.0f, 1.0f}), 2);
  Sampler r(plain(1.0f));
  r.set_banned({0, 2});
  auto h = histogram(r, {1.0f, 0.0f, 1.0f, -1.0f}, 500);
  EXPECT_EQ(h.count(0), 0u);
  EXPECT_EQ(h.count(2), 0u);
}

TEST(Sampler, Validation) {
  SamplingParams p;
  EXPECT_TRUE(pi::validate_sampling(p).ok());
  auto bad = [](auto edit) {
    SamplingParams q;
    edit(q);
    return pi::validate_sampling(q);
  };
  EXPECT_FALSE(bad([](SamplingParams& q) { q.temperature = -0.1f; }).ok());
  EXPECT_FALSE(bad([](SamplingParams& q) { q.top_p = 0.0f; }).ok());
  EXPECT_FALSE(bad([](SamplingParams& q) { q.top_p = 1.5f; }).ok());
  EXPECT_FALSE(bad([](SamplingParams& q) { q.min_p = -0.1f; }).ok());
  EXPECT_FALSE(bad([](SamplingParams& q) { q.repeat_penalty = 0.0f; }).ok());
  EXPECT_FALSE(bad([](SamplingParams& q) { q.repeat_last_n = -2; }).ok());
  EXPECT_FALSE(bad([](SamplingParams& q) { q.presence_penalty = NAN; }).ok());
  EXPECT_NE(bad([](SamplingParams& q) { q.top_p = 2.0f; }).error().message.find("top-p"),
            std::string::npos);
}

}  // namespace
