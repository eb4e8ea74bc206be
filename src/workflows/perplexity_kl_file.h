// The file `powerinfer perplexity --kl-save` writes and `--kl-base` reads: the base model's
// log-probabilities at every scored position, so that another model or mode can be compared
// with it token by token (KL divergence, top-1 agreement) without running both at once.
//
// Layout, little-endian, no padding:
//   char     magic[8]     "PIKLD001"
//   uint32   n_vocab
//   uint32   n_ctx        tokens per chunk (-c)
//   uint32   n_chunks
//   uint32   n_scored     scored positions per chunk: n_ctx - 1 - n_ctx / 2
//   uint64   vocab_hash   FNV-1a 64 over the vocabulary's token texts (vocab_hash())
//   uint64   tokens_hash  FNV-1a 64 over the int32 tokens below
//   int32    tokens[n_chunks, n_ctx]            each chunk as evaluated (BOS substituted)
//   then per chunk:
//     f64    nll[n_scored]                      -log p(target) from the f32 logits, exact
//     f16    log_probs[n_scored, n_vocab]
// Row s of chunk c holds log p(. | tokens[c, 0 .. n_ctx/2 + s]), the distribution that
// predicts tokens[c, n_ctx/2 + s + 1]. Rounding to f16 changes a log-probability by at most
// 2^-11 relative, and the comparison rounds the new model's rows the same way.
//
// Thread-compatible: one writer or reader per thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"

namespace pi {
class Tokenizer;
}

namespace pi::workflows {

struct KlBaseHeader {
  uint32_t n_vocab = 0;
  uint32_t n_ctx = 0;
  uint32_t n_chunks = 0;
  uint32_t n_scored = 0;
  uint64_t vocab_hash = 0;
  uint64_t tokens_hash = 0;
};

// The magic of the format above, for error messages and tests.
inline constexpr char kKlBaseMagic[9] = "PIKLD001";

// FNV-1a 64 over the vocabulary size and every token's text (with its length), so two
// vocabularies hash alike only if they spell the same pieces under the same ids.
uint64_t vocab_hash(const Tokenizer& tok);
// FNV-1a 64 over the little-endian bytes of the ids.
uint64_t tokens_hash(std::span<const int32_t> tokens);

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

// Streams a base file: the header and tokens at create(), then one chunk of log-probabilities
// per append(). finish() checks that every announced chunk was written; a writer destroyed
// before finish() removes its incomplete file.
class KlBaseWriter {
 public:
  // `tokens` holds n_chunks * n_ctx ids; the header's tokens_hash is computed here.
  static Result<KlBaseWriter> create(const std::string& path, KlBaseHeader header,
                                     std::span<const int32_t> tokens);
  KlBaseWriter(KlBaseWriter&&) noexcept = default;
  KlBaseWriter& operator=(KlBaseWriter&&) noexcept = default;
  ~KlBaseWriter();

  // One chunk: the scored tokens' NLL f64 [n_scored] and log-probabilities f16 [n_scored,
  // n_vocab].
  Status append(std::span<const double> nll, std::span<const uint16_t> log_probs);
  Status finish();
  uint64_t bytes() const;

 private:
  KlBaseWriter() = default;
  std::string path_;
  FilePtr f_;
  KlBaseHeader h_;
  uint32_t written_ = 0;
  bool done_ = false;
};

// Reads a base file written by KlBaseWriter. open() validates the magic, the header and the
// file size (a truncated file is refused before any work).
class KlBaseReader {
 public:
  static Result<KlBaseReader> open(const std::string& path);

  const KlBaseHeader& header() const { return h_; }
  // The chunks' tokens as evaluated by the base run, int32 [n_chunks, n_ctx].
  std::span<const int32_t> tokens() const { return tokens_; }
  // The next chunk: NLL f64 [n_scored] and log-probabilities f16 [n_scored, n_vocab].
  Status read_chunk(std::span<double> nll, std::span<uint16_t> log_probs);

 private:
  KlBaseReader() = default;
  std::string path_;
  FilePtr f_;
  KlBaseHeader h_;
  std::vector<int32_t> tokens_;
  uint32_t read_ = 0;
};

}  // namespace pi::workflows
