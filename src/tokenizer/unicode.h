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
CharClass char_class(char32_t cp);

struct CodeRange {
  char32_t lo;
  char32_t hi;  // inclusive
};
extern const char kUnicodeVersion[];
extern const CodeRange kLetterRanges[];
extern const size_t kLetterRanges_size;
extern const CodeRange kNumberRanges[];
extern const size_t kNumberRanges_size;

}  // namespace pi::tok
