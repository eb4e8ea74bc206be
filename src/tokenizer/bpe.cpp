// Byte-level BPE (GPT-2 family), as Hugging Face `tokenizers` applies it.
#include <queue>

#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace pi::tok {
namespace {

bool is_printable_byte(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; }

std::array<std::string, 256> make_byte_to_unicode() {
  std::array<std::string, 256> out;
  char32_t next = 256;  // bytes that are not printable map to 256, 257, ... in byte order
  for (int b = 0; b < 256; ++b) {
    append_utf8(out[b], is_printable_byte(b) ? static_cast<char32_t>(b) : next++);
  }
  return out;
}

std::array<int16_t, 324> make_unicode_to_byte() {
  std::array<int16_t, 324> out;
  out.fill(-1);
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) out[is_printable_byte(b) ? b : next++] = static_cast<int16_t>(b);
  return out;
}

struct Symbol {
  int32_t id;    // token id, -1 for a byte whose character is not in the vocabulary
  int32_t prev;  // index of the previous live symbol, -1 at the start
  int32_t next;  // index of the next live symbol, -1 at the end
  bool alive;
};

struct Candidate {
  int32_t rank;
  int32_t left;
  int32_t right;
  int32_t left_id;
  int32_t right_id;
  int32_t merged;
};

// Lowest rank first, then leftmost.
struct LaterFirst {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  }
};

void merge_word(const Vocab& v, std::string_view word, std::vector<int32_t>& out) {
  if (v.ignore_merges) {
    std::string mapped;
    for (unsigned char b : word) mapped += byte_to_unicode()[b];
    const int32_t id = v.find(mapped);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }

  std::vector<Symbol> syms(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    syms[i] = {v.byte_char_token[static_cast<uint8_t>(word[i])], static_cast<int32_t>(i) - 1,
               i + 1 < word.size() ? static_cast<int32_t>(i + 1) : -1, true};
  }

  std::priority_queue<Candidate, std::vector<Candidate>, LaterFirst> queue;
  auto consider = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0 || syms[l].id < 0 || syms[r].id < 0) return;
    const uint64_t key = (static_cast<uint64_t>(syms[l].id) << 32) | static_cast<uint32_t>(syms[r].id);
    auto it = v.merges.find(key);
    if (it == v.merges.end()) return;
    queue.push({it->second.rank, l, r, syms[l].id, syms[r].id, it->second.id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) consider(i, i + 1);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = syms[c.left];
    Symbol& r = syms[c.right];
    // Stale: one side has merged with something else since the pair was queued.
    if (!l.alive || !r.alive || l.next != c.right || l.id != c.left_id || r.id != c.right_id) continue;
    l.id = c.merged;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = c.left;
    r.alive = false;
    consider(l.prev, c.left);
    consider(c.left, l.next);
  }

  for (int32_t i = 0; i >= 0 && i < static_cast<int32_t>(syms.size()); i = syms[i].next) {
    if (syms[i].id >= 0) out.push_back(syms[i].id);
    else if (v.unk >= 0) out.push_back(v.unk);
  }
}

}  // namespace

const std::array<std::string, 256>& byte_to_unicode() {
  static const std::array<std::string, 256> table = make_byte_to_unicode();
  return table;
}

int byte_from_unicode(char32_t cp) {
  static const std::array<int16_t, 324> table = make_unicode_to_byte();
  return cp < table.size() ? table[cp] : -1;
}

void bpe_encode(const Vocab& v, std::string_view text, std::vector<int32_t>& out) {
  std::vector<ByteSpan> words;
  pretokenize(v.pre, text, words);
  for (const ByteSpan& w : words) merge_word(v, text.substr(w.begin, w.end - w.begin), out);
}

}  // namespace pi::tok
