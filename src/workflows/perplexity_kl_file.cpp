#include "workflows/perplexity_kl_file.h"

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "tokenizer/tokenizer.h"

namespace pi::workflows {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the KL base file is written with the host's byte order, which must be little");

constexpr const char* kMagic = kKlBaseMagic;
constexpr uint64_t kHeaderBytes = 8 + 4 * 4 + 2 * 8;
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

uint64_t fnv1a(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}

uint64_t payload_bytes(const KlBaseHeader& h) {
  return static_cast<uint64_t>(h.n_chunks) * h.n_ctx * sizeof(int32_t) +
         static_cast<uint64_t>(h.n_chunks) * h.n_scored * sizeof(double) +
         static_cast<uint64_t>(h.n_chunks) * h.n_scored * h.n_vocab * sizeof(uint16_t);
}

}  // namespace

uint64_t vocab_hash(const Tokenizer& tok) {
  const int32_t n = tok.n_vocab();
  uint64_t h = fnv1a(&n, sizeof n, kFnvOffset);
  for (int32_t id = 0; id < n; ++id) {
    const std::string& s = tok.token_text(id);
    const auto len = static_cast<uint32_t>(s.size());
    h = fnv1a(&len, sizeof len, h);
    h = fnv1a(s.data(), s.size(), h);
  }
  return h;
}

uint64_t tokens_hash(std::span<const int32_t> tokens) {
  return fnv1a(tokens.data(), tokens.size_bytes(), kFnvOffset);
}

Result<KlBaseWriter> KlBaseWriter::create(const std::string& path, KlBaseHeader header,
                                          std::span<const int32_t> tokens) {
  if (tokens.size() != static_cast<size_t>(header.n_chunks) * header.n_ctx)
    return err("%s: %zu tokens given for %u chunks of %u", path.c_str(), tokens.size(),
               header.n_chunks, header.n_ctx);
  header.tokens_hash = tokens_hash(tokens);
  KlBaseWriter w;
  w.path_ = path;
  w.h_ = header;
  w.f_.reset(std::fopen(path.c_str(), "wb"));
  if (!w.f_)
    return err("%s: cannot write the KL base file: %s", path.c_str(), std::strerror(errno));
  const uint32_t dims[4] = {header.n_vocab, header.n_ctx, header.n_chunks, header.n_scored};
  const uint64_t hashes[2] = {header.vocab_hash, header.tokens_hash};
  bool ok = std::fwrite(kMagic, 1, 8, w.f_.get()) == 8 &&
            std::fwrite(dims, sizeof dims, 1, w.f_.get()) == 1 &&
            std::fwrite(hashes, sizeof hashes, 1, w.f_.get()) == 1 &&
            std::fwrite(tokens.data(), 1, tokens.size_bytes(), w.f_.get()) == tokens.size_bytes();
  if (!ok) return err("%s: write failed: %s", path.c_str(), std::strerror(errno));
  return w;
}

