// The public API (include/powerinfer/engine.h): loading, model info, session options,
// prompt/sample/advance, reset, banned tokens, timings (whole session and per sequence) and
// context overflow.
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
  ASSERT_NE(e->vocabulary(), nullptr);
  EXPECT_EQ(e->vocabulary()->bos(), 1);

  pi::testing::TinySpec bare;
  bare.vocab = false;
  auto b = load_engine("engine_bare.gguf", bare);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->vocabulary(), nullptr);
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
  const std::vector<int32_t> prompt = e->vocabulary()->encode("in the", true, false);
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

// The multi-sequence API: sequence i of a batched session samples with seed + i and, after
// fork(0, i), reproduces a one-sequence session seeded seed + i (penalty window included);
// seq_rm frees a sequence for a new fork; bad ids are refused.
TEST(Session, ForkedSequencesReproduceSingleSessionsWithSeedPlusI) {
  auto e = load_engine("engine_multi.gguf");
  ASSERT_NE(e, nullptr);
  pi::SessionOptions o;
  o.n_ctx = 64;
  o.n_threads = 2;
  o.sampling.seed = 21;
  o.sampling.temperature = 1.0f;
  o.sampling.repeat_penalty = 1.5f;
  const std::vector<int32_t> prompt = e->vocabulary()->encode("in the", true, false);
  const int n_gen = 8, n_seq = 3;
  std::vector<std::vector<int32_t>> want;
  for (int i = 0; i < n_seq; ++i) {
    pi::SessionOptions one = o;
    one.sampling.seed = o.sampling.seed + static_cast<uint64_t>(i);
    auto s = std::move(pi::Session::create(*e, one)).value();
    EXPECT_TRUE(s->prompt(prompt).ok());
    std::vector<int32_t> out;
    for (int k = 0; k < n_gen; ++k) {
      out.push_back(s->sample());
      EXPECT_TRUE(s->advance(out.back()).ok());
    }
    want.push_back(out);
  }
  pi::SessionOptions multi = o;
  multi.n_seq_max = n_seq;
  auto s = std::move(pi::Session::create(*e, multi)).value();
  EXPECT_EQ(s->n_seq_max(), n_seq);
  ASSERT_TRUE(s->prompt(prompt).ok());
  for (int i = 1; i < n_seq; ++i) ASSERT_TRUE(s->fork(0, i).ok());
  EXPECT_FALSE(s->fork(0, 1).ok());  // sequence 1 holds positions
  EXPECT_FALSE(s->fork(0, n_seq).ok());
  EXPECT_EQ(s->sample(n_seq, s->logits()), -1);
  std::vector<std::vector<int32_t>> got(n_seq);
  const auto p = static_cast<int32_t>(prompt.size());
  for (int k = 0; k < n_gen; ++k) {
    std::vector<pi::BatchToken> batch;
    for (int i = 0; i < n_seq; ++i) {
      const auto logits = k == 0 ? s->logits() : s->batch_logits(static_cast<size_t>(i));
      got[i].push_back(s->sample(i, logits));
      batch.push_back({got[i].back(), i, p + k, true});
    }
    ASSERT_TRUE(s->decode(batch).ok());
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(s->seq_pos_max(2), p + n_gen - 1);
  EXPECT_EQ(s->timings().n_eval, n_seq * n_gen);
  EXPECT_EQ(s->timings().n_eval_passes, n_gen);
  // Removing sequence 2 lets it be forked again; a refused batch changes nothing.
  ASSERT_TRUE(s->seq_rm(2, 0).ok());
  EXPECT_EQ(s->seq_pos_max(2), -1);
  ASSERT_TRUE(s->fork(1, 2).ok());
  EXPECT_EQ(s->seq_pos_max(2), p + n_gen - 1);
  EXPECT_FALSE(s->decode(std::vector<pi::BatchToken>{{5, 0, 0, true}}).ok());
  EXPECT_FALSE(s->seq_rm(7, 0).ok());
  EXPECT_FALSE(s->seq_cp(0, 7).ok());
  s->reset();
  EXPECT_EQ(s->seq_pos_max(1), -1);
  EXPECT_EQ(s->n_past(), 0);
}

// Per-sequence timings: decode() charges a sequence's tokens to its prompt unless the entry is
// the token sample(seq) just returned (then it is generated); sequences absent from a call get
// nothing; prompt()/advance() count for sequence 0; reset_seq_timings() clears one sequence.
TEST(Session, SeqTimingsSplitPromptFromGeneratedPerSequence) {
  auto e = load_engine("engine_seq_timings.gguf");
  ASSERT_NE(e, nullptr);
  pi::SessionOptions o;
  o.n_ctx = 64;
  o.n_threads = 1;
  o.n_seq_max = 3;
  auto s = std::move(pi::Session::create(*e, o)).value();
  // Prompts of 4 (sequence 0) and 3 (sequence 1) tokens in one call; sequence 2 idle.
  std::vector<pi::BatchToken> batch = {{1, 0, 0, false}, {5, 0, 1, false}, {6, 0, 2, false},
                                       {7, 0, 3, true},  {1, 1, 0, false}, {8, 1, 1, false},
                                       {9, 1, 2, true}};
  ASSERT_TRUE(s->decode(batch).ok());
  EXPECT_EQ(s->seq_timings(0).n_prompt, 4);
  EXPECT_EQ(s->seq_timings(1).n_prompt, 3);
  EXPECT_EQ(s->seq_timings(0).n_eval, 0);
  EXPECT_GE(s->seq_timings(0).prompt_ms, 0.0);
  EXPECT_EQ(s->seq_timings(0).prompt_ms, s->seq_timings(1).prompt_ms);  // one call, both charged
  EXPECT_EQ(s->seq_timings(2).n_prompt, 0);
  EXPECT_EQ(s->seq_timings(2).prompt_ms, 0.0);
  // Sequence 0 feeds its sampled token (generated); sequence 1 feeds one it was not given
  // (a prompt token, e.g. a user turn).
  const int32_t t0 = s->sample(0, s->batch_logits(3));
  const int32_t t1 = s->sample(1, s->batch_logits(6));
  ASSERT_GE(t0, 0);
  ASSERT_GE(t1, 0);
  const int32_t other = t1 == 10 ? 11 : 10;
  ASSERT_TRUE(s->decode(std::vector<pi::BatchToken>{{t0, 0, 4, true}, {other, 1, 3, true}}).ok());
  pi::SeqTimings a = s->seq_timings(0), b = s->seq_timings(1);
  EXPECT_EQ(a.n_prompt, 4);
  EXPECT_EQ(a.n_eval, 1);
  EXPECT_EQ(a.n_sample, 1);
  EXPECT_EQ(b.n_prompt, 4);
  EXPECT_EQ(b.n_eval, 0);
  EXPECT_EQ(b.n_sample, 1);
  // A sampled token counts as generated once: feeding it again is a prompt token.
  ASSERT_TRUE(s->decode(std::vector<pi::BatchToken>{{t0, 0, 5, true}}).ok());
  EXPECT_EQ(s->seq_timings(0).n_eval, 1);
  EXPECT_EQ(s->seq_timings(0).n_prompt, 5);
  // The session totals still count every token once.
  EXPECT_EQ(s->timings().n_eval, 7 + 2 + 1);
  s->reset_seq_timings(0);
  EXPECT_EQ(s->seq_timings(0).n_prompt, 0);
  EXPECT_EQ(s->seq_timings(0).prompt_ms, 0.0);
  EXPECT_EQ(s->seq_timings(1).n_prompt, 4);  // others untouched
  EXPECT_EQ(s->seq_timings(-1).n_prompt, 0);
  EXPECT_EQ(s->seq_timings(3).n_prompt, 0);
  s->reset_seq_timings(7);  // outside: ignored

  // The one-sequence calls count for sequence 0.
  s->reset();
  s->reset_seq_timings(0);
  ASSERT_TRUE(s->prompt(std::vector<int32_t>{1, 5, 6}).ok());
  ASSERT_TRUE(s->advance(s->sample()).ok());
  ASSERT_TRUE(s->advance(s->sample()).ok());
  a = s->seq_timings(0);
  EXPECT_EQ(a.n_prompt, 3);
  EXPECT_EQ(a.n_eval, 2);
  EXPECT_EQ(a.n_sample, 2);
}

}  // namespace
