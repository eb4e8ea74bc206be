#include "core/direct_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace pi {

Result<DirectFile> DirectFile::open(const std::string& path, bool direct) {
  DirectFile f;
  f.path_ = path;
  if (direct) {
    f.fd_ = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    f.direct_ = f.fd_ >= 0;
  }
  if (f.fd_ < 0) f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd_ < 0) return err("%s: cannot open: %s", path.c_str(), std::strerror(errno));
  return f;
}

DirectFile::DirectFile(DirectFile&& o) noexcept
    : path_(std::move(o.path_)), fd_(std::exchange(o.fd_, -1)), direct_(o.direct_) {}

DirectFile& DirectFile::operator=(DirectFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
    direct_ = o.direct_;
  }
  return *this;
}

DirectFile::~DirectFile() {
  if (fd_ >= 0) ::close(fd_);
}

uint64_t DirectFile::size() const {
  struct stat st {};
  return fd_ >= 0 && ::fstat(fd_, &st) == 0 && st.st_size > 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

Status DirectFile::reopen_buffered() {
  if (fd_ >= 0) ::close(fd_);
  direct_ = false;
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) return err("%s: cannot open: %s", path_.c_str(), std::strerror(errno));
  return Status::Ok();
}

bool DirectFile::read_at(void* buf, uint64_t n, uint64_t off, uint64_t need) const {
  auto* out = static_cast<char*>(buf);
  uint64_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd_, out + got, static_cast<size_t>(n - got), static_cast<off_t>(off + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (r == 0) break;  // end of file: an aligned range may run past it
    got += static_cast<uint64_t>(r);
  }
  if (got < need) {
    errno = EIO;
    return false;
  }
  return true;
}

void populate_for_write(std::byte* p, size_t n) {
#ifdef MADV_POPULATE_WRITE
  if (madvise(p, n, MADV_POPULATE_WRITE) == 0) return;
#endif
  for (size_t off = 0; off < n; off += 4096) p[off] = std::byte{0};
}

}  // namespace pi
