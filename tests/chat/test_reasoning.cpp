// The reasoning/answer split of a reply (chat/reasoning.h): whole replies, every way of cutting
// a reply into pieces (a tag split anywhere gives the same result), replies without a block, a
// block the prompt opened, an unfinished block, and the formats.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chat/reasoning.h"

namespace pi::chat {
namespace {

ReasoningSplit::Delta split(const std::vector<std::string>& pieces, bool open = false) {
  ReasoningSplit s(open);
  ReasoningSplit::Delta all;
  for (const std::string& p : pieces) all = all + s.push(p);
  return all + s.finish();
}

// Every cut of `text` into two and three pieces gives `reasoning` and `content`.
void expect_every_cut(const std::string& text, const std::string& reasoning, const std::string& content,
                      bool open = false) {
  const auto whole = split({text}, open);
  EXPECT_EQ(whole.reasoning, reasoning) << text;
  EXPECT_EQ(whole.content, content) << text;
  for (size_t i = 0; i <= text.size(); ++i) {
    for (size_t j = i; j <= text.size(); ++j) {
      const auto d = split({text.substr(0, i), text.substr(i, j - i), text.substr(j)}, open);
      ASSERT_EQ(d.reasoning, reasoning) << "cut at " << i << ", " << j << ": " << text;
      ASSERT_EQ(d.content, content) << "cut at " << i << ", " << j << ": " << text;
    }
  }
}

TEST(ReasoningSplit, ThinkBlockApartFromTheAnswer) {
  expect_every_cut("<think>\nLet me add 2 and 2.\n</think>\n\nIt is 4.", "\nLet me add 2 and 2.\n", "It is 4.");
  expect_every_cut("\n <think>a<b</think>c", "a<b", "c");
  expect_every_cut("<think></think>\n\nshort", "", "short");
}

TEST(ReasoningSplit, NoBlockIsAllAnswer) {
  expect_every_cut("Hello <think>not a block</think>", "", "Hello <think>not a block</think>");
  expect_every_cut(" <thin>k", "", " <thin>k");
  expect_every_cut("<", "", "<");
  expect_every_cut("", "", "");
}

TEST(ReasoningSplit, OpenedByThePromptAndUnfinished) {
  expect_every_cut("I think so.</think>Yes.", "I think so.", "Yes.", /*open=*/true);
  // An unfinished block (the reply hit max_tokens while thinking) is all reasoning, a dangling
  // partial tag included.
  expect_every_cut("<think>still going </thi", "still going </thi", "");
}

TEST(ReasoningSplit, Formats) {
  ReasoningFormat f{};
  ASSERT_TRUE(parse_reasoning_format("deepseek", f));
  EXPECT_EQ(f, ReasoningFormat::DeepSeek);
  EXPECT_FALSE(parse_reasoning_format("r1", f));
  const char* qwen3 = "{%- if enable_thinking %}<think>\\n{%- endif %}<|im_start|>";
  EXPECT_TRUE(splits_reasoning(ReasoningFormat::Auto, qwen3));
  EXPECT_FALSE(splits_reasoning(ReasoningFormat::Auto, "<|im_start|>"));
  EXPECT_FALSE(splits_reasoning(ReasoningFormat::None, qwen3));
  EXPECT_TRUE(splits_reasoning(ReasoningFormat::DeepSeek, ""));
}

}  // namespace
}  // namespace pi::chat
