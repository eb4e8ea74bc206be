#include "tokenizer/pretokenize.h"

#include "tokenizer/unicode.h"

namespace pi::tok {
namespace {

struct Char {
  char32_t cp;
  CharClass cls;
  size_t offset;  // byte offset in the text
};

std::vector<Char> split_chars(std::string_view text) {
  std::vector<Char> chars;
  chars.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = decode_utf8(text, pos);
    // An invalid byte gets a code point that is in no class (U+FFFD is a symbol, So).
    chars.push_back({c.cp, c.valid ? char_class(c.cp) : CharClass::Other, pos});
    pos += c.len;
  }
  return chars;
}

// Matches the regex alternatives over a decoded text; every method returns the end (char
// index) of a match starting at i, or i if the alternative does not match there.
class Matcher {
 public:
  explicit Matcher(const std::vector<Char>& chars) : c_(chars), n_(chars.size()) {}

  bool is(size_t i, CharClass cls) const { return i < n_ && c_[i].cls == cls; }
  bool is_newline(size_t i) const { return i < n_ && (c_[i].cp == '\r' || c_[i].cp == '\n'); }

  size_t run(size_t i, CharClass cls) const {
    while (i < n_ && c_[i].cls == cls) ++i;
    return i;
  }

  // 's|'t|'re|'ve|'m|'ll|'d, optionally case-insensitive (Unicode simple case folding,
  // under which U+017F LATIN SMALL LETTER LONG S also matches 's').
  size_t contraction(size_t i, bool ignore_case) const {
    if (i + 1 >= n_ || c_[i].cp != '\'') return i;
    auto fold = [&](size_t k) -> char32_t {
      if (k >= n_) return 0;
      char32_t cp = c_[k].cp;
      if (!ignore_case) return cp;
      if (cp >= 'A' && cp <= 'Z') return cp - 'A' + 'a';
      if (cp == 0x17F) return 's';
      return cp;
    };
    const char32_t a = fold(i + 1);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    const char32_t b = fold(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return i;
  }

  // " ?X+" for a class X.
  size_t space_then_run(size_t i, CharClass cls) const {
    size_t j = i;
    if (c_[i].cp == ' ' && is(i + 1, cls)) j = i + 1;
    return is(j, cls) ? run(j, cls) : i;
  }

  // \s+(?!\S)|\s+ : a whitespace run, less its last character when a non-space follows.
  size_t whitespace(size_t i) const {
    const size_t k = run(i, CharClass::Space);
    if (k == i) return i;
    if (k == n_ || k - i == 1) return k;
    return k - 1;
  }

  size_t gpt2(size_t i) const {
    size_t e;
    if ((e = contraction(i, false)) != i) return e;
    if ((e = space_then_run(i, CharClass::Letter)) != i) return e;
    if ((e = space_then_run(i, CharClass::Number)) != i) return e;
    if ((e = space_then_run(i, CharClass::Other)) != i) return e;
    return whitespace(i);
  }

  // Llama 3's regex; Qwen2's is the same with runs of at most one digit.
  size_t llama3(size_t i, size_t max_digits) const {
    size_t e;
    if ((e = contraction(i, true)) != i) return e;
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (is(i, CharClass::Letter)) return run(i, CharClass::Letter);
    if (!is_newline(i) && !is(i, CharClass::Number) && is(i + 1, CharClass::Letter)) {
      return run(i + 1, CharClass::Letter);
    }
    // \p{N}{1,3} (Qwen2: \p{N})
    if (is(i, CharClass::Number)) {
      e = i;
      while (e < n_ && e < i + max_digits && c_[e].cls == CharClass::Number) ++e;
      return e;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    if ((e = space_then_run(i, CharClass::Other)) != i) {
      while (is_newline(e)) ++e;
      return e;
    }
    // \s*[\r\n]+ : the whitespace run up to and including its last newline.
    const size_t k = run(i, CharClass::Space);
    for (size_t m = k; m > i; --m) {
      if (is_newline(m - 1)) return m;
    }
    return whitespace(i);
  }

 private:
  const std::vector<Char>& c_;
  size_t n_;
};

}  // namespace

void pretokenize(PreTokenizer kind, std::string_view text, std::vector<ByteSpan>& out) {
  const std::vector<Char> chars = split_chars(text);
  const Matcher m(chars);
  for (size_t i = 0; i < chars.size();) {
    size_t e = i;
    switch (kind) {
      case PreTokenizer::Gpt2:
        e = m.gpt2(i);
        break;
      case PreTokenizer::Llama3:
        e = m.llama3(i, 3);
        break;
      case PreTokenizer::Qwen2:
        e = m.llama3(i, 1);
        break;
    }
    if (e == i) e = i + 1;  // unreachable: the alternatives cover every character class
    const size_t end = e < chars.size() ? chars[e].offset : text.size();
    out.push_back({chars[i].offset, end});
    i = e;
  }
}

}  // namespace pi::tok
