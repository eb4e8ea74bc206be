// Experts read from the file on demand (--moe-ram, model/expert_stream.h): with a cache just
// big enough to run (so experts are evicted and read again all the time), the logits equal the
// whole model's bit for bit for every MoE architecture and expert layout, any thread count and
// batch split; the counters add up; bad limits fail in one line before anything runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/expert_stream.h"
#include "model/model.h"
#include "model/placed_weights.h"
#include "model/tiny_model.h"
#include "runtime/context.h"

namespace {

using pi::DType;
using pi::LoadMode;
using pi::testing::temp_path;
using pi::testing::TinySpec;
using pi::testing::write_tiny_model;

struct Case {
  const char* name;
  TinySpec spec;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  TinySpec q;  // SwiGLU experts in Q8_0: the CPU reads them in 16-row groups (Q8_0_R16)
  q.arch = "qwen3moe";
  q.vocab = false;
  q.wtype = DType::Q8_0;
  q.n_expert = 8;
  q.n_expert_used = 2;
  q.n_layer = 3;
  out.push_back({"qwen3moe_q8_0", q});
  TinySpec st;  // ReGLU experts run sparse, down stored transposed in Q4_0 (the CPU's split layout)
  st.arch = "smallthinker";
  st.vocab = false;
  st.wtype = DType::Q4_0;
  st.n_expert = 8;
  st.n_expert_used = 3;
  st.n_swa = 2;
  st.n_layer = 3;
  st.down_exps_t = true;
  out.push_back({"smallthinker_q4_0_down_t", st});
  TinySpec g;  // MXFP4 experts with biases
  g.arch = "gpt-oss";
  g.vocab = false;
  g.wtype = DType::F32;
  g.expert_wtype = DType::MXFP4;
  g.n_expert = 6;
  g.n_expert_used = 2;
  g.n_swa = 3;
  g.n_layer = 3;
  out.push_back({"gpt_oss_mxfp4", g});
  return out;
}

// Bytes of the weights besides the experts, and the smallest cache a context accepts.
uint64_t resident_bytes(const pi::model::Model& m) {
  pi::model::ModelWeights w = m.weights();
  for (pi::model::LayerWeights& L : w.layers)
    pi::model::each_expert_stack(L.ffn, [](pi::model::Matrix& x) { x = pi::model::Matrix{}; });
  return pi::model::weight_bytes(w);
}

uint64_t moe_ram_for(const pi::model::Model& m, int64_t slots) {
  const pi::model::HParams& hp = m.hparams();
  return resident_bytes(m) + static_cast<uint64_t>(slots) * pi::model::ExpertStream::slot_bytes(hp, m.weights());
}

int64_t min_slots(const pi::model::HParams& hp) {
  return std::max(hp.n_expert + hp.n_expert_used, hp.n_layer * hp.n_expert_used);
}

pi::runtime::ContextOptions options(int threads, int64_t batch, uint64_t moe_ram) {
  pi::runtime::ContextOptions o;
  o.n_ctx = 32;
  o.n_batch = batch;
  o.n_threads = threads;
  o.all_logits = true;
  o.moe_ram = moe_ram;
  return o;
}

TEST(ExpertStream, LogitsEqualTheWholeModelWithExpertsEvictedAndReadAgain) {
  const std::vector<int32_t> tokens = {5, 17, 99, 3, 250, 8, 8, 140, 33, 1, 60, 61, 7, 200};
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const std::string path = temp_path(std::string("stream_") + c.name + ".gguf");
    ASSERT_TRUE(write_tiny_model(c.spec, path).ok());
    auto m = pi::model::Model::load(path, LoadMode::Map);
    ASSERT_TRUE(m.ok()) << m.error().message;
    const pi::model::HParams& hp = (*m)->hparams();
    std::vector<float> want;
    {
      auto ctx = pi::runtime::Context::create(**m, options(1, 14, 0));
      ASSERT_TRUE(ctx.ok()) << ctx.error().message;
      ASSERT_TRUE((*ctx)->decode(tokens, &want).ok());
    }
    for (float x : want) ASSERT_TRUE(std::isfinite(x));
    for (int threads : {1, 2}) {
      for (int64_t batch : {1, 5, 14}) {
        SCOPED_TRACE(testing::Message() << threads << " threads, batches of " << batch);
        auto ctx = pi::runtime::Context::create(**m, options(threads, batch, moe_ram_for(**m, min_slots(hp))));
        ASSERT_TRUE(ctx.ok()) << ctx.error().message;
        const pi::model::ExpertStream* s = (*ctx)->expert_stream();
        ASSERT_NE(s, nullptr);
        EXPECT_EQ(s->slots(), min_slots(hp));
        std::vector<float> got;
        ASSERT_TRUE((*ctx)->decode(tokens, &got).ok());
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "logit " << i;
        const pi::model::ExpertStreamStats st = s->stats();
        // The cache holds fewer experts than the model has: what ran was read, some of it again.
        const uint64_t asked = st.hits + st.prefetch_used + st.misses;
        EXPECT_GE(asked, static_cast<uint64_t>(hp.n_layer * hp.n_expert_used));
        EXPECT_GT(st.misses + st.prefetched, static_cast<uint64_t>(s->slots()));
        EXPECT_GE(st.bytes_read, (st.misses + st.prefetch_used) * pi::model::ExpertStream::slot_bytes(hp, (*m)->weights()) / 2);
        EXPECT_LE(st.prefetch_used, st.prefetched);
        EXPECT_EQ(s->failure(), "");
        if (hp.router_before_attn && batch == 1) {
          // SmallThinker routes before attention: one token's experts are read ahead of its layer.
          EXPECT_EQ(st.misses, 0u);
        }
        if (batch == 1) {
          // One token at a time: the next layer's experts are guessed and read ahead.
          EXPECT_GT(st.predicted, 0u);
          EXPECT_LE(st.predicted_right, st.predicted);
          EXPECT_GT(st.prefetched, 0u);
          EXPECT_GT(st.prefetch_used, 0u);
        } else if (batch == static_cast<int64_t>(tokens.size())) {
          EXPECT_EQ(st.predicted, 0u);  // one batch of 14 > 4 tokens: its experts are not guessed
        }
      }
    }
  }
}

