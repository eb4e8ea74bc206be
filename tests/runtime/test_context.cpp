// Context (forward pass + KV cache) invariants on tiny random models of every architecture
// and weight format, written in C++ (no Python needed):
//  - any thread count gives bit-identical logits and tokens;
//  - the prompt batch size changes logits only within rounding, and greedy tokens not at all;
//  - feeding a prompt token by token equals feeding it at once (the KV cache is consistent);
//  - context overflow fails without changing the cache; truncation allows re-decoding;
//  - the per-layer FFN step is swappable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/ffn.h"
#include "model/model.h"
#include "model/tiny_model.h"
#include "runtime/context.h"

namespace {

using namespace pi;
using pi::testing::TinySpec;

struct Variant {
  const char* name;
  TinySpec spec;
  double batch_tol;  // relative logit difference allowed between batch sizes
};

TinySpec spec(const char* arch, DType t, bool pwri, int64_t kv, bool two_norms = false) {
  return pi::testing::tiny_variant(arch, t, pwri, kv, two_norms, 3);
}

// Five layers (layers 0 and 4 global without RoPE, 1..3 through a 3-position window, which
// the tests' prompts cross), sparse ReGLU experts with the down projections either way.
TinySpec smallthinker(DType t, bool down_t) {
  TinySpec s = spec("smallthinker", t, false, 2);
  s.n_layer = 5;
  s.n_swa = 3;
  s.down_exps_t = down_t;
  return s;
}

// Matrix x matrix and matrix x vector kernels sum in different orders (f32: ~1e-6); the f16
// KV cache is the same either way. Quantized weights use the same 8-bit activation blocks in
// both paths.
std::vector<Variant> variants() {
  return {
      {"llama_f32", spec("llama", DType::F32, false, 2), 1e-4},
      {"llama_q4_0_pwri", spec("llama", DType::Q4_0, true, 2), 1e-3},
      {"bamboo_f16", spec("bamboo", DType::F16, false, 2), 1e-4},
      {"bamboo_q8_0_pwri", spec("bamboo", DType::Q8_0, true, 4), 1e-3},
      {"falcon7_q8_0", spec("falcon", DType::Q8_0, false, 1), 1e-3},
      {"falcon40_f32_pwri", spec("falcon", DType::F32, true, 2, true), 1e-4},
      {"opt_f32_pwri", spec("opt", DType::F32, true, 4), 1e-4},
      {"qwen2_q8_0", spec("qwen2", DType::Q8_0, false, 2), 1e-3},
      {"qwen3_f16", spec("qwen3", DType::F16, false, 2), 1e-4},
      {"qwen3moe_q8_0", spec("qwen3moe", DType::Q8_0, false, 2), 1e-3},
      {"smallthinker_q4_0", smallthinker(DType::Q4_0, true), 1e-3},
      {"smallthinker_f32", smallthinker(DType::F32, false), 1e-4},
  };
}

class ContextTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    const std::string path = pi::testing::temp_path(std::string(GetParam().name) + ".gguf");
    ASSERT_TRUE(pi::testing::write_tiny_model(GetParam().spec, path).ok());
    auto m = model::Model::load(path);
    ASSERT_TRUE(m.ok()) << m.error().message;
    model_ = std::move(*m);
    prompt_ = {1, 17, 250, 3, 99, 42, 7, 7, 7, 180, 5, 64, 128, 255, 2, 33, 77, 11, 12, 13};
  }

  std::unique_ptr<runtime::Context> context(int64_t n_batch, int n_threads, int64_t n_ctx = 64,
                                            bool all_logits = true) {
    runtime::ContextOptions o;
    o.n_ctx = n_ctx;
    o.n_batch = n_batch;
    o.n_threads = n_threads;
    o.all_logits = all_logits;
    auto c = runtime::Context::create(*model_, o);
    EXPECT_TRUE(c.ok());
    return std::move(*c);
  }

  std::vector<float> prompt_logits(int64_t n_batch, int n_threads) {
    auto c = context(n_batch, n_threads);
    std::vector<float> all;
    Status s = c->decode(prompt_, &all);
    EXPECT_TRUE(s.ok()) << s.error().message;
    return all;
  }

  std::vector<int32_t> greedy(int64_t n_batch, int n_threads, int n) {
    auto c = context(n_batch, n_threads, 64, false);
    EXPECT_TRUE(c->decode(prompt_).ok());
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
      auto l = c->logits();
      out.push_back(static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin()));
      EXPECT_TRUE(c->decode(std::vector<int32_t>{out.back()}).ok());
    }
    return out;
  }

  std::unique_ptr<model::Model> model_;
  std::vector<int32_t> prompt_;
};

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return num / den;
}

