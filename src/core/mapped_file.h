// A whole file in memory, read-only. Model weights are views into it; views must not outlive
// the MappedFile. Two ways to get there (LoadMode):
//  - Map: mmap the file (instant; pages come from the page cache on first touch, shared with
//    other processes; the kernel maps them with small pages, or large ones where its page
//    cache happens to hold large folios).
//  - Read: read it into anonymous memory advised for transparent huge pages (2 MiB), then
//    make it read-only. Costs a copy at load (the file's size in RAM besides the page cache,
//    ~1 s for 4 GB) and buys far fewer TLB misses: dense decoding of a 7B Q4_0 file measured
//    1.27x faster on an Intel Xeon; neuron-sparse decoding, which reads thousands of
//    scattered rows per token, ~5% faster on an AMD Zen 5 (docs/BENCHMARKS.md, "Mapped or
//    read into huge pages"). llama.cpp's --no-mmap.
//  - Auto: Read when transparent huge pages are available and the file and 1 GiB fit in the
//    memory available now (choose_load_mode), else Map. What the engine does by default. The
//    CPU's layout of transposed weights costs no second copy there: the model converts them in
//    place (edit(), Model::load); a mapped file gets a copy of them instead.
// Thread-safety: immutable after open(), safe to read from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "core/error.h"

namespace pi {

enum class LoadMode { Map, Read, Auto };

// Auto's choice (pure, for tests): Read when huge pages are on and file_bytes + 1 GiB <=
// mem_available, else Map.
LoadMode choose_load_mode(size_t file_bytes, size_t mem_available, bool huge_pages_on);
// Memory left free beside a copy the engine decides to make (Auto's read, the CPU's repack).
inline constexpr size_t kMemorySpare = size_t{1} << 30;
// Memory the kernel could give now without swapping (MemAvailable of /proc/meminfo: free plus
// reclaimable caches) in bytes, 0 when unknown; and whether transparent huge pages can back an
// madvise'd region (/sys/kernel/mm/transparent_hugepage/enabled not [never]).
size_t mem_available_bytes();
// The machine's physical memory in bytes, 0 when unknown.
size_t physical_memory_bytes();
// This process's resident memory now (VmRSS) and its peak (VmHWM, /proc/self/status) in bytes,
// 0 when unknown; the peak counts the model's pages (read into memory, or the mapped pages
// touched), copies, KV cache and buffers. reset_peak_resident() starts the peak again from
// the current size (clear_refs "5"; false where the kernel refuses).
size_t resident_bytes();
size_t peak_resident_bytes();
bool reset_peak_resident();
bool transparent_huge_pages_on();

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  // Maps or reads `path` (see LoadMode; mode() says which Auto chose). An empty file gives an
  // empty span.
  static Result<MappedFile> open(const std::string& path, LoadMode mode = LoadMode::Map);

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  LoadMode mode() const { return mode_; }
  // Bytes backed by huge pages (Read mode; from /proc/self/smaps, 0 when unknown).
  size_t huge_page_bytes() const;

  // Asks the kernel to read the given range ahead (madvise WILLNEED). Best effort.
  void prefetch(size_t offset, size_t length) const;
  // Map mode: drops the pages touched so far from this process's memory (madvise DONTNEED;
  // the page cache keeps them, a later touch maps them again). No-op otherwise. Best effort.
  void release_pages() const;

  // Read mode only: makes the memory writable while `edit` runs on it, then read-only again,
  // so that a loader can convert data in place (the CPU's layout of transposed weights,
  // without a second copy). Fails on a mapped file, whose pages are the page cache's.
  // Not thread-safe: call it before the memory is shared.
  Status edit(const std::function<void(std::span<std::byte>)>& edit);

  // Locks the whole file in RAM (mlock: read now, never paged out; llama.cpp's --mlock).
  // Fails, naming the reason, when RLIMIT_MEMLOCK or memory is too small; munmap unlocks.
  Status lock() const;

 private:
  void reset();
  std::string path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  void* region_ = nullptr;  // what munmap releases: the mapping (Map) or the anonymous region
  size_t region_size_ = 0;
  LoadMode mode_ = LoadMode::Map;
};

}  // namespace pi
