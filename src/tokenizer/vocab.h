// The loaded vocabulary shared by the encoders and decoders. Internal to src/tokenizer.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "gguf/reader.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace pi::tok {

using TokenType = Tokenizer::TokenType;

// Finds the longest of a set of token texts that starts at a given position.
class TokenMatcher {
 public:
  // `text` must outlive the matcher (it points into Vocab::text).
  void add(std::string_view text, int32_t id);
  // Sorts candidates longest first; call once after the last add().
  void finish();
  bool empty() const { return count_ == 0; }
  struct Match {
    int32_t id = -1;
    size_t len = 0;
  };
  Match longest_at(std::string_view s, size_t pos) const;

 private:
  std::array<std::vector<std::pair<std::string_view, int32_t>>, 256> by_first_byte_;
  size_t count_ = 0;
};

struct MergeRule {
  int32_t rank;
  int32_t id;  // the token the pair merges into
};

struct Vocab {
  Tokenizer::Kind kind = Tokenizer::Kind::Spm;
  std::string source;  // file name, for messages

  std::vector<std::string> text;    // token text as stored in the file
  std::vector<float> score;         // SPM merge priority (higher first); 0 when absent
  std::vector<TokenType> type;
  std::vector<std::string> piece;   // the bytes each token decodes to
  std::unordered_map<std::string_view, int32_t> id_of;  // text -> first id with that text

  int32_t bos = -1, eos = -1, unk = -1, pad = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = true;  // SPM dummy prefix
  std::vector<bool> eog;         // per id

  // Token texts split out of the input before the encoder runs. `user`: user-defined
  // tokens, matched always (empty for SPM, whose user-defined pieces are matched inside
  // the encoder, as sentencepiece does). `special_and_user`: those plus control and
  // unknown tokens, used when parse_special.
  TokenMatcher user, special_and_user;

  // SPM
  TokenMatcher spm_user_defined;
  std::array<int32_t, 256> byte_token{};  // <0xXX> ids, -1 when missing

  // BPE
  PreTokenizer pre = PreTokenizer::Gpt2;
  bool ignore_merges = false;             // a whole word that is a token is emitted as is
  std::unordered_map<uint64_t, MergeRule> merges;  // key: left id << 32 | right id
  std::array<int32_t, 256> byte_char_token{};      // id of the byte-level char for each byte

  int32_t n() const { return static_cast<int32_t>(text.size()); }
  int32_t find(std::string_view s) const {
    auto it = id_of.find(s);
    return it == id_of.end() ? -1 : it->second;
  }
};

Result<std::unique_ptr<Vocab>> load_vocab(const gguf::File& file);

// Encodes one stretch of text that contains no special tokens.
void spm_encode(const Vocab& v, std::string_view text, std::vector<int32_t>& out);
void bpe_encode(const Vocab& v, std::string_view text, std::vector<int32_t>& out);

// Appends what `id` decodes to, as decode() renders it. `at_start` is true until the first
// token that prints (control tokens do not count) and drives SPM's dummy-prefix removal.
void render_token(const Vocab& v, int32_t id, bool skip_special, bool& at_start, std::string& out);

// GPT-2's reversible map from bytes to printable characters (UTF-8 of one code point each).
const std::array<std::string, 256>& byte_to_unicode();
// Inverse of byte_to_unicode: code point -> byte, or -1.
int byte_from_unicode(char32_t cp);

}  // namespace pi::tok
