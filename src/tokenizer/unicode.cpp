#include "tokenizer/unicode.h"

#include <algorithm>

namespace pi::tok {
namespace {

bool is_cont(uint8_t b) { return (b & 0xC0) == 0x80; }

Category lookup_category(char32_t cp) {
  // ASCII, most characters of most text, without the search.
  if (cp < 0x80) {
    if (cp >= 'a' && cp <= 'z') return Category::Lower;
    if (cp >= 'A' && cp <= 'Z') return Category::Upper;
    if (cp >= '0' && cp <= '9') return Category::Number;
    return Category::Other;
  }
  const CategoryRange* begin = kCategoryRanges;
  const CategoryRange* end = begin + kCategoryRanges_size;
  const CategoryRange* it =
      std::upper_bound(begin, end, cp, [](char32_t c, const CategoryRange& r) { return c < r.lo; });
  return it != begin && cp <= (it - 1)->hi ? (it - 1)->cat : Category::Other;
}

bool is_white_space(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

// Valid range for the second byte of a sequence with lead byte `lead` (Unicode Table 3-7).
void second_byte_range(uint8_t lead, uint8_t& lo, uint8_t& hi) {
  lo = 0x80;
  hi = 0xBF;
  if (lead == 0xE0) lo = 0xA0;
  if (lead == 0xED) hi = 0x9F;
  if (lead == 0xF0) lo = 0x90;
  if (lead == 0xF4) hi = 0x8F;
}

// Sequence length implied by a lead byte, or 0 if it cannot start a sequence.
uint32_t lead_length(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

}  // namespace

Utf8Char decode_utf8(std::string_view s, size_t pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + pos;
  const size_t avail = s.size() - pos;
  const uint8_t b0 = p[0];
  const uint32_t len = lead_length(b0);
  if (len == 1) return {b0, 1, true};
  const Utf8Char bad{kReplacementChar, 1, false};
  if (len == 0 || avail < len) return bad;
  uint8_t lo, hi;
  second_byte_range(b0, lo, hi);
  if (p[1] < lo || p[1] > hi) return bad;
  for (uint32_t i = 2; i < len; ++i) {
    if (!is_cont(p[i])) return bad;
  }
  char32_t cp = b0 & (0xFF >> (len + 1));
  for (uint32_t i = 1; i < len; ++i) cp = (cp << 6) | (p[i] & 0x3F);
  return {cp, len, true};
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t utf8_incomplete_tail(std::string_view s) {
  const size_t n = s.size();
  // The lead byte of an incomplete sequence is at most 3 bytes from the end.
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<uint8_t>(s[n - back]);
    if (is_cont(b)) continue;
    const uint32_t len = lead_length(b);
    if (len <= back) return 0;  // ASCII, invalid lead, or a sequence that is already complete
    if (back >= 2) {
      uint8_t lo, hi;
      second_byte_range(b, lo, hi);
      const auto b1 = static_cast<uint8_t>(s[n - back + 1]);
      if (b1 < lo || b1 > hi) return 0;
    }
    return back;
  }
  return 0;
}

CharInfo char_info(char32_t cp) {
  if (is_white_space(cp)) return {CharClass::Space, Category::Other};
  const Category cat = lookup_category(cp);
  switch (cat) {
    case Category::Upper:
    case Category::Lower:
    case Category::Caseless:
      return {CharClass::Letter, cat};
    case Category::Number:
      return {CharClass::Number, cat};
    case Category::Mark:
    case Category::Other:
      break;
  }
  return {CharClass::Other, cat};
}

}  // namespace pi::tok
