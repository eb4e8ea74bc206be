// Embeddings (Session::embed) against the float64 NumPy forward pass: reference_forward.py
// --hidden gives the final hidden states after the output norm, pooled here in double (mean,
// last, first token) and compared with ours on tiny random models of every architecture.
//
// Bound: the cosine of ours and the reference's pooled vector is >= 0.9999, and without
// normalisation the relative error of the vector is <= 1e-3. Both sides use the same stored
// weights (f32, f16); what differs is the engine's f16 KV cache (relative rounding 2^-11 per
// key and value, about 2e-4 on the hidden states as on the logits, test_reference.cpp) and f32
// arithmetic, so the cosine misses 1 by about (2e-4)^2 / 2, far inside 1e-4.
// Also: unit norm with normalisation, several inputs in one call equal one at a time, other
// sequences untouched, 1 and 2 threads bit-identical, and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "model/reference_harness.h"
#include "powerinfer/engine.h"

namespace {

using namespace pi;
using pi::testing::TinyPyModel;

TinyPyModel py(const char* arch, const char* fmt, bool pwri, int kv_heads) {
  TinyPyModel m;
  m.arch = arch;
  m.outtype = fmt;
  m.pwri = pwri;
  m.kv_heads = kv_heads;
  return m;
}

std::unique_ptr<Engine> load(const TinyPyModel& spec) {
  auto path = pi::testing::make_py_model(spec);
  EXPECT_TRUE(path.ok()) << path.error().message;
  if (!path.ok()) return nullptr;
  auto e = Engine::load(*path);
  EXPECT_TRUE(e.ok()) << e.error().message;
  return e.ok() ? std::move(*e) : nullptr;
}

std::unique_ptr<Session> session(const Engine& e, int n_threads = 2, int n_seq = 1,
                                 int64_t n_ctx = 128) {
  SessionOptions o;
  o.n_ctx = n_ctx;
  o.n_batch = 8;  // inputs longer than a batch take several forward passes
  o.n_threads = n_threads;
  o.n_seq_max = n_seq;
  o.sparse.dense = true;  // PowerInfer files too: the reference is the dense forward pass
  auto s = Session::create(e, o);
  EXPECT_TRUE(s.ok()) << s.error().message;
  return s.ok() ? std::move(*s) : nullptr;
}

// Pools the reference's hidden states f32 [n, n_embd] in double.
std::vector<double> pool(const std::vector<float>& h, int64_t n_embd, Pooling p, bool normalize) {
  const auto d = static_cast<size_t>(n_embd);
  const size_t n = h.size() / d;
  std::vector<double> v(d, 0.0);
  for (size_t t = 0; t < n; ++t) {
    const bool take = p == Pooling::Mean || (p == Pooling::Cls && t == 0) ||
                      (p == Pooling::Last && t + 1 == n);
    if (!take) continue;
    for (size_t j = 0; j < d; ++j) v[j] += h[t * d + j];
  }
  if (p == Pooling::Mean)
    for (double& x : v) x /= static_cast<double>(n);
  if (normalize) {
    double sq = 0;
    for (double x : v) sq += x * x;
    for (double& x : v) x /= std::sqrt(sq);
  }
  return v;
}

double cosine(const std::vector<float>& a, const std::vector<double>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t j = 0; j < b.size(); ++j) {
    ab += a[j] * b[j];
    aa += static_cast<double>(a[j]) * a[j];
    bb += b[j] * b[j];
  }
  return ab / std::sqrt(aa * bb);
}

double rel_error(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t j = 0; j < b.size(); ++j) {
    num += (a[j] - b[j]) * (a[j] - b[j]);
    den += b[j] * b[j];
  }
  return std::sqrt(num / den);
}

double norm(const std::vector<float>& a) {
  double sq = 0;
  for (float x : a) sq += static_cast<double>(x) * x;
  return std::sqrt(sq);
}

class EmbedReference : public ::testing::TestWithParam<TinyPyModel> {
 protected:
  void SetUp() override {
    if (!pi::testing::python_available()) GTEST_SKIP() << "no Python with NumPy at " PI_PYTHON;
  }
};

