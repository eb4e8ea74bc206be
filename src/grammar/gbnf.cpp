#include "grammar/gbnf.h"

#include <algorithm>
#include <functional>
#include <map>

namespace pi::grammar {

bool CharSet::matches(uint32_t c) const {
  if (c < 128) return (ascii[c >> 6] >> (c & 63)) & 1u;
  auto it = std::upper_bound(ranges.begin(), ranges.end(), c,
                             [](uint32_t v, const auto& r) { return v < r.first; });
  return it != ranges.begin() && std::prev(it)->second >= c;
}

bool CharSet::intersects(uint32_t lo, uint32_t hi) const {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), hi,
                             [](uint32_t v, const auto& r) { return v < r.first; });
  return it != ranges.begin() && std::prev(it)->second >= lo;
}

bool decode_utf8(std::string_view s, size_t& i, uint32_t& cp) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  int n = 0;
  if (b0 < 0x80) {
    cp = b0;
  } else if ((b0 & 0xE0) == 0xC0) {
    cp = b0 & 0x1Fu, n = 1;
  } else if ((b0 & 0xF0) == 0xE0) {
    cp = b0 & 0x0Fu, n = 2;
  } else if ((b0 & 0xF8) == 0xF0) {
    cp = b0 & 0x07u, n = 3;
  } else {
    return false;
  }
  if (n > 0 && i + static_cast<size_t>(n) >= s.size()) return false;
  for (int k = 1; k <= n; ++k) {
    const auto b = static_cast<uint8_t>(s[i + static_cast<size_t>(k)]);
    if ((b & 0xC0) != 0x80) return false;
    cp = (cp << 6) | (b & 0x3Fu);
  }
  const uint32_t min_cp = n == 1 ? 0x80 : n == 2 ? 0x800 : n == 3 ? 0x10000 : 0;
  if (cp > kMaxCodePoint || cp < min_cp || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
  i += static_cast<size_t>(n) + 1;
  return true;
}

namespace {

using Alt = std::vector<Elem>;
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

// Sorted, merged ranges; with `negate` their complement in [0, kMaxCodePoint].
CharSet make_set(Ranges r, bool negate) {
  std::sort(r.begin(), r.end());
  Ranges merged;
  for (auto [lo, hi] : r) {
    if (!merged.empty() && lo <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, hi);
    } else {
      merged.emplace_back(lo, hi);
    }
  }
  if (negate) {
    Ranges inv;
    uint32_t next = 0;
    for (auto [lo, hi] : merged) {
      if (lo > next) inv.emplace_back(next, lo - 1);
      next = hi + 1;
    }
    if (next <= kMaxCodePoint) inv.emplace_back(next, kMaxCodePoint);
    merged = std::move(inv);
  }
  CharSet s;
  s.ranges = std::move(merged);
  for (auto [lo, hi] : s.ranges)
    for (uint32_t c = lo; c <= std::min<uint32_t>(hi, 127); ++c) s.ascii[c >> 6] |= 1ull << (c & 63);
  return s;
}

class Parser {
 public:
  explicit Parser(std::string_view t) : t_(t) {}

  Result<Rules> run() {
    if (t_.size() > kMaxGrammarBytes)
      return err("grammar: %zu bytes is more than the %zu a grammar may have", t_.size(),
                 kMaxGrammarBytes);
    skip(true);
    while (i_ < t_.size()) {
      PI_TRY(parse_rule());
      skip(true);
    }
    return finish();
  }

