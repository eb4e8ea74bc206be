// A grammar over a vocabulary: which tokens keep the generated text a prefix of the language.
//
// TokenSet holds every token's bytes and a trie of them, built once per vocabulary. A
// TokenFilter is one generation's grammar state: allows(id) checks one token (cost: its
// bytes), allowed() walks the trie once for the whole vocabulary (a prefix the grammar
// refuses prunes every token under it). End-of-generation tokens are allowed exactly when
// the text is a complete sentence; tokens without bytes (other control tokens) never are.
// Answers are remembered per grammar state (a token's verdict, or the whole mask), so a state
// met again (inside a string, in each element of an array) costs a table lookup.
// Thread-safety: TokenSet is immutable and shared; a TokenFilter is one thread's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/matcher.h"

namespace pi::grammar {

class TokenSet {
 public:
  // pieces[id]: the bytes token id adds to the text; eog[id]: it ends generation.
  TokenSet(std::vector<std::string> pieces, std::vector<bool> eog);

  int32_t size() const { return static_cast<int32_t>(pieces_.size()); }
  const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
  bool eog(int32_t id) const { return eog_[static_cast<size_t>(id)]; }

 private:
  friend class TokenFilter;
  struct TrieNode {
    uint32_t first_edge = 0, n_edges = 0;    // edges_[first_edge ..)
    uint32_t first_token = 0, n_tokens = 0;  // tokens_[first_token ..): ids ending here
  };
  struct Edge {
    uint8_t byte;
    uint32_t child;
  };
  std::vector<std::string> pieces_;
  std::vector<bool> eog_;
  std::vector<TrieNode> trie_;  // [0] is the root (the empty prefix)
  std::vector<Edge> edges_;
  std::vector<int32_t> tokens_;
};

class TokenFilter {
 public:
  TokenFilter(std::shared_ptr<const Rules> rules, std::shared_ptr<const TokenSet> tokens);

  // Whether sampling token id keeps the text in the language.
  bool allows(int32_t id);
  // mask[id] = allows(id) for every token, in one walk of the trie.
  void allowed(std::vector<uint8_t>& mask);
  // The tokens allowed in the current state when a whole mask of it is known (allowed() ran
  // in this state before), in id order; nullptr otherwise.
  const std::vector<int32_t>* known_allowed() const {
    return verdicts_->complete ? &verdicts_->allowed : nullptr;
  }
  // Records a sampled token; false when the grammar refuses it (the state is unchanged).
  bool accept(int32_t id);
  // The text is a complete sentence that nothing can extend: generation is over.
  bool complete() const { return m_.complete(); }
  bool accepting() const { return m_.accepting(); }
  void reset();
  void copy_state(const TokenFilter& o);
  const TokenSet& tokens() const { return *tokens_; }

 private:
  void walk(uint32_t node, size_t depth, std::vector<uint8_t>& mask);
  // Points verdicts_ at the current state's remembered answers.
  void enter_state();

  // Per state: 0 unknown, 1 allowed, 2 refused for each token, and whether all are known.
  struct Verdicts {
    std::vector<uint8_t> token;
    bool complete = false;
    std::vector<int32_t> allowed;  // when complete: the allowed ids
  };
  static constexpr size_t kMaxStates = 64;  // remembered states; beyond, forget them all
  std::unordered_map<std::string, Verdicts> states_;
  Verdicts* verdicts_ = nullptr;
  std::string key_;

  Matcher m_;
  std::shared_ptr<const TokenSet> tokens_;
  std::vector<Frontier> depth_;  // walk scratch: the state after each prefix length
};

}  // namespace pi::grammar
