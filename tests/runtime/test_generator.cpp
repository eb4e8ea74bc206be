// The generation loop (include/powerinfer/generator.h): end tokens, whole UTF-8 characters,
// stop strings with hold-back, shown control tokens, the order of the ends, log-probabilities,
// and the Session-driven sample()/feed() against a hand-written loop.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model/tiny_model.h"
#include "powerinfer/engine.h"
#include "powerinfer/generator.h"

namespace {

// The tiny model's vocabulary: 0 <unk>, 1 <s>, 2 </s> (end of generation), 3 + b the byte b,
// then "▁", "▁the", "▁a", "e", "t", "o", "n", "▁in", "▁and", "th", "he", ...
constexpr int32_t kBos = 1, kEos = 2;
constexpr int32_t byte_id(unsigned b) { return 3 + static_cast<int32_t>(b); }
constexpr int32_t kSpace = 259, kThe = 260, kA = 261, kE = 262, kT = 263, kO = 264, kTh = 268;

class GeneratorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = pi::testing::temp_path("generator.gguf");
    ASSERT_TRUE(pi::testing::write_tiny_model({}, path).ok());
    auto e = pi::Engine::load(path);
    ASSERT_TRUE(e.ok()) << e.error().message;
    engine_ = std::move(e).value().release();
  }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
  }
  static const pi::Vocabulary& vocab() { return *engine_->vocabulary(); }

  // Accepts `ids` in turn and returns the text shown after each, then finish()'s.
  static std::vector<std::string> shown(pi::Generator& g, const std::vector<int32_t>& ids,
                                        std::vector<pi::GenEnd>* ends = nullptr) {
    std::vector<std::string> out;
    for (int32_t t : ids) {
      const pi::GenEnd e = g.accept(t);
      if (ends != nullptr) ends->push_back(e);
      out.push_back(g.take());
    }
    out.push_back(g.finish());
    return out;
  }

  static pi::Engine* engine_;
};
pi::Engine* GeneratorTest::engine_ = nullptr;

using pi::GenEnd;

TEST_F(GeneratorTest, WholeCharactersOnlyAndTheContextKeepsTheLeadingSpace) {
  pi::Generator g(vocab());
  EXPECT_EQ(g.context(std::vector<int32_t>{kBos, kA}), "a");  // SPM drops a text's first space
  g.begin({});
  // U+00E9 is C3 A9: nothing is shown until its second byte.
  EXPECT_EQ(shown(g, {kThe, byte_id(0xC3), byte_id(0xA9), kE}),
            (std::vector<std::string>{" the", "", "\xC3\xA9", "e", ""}));
  EXPECT_EQ(g.n_tokens(), 4);
  // A character cut by the end comes out of finish() as it is.
  g.begin({});
  EXPECT_EQ(shown(g, {kE, byte_id(0xC3)}), (std::vector<std::string>{"e", "", "\xC3"}));
}

TEST_F(GeneratorTest, EndTokensEndWithoutTextUnlessIgnoredOrReplaced) {
  pi::Generator g(vocab());
  std::vector<GenEnd> ends;
  g.begin({});
  EXPECT_EQ(shown(g, {kE, kEos, kT}, &ends), (std::vector<std::string>{"e", "", "", ""}));
  EXPECT_EQ(ends, (std::vector<GenEnd>{GenEnd::None, GenEnd::EndToken, GenEnd::EndToken}));
  EXPECT_EQ(g.n_tokens(), 1);
  EXPECT_EQ(g.last_token(), kEos);

  pi::GenerateParams p;
  p.ignore_eos = true;  // </s> goes on, and as a control token adds no text
  g.begin(p);
  ends.clear();
  EXPECT_EQ(shown(g, {kEos, kT}, &ends), (std::vector<std::string>{"", "t", ""}));
  EXPECT_EQ(ends, (std::vector<GenEnd>{GenEnd::None, GenEnd::None}));

  p = {};
  p.end_tokens = {kA};    // a chat format's own ends replace the vocabulary's
  p.shown_tokens = {kEos};  // and its shown control tokens add their text
  g.begin(p);
  ends.clear();
  EXPECT_EQ(shown(g, {kT, kEos, kA}, &ends), (std::vector<std::string>{"t", "</s>", "", ""}));
  EXPECT_EQ(ends.back(), GenEnd::EndToken);
}

