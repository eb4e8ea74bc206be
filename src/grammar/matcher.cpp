#include "grammar/matcher.h"

#include <algorithm>
#include <unordered_map>

namespace pi::grammar {

Matcher::Matcher(std::shared_ptr<const Rules> rules) : rules_(std::move(rules)) { reset(); }

void Matcher::reset() {
  nodes_.clear();
  state_ = Frontier{};
  const Rules& g = *rules_;
  for (uint32_t a : g.alts[g.root]) {
    if (g.elems[a].kind == ElemKind::End) {
      state_.accepting = true;
    } else {
      expand(push(a, -1), state_);
    }
  }
  dedupe(state_);
}

int32_t Matcher::push(uint32_t pos, int32_t parent) {
  nodes_.push_back({pos, parent});
  return static_cast<int32_t>(nodes_.size() - 1);
}

void Matcher::expand(int32_t node, Frontier& out, int depth) {
  if (depth > kMaxExpandDepth) return;
  const Rules& g = *rules_;
  const Node n = nodes_[static_cast<size_t>(node)];
  const Elem e = g.elems[n.pos];
  if (e.kind == ElemKind::Char) {
    out.tops.push_back(node);
    return;
  }
  if (e.kind == ElemKind::End) {
    if (n.parent < 0) {
      out.accepting = true;
    } else {
      expand(n.parent, out, depth + 1);
    }
    return;
  }
  // A reference: its alternatives run on top of the continuation after it (none when the
  // reference ends its alternative: return to the caller's caller).
  int32_t cont = n.parent;
  if (g.elems[n.pos + 1].kind != ElemKind::End) cont = push(n.pos + 1, n.parent);
  for (uint32_t a : g.alts[e.arg]) {
    if (g.elems[a].kind != ElemKind::End) {
      expand(push(a, cont), out, depth + 1);
    } else if (cont < 0) {
      out.accepting = true;
    } else {
      expand(cont, out, depth + 1);
    }
  }
}

void Matcher::advance_node(int32_t node, Frontier& out) {
  const Node n = nodes_[static_cast<size_t>(node)];
  if (rules_->elems[n.pos + 1].kind != ElemKind::End) {
    expand(push(n.pos + 1, n.parent), out);
  } else if (n.parent < 0) {
    out.accepting = true;
  } else {
    expand(n.parent, out);
  }
}

void Matcher::dedupe(Frontier& f) const {
  if (f.tops.size() < 2) return;
  const auto key = [&](int32_t t) {
    const Node& n = nodes_[static_cast<size_t>(t)];
    return (static_cast<uint64_t>(n.pos) << 32) | static_cast<uint32_t>(n.parent);
  };
  std::sort(f.tops.begin(), f.tops.end(), [&](int32_t a, int32_t b) { return key(a) < key(b); });
  f.tops.erase(std::unique(f.tops.begin(), f.tops.end(),
                           [&](int32_t a, int32_t b) { return key(a) == key(b); }),
               f.tops.end());
}

bool Matcher::step(const Frontier& in, uint8_t byte, Frontier& out) {
  const Rules& g = *rules_;
  out.tops.clear();
  out.accepting = false;
  out.cp = 0;
  out.need = 0;
  out.len = 0;
  uint32_t cp = 0;
  uint8_t need = 0, len = 1;
  if (in.need == 0) {
    if (byte < 0x80) {
      cp = byte;
    } else if ((byte & 0xE0) == 0xC0) {
      cp = byte & 0x1Fu, need = 1, len = 2;
    } else if ((byte & 0xF0) == 0xE0) {
      cp = byte & 0x0Fu, need = 2, len = 3;
    } else if ((byte & 0xF8) == 0xF0) {
      cp = byte & 0x07u, need = 3, len = 4;
    } else {
      return false;
    }
  } else {
    if ((byte & 0xC0) != 0x80) return false;
    cp = (in.cp << 6) | (byte & 0x3Fu);
    need = static_cast<uint8_t>(in.need - 1);
    len = in.len;
  }
  // The shortest form only: a character of `len` bytes is at least this (no overlong
  // encodings, which would spell ASCII the grammar never sees as ASCII).
  const uint32_t min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : len == 4 ? 0x10000 : 0;
  if (need > 0) {
    // Inside a character: keep the stacks whose class holds a character with these bits.
    const uint32_t lo = std::max(cp << (6 * need), min_cp);
    const uint32_t hi = (cp << (6 * need)) | ((1u << (6 * need)) - 1);
    if (lo > hi || lo > kMaxCodePoint) return false;
    for (int32_t t : in.tops)
      if (g.sets[g.elems[nodes_[static_cast<size_t>(t)].pos].arg].intersects(lo, hi))
        out.tops.push_back(t);
    out.cp = cp;
    out.need = need;
    out.len = len;
    return !out.tops.empty();
  }
  if (cp > kMaxCodePoint || cp < min_cp || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
  for (int32_t t : in.tops)
    if (g.sets[g.elems[nodes_[static_cast<size_t>(t)].pos].arg].matches(cp)) advance_node(t, out);
  dedupe(out);
  return !out.dead();
}

bool Matcher::check(std::string_view bytes) {
  const size_t m = mark();
  const Frontier* cur = &state_;
  bool ok = true;
  for (size_t i = 0; i < bytes.size() && ok; ++i) {
    Frontier& next = scratch_[i & 1];
    ok = step(*cur, static_cast<uint8_t>(bytes[i]), next);
    cur = &next;
  }
  rollback(m);
  return ok;
}

bool Matcher::accept(std::string_view bytes) {
  if (bytes.empty()) return true;
  const size_t m = mark();
  const Frontier* cur = &state_;
  for (size_t i = 0; i < bytes.size(); ++i) {
    Frontier& next = scratch_[i & 1];
    if (!step(*cur, static_cast<uint8_t>(bytes[i]), next)) {
      rollback(m);
      return false;
    }
    cur = &next;
  }
  state_ = *cur;
  compact();
  return true;
}

void Matcher::copy_state(const Matcher& o) {
  nodes_ = o.nodes_;
  state_ = o.state_;
}

void Matcher::state_key(std::string& out) const {
  const auto put = [&](uint32_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
  out.clear();
  put(static_cast<uint32_t>(state_.accepting) | (static_cast<uint32_t>(state_.need) << 8) |
      (static_cast<uint32_t>(state_.len) << 16));
  put(state_.cp);
  put(static_cast<uint32_t>(state_.tops.size()));
  for (int32_t t : state_.tops) put(static_cast<uint32_t>(t));
  for (const Node& n : nodes_) {  // compacted: only the live stacks' nodes
    put(n.pos);
    put(static_cast<uint32_t>(n.parent));
  }
}

void Matcher::compact() {
  std::vector<Node> fresh;
  std::unordered_map<uint64_t, int32_t> interned;
  remap_.assign(nodes_.size(), -2);
  std::vector<int32_t> chain;
  for (int32_t& top : state_.tops) {
    // Intern the chain bottom-up so that equal tails become one node.
    chain.clear();
    for (int32_t n = top; n >= 0 && remap_[static_cast<size_t>(n)] == -2;
         n = nodes_[static_cast<size_t>(n)].parent)
      chain.push_back(n);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const Node& old = nodes_[static_cast<size_t>(*it)];
      const int32_t parent = old.parent < 0 ? -1 : remap_[static_cast<size_t>(old.parent)];
      const uint64_t key = (static_cast<uint64_t>(old.pos) << 32) | static_cast<uint32_t>(parent);
      auto [pos, added] = interned.try_emplace(key, static_cast<int32_t>(fresh.size()));
      if (added) fresh.push_back({old.pos, parent});
      remap_[static_cast<size_t>(*it)] = pos->second;
    }
    top = remap_[static_cast<size_t>(top)];
  }
  nodes_ = std::move(fresh);
  dedupe(state_);
}

}  // namespace pi::grammar
