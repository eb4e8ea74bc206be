#include "core/mapped_file.h"

#include "core/huge_region.h"
#include "core/os.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace pi {

MappedFile::~MappedFile() { reset(); }

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    region_ = std::exchange(other.region_, nullptr);
    region_size_ = std::exchange(other.region_size_, 0);
    mode_ = other.mode_;
  }
  return *this;
}

void MappedFile::reset() {
  if (region_ != nullptr) {
    if (mode_ == LoadMode::Read) os::unmap(region_, region_size_);
    else os::unmap_file(region_, region_size_);
  }
  region_ = nullptr;
  region_size_ = 0;
  data_ = nullptr;
  size_ = 0;
}

namespace {

// Reads the whole file into a fresh anonymous region advised for huge pages.
Status read_into_memory(os::File fd, const std::string& path, size_t size, void*& region,
                        size_t& region_size, const std::byte*& data) {
  HugeRegion mem(size);
  if (!mem.ok()) {
    return err("%s: cannot allocate %zu bytes to read the file into: %s", path.c_str(), size,
               os::last_error().c_str());
  }
  std::byte* aligned = mem.data();
  // Chunks of 64 MiB read by several threads: most of the time goes to the kernel faulting
  // in and zeroing the huge pages, which runs in parallel on as many cores.
  constexpr size_t kChunk = size_t{64} << 20;
  const size_t n_chunks = (size + kChunk - 1) / kChunk;
  const size_t n_threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8);
  std::atomic<size_t> next{0};
  std::mutex failure_mutex;
  std::string failure;
  auto worker = [&] {
    for (size_t c = next++; c < n_chunks; c = next++) {
      size_t done = c * kChunk;
      const size_t end = std::min(size, done + kChunk);
      while (done < end) {
        const int64_t r = os::read_at(fd, aligned + done, end - done, done);
        if (r <= 0) {
          const std::lock_guard<std::mutex> lock(failure_mutex);
          if (failure.empty()) {
            failure = err("%s: read failed at offset %zu of %zu: %s", path.c_str(), done, size,
                          r < 0 ? os::last_error().c_str() : "unexpected end of file")
                          .message;
          }
          next = n_chunks;  // the others stop at their next chunk
          return;
        }
        done += static_cast<size_t>(r);
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < std::min(n_threads, n_chunks); ++t) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
  if (!failure.empty()) return Error{failure};
  os::protect(mem.mapping(), mem.mapping_size(), os::Access::Read);
  data = aligned;
  std::tie(region, region_size) = mem.release();
  return Status::Ok();
}

}  // namespace

LoadMode choose_load_mode(size_t file_bytes, size_t mem_available, bool huge_pages_on) {
  const bool fits = mem_available >= kMemorySpare && file_bytes <= mem_available - kMemorySpare;
  return huge_pages_on && fits ? LoadMode::Read : LoadMode::Map;
}

namespace {

// The "<key> N kB" line of a /proc file, in bytes; 0 when absent or unreadable.
size_t proc_kib_line(const char* path, const char* format) {
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return 0;
  char line[256];
  size_t kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, format, &kib) == 1) break;
  }
  std::fclose(f);
  return kib * 1024;
}

}  // namespace

size_t mem_available_bytes() {
  const size_t kib = proc_kib_line("/proc/meminfo", "MemAvailable: %zu kB");
  return kib != 0 ? kib : static_cast<size_t>(os::available_memory());
}

size_t physical_memory_bytes() { return static_cast<size_t>(os::physical_memory()); }

size_t peak_resident_bytes() { return proc_kib_line("/proc/self/status", "VmHWM: %zu kB"); }

size_t resident_bytes() { return proc_kib_line("/proc/self/status", "VmRSS: %zu kB"); }

bool reset_peak_resident() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

bool transparent_huge_pages_on() {
  std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (f == nullptr) return false;
  char line[256] = {};
  const bool read = std::fgets(line, sizeof line, f) != nullptr;
  std::fclose(f);
  return read && std::strstr(line, "[never]") == nullptr;
}

