#include "grammar/token_filter.h"

#include <algorithm>
#include <numeric>

namespace pi::grammar {

TokenSet::TokenSet(std::vector<std::string> pieces, std::vector<bool> eog)
    : pieces_(std::move(pieces)), eog_(std::move(eog)) {
  eog_.resize(pieces_.size(), false);
  // Build the trie from the pieces in byte order: each node's children are then contiguous
  // runs, laid out breadth by breadth per parent as they are first met.
  std::vector<int32_t> order(pieces_.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return pieces_[static_cast<size_t>(a)] < pieces_[static_cast<size_t>(b)];
  });
  // Recursive construction over the sorted range [lo, hi) sharing the prefix of `depth` bytes.
  struct Build {
    TokenSet& s;
    const std::vector<int32_t>& order;
    void node(uint32_t id, size_t lo, size_t hi, size_t depth) {
      size_t i = lo;
      s.trie_[id].first_token = static_cast<uint32_t>(s.tokens_.size());
      while (i < hi && s.pieces_[static_cast<size_t>(order[i])].size() == depth) {
        if (!s.eog_[static_cast<size_t>(order[i])] && depth > 0) s.tokens_.push_back(order[i]);
        ++i;
      }
      s.trie_[id].n_tokens = static_cast<uint32_t>(s.tokens_.size()) - s.trie_[id].first_token;
      std::vector<std::pair<size_t, size_t>> runs;
      while (i < hi) {
        const char b = s.pieces_[static_cast<size_t>(order[i])][depth];
        size_t j = i;
        while (j < hi && s.pieces_[static_cast<size_t>(order[j])][depth] == b) ++j;
        runs.emplace_back(i, j);
        i = j;
      }
      s.trie_[id].first_edge = static_cast<uint32_t>(s.edges_.size());
      s.trie_[id].n_edges = static_cast<uint32_t>(runs.size());
      const auto first_child = static_cast<uint32_t>(s.trie_.size());
      for (auto [a, b] : runs) {
        s.edges_.push_back({static_cast<uint8_t>(s.pieces_[static_cast<size_t>(order[a])][depth]),
                            static_cast<uint32_t>(s.trie_.size())});
        s.trie_.emplace_back();
        (void)b;
      }
      for (size_t k = 0; k < runs.size(); ++k)
        node(first_child + static_cast<uint32_t>(k), runs[k].first, runs[k].second, depth + 1);
    }
  };
  trie_.emplace_back();
  Build{*this, order}.node(0, 0, order.size(), 0);
}

TokenFilter::TokenFilter(std::shared_ptr<const Rules> rules, std::shared_ptr<const TokenSet> tokens)
    : m_(std::move(rules)), tokens_(std::move(tokens)) {
  enter_state();
}

void TokenFilter::enter_state() {
  m_.state_key(key_);
  auto it = states_.find(key_);
  if (it == states_.end()) {
    if (states_.size() >= kMaxStates) states_.clear();
    it = states_.emplace(key_, Verdicts{}).first;
    it->second.token.assign(static_cast<size_t>(tokens_->size()), 0);
  }
  verdicts_ = &it->second;
}

void TokenFilter::reset() {
  m_.reset();
  enter_state();
}

void TokenFilter::copy_state(const TokenFilter& o) {
  m_.copy_state(o.m_);
  enter_state();
}

bool TokenFilter::allows(int32_t id) {
  if (id < 0 || id >= tokens_->size()) return false;
  uint8_t& v = verdicts_->token[static_cast<size_t>(id)];
  if (v == 0) {
    bool ok = false;
    if (tokens_->eog(id)) {
      ok = m_.accepting();
    } else {
      const std::string& p = tokens_->piece(id);
      ok = !p.empty() && m_.check(p);
    }
    v = ok ? 1 : 2;
  }
  return v == 1;
}

bool TokenFilter::accept(int32_t id) {
  if (id < 0 || id >= tokens_->size()) return false;
  if (tokens_->eog(id)) return m_.accepting();
  const std::string& p = tokens_->piece(id);
  if (p.empty() || !m_.accept(p)) return false;
  enter_state();
  return true;
}

void TokenFilter::allowed(std::vector<uint8_t>& mask) {
  const auto n = static_cast<size_t>(tokens_->size());
  if (verdicts_->complete) {
    mask.resize(n);
    for (size_t i = 0; i < n; ++i) mask[i] = verdicts_->token[i] == 1;
    return;
  }
  mask.assign(n, 0);
  if (m_.accepting())
    for (int32_t id = 0; id < tokens_->size(); ++id)
      if (tokens_->eog(id)) mask[static_cast<size_t>(id)] = 1;
  if (depth_.empty()) depth_.resize(1);
  depth_[0] = m_.state();
  walk(0, 0, mask);
  verdicts_->allowed.clear();
  for (size_t i = 0; i < n; ++i) {
    verdicts_->token[i] = mask[i] ? 1 : 2;
    if (mask[i]) verdicts_->allowed.push_back(static_cast<int32_t>(i));
  }
  verdicts_->complete = true;
}

void TokenFilter::walk(uint32_t node, size_t depth, std::vector<uint8_t>& mask) {
  const TokenSet& s = *tokens_;
  const TokenSet::TrieNode& n = s.trie_[node];
  if (depth_.size() < depth + 2) depth_.resize(depth + 2);
  for (uint32_t e = 0; e < n.n_edges; ++e) {
    const TokenSet::Edge edge = s.edges_[n.first_edge + e];
    const size_t m = m_.mark();
    if (m_.step(depth_[depth], edge.byte, depth_[depth + 1])) {
      const TokenSet::TrieNode& c = s.trie_[edge.child];
      for (uint32_t t = 0; t < c.n_tokens; ++t)
        mask[static_cast<size_t>(s.tokens_[c.first_token + t])] = 1;
      walk(edge.child, depth + 1, mask);
    }
    m_.rollback(m);
  }
}

}  // namespace pi::grammar