TEST_P(EmbedReference, PoolingsAgreeWithTheFloat64Reference) {
  const TinyPyModel& spec = GetParam();
  auto e = load(spec);
  ASSERT_NE(e, nullptr);
  auto s = session(*e);
  ASSERT_NE(s, nullptr);
  const int64_t n_embd = e->info().n_embd;
  const auto tokens = pi::testing::test_tokens(21, 3, static_cast<int32_t>(e->info().n_vocab), 5);
  auto ref = pi::testing::reference_hidden(*pi::testing::make_py_model(spec), tokens);
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  ASSERT_EQ(ref->size(), tokens.size() * static_cast<size_t>(n_embd));
  for (Pooling p : {Pooling::Mean, Pooling::Last, Pooling::Cls}) {
    for (bool normalize : {true, false}) {
      std::vector<float> ours;
      Status st = s->embed(tokens, {p, normalize}, ours);
      ASSERT_TRUE(st.ok()) << st.error().message;
      ASSERT_EQ(ours.size(), static_cast<size_t>(n_embd));
      const std::vector<double> want = pool(*ref, n_embd, p, normalize);
      const double cos = cosine(ours, want), rel = rel_error(ours, want);
      std::printf("  %-32s %-4s %-9s cosine 1 - %.2g, rel error %.2g\n",
                  spec.file_name().c_str(), pooling_name(p), normalize ? "unit" : "raw",
                  1 - cos, rel);
      EXPECT_GE(cos, 0.9999) << pooling_name(p);
      EXPECT_LE(rel, 1e-3) << pooling_name(p);
      if (normalize) {
        EXPECT_NEAR(norm(ours), 1.0, 1e-5);
      }
    }
  }
  // No pooling: every token's state, each against the reference's row.
  const auto d = static_cast<size_t>(n_embd);
  for (bool normalize : {true, false}) {
    std::vector<float> ours;
    Status st = s->embed(tokens, {Pooling::None, normalize}, ours);
    ASSERT_TRUE(st.ok()) << st.error().message;
    ASSERT_EQ(ours.size(), tokens.size() * d);
    double worst_cos = 1, worst_rel = 0;
    for (size_t t = 0; t < tokens.size(); ++t) {
      const std::vector<float> row_ref(ref->begin() + static_cast<ptrdiff_t>(t * d),
                                       ref->begin() + static_cast<ptrdiff_t>((t + 1) * d));
      const std::vector<double> want = pool(row_ref, n_embd, Pooling::Last, normalize);
      const std::vector<float> row(ours.begin() + static_cast<ptrdiff_t>(t * d),
                                   ours.begin() + static_cast<ptrdiff_t>((t + 1) * d));
      worst_cos = std::min(worst_cos, cosine(row, want));
      worst_rel = std::max(worst_rel, rel_error(row, want));
      if (normalize) {
        EXPECT_NEAR(norm(row), 1.0, 1e-5) << "token " << t;
      }
    }
    std::printf("  %-32s none %-9s worst token: cosine 1 - %.2g, rel error %.2g\n",
                spec.file_name().c_str(), normalize ? "unit" : "raw", 1 - worst_cos, worst_rel);
    EXPECT_GE(worst_cos, 0.9999);
    EXPECT_LE(worst_rel, 1e-3);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, EmbedReference,
    ::testing::Values(py("llama", "f32", false, 2), py("bamboo", "f16", true, 2),
                      py("falcon", "f32", false, 1), py("falcon", "f16", true, 2),
                      py("opt", "f32", false, 4), py("qwen2", "f32", false, 2)),
    [](const ::testing::TestParamInfo<TinyPyModel>& i) {
      std::string n = i.param.file_name();
      for (char& c : n)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      return n;
    });

class Embed : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!pi::testing::python_available()) GTEST_SKIP() << "no Python with NumPy at " PI_PYTHON;
    engine_ = load(py("llama", "f32", true, 2));
    ASSERT_NE(engine_, nullptr);
  }
  std::vector<int32_t> tokens(int n, uint32_t seed) const {
    return pi::testing::test_tokens(n, 3, static_cast<int32_t>(engine_->info().n_vocab), seed);
  }
  std::unique_ptr<Engine> engine_;
};

TEST_F(Embed, SeveralInputsInOneCallEqualOneAtATime) {
  const std::vector<std::vector<int32_t>> in = {tokens(5, 1), tokens(17, 2), tokens(30, 3)};
  for (Pooling p : {Pooling::Mean, Pooling::Last, Pooling::Cls, Pooling::None}) {
    auto many = session(*engine_, 2, 3);
    ASSERT_NE(many, nullptr);
    // Sequences 2, 0, 1: the rows follow the inputs, not the sequence ids.
    const EmbedInput inputs[3] = {{2, in[0]}, {0, in[1]}, {1, in[2]}};
    std::vector<float> all;
    Status st = many->embed(inputs, {p, true}, all);
    ASSERT_TRUE(st.ok()) << st.error().message;
    const auto d = static_cast<size_t>(engine_->info().n_embd);
    // Rows per input: one pooled vector, or (None) one per token.
    const auto rows = [&](size_t i) { return p == Pooling::None ? in[i].size() : size_t{1}; };
    ASSERT_EQ(all.size(), (rows(0) + rows(1) + rows(2)) * d);
    size_t first = 0;
    for (size_t i = 0; i < 3; ++i) {
      auto one = session(*engine_, 2, 1);
      std::vector<float> e;
      ASSERT_TRUE(one->embed(in[i], {p, true}, e).ok());
      const std::vector<float> row(all.begin() + static_cast<ptrdiff_t>(first * d),
                                   all.begin() + static_cast<ptrdiff_t>((first + rows(i)) * d));
      EXPECT_EQ(row, e) << pooling_name(p) << " input " << i;
      first += rows(i);
    }
    for (int32_t q = 0; q < 3; ++q) EXPECT_EQ(many->seq_pos_max(q), -1);
  }
}