TEST(ExpertStream, BigEnoughCacheReadsEachExpertOnce) {
  const Case c = cases()[0];
  const std::string path = temp_path("stream_once.gguf");
  ASSERT_TRUE(write_tiny_model(c.spec, path).ok());
  auto m = pi::model::Model::load(path, LoadMode::Map);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const pi::model::HParams& hp = (*m)->hparams();
  auto ctx = pi::runtime::Context::create(**m, options(2, 1, moe_ram_for(**m, hp.n_layer * hp.n_expert)));
  ASSERT_TRUE(ctx.ok()) << ctx.error().message;
  const std::vector<int32_t> tokens = {5, 17, 99, 3, 250, 8, 8, 140, 33, 1, 60, 61, 7, 200, 5, 17, 99, 3};
  std::vector<float> got;
  ASSERT_TRUE((*ctx)->decode(tokens, &got).ok());
  const pi::model::ExpertStreamStats st = (*ctx)->expert_stream()->stats();
  // Never evicted: at most one read per expert, and the rest hits.
  EXPECT_LE(st.misses + st.prefetched, static_cast<uint64_t>(hp.n_layer * hp.n_expert));
  EXPECT_GT(st.hits, 0u);
}

TEST(ExpertStream, BadLimitsFailInOneLineBeforeRunning) {
  const Case c = cases()[0];
  const std::string path = temp_path("stream_errors.gguf");
  ASSERT_TRUE(write_tiny_model(c.spec, path).ok());
  auto m = pi::model::Model::load(path, LoadMode::Map);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const pi::model::HParams& hp = (*m)->hparams();
  const auto error_of = [&](const pi::model::Model& model, pi::runtime::ContextOptions o) {
    auto ctx = pi::runtime::Context::create(model, o);
    return ctx.ok() ? std::string("(created)") : ctx.error().message;
  };
  // Less than the weights besides the experts.
  std::string e = error_of(**m, options(1, 4, resident_bytes(**m) / 2));
  EXPECT_NE(e.find("besides the experts"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);
  // A cache one expert short of what a step needs.
  e = error_of(**m, options(1, 4, moe_ram_for(**m, min_slots(hp) - 1)));
  EXPECT_NE(e.find("fewer than the " + std::to_string(min_slots(hp))), std::string::npos) << e;
  EXPECT_NE(e.find("--moe-ram"), std::string::npos) << e;
  // A file read into memory, a model without experts, another device.
  auto read = pi::model::Model::load(path, LoadMode::Read);
  ASSERT_TRUE(read.ok());
  e = error_of(**read, options(1, 4, uint64_t{1} << 30));
  EXPECT_NE(e.find("mapped"), std::string::npos) << e;
  TinySpec dense;
  dense.vocab = false;
  const std::string dense_path = temp_path("stream_dense.gguf");
  ASSERT_TRUE(write_tiny_model(dense, dense_path).ok());
  auto d = pi::model::Model::load(dense_path, LoadMode::Map);
  ASSERT_TRUE(d.ok());
  e = error_of(**d, options(1, 4, uint64_t{1} << 30));
  EXPECT_NE(e.find("has none"), std::string::npos) << e;
  pi::runtime::ContextOptions sim = options(1, 4, uint64_t{1} << 30);
  sim.device.name = "sim";
  e = error_of(**m, sim);
  EXPECT_NE(e.find("--vram-budget"), std::string::npos) << e;
}

}  // namespace
