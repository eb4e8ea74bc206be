// A file read at offsets, bypassing the page cache where the file system allows it (direct I/O:
// offsets, lengths and buffers on kDirectAlign boundaries), else through it: the platform seam
// of the experts read on demand (model/expert_stream.h, --moe-ram) and of the disk probe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace pi {

inline constexpr uint64_t kDirectAlign = 4096;

class DirectFile {
 public:
  // Opens `path` for reading: direct when `direct` and the file system takes it (direct()
  // says which), else through the page cache.
  static Result<DirectFile> open(const std::string& path, bool direct);
  DirectFile() = default;
  DirectFile(DirectFile&& o) noexcept;
  DirectFile& operator=(DirectFile&& o) noexcept;
  DirectFile(const DirectFile&) = delete;
  DirectFile& operator=(const DirectFile&) = delete;
  ~DirectFile();

  bool direct() const { return direct_; }
  uint64_t size() const;  // 0 when it cannot be told
  // Opens the file again through the page cache (after a refused direct read).
  Status reopen_buffered();
  // Reads [off, off + n) into buf, n bytes unless the end of the file comes first; fails on an
  // error (read_error() says why) or when fewer than `need` bytes were read. Safe from several
  // threads.
  bool read_at(void* buf, uint64_t n, uint64_t off, uint64_t need) const;
  // Why the last read_at of this thread failed.
  static std::string read_error();

 private:
  std::string path_;
  intptr_t fd_ = -1;  // os::File
  bool direct_ = false;
};

// Faults in the pages of [p, p + n) for writing now (MADV_POPULATE_WRITE where the kernel has
// it, else one write per page), so that first use does not pay for zeroing them.
void populate_for_write(std::byte* p, size_t n);

}  // namespace pi
