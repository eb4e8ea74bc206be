// The harmony format (gpt-oss; chat/harmony.h): rendering exactly as gpt-oss's template writes
// it (system message, developer message, history with final channels only, the generation
// prompt, the reasoning effort and date), where prefix stability breaks, detection and names,
// refusals; the reply split (chat/reasoning.h's HarmonySplit): analysis to reasoning, final and
// commentary to content, headers and end tags in neither, under every cut of the reply into
// pieces; the reply tokens a generation loop needs; and the choice of split.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/harmony.h"
#include "chat/reasoning.h"

namespace pi::chat {
namespace {

const std::string kSystem =
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\nCurrent date: 2025-08-05\n\nReasoning: medium\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every "
    "message.<|end|>";

RenderOptions dated(ReasoningEffort e = ReasoningEffort::Medium) { return {e, "2025-08-05"}; }

std::string must_render(const std::vector<Message>& m, bool gen, const RenderOptions& o = dated()) {
  auto r = render(Template::Harmony, m, gen, o);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : std::string();
}

TEST(Harmony, RendersSystemDeveloperHistoryAndPrompt) {
  const std::vector<Message> m = {
      {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Why?"}};
  EXPECT_EQ(must_render(m, true),
            kSystem +
                "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|>"
                "<|start|>user<|message|>Hi<|end|>"
                "<|start|>assistant<|channel|>final<|message|>Hello.<|end|>"
                "<|start|>user<|message|>Why?<|end|><|start|>assistant");
  // Without a system prompt there is no developer message; the system message is always there.
  EXPECT_EQ(must_render({{"user", "Hi"}}, true), kSystem + "<|start|>user<|message|>Hi<|end|><|start|>assistant");
  EXPECT_EQ(must_render({}, true), kSystem + "<|start|>assistant");
  // A first "developer" message is the developer message too; an empty one is left out.
  EXPECT_EQ(must_render({{"developer", "D"}, {"user", "u"}}, false),
            kSystem + "<|start|>developer<|message|># Instructions\n\nD\n\n<|end|><|start|>user<|message|>u<|end|>");
  EXPECT_EQ(must_render({{"system", ""}, {"user", "u"}}, false), kSystem + "<|start|>user<|message|>u<|end|>");
}

TEST(Harmony, ReasoningEffortAndDate) {
  const std::string high = must_render({}, false, dated(ReasoningEffort::High));
  EXPECT_NE(high.find("\n\nReasoning: high\n\n"), std::string::npos) << high;
  const std::string low = must_render({}, false, dated(ReasoningEffort::Low));
  EXPECT_NE(low.find("\n\nReasoning: low\n\n"), std::string::npos) << low;
  const std::string today = must_render({}, false, {ReasoningEffort::Medium, ""});
  EXPECT_NE(today.find("Current date: " + local_date() + "\n"), std::string::npos) << today;
  ASSERT_EQ(local_date().size(), 10u);
  ReasoningEffort e{};
  ASSERT_TRUE(parse_reasoning_effort("high", e));
  EXPECT_EQ(e, ReasoningEffort::High);
  EXPECT_FALSE(parse_reasoning_effort("minimal", e));
  EXPECT_FALSE(parse_reasoning_effort("HIGH", e));
  EXPECT_STREQ(reasoning_effort_name(ReasoningEffort::Medium), "medium");
}

// Where harmony is not prefix-stable (chat_template.h): the last answer of a rendering without
// generation prompt ends with <|return|> and becomes <|end|> once a turn follows; the reply the
// model wrote (analysis included) is not in the next rendering. Turns ending with a user
// message are prefixes of what follows.
TEST(Harmony, PrefixStabilityAndWhereItBreaks) {
  const std::vector<Message> two = {{"user", "Hi"}, {"assistant", "Hello."}};
  const std::string closed = must_render(two, false);
  EXPECT_TRUE(closed.ends_with("<|start|>assistant<|channel|>final<|message|>Hello.<|return|>")) << closed;
  std::vector<Message> three = two;
  three.push_back({"user", "Why?"});
  const std::string next = must_render(three, true);
  EXPECT_NE(next.compare(0, closed.size(), closed), 0);
  EXPECT_NE(next.find("Hello.<|end|><|start|>user"), std::string::npos) << next;
  const std::string one = must_render({{"user", "Hi"}}, false);
  EXPECT_EQ(next.compare(0, one.size(), one), 0);
  // The prompt plus the model's reply as generated, against the next turn's rendering: they
  // part where the reply's analysis channel begins.
  const std::string fed = must_render({{"user", "Hi"}}, true) +
                          "<|channel|>analysis<|message|>Greet.<|end|><|start|>assistant<|channel|>final<|message|>Hello.";
  size_t common = 0;
  while (common < fed.size() && common < next.size() && fed[common] == next[common]) ++common;
  EXPECT_EQ(fed.substr(common), "analysis<|message|>Greet.<|end|><|start|>assistant<|channel|>final<|message|>Hello.");
}

TEST(Harmony, Refusals) {
  auto late = render(Template::Harmony, std::vector<Message>{{"user", "u"}, {"system", "s"}}, true);
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.error().code, ErrorCode::BadRequest);
  EXPECT_NE(late.error().message.find("messages[1]"), std::string::npos) << late.error().message;
  auto tags = render(Template::Harmony,
                     std::vector<Message>{{"user", "u"}, {"assistant", "<|channel|>final<|message|>x"}}, true);
  ASSERT_FALSE(tags.ok());
  EXPECT_NE(tags.error().message.find("channel tags"), std::string::npos) << tags.error().message;
  auto tool = render(Template::Harmony, std::vector<Message>{{"tool", "t"}}, true);
  ASSERT_FALSE(tool.ok());
  EXPECT_NE(tool.error().message.find("role 'tool' is not one of system, developer, user, assistant"),
            std::string::npos)
      << tool.error().message;
  // "developer" is a harmony role only.
  EXPECT_FALSE(render(Template::ChatML, std::vector<Message>{{"developer", "d"}}, true).ok());
}

TEST(Harmony, DetectionAndNames) {
  // Abridged from gpt-oss's chat_template.jinja, which also contains Phi-3's <|end|>.
  const std::string jinja =
      "{{- \"<|start|>system<|message|>\" }}{{- build_system_message() }}{{- \"<|end|>\" }}"
      "{{- \"<|start|>assistant<|channel|>final<|message|>\" + message.content + \"<|end|>\" }}";
  auto t = detect_template(jinja);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, Template::Harmony);
  for (const char* name : {"gpt-oss", "harmony"}) {
    auto n = template_from_name(name);
    ASSERT_TRUE(n.ok()) << name;
    EXPECT_EQ(*n, Template::Harmony);
  }
  EXPECT_STREQ(template_name(Template::Harmony), "gpt-oss");
  EXPECT_NE(template_names().find("gpt-oss"), std::string::npos);
}

TEST(Harmony, ReplyTokens) {
  const ReplyTokens r = reply_tokens(Template::Harmony);
  EXPECT_EQ(r.shown, (std::vector<std::string_view>{"<|start|>", "<|channel|>", "<|message|>", "<|end|>",
                                                    "<|constrain|>"}));
  EXPECT_EQ(r.not_end, (std::vector<std::string_view>{"<|end|>"}));
  EXPECT_EQ(r.end, (std::vector<std::string_view>{"<|return|>", "<|call|>"}));
  EXPECT_TRUE(reply_tokens(Template::ChatML).empty());
}

HarmonySplit::Delta split(const std::vector<std::string>& pieces) {
  HarmonySplit s;
  HarmonySplit::Delta all;
  for (const std::string& p : pieces) all = all + s.push(p);
  return all + s.finish();
}

// Every cut of `text` into three pieces gives `reasoning` and `content`.
void expect_every_cut(const std::string& text, const std::string& reasoning, const std::string& content) {
  const auto whole = split({text});
  EXPECT_EQ(whole.reasoning, reasoning) << text;
  EXPECT_EQ(whole.content, content) << text;
  for (size_t i = 0; i <= text.size(); ++i) {
    for (size_t j = i; j <= text.size(); ++j) {
      const auto d = split({text.substr(0, i), text.substr(i, j - i), text.substr(j)});
      ASSERT_EQ(d.reasoning, reasoning) << "cut at " << i << ", " << j << ": " << text;
      ASSERT_EQ(d.content, content) << "cut at " << i << ", " << j << ": " << text;
    }
  }
}

TEST(HarmonySplit, AnalysisIsReasoningFinalIsContent) {
  expect_every_cut(
      "<|channel|>analysis<|message|>User says hi. Reply <b>briefly</b>.<|end|>"
      "<|start|>assistant<|channel|>final<|message|>Hello! a<|b <|return|>",
      "User says hi. Reply <b>briefly</b>.", "Hello! a<|b ");
  // The generation loop stops at <|return|>, so the reply text usually ends with the answer.
  expect_every_cut("<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>4",
                   "Think.", "4");
}

TEST(HarmonySplit, CommentaryAndConstrainedHeadersAreContent) {
  // A preamble on the commentary channel, then the answer; a header with <|constrain|>.
  expect_every_cut(
      "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>commentary<|message|>Let me "
      "check.<|end|><|start|>assistant<|channel|>final <|constrain|>json<|message|>{\"x\":1}",
      "a", "Let me check.{\"x\":1}");
  // Two analysis messages are both reasoning.
  expect_every_cut("<|channel|>analysis<|message|>one<|end|><|start|>assistant<|channel|>analysis<|message|>two<|end|>",
                   "onetwo", "");
}

TEST(HarmonySplit, RobustToMissingHeaders) {
  // Straight to the final channel.
  expect_every_cut("<|channel|>final<|message|>Just the answer.", "", "Just the answer.");
  // No header at all: plain text is the answer, "<" and "<|" included.
  expect_every_cut("Plain <| text <", "", "Plain <| text <");
  expect_every_cut("", "", "");
  expect_every_cut("<|", "", "<|");
  // A header with no channel.
  expect_every_cut("<|message|>no channel", "", "no channel");
  // A model that opens the next header without <|end|>.
  expect_every_cut("<|channel|>analysis<|message|>hmm<|start|>assistant<|channel|>final<|message|>ok", "hmm", "ok");
  expect_every_cut("<|channel|>analysis<|message|>hmm<|channel|>final<|message|>ok", "hmm", "ok");
}

TEST(HarmonySplit, UnfinishedReplies) {
  // Cut off while thinking: all reasoning; a partial end tag is text of its side.
  expect_every_cut("<|channel|>analysis<|message|>still <|en", "still <|en", "");
  // Cut off inside a header: the header never shows.
  expect_every_cut("<|channel|>analysis<|message|>x<|end|><|start|>assistant<|chan", "x", "");
  // A "header" that never ends is text after 256 bytes.
  const std::string junk = "<|start|>" + std::string(300, 'j');
  EXPECT_EQ(split({junk}).content, junk);
}

TEST(HarmonySplit, PiecesStreamAsTheyArrive) {
  HarmonySplit s;
  EXPECT_TRUE(s.push("<|channel|>").empty());
  EXPECT_TRUE(s.push("analysis").empty());
  EXPECT_TRUE(s.push("<|message|>").empty());
  EXPECT_EQ(s.push("Let").reasoning, "Let");
  EXPECT_EQ(s.push(" me").reasoning, " me");
  EXPECT_TRUE(s.push("<|end|>").empty());
  EXPECT_TRUE(s.push("<|start|>").empty());
  EXPECT_TRUE(s.push("assistant").empty());
  EXPECT_TRUE(s.push("<|channel|>").empty());
  EXPECT_TRUE(s.push("final").empty());
  EXPECT_TRUE(s.push("<|message|>").empty());
  EXPECT_EQ(s.push("Hi").content, "Hi");
  EXPECT_TRUE(s.finish().empty());
}

TEST(ReplySplit, KindFollowsFormatAndTemplate) {
  EXPECT_EQ(split_kind(ReasoningFormat::Auto, Template::Harmony, "<|channel|>"), SplitKind::Harmony);
  EXPECT_EQ(split_kind(ReasoningFormat::DeepSeek, Template::Harmony, ""), SplitKind::Harmony);
  EXPECT_EQ(split_kind(ReasoningFormat::None, Template::Harmony, "<|channel|>"), SplitKind::None);
  EXPECT_EQ(split_kind(ReasoningFormat::Auto, Template::ChatML, "<think>"), SplitKind::Think);
  EXPECT_EQ(split_kind(ReasoningFormat::Auto, Template::ChatML, "<|im_start|>"), SplitKind::None);
  const std::string reply = "<|channel|>analysis<|message|>r<|end|><|start|>assistant<|channel|>final<|message|>c";
  ReplySplit none(SplitKind::None);
  EXPECT_EQ((none.push(reply) + none.finish()).content, reply);
  ReplySplit harmony(SplitKind::Harmony);
  const auto d = harmony.push(reply) + harmony.finish();
  EXPECT_EQ(d.reasoning, "r");
  EXPECT_EQ(d.content, "c");
  ReplySplit think(SplitKind::Think, /*open=*/true);
  const auto t = think.push("why</think>because") + think.finish();
  EXPECT_EQ(t.reasoning, "why");
  EXPECT_EQ(t.content, "because");
}

}  // namespace
}  // namespace pi::chat
