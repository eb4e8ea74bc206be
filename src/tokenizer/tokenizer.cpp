#include "tokenizer/tokenizer.h"

#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace pi {

using tok::TokenType;
using tok::Vocab;

Tokenizer::Tokenizer(std::unique_ptr<const Vocab> vocab) : vocab_(std::move(vocab)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::from_gguf(const gguf::File& file) {
  auto vocab = tok::load_vocab(file);
  if (!vocab.ok()) return vocab.error();
  return Tokenizer(std::move(vocab.value()));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  const Vocab& v = *vocab_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && v.bos >= 0) out.push_back(v.bos);

  auto encode_raw = [&](std::string_view raw) {
    if (v.kind == Kind::Spm) tok::spm_encode(v, raw, out);
    else tok::bpe_encode(v, raw, out);
  };
  // Leftmost-longest split at special tokens; the stretches between go to the encoder.
  const tok::TokenMatcher& specials = parse_special ? v.special_and_user : v.user;
  size_t raw_begin = 0;
  if (!specials.empty()) {
    for (size_t pos = 0; pos < text.size();) {
      const tok::TokenMatcher::Match m = specials.longest_at(text, pos);
      if (m.id < 0) {
        ++pos;
        continue;
      }
      if (pos > raw_begin) encode_raw(text.substr(raw_begin, pos - raw_begin));
      out.push_back(m.id);
      pos += m.len;
      raw_begin = pos;
    }
  }
  if (raw_begin < text.size()) encode_raw(text.substr(raw_begin));
  return out;
}

namespace tok {

void render_token(const Vocab& v, int32_t id, bool skip_special, bool& at_start, std::string& out) {
  if (id < 0 || id >= v.n()) {
    append_utf8(out, kReplacementChar);
    at_start = false;
    return;
  }
  const TokenType t = v.type[id];
  if (t == TokenType::Control) {
    if (!skip_special) out += v.piece[id];
    return;
  }
  const std::string& p = v.piece[id];
  const bool strip = at_start && v.add_space_prefix && t != TokenType::Byte &&
                     t != TokenType::Unknown && !p.empty() && p[0] == ' ';
  out.append(p, strip ? 1 : 0);
  at_start = false;
}

}  // namespace tok

std::string Tokenizer::token_to_piece(int32_t id) const {
  if (!valid(id)) {
    std::string s;
    tok::append_utf8(s, tok::kReplacementChar);
    return s;
  }
  return vocab_->piece[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  bool at_start = true;
  for (int32_t id : ids) tok::render_token(*vocab_, id, skip_special, at_start, out);
  return out;
}

Tokenizer::Kind Tokenizer::kind() const { return vocab_->kind; }
int32_t Tokenizer::n_vocab() const { return vocab_->n(); }
int32_t Tokenizer::bos() const { return vocab_->bos; }
int32_t Tokenizer::eos() const { return vocab_->eos; }
int32_t Tokenizer::unk() const { return vocab_->unk; }
int32_t Tokenizer::pad() const { return vocab_->pad; }
bool Tokenizer::add_bos() const { return vocab_->add_bos; }
bool Tokenizer::add_eos() const { return vocab_->add_eos; }
bool Tokenizer::is_eog(int32_t id) const { return valid(id) && vocab_->eog[id]; }

Tokenizer::TokenType Tokenizer::token_type(int32_t id) const {
  return valid(id) ? vocab_->type[id] : TokenType::Undefined;
}

const std::string& Tokenizer::token_text(int32_t id) const {
  static const std::string kEmpty;
  return valid(id) ? vocab_->text[id] : kEmpty;
}

int32_t Tokenizer::find_token(std::string_view text) const { return vocab_->find(text); }

Tokenizer::StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : vocab_(tokenizer.vocab_.get()), skip_special_(skip_special) {}

std::string Tokenizer::StreamDecoder::push(int32_t id) {
  tok::render_token(*vocab_, id, skip_special_, at_start_, pending_);
  const size_t ready = pending_.size() - tok::utf8_incomplete_tail(pending_);
  std::string out = pending_.substr(0, ready);
  pending_.erase(0, ready);
  return out;
}

std::string Tokenizer::StreamDecoder::flush() {
  std::string out = std::move(pending_);
  pending_.clear();
  at_start_ = true;
  return out;
}

}  // namespace pi
