// UTF-8 decoding, character classes and the pre-tokenizers on hand-picked inputs (the
// oracle tests compare the pre-tokenizers with Hugging Face on many more).
#include <gtest/gtest.h>

#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"

namespace pi::tok {
namespace {

TEST(Utf8, DecodesValidSequences) {
  EXPECT_EQ(decode_utf8("A", 0).cp, U'A');
  EXPECT_EQ(decode_utf8("\xC3\xA9", 0).cp, U'\u00E9');
  EXPECT_EQ(decode_utf8("\xE6\xBC\xA2", 0).cp, U'\u6F22');
  const Utf8Char emoji = decode_utf8("\xF0\x9F\x98\x80", 0);
  EXPECT_EQ(emoji.cp, U'\U0001F600');
  EXPECT_EQ(emoji.len, 4u);
  EXPECT_TRUE(emoji.valid);
  EXPECT_EQ(decode_utf8(std::string_view("\0", 1), 0).cp, U'\0');
}

TEST(Utf8, RejectsIllFormedSequencesOneByteAtATime) {
  for (const char* bad : {"\x80", "\xBF", "\xC0\xAF", "\xC1\xBF", "\xE0\x80\xAF", "\xED\xA0\x80",
                          "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xFF", "\xE6\xBC", "\xF0\x9F\x98",
                          "\xE6\x41\x41"}) {
    const Utf8Char c = decode_utf8(bad, 0);
    EXPECT_FALSE(c.valid) << bad;
    EXPECT_EQ(c.len, 1u);
    EXPECT_EQ(c.cp, kReplacementChar);
  }
}

TEST(Utf8, EncodesCodePoints) {
  for (char32_t cp : {U'\0', U'A', U'\u00E9', U'\u07FF', U'\u0800', U'\uFFFD', U'\U00010000', U'\U0010FFFF'}) {
    std::string s;
    append_utf8(s, cp);
    const Utf8Char c = decode_utf8(s, 0);
    EXPECT_TRUE(c.valid);
    EXPECT_EQ(c.cp, cp);
    EXPECT_EQ(c.len, s.size());
  }
}

TEST(Utf8, IncompleteTail) {
  EXPECT_EQ(utf8_incomplete_tail(""), 0u);
  EXPECT_EQ(utf8_incomplete_tail("abc"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("a\xC3"), 1u);
  EXPECT_EQ(utf8_incomplete_tail("a\xC3\xA9"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xE6"), 1u);
  EXPECT_EQ(utf8_incomplete_tail("\xE6\xBC"), 2u);
  EXPECT_EQ(utf8_incomplete_tail("\xE6\xBC\xA2"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x98\x80"), 0u);
  // Not completable: invalid second byte, invalid lead, stray continuation.
  EXPECT_EQ(utf8_incomplete_tail("\xE0\x80"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xED\xA0"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xFF"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\x80\x80\x80"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xC3\x41"), 0u);
}

TEST(CharClass, FollowsUnicodeCategories) {
  EXPECT_EQ(char_class(U'a'), CharClass::Letter);
  EXPECT_EQ(char_class(U'\u00AA'), CharClass::Letter);  // Lo
  EXPECT_EQ(char_class(U'\u01C5'), CharClass::Letter);  // Lt
  EXPECT_EQ(char_class(U'\u6F22'), CharClass::Letter);
  EXPECT_EQ(char_class(U'7'), CharClass::Number);
  EXPECT_EQ(char_class(U'\u00B2'), CharClass::Number);  // No
  EXPECT_EQ(char_class(U'\u2160'), CharClass::Number);  // Nl
  EXPECT_EQ(char_class(U'\u0663'), CharClass::Number);
  for (char32_t ws : {U' ', U'\t', U'\n', U'\r', U'\v', U'\f', U'\u0085', U'\u00A0', U'\u2007', U'\u3000', U'\u2028'}) {
    EXPECT_EQ(char_class(ws), CharClass::Space) << static_cast<uint32_t>(ws);
  }
  for (char32_t other : {U'!', U'\u0301', U'\u200B', U'\uFEFF', U'\x1C', U'\U0001F600', U'\uFFFD'}) {
    EXPECT_EQ(char_class(other), CharClass::Other) << static_cast<uint32_t>(other);
  }
  EXPECT_STRNE(kUnicodeVersion, "");
}

std::vector<std::string> split(PreTokenizer kind, std::string_view text) {
  std::vector<ByteSpan> spans;
  pretokenize(kind, text, spans);
  std::vector<std::string> out;
  size_t expect_begin = 0;
  for (const ByteSpan& s : spans) {
    EXPECT_EQ(s.begin, expect_begin);
    EXPECT_LT(s.begin, s.end);
    expect_begin = s.end;
    out.emplace_back(text.substr(s.begin, s.end - s.begin));
  }
  EXPECT_EQ(expect_begin, text.size());
  return out;
}

using V = std::vector<std::string>;

TEST(PreTokenize, Gpt2) {
  EXPECT_EQ(split(PreTokenizer::Gpt2, ""), V{});
  EXPECT_EQ(split(PreTokenizer::Gpt2, "Hello world's  end"), V({"Hello", " world", "'s", " ", " end"}));
  EXPECT_EQ(split(PreTokenizer::Gpt2, "x  \n\n y"), V({"x", "  \n\n", " y"}));
  EXPECT_EQ(split(PreTokenizer::Gpt2, "a 123 ?! b  "), V({"a", " 123", " ?!", " b", "  "}));
  EXPECT_EQ(split(PreTokenizer::Gpt2, "DON'T"), V({"DON", "'", "T"}));
  EXPECT_EQ(split(PreTokenizer::Gpt2, "\xFF\xFEx"), V({"\xFF\xFE", "x"}));
}

TEST(PreTokenize, Llama3) {
  EXPECT_EQ(split(PreTokenizer::Llama3, "Hello   world's 12345 \n\n  x\t\ty"),
            V({"Hello", "  ", " world", "'s", " ", "123", "45", " \n\n", " ", " x", "\t", "\ty"}));
  EXPECT_EQ(split(PreTokenizer::Llama3, "DON'T"), V({"DON", "'T"}));
  EXPECT_EQ(split(PreTokenizer::Llama3, "x'\xC5\xBF" "a"), V({"x", "'\xC5\xBF", "a"}));
  EXPECT_EQ(split(PreTokenizer::Llama3, "(abc) ...\n\nx"), V({"(abc", ")", " ...\n\n", "x"}));
}

}  // namespace
}  // namespace pi::tok
