// GGUF reader. Parses the header, metadata and tensor infos of a GGUF v2/v3 file (magic
// "GGUF") or of a PowerInfer file (magic "PWRI", otherwise identical), validating every
// count, length, offset and size against the file before using it. Tensor data is never
// read or copied: views point into the file's memory map.
//
// Errors name the file, the byte offset and the problem, on one line.
// Thread-safety: a File is immutable after open(); concurrent reads are safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/mapped_file.h"
#include "gguf/value.h"
#include "tensor/dtype.h"
#include "tensor/shape.h"

namespace pi::gguf {

enum class Magic : uint32_t {
  GGUF = 0x46554747,  // "GGUF" read as little-endian u32
  PWRI = 0x49525750,  // "PWRI"
};

constexpr uint32_t kDefaultAlignment = 32;

// general.architecture of the original PowerInfer's GPU index files. In a PWRI file with this
// architecture, tensor type ids 16/17/18 mean I8/I16/I32 (dtype_info_gpu_index), on reading
// and on writing.
inline constexpr const char* kGpuIndexArch = "generic.gpu_index";

struct KeyValue {
  std::string key;
  Value value;
  uint64_t offset;  // file offset of the key, for diagnostics
};

// One tensor: name, type, shape (outermost first) and where its bytes live.
struct TensorInfo {
  std::string name;
  DType type = DType::F32;
  Shape shape;
  uint64_t offset = 0;       // relative to the start of the data section
  uint64_t nbytes = 0;
  uint64_t info_offset = 0;  // file offset of this tensor's info record
};

// A non-owning view of one tensor's bytes inside the mapped file.
struct TensorView {
  const TensorInfo* info = nullptr;
  const std::byte* data = nullptr;

  DType type() const { return info->type; }
  const Shape& shape() const { return info->shape; }
  uint64_t nbytes() const { return info->nbytes; }
};

// Limits that keep a hostile file from making the parser allocate without bound.
struct ReadLimits {
  uint64_t max_string_bytes = 1ull << 30;
  uint32_t max_array_depth = 8;
  uint64_t max_array_items = uint64_t{1} << 24;  // per array; vocabularies are ~10^5
  int64_t max_dim = int64_t{1} << 40;
};

class File {
 public:
  // Maps (or, with LoadMode::Read, reads into memory) and parses `path`.
  static Result<File> open(const std::string& path, const ReadLimits& limits = {},
                           LoadMode mode = LoadMode::Map);

  const std::string& path() const { return path_; }
  Magic magic() const { return magic_; }
  bool is_powerinfer() const { return magic_ == Magic::PWRI; }
  // PWRI magic and general.architecture = kGpuIndexArch.
  bool is_gpu_index() const;
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }
  const std::byte* base() const { return base_; }
  // The file's memory (mapped or read); empty for in-memory images (parse_bytes).
  const MappedFile& mapping() const { return map_; }
  // The file's bytes, writable while `edit` runs (MappedFile::edit: read into memory only);
  // the views handed out keep pointing at the same (edited) bytes.
  Status edit(const std::function<void(std::span<std::byte>)>& edit) { return map_.edit(edit); }

  const std::vector<KeyValue>& metadata() const { return kvs_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

  const Value* find(std::string_view key) const;
  const TensorInfo* find_tensor(std::string_view name) const;
  Result<TensorView> tensor(std::string_view name) const;
  TensorView view(const TensorInfo& info) const;

  // Typed metadata access. get_* fail with a message naming the file and key when the
  // key is missing or has another type; *_or return a default only when missing.
  Result<std::string> get_string(std::string_view key) const;
  Result<int64_t> get_int(std::string_view key) const;
  Result<double> get_number(std::string_view key) const;
  int64_t get_int_or(std::string_view key, int64_t def) const;
  double get_number_or(std::string_view key, double def) const;

  // Hints the OS to read a tensor's bytes ahead (no-op for in-memory images).
  void prefetch(const TensorInfo& info) const;

 private:
  friend class Parser;
  friend Result<File> parse_bytes(std::string, const std::byte*, size_t, const ReadLimits&);
  MappedFile map_;  // empty for in-memory images
  std::string path_;
  const std::byte* base_ = nullptr;
  size_t size_ = 0;
  Magic magic_ = Magic::GGUF;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kvs_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Parses an in-memory image (used by the fuzzer and tests); `name` is used in messages.
// The bytes must outlive the returned File.
Result<File> parse_bytes(std::string name, const std::byte* data, size_t size,
                         const ReadLimits& limits = {});

}  // namespace pi::gguf
