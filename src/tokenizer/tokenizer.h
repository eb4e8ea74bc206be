// Text <-> token ids for llama.cpp-compatible GGUF vocabularies.
//
// Two algorithms, chosen by `tokenizer.ggml.model`:
//  - "llama": SentencePiece BPE. Encoding agrees exactly with the sentencepiece library for
//    models of model_type=bpe with identity normalisation (no NFKC, no whitespace squeezing),
//    i.e. what llama.cpp implements: an optional dummy-prefix space, ' ' -> U+2581, then
//    repeated merging of the adjacent pair whose concatenation is the highest-scoring
//    piece (ties: leftmost), and <0xXX> byte tokens for characters not in the vocabulary.
//  - "gpt2": byte-level BPE. A regex pre-tokenizer (`tokenizer.ggml.pre`) splits the text
//    into words, each word's bytes are mapped to GPT-2's printable byte alphabet, and the
//    ranked merges are applied (lowest rank first, ties: leftmost), as Hugging Face
//    `tokenizers` does.
// docs/FORMATS.md ("Tokenizer") lists the keys read and every rule in detail.
//
// Thread-safety: a Tokenizer is immutable after from_gguf(); encode/decode may be called
// from any number of threads. A StreamDecoder is single-threaded state.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "gguf/reader.h"

namespace pi {

namespace tok {
struct Vocab;
}

class Tokenizer {
 public:
  enum class Kind { Spm, Bpe };

  // Token types of `tokenizer.ggml.token_type` (llama.cpp's llama_token_type).
  enum class TokenType : uint8_t {
    Undefined = 0,  // treated as Normal
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,
    Unused = 5,
    Byte = 6,
  };

  // Reads and validates the vocabulary. Fails, naming the file and key, on a missing or
  // unsupported model, keys of the wrong type, arrays whose lengths disagree, malformed
  // byte tokens, merges that reference unknown tokens, and special ids out of range.
  static Result<Tokenizer> from_gguf(const gguf::File& file);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Encodes UTF-8 text. With add_bos the BOS id is prepended (if the vocabulary has one;
  // callers usually pass add_bos()). EOS is never appended: callers that honour
  // tokenizer.ggml.add_eos_token append eos() when add_eos() is true. Control and
  // unknown tokens written in the text (e.g. "</s>") become their ids only when
  // parse_special; otherwise they are ordinary text. User-defined tokens always match.
  // For SPM, each stretch of text between special tokens is encoded as sentencepiece
  // encodes a whole string, dummy prefix included (llama.cpp does the same).
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;

  // The bytes this token stands for: byte tokens give their byte, SPM's U+2581 gives a
  // space, byte-level BPE tokens give their original bytes; control and user-defined
  // tokens give their text. Ids out of range give U+FFFD. No dummy-prefix stripping.
  std::string token_to_piece(int32_t id) const;

  // Concatenates the pieces. skip_special drops control tokens (BOS, EOS, ...). SPM with a
  // dummy prefix drops one leading space of the first normal piece when no byte or
  // unknown token precedes it, as sentencepiece's decoder does. Ids out of range decode
  // to U+FFFD. The result is raw bytes: an invalid UTF-8 sequence spelt by byte tokens
  // stays as it is (sentencepiece would print U+FFFD).
  std::string decode(std::span<const int32_t> ids, bool skip_special) const;

  Kind kind() const;
  int32_t n_vocab() const;
  int32_t bos() const;  // -1 when the vocabulary has none
  int32_t eos() const;  // -1 when the vocabulary has none
  int32_t unk() const;  // -1 when the vocabulary has none
  int32_t pad() const;  // -1 when the vocabulary has none
  bool add_bos() const;
  bool add_eos() const;
  // End of generation: EOS, EOT/EOM if the file names them, and control tokens spelt like
  // the usual end-of-turn markers (<|eot_id|>, <|im_end|>, <|endoftext|>, <end_of_turn>, ...).
  bool is_eog(int32_t id) const;
  bool valid(int32_t id) const { return id >= 0 && id < n_vocab(); }
  TokenType token_type(int32_t id) const;  // Undefined for ids out of range
  const std::string& token_text(int32_t id) const;  // as stored in the file; "" out of range
  int32_t find_token(std::string_view text) const;   // -1 if no token has this text

  // Incremental detokenization for printing while generating. push() returns the UTF-8
  // that is complete so far and holds back a trailing incomplete multi-byte sequence until
  // the bytes that complete it arrive; invalid bytes are passed through. The pushes plus
  // flush() concatenate to decode(all ids, skip_special). Keeps a pointer to the
  // tokenizer's vocabulary: the Tokenizer must outlive it (moving the Tokenizer is fine).
  class StreamDecoder {
   public:
    explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = true);
    std::string push(int32_t id);
    // Returns whatever is held back (possibly an incomplete sequence) and resets the
    // decoder to the start of a sequence.
    std::string flush();

   private:
    const tok::Vocab* vocab_;
    bool skip_special_;
    bool at_start_ = true;
    std::string pending_;
  };

 private:
  explicit Tokenizer(std::unique_ptr<const tok::Vocab> vocab);
  std::unique_ptr<const tok::Vocab> vocab_;
};

}  // namespace pi
