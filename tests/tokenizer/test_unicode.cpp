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
  EXPECT_EQ(char_info(U'a').cls, CharClass::Letter);
  EXPECT_EQ(char_info(U'\u00AA').cls, CharClass::Letter);  // Lo
  EXPECT_EQ(char_info(U'\u01C5').cls, CharClass::Letter);  // Lt
  EXPECT_EQ(char_info(U'\u6F22').cls, CharClass::Letter);
  EXPECT_EQ(char_info(U'7').cls, CharClass::Number);
  EXPECT_EQ(char_info(U'\u00B2').cls, CharClass::Number);  // No
  EXPECT_EQ(char_info(U'\u2160').cls, CharClass::Number);  // Nl
  EXPECT_EQ(char_info(U'\u0663').cls, CharClass::Number);
  for (char32_t ws : {U' ', U'\t', U'\n', U'\r', U'\v', U'\f', U'\u0085', U'\u00A0', U'\u2007', U'\u3000', U'\u2028'}) {
    EXPECT_EQ(char_info(ws).cls, CharClass::Space) << static_cast<uint32_t>(ws);
  }
  for (char32_t other : {U'!', U'\u0301', U'\u200B', U'\uFEFF', U'\x1C', U'\U0001F600', U'\uFFFD'}) {
    EXPECT_EQ(char_info(other).cls, CharClass::Other) << static_cast<uint32_t>(other);
  }
  EXPECT_STRNE(kUnicodeVersion, "");
}

// The table is searched by binary search, and ASCII is answered without it.
TEST(CharClass, TableIsSortedAndAsciiAgreesWithIt) {
  for (size_t k = 0; k < kCategoryRanges_size; ++k) {
    EXPECT_LE(kCategoryRanges[k].lo, kCategoryRanges[k].hi) << k;
    if (k > 0) {
      EXPECT_LT(kCategoryRanges[k - 1].hi, kCategoryRanges[k].lo) << k;
    }
  }
  for (char32_t cp = 0; cp < 0x80; ++cp) {
    Category want = Category::Other;
    for (size_t k = 0; k < kCategoryRanges_size; ++k) {
      if (cp >= kCategoryRanges[k].lo && cp <= kCategoryRanges[k].hi) want = kCategoryRanges[k].cat;
    }
    EXPECT_EQ(char_info(cp).cat, want) << static_cast<uint32_t>(cp);
  }
}

TEST(CharClass, CategoriesOfTheCaseAwareSplit) {
  for (char32_t c : {U'A', U'\u00C9', U'\u01C4', U'\u01C5', U'\u1F88', U'\U0001D400'}) {  // Lu, Lt
    EXPECT_EQ(char_info(c).cat, Category::Upper) << static_cast<uint32_t>(c);
    EXPECT_EQ(char_info(c).cls, CharClass::Letter);
  }
  for (char32_t c : {U'a', U'\u00DF', U'\u01C6', U'\u017F', U'\uAB70'}) {  // Ll
    EXPECT_EQ(char_info(c).cat, Category::Lower) << static_cast<uint32_t>(c);
    EXPECT_EQ(char_info(c).cls, CharClass::Letter);
  }
  for (char32_t c : {U'\u02B0', U'\u3005', U'\u30FC', U'\u00AA', U'\u6F22', U'\uAC00'}) {  // Lm, Lo
    EXPECT_EQ(char_info(c).cat, Category::Caseless) << static_cast<uint32_t>(c);
    EXPECT_EQ(char_info(c).cls, CharClass::Letter);
  }
  for (char32_t c : {U'\u0301', U'\u093F', U'\u20DD', U'\uFE0F'}) {  // Mn, Mc, Me: not \p{L}
    EXPECT_EQ(char_info(c).cat, Category::Mark) << static_cast<uint32_t>(c);
    EXPECT_EQ(char_info(c).cls, CharClass::Other);
  }
  EXPECT_EQ(char_info(U'\u2160').cat, Category::Number);
  // Cased symbols (So) are not letters.
  EXPECT_EQ(char_info(U'\u24D0').cat, Category::Other);
  EXPECT_EQ(char_info(U' ').cat, Category::Other);
  EXPECT_EQ(char_info(U' ').cls, CharClass::Space);
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

TEST(PreTokenize, O200kSplitsWordsByCase) {
  const auto o200k = [](std::string_view text) { return split(PreTokenizer::O200k, text); };
  // An upper-case run then a lower-case one is one word; a lower-to-upper change starts one.
  EXPECT_EQ(o200k("camelCaseHTMLParser"), V({"camel", "Case", "HTMLParser"}));
  EXPECT_EQ(o200k("ALLCAPS lower Title"), V({"ALLCAPS", " lower", " Title"}));
  // Titlecase (Lt) is on the upper side: "ǅungla" is one word, so is " ǄA" (Lu Lu).
  EXPECT_EQ(o200k("\xC7\x85ungla \xC7\x84" "A"), V({"\xC7\x85ungla", " \xC7\x84" "A"}));
  // Modifier letters (Lm) are on both sides: "ʰ" can end a word, so "ʰA" is two words, while
  // "Aʰa" is one.
  EXPECT_EQ(o200k("\xCA\xB0" "A"), V({"\xCA\xB0", "A"}));
  EXPECT_EQ(o200k("A\xCA\xB0" "a"), V({"A\xCA\xB0" "a"}));
  // Combining marks stay with their letter, and as [^\r\n\p{L}\p{N}] may also lead a word.
  EXPECT_EQ(o200k("Cafe\xCC\x81 \xCC\x81" "abc"), V({"Cafe\xCC\x81", " \xCC\x81" "abc"}));
  EXPECT_EQ(o200k(" \xCC\x81" "A"), V({" \xCC\x81", "A"}));
}

TEST(PreTokenize, O200kContractionsDigitsPunctuationAndSpace) {
  const auto o200k = [](std::string_view text) { return split(PreTokenizer::O200k, text); };
  // Contractions, in any case, end the word before them.
  EXPECT_EQ(o200k("DON'T stop, You'Re HelloWorld's"),
            V({"DON'T", " stop", ",", " You'Re", " Hello", "World's"}));
  EXPECT_EQ(o200k("1234567"), V({"123", "456", "7"}));
  // Punctuation takes the newlines and slashes after it.
  EXPECT_EQ(o200k("a/b//c"), V({"a", "/b", "//", "c"}));
  EXPECT_EQ(o200k("!!\n\n/x"), V({"!!\n\n/", "x"}));
  EXPECT_EQ(o200k("...\r\n x"), V({"...\r\n", " x"}));
  EXPECT_EQ(o200k("  word  "), V({" ", " word", "  "}));
  EXPECT_EQ(o200k("\t\tx\r\n\r\n y"), V({"\t", "\tx", "\r\n\r\n", " y"}));
  // Invalid bytes are characters of no class: one may lead a word, or be punctuation.
  EXPECT_EQ(o200k("\xFF" "Abc"), V({"\xFF" "Abc"}));
  EXPECT_EQ(o200k("\xFF\xFE\n/"), V({"\xFF\xFE\n/"}));
}

}  // namespace
}  // namespace pi::tok
