// SentencePiece BPE encoding (model_type=bpe), with sentencepiece's rules:
//  - normalisation is identity except that ' ' becomes U+2581 and, with the dummy prefix,
//    U+2581 is prepended; malformed UTF-8 bytes become U+FFFD, one per byte;
//  - the text starts as one symbol per character, except that user-defined pieces are
//    matched first (longest match) and never merge further;
//  - the adjacent pair whose concatenation is a piece of the highest score merges next
//    (ties: leftmost); pieces of type normal, user-defined and unused take part;
//  - a final symbol of type unused is split back into the two symbols it merged from (as
//    recorded when the pair was last queued), or treated as unknown if it is a character;
//  - a symbol that is not a token becomes its bytes' <0xXX> tokens or, without them, <unk>;
//    a run of such symbols gives one <unk>.
#include <queue>
#include <unordered_map>

#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace pi::tok {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";

struct Symbol {
  uint32_t begin;  // byte range in the normalised text
  uint32_t len;
  int32_t prev;
  int32_t next;
  bool frozen;     // a user-defined piece
};

struct Candidate {
  float score;
  int32_t left;
  int32_t right;
  uint32_t len;  // combined length when queued; a mismatch later means the pair is stale
};

// Highest score first, then leftmost.
struct LaterFirst {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.score != b.score ? a.score < b.score : a.left > b.left;
  }
};

bool mergeable(TokenType t) {
  return t == TokenType::Normal || t == TokenType::Undefined || t == TokenType::UserDefined ||
         t == TokenType::Unused;
}

std::string normalize(const Vocab& v, std::string_view text) {
  std::string norm;
  norm.reserve(text.size() + kSpaceMarker.size() * 2);
  if (v.add_space_prefix) norm += kSpaceMarker;
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = decode_utf8(text, pos);
    if (!c.valid) append_utf8(norm, kReplacementChar);
    else if (c.cp == ' ') norm += kSpaceMarker;
    else norm.append(text.substr(pos, c.len));
    pos += c.len;
  }
  return norm;
}

}  // namespace

void spm_encode(const Vocab& v, std::string_view text, std::vector<int32_t>& out) {
  if (text.empty()) return;
  const std::string norm = normalize(v, text);
  const std::string_view s = norm;

  std::vector<Symbol> syms;
  syms.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    size_t len = v.spm_user_defined.empty() ? 0 : v.spm_user_defined.longest_at(s, pos).len;
    const bool frozen = len > 0;
    if (!frozen) len = decode_utf8(s, pos).len;
    const auto i = static_cast<int32_t>(syms.size());
    syms.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(len), i - 1, i + 1, frozen});
    pos += len;
  }
  syms.back().next = -1;

  auto text_of = [&](int32_t i) { return s.substr(syms[i].begin, syms[i].len); };

  // For pieces of type unused: the two symbols each merged from, as last queued.
  std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>> unmerge;
  std::priority_queue<Candidate, std::vector<Candidate>, LaterFirst> queue;
  auto consider = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0 || syms[l].frozen || syms[r].frozen) return;
    const std::string_view pair = s.substr(syms[l].begin, syms[l].len + syms[r].len);
    const int32_t id = v.find(pair);
    if (id < 0 || !mergeable(v.type[id])) return;
    queue.push({v.score[id], l, r, static_cast<uint32_t>(pair.size())});
    if (v.type[id] == TokenType::Unused) unmerge[pair] = {text_of(l), text_of(r)};
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) consider(i, i + 1);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = syms[c.left];
    Symbol& r = syms[c.right];
    if (l.len == 0 || r.len == 0 || l.next != c.right || l.len + r.len != c.len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = c.left;
    consider(l.prev, c.left);
    consider(c.left, l.next);
  }

  // Emits one final symbol, splitting unused pieces back into their parts.
  bool last_was_unknown = false;
  auto emit = [&](auto&& self, std::string_view piece) -> void {
    int32_t id = v.find(piece);
    if (id >= 0 && v.type[id] == TokenType::Unused) {
      auto it = unmerge.find(piece);
      if (it != unmerge.end()) {
        self(self, it->second.first);
        self(self, it->second.second);
        return;
      }
      id = -1;  // an unused piece that was never merged is not a token
    }
    if (id >= 0) {
      out.push_back(id);
      last_was_unknown = false;
      return;
    }
    bool bytes = true;
    for (unsigned char b : piece) bytes = bytes && v.byte_token[b] >= 0;
    if (bytes) {
      for (unsigned char b : piece) out.push_back(v.byte_token[b]);
      last_was_unknown = false;
    } else {
      if (v.unk >= 0 && !last_was_unknown) out.push_back(v.unk);
      last_was_unknown = true;
    }
  };
  for (int32_t i = 0; i >= 0; i = syms[i].next) emit(emit, text_of(i));
}

}  // namespace pi::tok
