// The model's tokenizer in the public API: text <-> token ids and streaming detokenization,
// for callers that see only include/powerinfer/ (the HTTP server). A thin facade over the
// engine's tokenizer; Engine::vocabulary() returns it.
//
// Thread-safety: a Vocabulary is immutable; any number of threads may call it. A Decoder is
// single-threaded state and must not outlive the Engine.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pi {

class Tokenizer;

class Vocabulary {
 public:
  explicit Vocabulary(const Tokenizer& tokenizer) : tok_(&tokenizer) {}

  // UTF-8 text to ids. add_bos prepends BOS when the vocabulary has one (usually: add_bos());
  // with parse_special, control tokens written in the text ("<|im_end|>") become their ids.
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;
  // Ids to bytes; skip_special drops control tokens. Ids out of range decode to U+FFFD.
  std::string decode(std::span<const int32_t> ids, bool skip_special) const;
  std::string piece(int32_t id) const;  // the bytes of one token
  int32_t n_vocab() const;
  int32_t bos() const;  // -1: none
  int32_t eos() const;  // -1: none
  bool add_bos() const;
  bool is_eog(int32_t id) const;  // end of generation (EOS, end-of-turn markers)
  std::vector<int32_t> eog_tokens() const;

  // Incremental detokenization: push() returns the UTF-8 complete so far and holds back a
  // trailing incomplete multi-byte sequence; pushes plus flush() equal decode(ids, true).
  class Decoder {
   public:
    explicit Decoder(const Vocabulary& v);
    ~Decoder();
    Decoder(Decoder&&) noexcept;
    Decoder& operator=(Decoder&&) noexcept;
    std::string push(int32_t id);
    std::string flush();

   private:
    struct State;
    std::unique_ptr<State> s_;
  };

 private:
  const Tokenizer* tok_;
};

}  // namespace pi
