#include "tokenizer/pretokenize.h"

#include "tokenizer/unicode.h"

namespace pi::tok {
namespace {

struct Char {
  char32_t cp;
  CharClass cls;
  Category cat;
  size_t offset;  // byte offset in the text
};

std::vector<Char> split_chars(std::string_view text) {
  std::vector<Char> chars;
  chars.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = decode_utf8(text, pos);
    // An invalid byte is in no class (U+FFFD, its code point, is a symbol, So).
    const CharInfo info = c.valid ? char_info(c.cp) : CharInfo{CharClass::Other, Category::Other};
    chars.push_back({c.cp, info.cls, info.cat, pos});
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

  // o200k's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}]: Lm, Lo and marks are in
  // both.
  bool is_upper(size_t i) const {
    return i < n_ && (c_[i].cat == Category::Upper || c_[i].cat == Category::Caseless ||
                      c_[i].cat == Category::Mark);
  }
  bool is_lower(size_t i) const {
    return i < n_ && (c_[i].cat == Category::Lower || c_[i].cat == Category::Caseless ||
                      c_[i].cat == Category::Mark);
  }
  size_t run_upper(size_t i) const {
    while (is_upper(i)) ++i;
    return i;
  }
  size_t run_lower(size_t i) const {
    while (is_lower(i)) ++i;
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

  // \p{N}{1,max}
  size_t digits(size_t i, size_t max) const {
    size_t e = i;
    while (e < n_ && e < i + max && c_[e].cls == CharClass::Number) ++e;
    return e;
  }

  // ' ?[^\s\p{L}\p{N}]+[\r\n]*', or with [\r\n/]* when `slash`.
  size_t punctuation(size_t i, bool slash) const {
    size_t e = space_then_run(i, CharClass::Other);
    if (e == i) return i;
    while (is_newline(e) || (slash && e < n_ && c_[e].cp == '/')) ++e;
    return e;
  }

  // \s*[\r\n]+|\s+(?!\S)|\s+ : the whitespace run up to and including its last newline, else
  // whitespace().
  size_t space_or_newlines(size_t i) const {
    const size_t k = run(i, CharClass::Space);
    for (size_t m = k; m > i; --m) {
      if (is_newline(m - 1)) return m;
    }
    return whitespace(i);
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
    if ((e = digits(i, max_digits)) != i) return e;
    if ((e = punctuation(i, false)) != i) return e;
    return space_or_newlines(i);
  }

  // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)? from j.
  // The first run gives back characters until the second can start, so the second starts at
  // the last lower-set character in or just after the greedy upper-set run: "ʰA" (Lm, Lu)
  // matches only "ʰ".
  size_t upper_then_lower(size_t j) const {
    const size_t u = run_upper(j);
    for (size_t k = u + 1; k-- > j;) {
      if (is_lower(k)) return contraction(run_lower(k), true);
    }
    return j;
  }

  // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)? from j.
  size_t upper_word(size_t j) const {
    const size_t u = run_upper(j);
    return u == j ? j : contraction(run_lower(u), true);
  }

  // o200k_base (GPT-4o, gpt-oss):
  //   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|...)?|
  //   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|...)?|
  //   \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
  size_t o200k(size_t i) const {
    size_t e;
    // Each word alternative tries its optional first character taken, then not taken: a mark
    // is both such a character and in both letter sets.
    const bool first = !is_newline(i) && !is(i, CharClass::Letter) && !is(i, CharClass::Number);
    if (first && (e = upper_then_lower(i + 1)) != i + 1) return e;
    if ((e = upper_then_lower(i)) != i) return e;
    if (first && (e = upper_word(i + 1)) != i + 1) return e;
    if ((e = upper_word(i)) != i) return e;
    if ((e = digits(i, 3)) != i) return e;
    if ((e = punctuation(i, true)) != i) return e;
    return space_or_newlines(i);
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
      case PreTokenizer::O200k:
        e = m.o200k(i);
        break;
    }
    if (e == i) e = i + 1;  // unreachable: the alternatives cover every character class
    const size_t end = e < chars.size() ? chars[e].offset : text.size();
    out.push_back({chars[i].offset, end});
    i = e;
  }
}

}  // namespace pi::tok