TEST_F(GeneratorTest, StopStringsCutTheTextAndHoldBackWhatMayBeginOne) {
  pi::Generator g(vocab());
  pi::GenerateParams p;
  p.stop = {"the", ""};
  g.begin(p);
  std::vector<GenEnd> ends;
  // "e" is shown; "th" may begin "the" and waits; "e" completes it: the text ends before it.
  EXPECT_EQ(shown(g, {kE, kTh, kE, kT}, &ends), (std::vector<std::string>{"e", "", "", "", ""}));
  EXPECT_EQ(ends, (std::vector<GenEnd>{GenEnd::None, GenEnd::None, GenEnd::StopString, GenEnd::StopString}));
  EXPECT_EQ(g.stop_word(), "the");
  EXPECT_EQ(g.text(), "e");
  // Held back, then released when it cannot begin the stop string, or at the end.
  g.begin(p);
  EXPECT_EQ(shown(g, {kTh, kO}), (std::vector<std::string>{"", "tho", ""}));
  g.begin(p);
  EXPECT_EQ(shown(g, {kT, kT}), (std::vector<std::string>{"", "t", "t"}));
  EXPECT_EQ(g.stop_word(), "");
}

TEST_F(GeneratorTest, EndsComeInTheirOrderAndStay) {
  pi::Generator g(vocab());
  pi::GenerateParams p;
  p.max_tokens = 2;
  g.begin(p);
  EXPECT_EQ(g.accept(kE), GenEnd::None);
  EXPECT_EQ(g.accept(kT), GenEnd::Length);  // the answer's last token
  EXPECT_EQ(g.accept(kE), GenEnd::Length);  // and it stays ended
  EXPECT_EQ(g.n_tokens(), 2);
  EXPECT_EQ(g.finish(), "et");

  p.max_tokens = 0;  // nothing is ever part of the answer
  g.begin(p);
  EXPECT_EQ(g.accept(kE), GenEnd::Length);
  EXPECT_EQ(g.n_tokens(), 0);

  // A complete grammar ends after the token that completed it; a full context after the
  // token it cannot hold; both after a stop string, the context before the length.
  p.max_tokens = 1;
  g.begin(p);
  EXPECT_EQ(g.accept(kE, {}, /*grammar_done=*/true, /*context_full=*/true), GenEnd::GrammarDone);
  EXPECT_EQ(g.finish(), "e");
  g.begin(p);
  EXPECT_EQ(g.accept(kE, {}, false, true), GenEnd::ContextFull);
  p.stop = {"e"};
  g.begin(p);
  EXPECT_EQ(g.accept(kE, {}, true, true), GenEnd::StopString);
  EXPECT_EQ(g.finish(), "");

  g.begin({});
  EXPECT_EQ(g.accept(-1), GenEnd::NoToken);
  EXPECT_EQ(g.n_tokens(), 0);
}

TEST_F(GeneratorTest, LogProbabilitiesAreTheLogSoftmaxAndTheMostLikelyFirst) {
  pi::Generator g(vocab());
  std::vector<float> logits(static_cast<size_t>(vocab().n_vocab()), -5.0f);
  logits[kE] = 2.0f;
  logits[kT] = 3.0f;
  logits[kA] = 3.0f;  // ties: the lower id first
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l));
  const double lse = std::log(sum);
  pi::GenerateParams p;
  p.top_logprobs = 3;
  g.begin(p);
  ASSERT_EQ(g.accept(kE, logits), GenEnd::None);
  ASSERT_EQ(g.accept(kT, logits), GenEnd::None);
  const std::vector<pi::TokenProb> probs = g.take_probs();
  ASSERT_EQ(probs.size(), 2u);
  EXPECT_EQ(probs[0].id, kE);
  EXPECT_EQ(probs[0].text, "e");
  EXPECT_NEAR(probs[0].logprob, 2.0 - lse, 1e-5);
  ASSERT_EQ(probs[0].top.size(), 3u);
  EXPECT_EQ(probs[0].top[0].id, kA);
  EXPECT_EQ(probs[0].top[1].id, kT);
  EXPECT_EQ(probs[0].top[2].id, kE);
  EXPECT_NEAR(probs[1].logprob, 3.0 - lse, 1e-5);
  EXPECT_TRUE(g.take_probs().empty());  // taken

  g.begin({});  // off: nothing recorded
  ASSERT_EQ(g.accept(kE, logits), GenEnd::None);
  EXPECT_TRUE(g.take_probs().empty());
}

