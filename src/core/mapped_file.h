// Read-only memory map of a whole file. Model weights are views into this mapping; nothing
// is copied. The mapping lives as long as the MappedFile; views must not outlive it.
// Thread-safety: immutable after open(), safe to read from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "core/error.h"

namespace pi {

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  // Maps `path` read-only. An empty file maps to an empty span.
  static Result<MappedFile> open(const std::string& path);

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Asks the kernel to read the given range ahead (madvise WILLNEED). Best effort.
  void prefetch(size_t offset, size_t length) const;

 private:
  void reset();
  std::string path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace pi