Result<MappedFile> MappedFile::open(const std::string& path, LoadMode mode) {
  const os::File fd = os::open_read(path, /*direct=*/false);
  if (fd == os::kNoFile) return err("%s: cannot open: %s", path.c_str(), os::last_error().c_str());
  uint64_t file_size = 0;
  if (!os::regular_size(fd, file_size)) {
    os::close(fd);
    return err("%s: not a regular file", path.c_str());
  }
  MappedFile f;
  f.path_ = path;
  const auto size = static_cast<size_t>(file_size);
  if (mode == LoadMode::Auto)
    mode = choose_load_mode(size, mem_available_bytes(), transparent_huge_pages_on());
  f.mode_ = mode;
  if (size > 0 && mode == LoadMode::Read) {
    const Status s = read_into_memory(fd, path, size, f.region_, f.region_size_, f.data_);
    os::close(fd);
    if (!s.ok()) return s.error();
    f.size_ = size;
    return f;
  }
  if (size > 0) {
    void* p = os::map_file(fd, size);
    if (p == nullptr) {
      const std::string why = os::last_error();
      os::close(fd);
      return err("%s: cannot mmap: %s", path.c_str(), why.c_str());
    }
    f.region_ = p;
    f.region_size_ = size;
    f.data_ = static_cast<const std::byte*>(p);
    f.size_ = size;
  }
  os::close(fd);
  return f;
}

size_t MappedFile::huge_page_bytes() const {
  if (mode_ != LoadMode::Read || region_ == nullptr) return 0;
  std::FILE* smaps = std::fopen("/proc/self/smaps", "r");
  if (smaps == nullptr) return 0;
  const auto begin = reinterpret_cast<uintptr_t>(region_);
  bool in_region = false;
  size_t kib = 0;
  char line[512];
  while (std::fgets(line, sizeof line, smaps) != nullptr) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && std::strchr(line, '-') != nullptr &&
        std::strncmp(line, "AnonHugePages", 13) != 0) {
      in_region = lo >= begin && hi <= begin + region_size_;
      continue;
    }
    size_t v = 0;
    if (in_region && std::sscanf(line, "AnonHugePages: %zu kB", &v) == 1) kib += v;
  }
  std::fclose(smaps);
  return kib * 1024;
}

Status MappedFile::edit(const std::function<void(std::span<std::byte>)>& edit) {
  if (mode_ != LoadMode::Read || region_ == nullptr) {
    return err("%s: only a file read into memory can be edited in place (this one is mapped)",
               path_.c_str());
  }
  if (!os::protect(region_, region_size_, os::Access::ReadWrite)) {
    return err("%s: cannot make its memory writable: %s", path_.c_str(), os::last_error().c_str());
  }
  edit(std::span<std::byte>(const_cast<std::byte*>(data_), size_));
  os::protect(region_, region_size_, os::Access::Read);
  return Status::Ok();
}

void MappedFile::prefetch(size_t offset, size_t length) const {
  if (data_ == nullptr || offset >= size_) return;
  const size_t page = os::page_size();
  size_t begin = offset / page * page;
  size_t end = std::min(size_, offset + length);
  os::advise_will_need(const_cast<std::byte*>(data_) + begin, end - begin);
}

void MappedFile::release_pages() const {
  if (data_ == nullptr || mode_ != LoadMode::Map) return;
  os::advise_dont_need(region_, region_size_);
}

}  // namespace pi

namespace pi {

Status MappedFile::lock() const {
  if (size_ == 0) return Status::Ok();
  if (!os::lock(data_, size_)) {
    return err("%s: cannot lock %.1f MiB in memory (mlock: %s; see ulimit -l)", path_.c_str(),
               static_cast<double>(size_) / 1048576.0, os::last_error().c_str());
  }
  return Status::Ok();
}

}  // namespace pi
