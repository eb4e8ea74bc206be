// A sequence's saved KV state (the prompt cache of `run --prompt-cache` and the server's slot
// save/restore): the file format of docs/FORMATS.md ("Sequence state files"). A file holds a
// fingerprint of the model that wrote it, the sequence's token ids (positions 0..n-1) and, per
// layer, the K and V rows of its n cells as the cache stores them (KvLayer's element type).
//
// Writing reads the cells through the device that holds each layer (copy_out); reading writes
// them into cells planned by the caller (copy_in) without touching the cache's metadata: the
// caller commits them with KvCache::apply, the only mutator. Every error is one line naming
// the file and what is wrong.
// Thread-safety: none; the session's thread drives these.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/reader.h"
#include "model/model.h"
#include "runtime/kv_cache.h"
#include "tensor/dtype.h"

namespace pi::runtime {

inline constexpr char kStateMagic[4] = {'P', 'I', 'S', 'Q'};
inline constexpr uint32_t kStateVersion = 1;

// What a state file must agree on with the model that reads it: the KV cache's shape and
// element type, the vocabulary size, and a hash of the model file.
struct KvFingerprint {
  std::string arch;  // general.architecture
  int64_t n_layer = 0, n_head_kv = 0, head_dim = 0, n_embd = 0, n_vocab = 0;
  DType kv_type = DType::F16;    // the cache's key type (ggml type id in the file)
  DType kv_type_v = DType::F16;  // its value type (the file's second word: 0 when equal)
  uint64_t kv_row_bytes = 0;     // bytes of one cell's K in one layer: all its kv heads
  uint64_t kv_row_bytes_v = 0;   // the same for V (follows from kv_type_v)
  uint64_t model_hash = 0;     // model_file_hash()
};

// FNV-1a 64 over the file's header (magic, metadata, tensor infos: bytes [0, data_offset)),
// the first 64 bytes of every F32 tensor (the norms, which fine-tunes of one shape change)
// and the file's size: cheap (a few pages of weights are read) and different for another
// model, another quantization or another vocabulary.
uint64_t model_file_hash(const gguf::File& f);
// The fingerprint of a cache of m in the given key and value types.
KvFingerprint kv_fingerprint(const model::Model& m, KvTypes types = {});

// Writes `tokens` and the cells of sequence seq, which must hold exactly positions
// 0..tokens.size()-1, to `path` (through `path`.tmp and a rename, so a reader never sees a
// half-written file). Returns the bytes written.
Result<uint64_t> write_seq_state(const std::string& path, const KvFingerprint& fp,
                                 const KvCache& cache, SeqId seq, std::span<const int32_t> tokens);

// An open state file whose header matches the model and whose size matches its token count.
class SeqStateFile {
 public:
  // Fails (naming the file) when it is missing, too short, not a state file, of another
  // version or model (naming the field), or of a size that does not match its header.
  static Result<SeqStateFile> open(const std::string& path, const KvFingerprint& fp);

  const std::vector<int32_t>& tokens() const { return tokens_; }
  uint64_t file_bytes() const { return file_bytes_; }
  const std::string& path() const { return path_; }

  // Writes the K and V rows of the file's tokens [0, cells.size()) into cells `cells` of every
  // layer of `cache` (the contents only; the caller commits them).
  Status read_cells(const KvCache& cache, const KvSlot& slot);

 private:
  struct Closer {
    void operator()(std::FILE* f) const {
      if (f != nullptr) std::fclose(f);
    }
  };
  std::string path_;
  std::unique_ptr<std::FILE, Closer> file_;
  KvFingerprint fp_;
  std::vector<int32_t> tokens_;
  uint64_t data_offset_ = 0;  // where the first layer's K rows start
  uint64_t file_bytes_ = 0;
};

}  // namespace pi::runtime
