// The public API (include/powerinfer/engine.h): loading, model info, session options,
// prompt/sample/advance, reset, banned tokens, timings and context overflow.
#include <gtest/gtest.h>

#include "model/tiny_model.h"
#include "powerinfer/engine.h"
#include "tokenizer/tokenizer.h"

namespace {

std::unique_ptr<pi::Engine> load_engine(const std::string& name, pi::testing::TinySpec spec = {}) {
  const std::string path = pi::testing::temp_path(name);
  EXPECT_TRUE(pi::testing::write_tiny_model(spec, path).ok());
  auto e = pi::Engine::load(path);
  EXPECT_TRUE(e.ok()) << e.error().message;
  return e.ok() ? std::move(e).value() : nullptr;
}

TEST(Engine, LoadsModelInfoAndTokenizer) {
  pi::testing::TinySpec spec;
  spec.pwri = true;
  auto e = load_engine("engine.pwri.gguf", spec);
  ASSERT_NE(e, nullptr);
  const pi::ModelInfo& i = e->info();
  EXPECT_EQ(i.architecture, "llama");
  EXPECT_EQ(i.name, "tiny-llama");
  EXPECT_TRUE(i.powerinfer);
  EXPECT_EQ(i.activation, "relu");
  EXPECT_EQ(i.n_vocab, 300);
  EXPECT_EQ(i.n_layer, 2);
  EXPECT_GT(i.weight_bytes_per_token, 0u);
  EXPECT_LT(i.weight_bytes_per_token, i.file_bytes);
  ASSERT_NE(e->tokenizer(), nullptr);
  EXPECT_EQ(e->tokenizer()->bos(), 1);

  pi::testing::TinySpec bare;
  bare.vocab = false;
  auto b = load_engine("engine_bare.gguf", bare);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->tokenizer(), nullptr);
}

TEST(Session, RejectsBadOptions) {
  auto e = load_engine("engine_opts.gguf");
  ASSERT_NE(e, nullptr);
  pi::SessionOptions o;
  o.sampling.top_p = 0.0f;
  auto s = pi::Session::create(*e, o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("top-p"), std::string::npos);
  o.sampling.top_p = 0.9f;
  o.n_batch = 0;
  EXPECT_FALSE(pi::Session::create(*e, o).ok());
}

TEST(Session, GeneratesReproduciblyAndResets) {
  auto e = load_engine("engine_gen.gguf");
  ASSERT_NE(e, nullptr);
  pi::SessionOptions o;
  o.n_ctx = 64;
  o.n_batch = 4;
  o.n_threads = 2;
  o.sampling.seed = 9;
  o.sampling.temperature = 1.0f;
  auto s = std::move(pi::Session::create(*e, o)).value();
  EXPECT_EQ(s->n_ctx(), 64);
  EXPECT_EQ(s->n_threads(), 2);
  const std::vector<int32_t> prompt = e->tokenizer()->encode("in the", true, false);
  auto run = [&] {
    std::vector<int32_t> out;
    EXPECT_TRUE(s->prompt(prompt).ok());
    for (int i = 0; i < 10; ++i) {
      out.push_back(s->sample());
      EXPECT_TRUE(s->advance(out.back()).ok());
    }
    return out;
  };
  const auto first = run();
  EXPECT_EQ(s->n_past(), static_cast<int64_t>(prompt.size()) + 10);
  s->reset();
  EXPECT_EQ(s->n_past(), 0);
  EXPECT_EQ(run(), first);
  const pi::Timings& t = s->timings();
  EXPECT_EQ(t.n_prompt, 2 * static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(t.n_eval, 20);
  EXPECT_EQ(t.n_sample, 20);
  EXPECT_GT(t.prompt_ms, 0.0);
}

TEST(Session, BannedTokensAndOverflow) {
  auto e = load_engine("engine_ban.gguf");
  ASSERT_NE(e, nullptr);
  pi::SessionOptions o;
  o.n_ctx = 8;
  o.sampling.temperature = 0.0f;
  auto s = std::move(pi::Session::create(*e, o)).value();
  ASSERT_TRUE(s->prompt(std::vector<int32_t>{1, 5, 6}).ok());
  const int32_t best = s->sample();
  s->ban_tokens({best});
  EXPECT_NE(s->sample(), best);
  pi::Status st = s->prompt(std::vector<int32_t>(6, 7));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("context overflow"), std::string::npos);
  EXPECT_EQ(s->n_past(), 3);
}

}  // namespace