 private:
  Error fail(const char* what) const { return fail_at(i_, what); }
  Error fail_at(size_t at, const char* what) const {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < at && k < t_.size(); ++k) {
      if (t_[k] == '\n') {
        ++line, col = 1;
      } else {
        ++col;
      }
    }
    return err("grammar: line %zu, column %zu: %s", line, col, what);
  }

  // Skips spaces, tabs and comments; newlines too when `newlines`.
  void skip(bool newlines) {
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++i_;
      } else if (c == '#') {
        while (i_ < t_.size() && t_[i_] != '\n') ++i_;
      } else {
        break;
      }
    }
  }

  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
  }

  std::string_view name() {
    const size_t b = i_;
    while (i_ < t_.size() && name_char(t_[i_])) ++i_;
    return t_.substr(b, i_ - b);
  }

  uint32_t rule_id(std::string_view n, size_t at) {
    auto it = ids_.find(std::string(n));
    if (it != ids_.end()) return it->second;
    const auto id = static_cast<uint32_t>(rules_.size());
    ids_.emplace(std::string(n), id);
    rules_.emplace_back();
    names_.emplace_back(n);
    defined_.push_back(false);
    first_use_.push_back(at);
    return id;
  }

  uint32_t new_rule(uint32_t parent) {
    const auto id = static_cast<uint32_t>(rules_.size());
    rules_.emplace_back();
    names_.push_back(names_[parent] + "_" + std::to_string(id));
    defined_.push_back(true);
    first_use_.push_back(i_);
    return id;
  }

  Status parse_rule() {
    const size_t at = i_;
    const std::string_view n = name();
    if (n.empty()) return fail("expected a rule name");
    skip(false);
    if (t_.substr(i_, 3) != "::=") return fail("expected '::='");
    i_ += 3;
    skip(true);
    const uint32_t id = rule_id(n, at);
    if (defined_[id]) return fail_at(at, ("rule '" + std::string(n) + "' defined twice").c_str());
    defined_[id] = true;
    PI_TRY(parse_alternatives(id, id, false, 0));
    if (i_ < t_.size() && t_[i_] != '\n' && t_[i_] != '\r')
      return fail("expected a newline or the end after a rule");
    return Status::Ok();
  }

  Status parse_alternatives(uint32_t id, uint32_t owner, bool nested, int depth) {
    std::vector<Alt> alts;
    alts.emplace_back();
    PI_TRY(parse_sequence(alts.back(), owner, nested, depth));
    while (i_ < t_.size() && t_[i_] == '|') {
      ++i_;
      skip(true);
      alts.emplace_back();
      PI_TRY(parse_sequence(alts.back(), owner, nested, depth));
    }
    rules_[id] = std::move(alts);
    return Status::Ok();
  }

  Result<uint32_t> parse_char(bool in_class) {
    if (i_ >= t_.size()) return fail("unexpected end of the grammar");
    if (t_[i_] != '\\') {
      uint32_t cp = 0;
      if (!decode_utf8(t_, i_, cp)) return fail("invalid UTF-8");
      return cp;
    }
    ++i_;
    if (i_ >= t_.size()) return fail("unexpected end of the grammar after '\\'");
    const char e = t_[i_++];
    switch (e) {
      case 'n': return uint32_t{'\n'};
      case 'r': return uint32_t{'\r'};
      case 't': return uint32_t{'\t'};
      case '\\': case '"': case '[': case ']': return static_cast<uint32_t>(e);
      case '-': case '^': case '/': case '.':
        if (in_class || e == '/' || e == '.') return static_cast<uint32_t>(e);
        break;
      case 'x': case 'u': case 'U': {
        const int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t v = 0;
        for (int k = 0; k < digits; ++k) {
          if (i_ >= t_.size()) return fail("unexpected end of the grammar in a hex escape");
          const char h = t_[i_];
          int d = -1;
          if (h >= '0' && h <= '9') d = h - '0';
          if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
          if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
          if (d < 0) return fail("expected a hex digit");
          v = v * 16 + static_cast<uint32_t>(d);
          ++i_;
        }
        if (v > kMaxCodePoint) return fail("code point above U+10FFFF");
        return v;
      }
      default:
        break;
    }
    i_ -= 2;
    return fail("unknown escape");
  }

  uint32_t add_set(CharSet s) {
    sets_.push_back(std::move(s));
    return static_cast<uint32_t>(sets_.size() - 1);
  }

  Status parse_sequence(Alt& out, uint32_t owner, bool nested, int depth) {
    size_t last = out.size();  // where the element a quantifier applies to starts
    bool have_last = false;
    while (i_ < t_.size()) {
      const char c = t_[i_];
      const size_t start = out.size();
      if (c == '"') {
        ++i_;
        while (i_ < t_.size() && t_[i_] != '"') {
          if (t_[i_] == '\n') return fail("newline inside a literal");
          auto cp = parse_char(false);
          if (!cp.ok()) return cp.error();
          out.push_back({ElemKind::Char, add_set(make_set({{*cp, *cp}}, false))});
        }
        if (i_ >= t_.size()) return fail("unterminated literal");
        ++i_;
      } else if (c == '[') {
        ++i_;
        bool negate = false;
        if (i_ < t_.size() && t_[i_] == '^') negate = true, ++i_;
        Ranges r;
        while (i_ < t_.size() && t_[i_] != ']') {
          if (t_[i_] == '\n' || t_[i_] == '\r') return fail("unterminated character class");
          auto lo = parse_char(true);
          if (!lo.ok()) return lo.error();
          uint32_t hi = *lo;
          if (i_ + 1 < t_.size() && t_[i_] == '-' && t_[i_ + 1] != ']') {
            ++i_;
            if (t_[i_] == '\n' || t_[i_] == '\r') return fail("unterminated character class");
            auto h = parse_char(true);
            if (!h.ok()) return h.error();
            hi = *h;
            if (hi < *lo) return fail("character range with its end below its start");
          }
          r.emplace_back(*lo, hi);
        }
        if (i_ >= t_.size()) return fail("unterminated character class");
        ++i_;
        out.push_back({ElemKind::Char, add_set(make_set(std::move(r), negate))});
      } else if (c == '.') {
        ++i_;
        out.push_back({ElemKind::Char, add_set(make_set({{0, kMaxCodePoint}}, false))});
      } else if (name_char(c)) {
        const size_t at = i_;
        const std::string_view n = name();
        // A name followed by ::= starts the next rule: this sequence ended at a newline.
        size_t k = i_;
        while (k < t_.size() && (t_[k] == ' ' || t_[k] == '\t')) ++k;
        if (t_.substr(k, 3) == "::=")
          return fail_at(at, nested ? "expected ')'" : "expected a newline before this rule");
        out.push_back({ElemKind::Ref, rule_id(n, at)});
      } else if (c == '(') {
        if (depth >= kMaxNesting) return fail("groups nested too deeply");
        ++i_;
        skip(true);
        const uint32_t sub = new_rule(owner);
        PI_TRY(parse_alternatives(sub, owner, true, depth + 1));
        if (i_ >= t_.size() || t_[i_] != ')') return fail("expected ')'");
        ++i_;
        out.push_back({ElemKind::Ref, sub});
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_last) return fail("a repetition needs an element before it");
        uint32_t lo = 0, hi = UINT32_MAX;  // UINT32_MAX: no bound
        if (c == '*') {
          ++i_;
        } else if (c == '+') {
          lo = 1, ++i_;
        } else if (c == '?') {
          hi = 1, ++i_;
        } else {
          ++i_;
          skip(false);
          auto number = [&](uint32_t& v) -> bool {
            if (i_ >= t_.size() || t_[i_] < '0' || t_[i_] > '9') return false;
            uint64_t x = 0;
            while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9' && x <= kMaxRepeat)
              x = x * 10 + static_cast<uint64_t>(t_[i_++] - '0');
            v = static_cast<uint32_t>(std::min<uint64_t>(x, kMaxRepeat + 1));
            return true;
          };
          const bool has_lo = number(lo);
          skip(false);
          if (i_ < t_.size() && t_[i_] == ',') {
            ++i_;
            skip(false);
            if (!number(hi)) hi = UINT32_MAX;
            if (!has_lo) lo = 0;
          } else if (has_lo) {
            hi = lo;
          } else {
            return fail("expected a number in '{}'");
          }
          skip(false);
          if (i_ >= t_.size() || t_[i_] != '}') return fail("expected '}'");
          ++i_;
          if (lo > kMaxRepeat || (hi != UINT32_MAX && hi > kMaxRepeat))
            return fail("repetition count above 1000");
          if (hi < lo) return fail("repetition with its maximum below its minimum");
        }
        Alt item(out.begin() + static_cast<std::ptrdiff_t>(last), out.end());
        out.resize(last);
        PI_TRY(repeat(out, std::move(item), lo, hi, owner));
        have_last = false;
        skip(nested);
        continue;
      } else {
        break;
      }
      last = start;
      have_last = true;
      if (out.size() > kMaxElems) return fail("grammar too large");
      skip(nested);
    }
    return Status::Ok();
  }

  // Appends `item` repeated lo..hi times (hi == UINT32_MAX: unbounded) to `out`.
  Status repeat(Alt& out, Alt item, uint32_t lo, uint32_t hi, uint32_t owner) {
    if (item.empty()) return Status::Ok();  // "" repeated is still ""
    if (item.size() > 1) {
      const uint32_t sub = new_rule(owner);
      rules_[sub] = {std::move(item)};
      item = {{ElemKind::Ref, sub}};
    }
    const Elem x = item[0];
    if (static_cast<uint64_t>(total_) + lo + (hi == UINT32_MAX ? 2 : hi) > kMaxElems)
      return fail("grammar too large");
    total_ += lo + (hi == UINT32_MAX ? 2 : hi);
    for (uint32_t k = 0; k < lo; ++k) out.push_back(x);
    if (hi == UINT32_MAX) {
      const uint32_t star = new_rule(owner);  // star ::= x star | ""
      rules_[star] = {{x, {ElemKind::Ref, star}}, {}};
      out.push_back({ElemKind::Ref, star});
    } else if (hi > lo) {
      uint32_t prev = UINT32_MAX;  // opt_k ::= x opt_{k-1} | ""
      for (uint32_t k = lo; k < hi; ++k) {
        const uint32_t opt = new_rule(owner);
        Alt a{x};
        if (prev != UINT32_MAX) a.push_back({ElemKind::Ref, prev});
        rules_[opt] = {std::move(a), {}};
        prev = opt;
      }
      out.push_back({ElemKind::Ref, prev});
    }
    return Status::Ok();
  }

  Result<Rules> finish() {
    auto root = ids_.find("root");
    if (root == ids_.end() || !defined_[root->second]) return err("grammar: no 'root' rule");
    for (size_t r = 0; r < rules_.size(); ++r) {
      if (!defined_[r])
        return fail_at(first_use_[r], ("undefined rule '" + names_[r] + "'").c_str());
    }
    Rules g;
    g.root = root->second;
    g.names = std::move(names_);
    g.sets = std::move(sets_);
    g.alts.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
      for (const Alt& a : rules_[r]) {
        g.alts[r].push_back(static_cast<uint32_t>(g.elems.size()));
        g.elems.insert(g.elems.end(), a.begin(), a.end());
        g.elems.push_back({ElemKind::End, 0});
      }
      if (g.elems.size() > kMaxElems) return err("grammar: too large");
    }
    PI_TRY(check_left_recursion(g));
    return g;
  }

  // A rule is nullable when one of its alternatives is all nullable references. Left
  // recursion: a cycle of references each at the start of an alternative or behind only
  // nullable references.
  static Status check_left_recursion(const Rules& g) {
    const size_t n = g.alts.size();
    std::vector<char> nullable(n, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (uint32_t a : g.alts[r]) {
          size_t p = a;
          while (g.elems[p].kind == ElemKind::Ref && nullable[g.elems[p].arg]) ++p;
          if (g.elems[p].kind == ElemKind::End) {
            nullable[r] = 1, changed = true;
            break;
          }
        }
      }
    }
    std::vector<std::vector<uint32_t>> first(n);  // rules reachable without consuming
    for (size_t r = 0; r < n; ++r) {
      for (uint32_t a : g.alts[r]) {
        for (size_t p = a; g.elems[p].kind == ElemKind::Ref; ++p) {
          first[r].push_back(g.elems[p].arg);
          if (!nullable[g.elems[p].arg]) break;
        }
      }
    }
    std::vector<uint8_t> state(n, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<uint32_t, size_t>> stack;
    for (uint32_t s = 0; s < n; ++s) {
      if (state[s]) continue;
      stack.emplace_back(s, 0);
      state[s] = 1;
      while (!stack.empty()) {
        auto& [r, k] = stack.back();
        if (k < first[r].size()) {
          const uint32_t next = first[r][k++];
          if (state[next] == 1)
            return err("grammar: rule '%s' is left-recursive (it reaches itself before "
                       "matching a character)", g.names[next].c_str());
          if (state[next] == 0) {
            state[next] = 1;
            stack.emplace_back(next, 0);
          }
        } else {
          state[r] = 2;
          stack.pop_back();
        }
      }
    }
    return Status::Ok();
  }

  std::string_view t_;
  size_t i_ = 0;
  std::map<std::string, uint32_t> ids_;
  std::vector<std::vector<Alt>> rules_;
  std::vector<std::string> names_;
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;
  std::vector<CharSet> sets_;
  uint64_t total_ = 0;
};

}  // namespace

Result<Rules> parse_gbnf(std::string_view text) { return Parser(text).run(); }

}  // namespace pi::grammar