// embed_all: more inputs than sequences, and more tokens than the context, go in groups; the
// rows equal one call per input. An input longer than the context fails before anything runs.
TEST_F(Embed, AnyNumberOfInputsGoInGroupsThatFit) {
  std::vector<std::vector<int32_t>> in;
  for (uint32_t i = 0; i < 7; ++i) in.push_back(tokens(5 + 6 * static_cast<int>(i), 10 + i));  // 5..41 tokens
  for (Pooling p : {Pooling::Mean, Pooling::None}) {
    auto s = session(*engine_, 2, 3, 64);  // 3 sequences, 64 cells: groups of 3, 2 and 2
    ASSERT_NE(s, nullptr);
    std::vector<float> all;
    Status st = s->embed_all(in, {p, true}, all);
    ASSERT_TRUE(st.ok()) << st.error().message;
    std::vector<float> want, e;
    for (const auto& t : in) {
      auto one = session(*engine_, 2, 1, 64);
      ASSERT_TRUE(one->embed(t, {p, true}, e).ok());
      want.insert(want.end(), e.begin(), e.end());
    }
    EXPECT_EQ(all, want) << pooling_name(p);
  }
  auto s = session(*engine_, 2, 3, 32);
  std::vector<float> out = {1.0f};
  const Status st = s->embed_all(in, {Pooling::Mean, true}, out);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, pi::ErrorCode::BadRequest);
  EXPECT_NE(st.error().message.find("input 5 is 35 tokens; the context holds 32"), std::string::npos)
      << st.error().message;
  EXPECT_EQ(s->timings().n_prompt, 0);  // nothing ran
}

TEST_F(Embed, EachInputStartsFresh) {
  auto s = session(*engine_);
  std::vector<float> a1, b, a2;
  ASSERT_TRUE(s->embed(tokens(12, 4), {}, a1).ok());
  ASSERT_TRUE(s->embed(tokens(9, 5), {}, b).ok());
  ASSERT_TRUE(s->prompt(tokens(7, 6)).ok());  // sequence 0 holds a prompt: embed replaces it
  ASSERT_TRUE(s->embed(tokens(12, 4), {}, a2).ok());
  EXPECT_EQ(a1, a2);
  EXPECT_NE(a1, b);
  EXPECT_EQ(s->n_past(), 0);
}

TEST_F(Embed, OtherSequencesAreUntouched) {
  const std::vector<int32_t> prompt = tokens(10, 7);
  const int32_t next = prompt[3];
  auto with = session(*engine_, 2, 2);
  auto without = session(*engine_, 2, 2);
  ASSERT_TRUE(with->prompt(prompt).ok());
  ASSERT_TRUE(without->prompt(prompt).ok());
  const std::vector<int32_t> other = tokens(25, 8);
  const EmbedInput in[1] = {{1, other}};
  std::vector<float> e;
  ASSERT_TRUE(with->embed(in, {}, e).ok());
  EXPECT_EQ(with->seq_pos_max(0), 9);
  EXPECT_EQ(with->seq_pos_max(1), -1);
  ASSERT_TRUE(with->advance(next).ok());
  ASSERT_TRUE(without->advance(next).ok());
  const auto l1 = with->logits(), l2 = without->logits();
  EXPECT_EQ(std::vector<float>(l1.begin(), l1.end()), std::vector<float>(l2.begin(), l2.end()));
}

TEST_F(Embed, OneAndTwoThreadsAreBitIdentical) {
  const std::vector<int32_t> t = tokens(33, 9);
  for (Pooling p : {Pooling::Mean, Pooling::Last, Pooling::Cls, Pooling::None}) {
    std::vector<float> e1, e2;
    ASSERT_TRUE(session(*engine_, 1)->embed(t, {p, false}, e1).ok());
    ASSERT_TRUE(session(*engine_, 2)->embed(t, {p, false}, e2).ok());
    EXPECT_EQ(e1, e2) << pooling_name(p);
  }
}