TEST_P(ContextTest, ThreadCountDoesNotChangeAnything) {
  const auto one = prompt_logits(7, 1);
  ASSERT_EQ(one.size(), prompt_.size() * static_cast<size_t>(model_->hparams().n_vocab));
  EXPECT_EQ(prompt_logits(7, 2), one);
  EXPECT_EQ(prompt_logits(7, 3), one);
  EXPECT_EQ(greedy(7, 2, 24), greedy(7, 1, 24));
}

TEST_P(ContextTest, BatchSizeChangesLogitsOnlyWithinRounding) {
  const auto b1 = prompt_logits(1, 2);
  const auto b7 = prompt_logits(7, 2);
  const auto b512 = prompt_logits(512, 2);
  const double d7 = max_rel_diff(b7, b1), d512 = max_rel_diff(b512, b1);
  std::printf("  %-18s batch 7 vs 1: %.3g, batch 512 vs 1: %.3g (bound %.3g)\n", GetParam().name,
              d7, d512, GetParam().batch_tol);
  EXPECT_LE(d7, GetParam().batch_tol);
  EXPECT_LE(d512, GetParam().batch_tol);
  const auto g1 = greedy(1, 2, 24);
  EXPECT_EQ(greedy(7, 2, 24), g1);
  EXPECT_EQ(greedy(512, 2, 24), g1);
}

TEST_P(ContextTest, TruncateThenRedecodeReproducesLogits) {
  auto c = context(8, 2, 64, false);
  ASSERT_TRUE(c->decode(prompt_).ok());
  const std::vector<float> first(c->logits().begin(), c->logits().end());
  ASSERT_TRUE(c->decode(std::vector<int32_t>{5, 6, 7}).ok());
  ASSERT_TRUE(c->truncate(static_cast<int64_t>(prompt_.size()) - 4).ok());
  EXPECT_EQ(c->n_past(), static_cast<int64_t>(prompt_.size()) - 4);
  ASSERT_TRUE(c->decode(std::span(prompt_).subspan(prompt_.size() - 4)).ok());
  const std::vector<float> again(c->logits().begin(), c->logits().end());
  EXPECT_LE(max_rel_diff(again, first), GetParam().batch_tol);
}

INSTANTIATE_TEST_SUITE_P(Models, ContextTest, ::testing::ValuesIn(variants()),
                         [](const auto& info) { return std::string(info.param.name); });

class ContextBasics : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = pi::testing::temp_path("basics.gguf");
    TinySpec s;
    s.vocab = false;
    ASSERT_TRUE(pi::testing::write_tiny_model(s, path).ok());
    model_ = model::Model::load(path).value();
  }
  std::unique_ptr<model::Model> model_;
};

TEST_F(ContextBasics, ContextOverflowFailsAndLeavesCacheUnchanged) {
  runtime::ContextOptions o;
  o.n_ctx = 16;
  o.n_batch = 4;
  auto c = runtime::Context::create(*model_, o).value();
  std::vector<int32_t> toks(17, 5);
  Status s = c->decode(toks);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("context overflow"), std::string::npos) << s.error().message;
  EXPECT_EQ(c->n_past(), 0);
  toks.resize(16);
  ASSERT_TRUE(c->decode(toks).ok());
  EXPECT_EQ(c->n_past(), 16);
  EXPECT_FALSE(c->decode(std::vector<int32_t>{1}).ok());
  EXPECT_EQ(c->n_past(), 16);
}

TEST_F(ContextBasics, OptionsAreCheckedAndResolved) {
  runtime::ContextOptions o;
  o.n_threads = 0;
  EXPECT_FALSE(runtime::Context::create(*model_, o).ok());
  o.n_threads = 1;
  o.n_batch = 0;
  EXPECT_FALSE(runtime::Context::create(*model_, o).ok());
  o.n_batch = 512;
  auto c = runtime::Context::create(*model_, o);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->n_ctx(), 256);            // the model's training context
  EXPECT_EQ((*c)->options().n_batch, 256);  // clamped to the context
}