KlBaseWriter::~KlBaseWriter() {
  if (f_ && !done_) {
    f_.reset();
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
}

Status KlBaseWriter::append(std::span<const double> nll, std::span<const uint16_t> log_probs) {
  if (written_ >= h_.n_chunks)
    return err("%s: more than the announced %u chunks", path_.c_str(), h_.n_chunks);
  if (nll.size() != h_.n_scored ||
      log_probs.size() != static_cast<size_t>(h_.n_scored) * h_.n_vocab)
    return err("%s: chunk of %zu NLLs and %zu log-probabilities, expected %u and %u x %u",
               path_.c_str(), nll.size(), log_probs.size(), h_.n_scored, h_.n_scored, h_.n_vocab);
  if (std::fwrite(nll.data(), 1, nll.size_bytes(), f_.get()) != nll.size_bytes() ||
      std::fwrite(log_probs.data(), 1, log_probs.size_bytes(), f_.get()) != log_probs.size_bytes())
    return err("%s: write failed: %s", path_.c_str(), std::strerror(errno));
  ++written_;
  return Status::Ok();
}

Status KlBaseWriter::finish() {
  if (written_ != h_.n_chunks)
    return err("%s: %u of %u chunks written", path_.c_str(), written_, h_.n_chunks);
  if (std::fflush(f_.get()) != 0)
    return err("%s: write failed: %s", path_.c_str(), std::strerror(errno));
  f_.reset();
  done_ = true;
  return Status::Ok();
}

uint64_t KlBaseWriter::bytes() const { return kHeaderBytes + payload_bytes(h_); }

Result<KlBaseReader> KlBaseReader::open(const std::string& path) {
  KlBaseReader r;
  r.path_ = path;
  r.f_.reset(std::fopen(path.c_str(), "rb"));
  if (!r.f_) return err("%s: cannot read the KL base file: %s", path.c_str(), std::strerror(errno));
  char magic[8];
  uint32_t dims[4];
  uint64_t hashes[2];
  if (std::fread(magic, 1, sizeof magic, r.f_.get()) != sizeof magic ||
      std::memcmp(magic, kMagic, 8) != 0)
    return err("%s: not a KL base file (written by perplexity --kl-save): bad magic", path.c_str());
  if (std::fread(dims, sizeof dims, 1, r.f_.get()) != 1 ||
      std::fread(hashes, sizeof hashes, 1, r.f_.get()) != 1)
    return err("%s: truncated header", path.c_str());
  KlBaseHeader& h = r.h_;
  h.n_vocab = dims[0];
  h.n_ctx = dims[1];
  h.n_chunks = dims[2];
  h.n_scored = dims[3];
  h.vocab_hash = hashes[0];
  h.tokens_hash = hashes[1];
  if (h.n_vocab == 0 || h.n_ctx < 4 || h.n_chunks == 0 || h.n_scored != h.n_ctx - 1 - h.n_ctx / 2)
    return err("%s: invalid header (n_vocab %u, n_ctx %u, n_chunks %u, n_scored %u)", path.c_str(),
               h.n_vocab, h.n_ctx, h.n_chunks, h.n_scored);
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  const uint64_t want = kHeaderBytes + payload_bytes(h);
  if (ec || size != want)
    return err("%s: file is %llu bytes, its header announces %llu (truncated or not a KL base)",
               path.c_str(), static_cast<unsigned long long>(size),
               static_cast<unsigned long long>(want));
  r.tokens_.resize(static_cast<size_t>(h.n_chunks) * h.n_ctx);
  if (std::fread(r.tokens_.data(), sizeof(int32_t), r.tokens_.size(), r.f_.get()) !=
      r.tokens_.size())
    return err("%s: truncated token list", path.c_str());
  if (tokens_hash(r.tokens_) != h.tokens_hash)
    return err("%s: token list does not match its hash (corrupt file)", path.c_str());
  return r;
}

Status KlBaseReader::read_chunk(std::span<double> nll, std::span<uint16_t> log_probs) {
  if (read_ >= h_.n_chunks)
    return err("%s: all %u chunks already read", path_.c_str(), h_.n_chunks);
  if (nll.size() != h_.n_scored ||
      log_probs.size() != static_cast<size_t>(h_.n_scored) * h_.n_vocab)
    return err("%s: chunk buffers of %zu and %zu values, expected %u and %u x %u", path_.c_str(),
               nll.size(), log_probs.size(), h_.n_scored, h_.n_scored, h_.n_vocab);
  if (std::fread(nll.data(), sizeof(double), nll.size(), f_.get()) != nll.size() ||
      std::fread(log_probs.data(), sizeof(uint16_t), log_probs.size(), f_.get()) !=
          log_probs.size())
    return err("%s: truncated at chunk %u", path_.c_str(), read_ + 1);
  ++read_;
  return Status::Ok();
}

}  // namespace pi::workflows
