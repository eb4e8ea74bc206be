// UTF-8 and Unicode character classes for the tokenizers. Internal to src/tokenizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pi::tok {

constexpr char32_t kReplacementChar = 0xFFFD;

// One decoded UTF-8 sequence.
struct Utf8Char {
  char32_t cp = 0;   // the code point, or kReplacementChar when !valid
  uint32_t len = 1;  // bytes consumed: 1..4; an invalid sequence consumes one byte
  bool valid = true;
};

// Decodes the sequence starting at s[pos] (pos < s.size()). Strict: overlong forms,
// surrogates, code points above U+10FFFF, stray continuation bytes and truncated sequences
// are invalid, and then exactly one byte is consumed.
Utf8Char decode_utf8(std::string_view s, size_t pos);

void append_utf8(std::string& out, char32_t cp);

// Bytes at the end of `s` that are a proper prefix of a valid UTF-8 sequence, i.e. that
// a later byte could still complete (0..3).
size_t utf8_incomplete_tail(std::string_view s);

// Character classes of the pre-tokenizer regexes: \p{L} (general category L*), \p{N} (N*)
// and \s (the Unicode White_Space property, as Oniguruma and PCRE use it).
enum class CharClass : uint8_t { Other, Letter, Number, Space };

// General categories, grouped as the pre-tokenizer regexes tell them apart. \p{L} is Upper,
// Lower and Caseless together. The o200k regex's case-aware classes overlap:
// [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] is Upper, Caseless and Mark, [\p{Ll}\p{Lm}\p{Lo}\p{M}] is Lower,
// Caseless and Mark.
enum class Category : uint8_t {
  Other,     // C*, P*, S*, Z*
  Upper,     // Lu, Lt
  Lower,     // Ll
  Caseless,  // Lm, Lo
  Mark,      // Mn, Mc, Me: not \p{L}, so CharClass::Other, like punctuation
  Number,    // Nd, Nl, No
};

// A character's class and category from one table lookup. White space is Category::Other.
struct CharInfo {
  CharClass cls;
  Category cat;
};
CharInfo char_info(char32_t cp);

struct CategoryRange {
  char32_t lo;
  char32_t hi;  // inclusive
  Category cat;
};
extern const char kUnicodeVersion[];
// Sorted, disjoint; code points in none of them are Category::Other.
extern const CategoryRange kCategoryRanges[];
extern const size_t kCategoryRanges_size;

}  // namespace pi::tok