TEST_F(ContextBasics, InvalidTokenIsRejected) {
  auto c = runtime::Context::create(*model_, {}).value();
  Status s = c->decode(std::vector<int32_t>{1, 300});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("token id 300 outside the vocabulary"), std::string::npos);
  EXPECT_EQ(c->n_past(), 0);
}

// Wraps the dense FFN and counts calls: a stand-in for the sparse engine's step.
class CountingFfn final : public model::FfnStep {
 public:
  CountingFfn(const model::Model& m, runtime::Context& c, int64_t n)
      : dense_(model::DenseFfn::create(m, c.weights(), c.device(), n).value()) {}
  void run(int64_t il, const model::FfnInput& in, float* out) override {
    ++calls;
    tokens += in.m;
    dense_->run(il, in, out);
  }
  int calls = 0;
  int64_t tokens = 0;

 private:
  std::unique_ptr<model::DenseFfn> dense_;
};

TEST_F(ContextBasics, FfnStepIsSwappable) {
  runtime::ContextOptions o;
  o.n_ctx = 32;
  o.n_batch = 4;
  auto plain = runtime::Context::create(*model_, o).value();
  auto swapped = runtime::Context::create(*model_, o).value();
  auto step = std::make_unique<CountingFfn>(*model_, *swapped, 4);
  CountingFfn* counter = step.get();
  swapped->forward().set_ffn(std::move(step));
  const std::vector<int32_t> toks = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(plain->decode(toks).ok());
  ASSERT_TRUE(swapped->decode(toks).ok());
  EXPECT_EQ(counter->calls, 2 * 2);  // two batches (4 + 2) x two layers
  EXPECT_EQ(counter->tokens, 6 * 2);
  EXPECT_TRUE(
      std::equal(plain->logits().begin(), plain->logits().end(), swapped->logits().begin()));
}

// A profiling context counts every neuron of every token (its dense logits unchanged), and
// measuring runs are refused on a device that is not the host.
TEST_F(ContextBasics, ProfilingContextCountsNeuronsAndStaysOnTheHost) {
  runtime::ContextOptions o;
  o.n_ctx = 32;
  o.n_batch = 4;
  o.dense = true;
  auto plain = runtime::Context::create(*model_, o).value();
  EXPECT_EQ(plain->profiler(), nullptr);
  o.profile = true;
  auto prof = runtime::Context::create(*model_, o).value();
  ASSERT_NE(prof->profiler(), nullptr);
  const std::vector<int32_t> toks = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(plain->decode(toks).ok());
  ASSERT_TRUE(prof->decode(toks).ok());
  EXPECT_TRUE(std::equal(plain->logits().begin(), plain->logits().end(), prof->logits().begin()));
  EXPECT_EQ(prof->profiler()->stats().n_tokens, toks.size());
  o.device.name = "sim";
  auto refused = runtime::Context::create(*model_, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("run on the CPU"), std::string::npos) << refused.error().message;
}

}  // namespace

namespace {

// A learned position table (opt) bounds the context: a longer one is refused at creation with
// the table's size; the default context is the table's length; every position it covers runs.
TEST(ContextLearnedPositions, ContextIsBoundedByThePositionTable) {
  TinySpec s = spec("opt", DType::F32, false, 4);
  s.reshape = {{"position_embd.weight", Shape{40, 64}}};  // 38 positions after the offset
  const std::string path = pi::testing::temp_path("ctx_opt_short_table.gguf");
  ASSERT_TRUE(pi::testing::write_tiny_model(s, path).ok());
  auto m = model::Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  runtime::ContextOptions o;
  o.n_ctx = 64;
  auto bad = runtime::Context::create(**m, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("a context of 64 tokens is longer than the 38 positions"),
            std::string::npos)
      << bad.error().message;
  o.n_ctx = 0;  // default: the training context, clamped to the table
  auto c = runtime::Context::create(**m, o);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ((*c)->n_ctx(), 38);
  std::vector<int32_t> toks(38);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>(3 + i);
  EXPECT_TRUE((*c)->decode(toks).ok());
  EXPECT_FALSE((*c)->decode(std::vector<int32_t>{5}).ok());
}

}  // namespace
