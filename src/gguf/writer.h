// Streaming GGUF writer. Declare metadata and tensors first, then begin() writes the header,
// metadata and tensor infos, and tensor bytes are appended in declaration order, in as many
// pieces as the caller likes: a multi-GB model is written with O(chunk) memory.
// Not thread-safe.
#pragma once

#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/reader.h"
#include "gguf/value.h"
#include "tensor/dtype.h"
#include "tensor/shape.h"

namespace pi::gguf {

class Writer {
 public:
  explicit Writer(Magic magic = Magic::GGUF, uint32_t version = 3);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Sets the data alignment (power of two); a non-default value is also recorded as
  // general.alignment. Must precede add_tensor().
  Status set_alignment(uint32_t alignment);
  Status add_kv(std::string key, Value value);
  // Declares a tensor; shape is outermost first. Its byte size follows from type and shape.
  // Dimensions must be >= 1, except in a GPU index file (is_gpu_index()), where 0 is allowed.
  Status add_tensor(std::string name, DType type, const Shape& shape);

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // PWRI magic and general.architecture = kGpuIndexArch already added: I8/I16/I32 tensors are
  // written with the original's type ids 16/17/18 (gpu_index_type_id).
  bool is_gpu_index() const;

  // Creates `path` and writes everything up to the first tensor's data.
  Status begin(const std::string& path);
  // Appends bytes to the current tensor; moves to the next one when it is complete.
  Status write(std::span<const std::byte> bytes);
  // Convenience: writes one whole tensor (must be the current one, with exactly its size).
  Status write_tensor(const std::string& name, std::span<const std::byte> bytes);
  // Checks that every tensor was written in full, flushes and closes the file.
  Status finish();

 private:
  Status put(const void* p, size_t n);
  Status put_string(const std::string& s);
  Status put_value(const Value& v);
  Status pad_to_alignment();
  // Moves past zero-byte tensors (index files only) at the current position.
  Status skip_empty_tensors();

  Magic magic_;
  uint32_t version_;
  uint32_t alignment_ = kDefaultAlignment;
  std::vector<KeyValue> kvs_;
  std::vector<TensorInfo> tensors_;
  uint64_t data_size_ = 0;

  std::vector<char> buffer_;  // stdio buffer; must outlive fp_
  std::FILE* fp_ = nullptr;
  std::string path_;
  uint64_t written_ = 0;        // bytes written to the file so far
  size_t current_ = 0;          // index of the tensor being written
  uint64_t current_done_ = 0;   // bytes of it written
  bool began_ = false;
};

}  // namespace pi::gguf
