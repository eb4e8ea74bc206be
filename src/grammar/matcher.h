// Where a text stands in a grammar: the set of pushdown stacks (llama.cpp's approach) that
// the text so far leaves, advanced byte by byte (UTF-8, a token may end inside a character).
//
// A stack is a chain of nodes in an arena, each a position in Rules::elems and the node to
// return to; stacks share their tails. Every live stack's top is a Char element: references
// are expanded eagerly and a reference in tail position returns straight to its caller's
// caller, so x* and x+ need no stack growth. The text is accepted when a stack emptied.
//
// Speculative steps (checking a token) add nodes past a mark(); rollback(mark) drops them.
// Thread-safety: a Matcher is used by one thread at a time; Rules is shared read-only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/gbnf.h"

namespace pi::grammar {

// The state after some text: the stacks' top nodes, whether a stack emptied, and a partial
// UTF-8 character (need > 0: bytes still to come; cp: its bits so far).
struct Frontier {
  std::vector<int32_t> tops;
  bool accepting = false;
  uint32_t cp = 0;
  uint8_t need = 0;
  uint8_t len = 0;  // the partial character's length in bytes (2..4)

  bool dead() const { return tops.empty() && !accepting; }
};

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Rules> rules);

  const Frontier& state() const { return state_; }
  // The text is a sentence of the grammar (no partial character).
  bool accepting() const { return state_.accepting && state_.need == 0; }
  // Accepting, and no character can follow.
  bool complete() const { return accepting() && state_.tops.empty(); }
  // Back to the empty text.
  void reset();
  // Advances by `bytes`; false (and the state unchanged) when they leave the language.
  bool accept(std::string_view bytes);
  // Whether `bytes` keeps the text a prefix of the language; the state is unchanged.
  bool check(std::string_view bytes);

  // Low level, for walking many continuations from one state (the token trie): one byte from
  // `in` into `out` (which must not alias `in`). false when `out` is dead. Adds nodes: undo
  // them with rollback(mark()) once `out` is no longer needed.
  bool step(const Frontier& in, uint8_t byte, Frontier& out);
  size_t mark() const { return nodes_.size(); }
  void rollback(size_t m) { nodes_.resize(m); }
  // Copies another matcher's state (same rules).
  void copy_state(const Matcher& o);
  // Bytes that identify the state exactly (equal keys: the same stacks, so the same answers
  // to every check); states reached by different texts may still get different keys.
  void state_key(std::string& out) const;

 private:
  struct Node {
    uint32_t pos;    // index into rules_->elems
    int32_t parent;  // -1: the bottom of the stack
  };
  int32_t push(uint32_t pos, int32_t parent);
  // Expands references until every stack's top is a character class. A derivation deeper
  // than kMaxExpandDepth references without a character (only a pathological grammar: a
  // chain of thousands of rules) is cut there, so the native stack stays bounded.
  static constexpr int kMaxExpandDepth = 10000;
  void expand(int32_t node, Frontier& out, int depth = 0);
  void advance_node(int32_t node, Frontier& out);
  void dedupe(Frontier& f) const;
  // Rebuilds the arena from the live stacks, sharing equal tails (the committed state only).
  void compact();

  std::shared_ptr<const Rules> rules_;
  std::vector<Node> nodes_;
  Frontier state_, scratch_[2];
  std::vector<int32_t> remap_;
};

}  // namespace pi::grammar