TEST_F(GeneratorTest, ReplyIdsReplaceTheEndsOfAChatFormat) {
  const std::vector<std::string_view> shown_texts{"</s>", "<nope>"};
  const std::vector<std::string_view> not_end{"</s>"};
  const std::vector<std::string_view> end{"<s>"};
  const pi::ReplyIds r = pi::reply_ids(vocab(), shown_texts, not_end, end);
  EXPECT_EQ(r.shown, std::vector<int32_t>{kEos});   // texts of no single token are skipped
  EXPECT_EQ(r.end, std::vector<int32_t>{kBos});     // </s> does not end it, <s> does
  const pi::ReplyIds none = pi::reply_ids(vocab(), {}, {}, {});
  EXPECT_TRUE(none.shown.empty() && none.end.empty());
}

TEST_F(GeneratorTest, SessionLoopEqualsSampleAndAdvanceByHand) {
  pi::SessionOptions o;
  o.n_ctx = 32;
  o.sampling.seed = 3;
  o.sampling.temperature = 1.0f;
  const std::vector<int32_t> prompt{kBos, kThe, kSpace};

  auto hand = std::move(pi::Session::create(*engine_, o)).value();
  ASSERT_TRUE(hand->prompt(prompt).ok());
  hand->ban_tokens({kEos});
  std::vector<int32_t> want;
  for (int i = 0; i < 6; ++i) {
    want.push_back(hand->sample());
    ASSERT_TRUE(hand->advance(want.back()).ok());
  }

  auto s = std::move(pi::Session::create(*engine_, o)).value();
  ASSERT_TRUE(s->prompt(prompt).ok());
  s->ban_tokens({kEos});
  pi::Generator g(vocab());
  (void)g.context(prompt);
  pi::GenerateParams p;
  p.max_tokens = 6;
  g.begin(p);
  std::vector<int32_t> got;
  std::string text;
  GenEnd e = GenEnd::None;
  while (e == GenEnd::None) {
    auto r = g.sample(*s);
    ASSERT_TRUE(r.ok()) << r.error().message;
    e = *r;
    text += g.take();
    auto fed = g.feed(*s);
    ASSERT_TRUE(fed.ok());
    EXPECT_TRUE(*fed);  // every token of a Length end is fed, the last one too
    got.push_back(g.last_token());
    EXPECT_FALSE(*g.feed(*s));  // once
  }
  text += g.finish();
  EXPECT_EQ(e, GenEnd::Length);
  EXPECT_EQ(got, want);
  EXPECT_EQ(s->n_past(), hand->n_past());
  pi::Vocabulary::Decoder dec(vocab());  // the text is the stream decoder's, after the prompt
  for (int32_t t : prompt) (void)dec.push(t);
  std::string want_text;
  for (int32_t t : want) want_text += dec.push(t);
  EXPECT_EQ(text, want_text + dec.flush());

  // A full context: the token is part of the answer but not fed.
  o.n_ctx = static_cast<int64_t>(prompt.size()) + 2;
  auto small = std::move(pi::Session::create(*engine_, o)).value();
  ASSERT_TRUE(small->prompt(prompt).ok());
  small->ban_tokens({kEos});
  g.begin({});
  int fed = 0;
  for (e = GenEnd::None; e == GenEnd::None;) {
    e = *g.sample(*small);
    fed += *g.feed(*small) ? 1 : 0;
  }
  EXPECT_EQ(e, GenEnd::ContextFull);
  EXPECT_EQ(fed, 2);
  EXPECT_EQ(g.n_tokens(), 3);
  EXPECT_EQ(small->n_past(), small->n_ctx());
}

}  // namespace
