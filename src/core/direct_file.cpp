#include "core/direct_file.h"

#include <utility>

#include "core/os.h"

namespace pi {

Result<DirectFile> DirectFile::open(const std::string& path, bool direct) {
  DirectFile f;
  f.path_ = path;
  if (direct) {
    f.fd_ = os::open_read(path, /*direct=*/true);
    f.direct_ = f.fd_ != os::kNoFile;
  }
  if (f.fd_ == os::kNoFile) f.fd_ = os::open_read(path, /*direct=*/false);
  if (f.fd_ == os::kNoFile) return err("%s: cannot open: %s", path.c_str(), os::last_error().c_str());
  return f;
}

DirectFile::DirectFile(DirectFile&& o) noexcept
    : path_(std::move(o.path_)), fd_(std::exchange(o.fd_, os::kNoFile)), direct_(o.direct_) {}

DirectFile& DirectFile::operator=(DirectFile&& o) noexcept {
  if (this != &o) {
    os::close(fd_);
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, os::kNoFile);
    direct_ = o.direct_;
  }
  return *this;
}

DirectFile::~DirectFile() { os::close(fd_); }

uint64_t DirectFile::size() const {
  uint64_t n = 0;
  return fd_ != os::kNoFile && os::regular_size(fd_, n) ? n : 0;
}

Status DirectFile::reopen_buffered() {
  os::close(fd_);
  direct_ = false;
  fd_ = os::open_read(path_, /*direct=*/false);
  if (fd_ == os::kNoFile) return err("%s: cannot open: %s", path_.c_str(), os::last_error().c_str());
  return Status::Ok();
}

namespace {
thread_local bool short_read = false;  // the last failed read_at ended early rather than failed
}  // namespace

bool DirectFile::read_at(void* buf, uint64_t n, uint64_t off, uint64_t need) const {
  short_read = false;
  auto* out = static_cast<char*>(buf);
  uint64_t got = 0;
  while (got < n) {
    const int64_t r = os::read_at(fd_, out + got, static_cast<size_t>(n - got), off + got);
    if (r < 0) return false;
    if (r == 0) break;  // end of file: an aligned range may run past it
    got += static_cast<uint64_t>(r);
  }
  if (got < need) {
    short_read = true;
    return false;
  }
  return true;
}

std::string DirectFile::read_error() { return short_read ? "unexpected end of file" : os::last_error(); }

void populate_for_write(std::byte* p, size_t n) {
  if (os::populate_write(p, n)) return;
  for (size_t off = 0; off < n; off += 4096) p[off] = std::byte{0};
}

}  // namespace pi
