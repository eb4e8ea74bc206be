// GBNF, llama.cpp's grammar format, parsed into flat rules the matcher walks.
//
// The syntax (the same as llama.cpp's, so users' grammar files work):
//   name ::= alternatives        one rule per line; `root` is where matching starts
//   a b c                        a sequence;  a | b   alternatives (a newline may follow `|`)
//   "text"                       a literal: escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH
//   [a-z0-9_] [^"\\]             a character class, ^ negates it;  .  any character
//   ( ... )                      a group; inside it newlines are spaces
//   x* x+ x? x{m} x{m,} x{m,n} x{,n}   repetitions of the element before them
//   # comment                    to the end of the line
// Characters are Unicode code points; the grammar text is UTF-8.
//
// The parsed form: every rule is a list of alternatives, every alternative a run of elements
// (a character class to match, or a reference to a rule) ended by an End element, all in one
// array. Groups and repetitions become generated rules (x* becomes r ::= x r | ""), so a
// matcher only ever sees classes and references. Left recursion (a rule that can reach itself
// without consuming a character) is refused: a top-down matcher would loop on it.
// Thread-safety: Rules is immutable after parse_gbnf(); share it freely.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"

namespace pi::grammar {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// A set of code points: sorted, disjoint, inclusive ranges, with an ASCII bitmap for speed.
struct CharSet {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  std::array<uint64_t, 2> ascii{};

  bool matches(uint32_t c) const;
  // Whether any code point in [lo, hi] is in the set.
  bool intersects(uint32_t lo, uint32_t hi) const;
};

enum class ElemKind : uint8_t { End, Char, Ref };

struct Elem {
  ElemKind kind = ElemKind::End;
  uint32_t arg = 0;  // Char: index into Rules::sets; Ref: rule id
};

struct Rules {
  std::vector<Elem> elems;                  // every alternative, each ended by End
  std::vector<CharSet> sets;                // the character classes Char elements name
  std::vector<std::vector<uint32_t>> alts;  // per rule: where each alternative starts in elems
  std::vector<std::string> names;           // per rule; generated rules are NAME_N
  uint32_t root = 0;
};

// Limits that keep a hostile grammar from exhausting memory or the stack.
inline constexpr size_t kMaxGrammarBytes = 1 << 20;
inline constexpr size_t kMaxElems = 1 << 20;
inline constexpr int kMaxNesting = 100;
inline constexpr uint32_t kMaxRepeat = 1000;

// Parses GBNF text. Errors are one line naming the line and column: "grammar: line 2,
// column 9: expected '::='".
Result<Rules> parse_gbnf(std::string_view text);

// Decodes one UTF-8 code point at s[i], advancing i. false on an invalid or truncated
// sequence.
bool decode_utf8(std::string_view s, size_t& i, uint32_t& cp);

}  // namespace pi::grammar
