// The public tokenizer facade (include/powerinfer/vocabulary.h) over pi::Tokenizer.
#include "powerinfer/vocabulary.h"

#include "tokenizer/tokenizer.h"

namespace pi {

std::vector<int32_t> Vocabulary::encode(std::string_view text, bool add_bos,
                                        bool parse_special) const {
  return tok_->encode(text, add_bos, parse_special);
}
std::string Vocabulary::decode(std::span<const int32_t> ids, bool skip_special) const {
  return tok_->decode(ids, skip_special);
}
std::string Vocabulary::piece(int32_t id) const { return tok_->token_to_piece(id); }
int32_t Vocabulary::n_vocab() const { return tok_->n_vocab(); }
int32_t Vocabulary::bos() const { return tok_->bos(); }
int32_t Vocabulary::eos() const { return tok_->eos(); }
bool Vocabulary::add_bos() const { return tok_->add_bos(); }
bool Vocabulary::is_eog(int32_t id) const { return tok_->is_eog(id); }
std::vector<int32_t> Vocabulary::eog_tokens() const {
  std::vector<int32_t> out;
  for (int32_t id = 0; id < tok_->n_vocab(); ++id)
    if (tok_->is_eog(id)) out.push_back(id);
  return out;
}

struct Vocabulary::Decoder::State {
  explicit State(const Tokenizer& t) : dec(t) {}
  Tokenizer::StreamDecoder dec;
};

Vocabulary::Decoder::Decoder(const Vocabulary& v) : s_(std::make_unique<State>(*v.tok_)) {}
Vocabulary::Decoder::~Decoder() = default;
Vocabulary::Decoder::Decoder(Decoder&&) noexcept = default;
Vocabulary::Decoder& Vocabulary::Decoder::operator=(Decoder&&) noexcept = default;
std::string Vocabulary::Decoder::push(int32_t id) { return s_->dec.push(id); }
std::string Vocabulary::Decoder::flush() { return s_->dec.flush(); }

}  // namespace pi