// The unpooled rows are the states the poolings read: the first is cls's vector, the last is
// last's, and their mean (summed in double in token order, as Mean does) is mean's, bit for bit.
TEST_F(Embed, UnpooledRowsAreWhatThePoolingsRead) {
  const std::vector<int32_t> t = tokens(21, 13);
  const auto d = static_cast<size_t>(engine_->info().n_embd);
  auto s = session(*engine_);
  std::vector<float> none, mean, last, cls;
  ASSERT_TRUE(s->embed(t, {Pooling::None, false}, none).ok());
  ASSERT_TRUE(s->embed(t, {Pooling::Mean, false}, mean).ok());
  ASSERT_TRUE(s->embed(t, {Pooling::Last, false}, last).ok());
  ASSERT_TRUE(s->embed(t, {Pooling::Cls, false}, cls).ok());
  ASSERT_EQ(none.size(), t.size() * d);
  EXPECT_EQ(std::vector<float>(none.begin(), none.begin() + static_cast<ptrdiff_t>(d)), cls);
  EXPECT_EQ(std::vector<float>(none.end() - static_cast<ptrdiff_t>(d), none.end()), last);
  std::vector<float> avg(d);
  for (size_t j = 0; j < d; ++j) {
    double sum = 0;
    for (size_t k = 0; k < t.size(); ++k) sum += none[k * d + j];
    avg[j] = static_cast<float>(sum / static_cast<double>(t.size()));
  }
  EXPECT_EQ(avg, mean);
  // Normalised, each row has unit length.
  std::vector<float> unit;
  ASSERT_TRUE(s->embed(t, {Pooling::None, true}, unit).ok());
  for (size_t k = 0; k < t.size(); ++k) {
    EXPECT_NEAR(norm(std::vector<float>(unit.begin() + static_cast<ptrdiff_t>(k * d),
                                        unit.begin() + static_cast<ptrdiff_t>((k + 1) * d))),
                1.0, 1e-5);
  }
}

TEST_F(Embed, RejectsBadInputs) {
  auto s = session(*engine_, 2, 2, 32);
  std::vector<float> e;
  const std::vector<int32_t> empty;
  EXPECT_FALSE(s->embed(empty, {}, e).ok());
  EXPECT_FALSE(s->embed(std::span<const EmbedInput>(), {}, e).ok());
  const std::vector<int32_t> bad = {5, static_cast<int32_t>(engine_->info().n_vocab)};
  Status st = s->embed(bad, {}, e);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("vocabulary"), std::string::npos) << st.error().message;
  const std::vector<int32_t> t = tokens(4, 10);
  const EmbedInput twice[2] = {{1, t}, {1, t}};
  EXPECT_FALSE(s->embed(twice, {}, e).ok());
  const EmbedInput outside[1] = {{2, t}};
  EXPECT_FALSE(s->embed(outside, {}, e).ok());
  st = s->embed(tokens(33, 11), {}, e);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("context overflow"), std::string::npos) << st.error().message;
  // The session still works after the failures.
  EXPECT_TRUE(s->embed(t, {}, e).ok());
  EXPECT_EQ(e.size(), static_cast<size_t>(engine_->info().n_embd));
}

// On the simulated GPU whole (its ops run the CPU's kernels: the same bits) and hybrid, with
// a VRAM budget that holds only part of the model (the output norm on whichever lane the
// plan gives the head).
TEST_F(Embed, SimulatedGpuAndHybridSessions) {
  const std::vector<int32_t> t = tokens(19, 12);
  std::vector<float> cpu, sim, hybrid;
  ASSERT_TRUE(session(*engine_)->embed(t, {}, cpu).ok());
  for (const std::optional<uint64_t> budget : {std::optional<uint64_t>{}, std::optional<uint64_t>{96 << 10}}) {
    SessionOptions o;
    o.n_ctx = 128;
    o.n_batch = 8;
    o.n_threads = 2;
    o.sparse.dense = true;
    o.device = "sim";
    o.vram_budget = budget;
    auto s = Session::create(*engine_, o);
    ASSERT_TRUE(s.ok()) << s.error().message;
    std::vector<float>& out = budget ? hybrid : sim;
    Status st = (*s)->embed(t, {}, out);
    ASSERT_TRUE(st.ok()) << st.error().message;
    if (budget) EXPECT_TRUE((*s)->placement().hybrid);
  }
  EXPECT_EQ(sim, cpu);
  std::vector<double> c(cpu.begin(), cpu.end());
  EXPECT_GE(cosine(hybrid, c), 0.99999);
}

TEST(EmbedNames, PoolingNamesRoundTrip) {
  for (Pooling p : {Pooling::Mean, Pooling::Last, Pooling::Cls, Pooling::None})
    EXPECT_EQ(parse_pooling(pooling_name(p)), p);
  EXPECT_FALSE(parse_pooling("max").has_value());
  EXPECT_FALSE(parse_pooling("").has_value());
}

}  // namespace
