// The operating system under core: files read at offsets, anonymous memory, the machine's
// memory figures. Linux and other POSIX systems, and Windows (MinGW-w64, MSVC); the rest of
// core builds its seams (mapped_file.h, huge_region.h, direct_file.h) on these, and no layer
// above core calls the system itself.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace pi::os {

// A file open for reading: a file descriptor, or a Windows HANDLE's bits; kNoFile when none.
using File = intptr_t;
inline constexpr File kNoFile = -1;

// Opens `path` for reading (direct: bypassing the page cache, O_DIRECT or
// FILE_FLAG_NO_BUFFERING). kNoFile on failure, with last_error() telling why.
File open_read(const std::string& path, bool direct);
void close(File f);
// The size of an open regular file; false for a directory or when it cannot be told.
bool regular_size(File f, uint64_t& size);
// Reads up to n bytes at offset `off` (not moving any file position: safe from several
// threads); the bytes read, 0 at the end of the file, -1 on an error (last_error()).
int64_t read_at(File f, void* buf, size_t n, uint64_t off);
// The last failed call's reason, as strerror gives it.
std::string last_error();

// Anonymous memory, zero-filled, pages coming as they are first touched: readable and
// writable (`accessible`), else address space whose every access faults. `overcommit`: no
// check against the memory the system could commit (Linux MAP_NORESERVE: address space for a
// simulated device, not memory it will all use). nullptr on failure.
void* map_anonymous(size_t n, bool accessible, bool overcommit);
void unmap(void* p, size_t n);
// What the pages of [p, p + n) allow from now on; false on failure.
enum class Access { None, Read, ReadWrite };
bool protect(void* p, size_t n, Access a);
// Hints, best effort: back with transparent huge pages; read ahead; drop the pages of a file
// mapping from this process; fault in for writing now (false: not supported, touch instead).
void advise_huge(void* p, size_t n);
void advise_will_need(void* p, size_t n);
void advise_dont_need(void* p, size_t n);
bool populate_write(void* p, size_t n);
// Keeps [p, p + n) in RAM (mlock / VirtualLock); false on failure (last_error()).
bool lock(const void* p, size_t n);

// A read-only mapping of n bytes of an open file (nullptr on failure), and its release.
void* map_file(File f, size_t n);
void unmap_file(void* p, size_t n);

// Aligned heap blocks (free them with aligned_free).
void* aligned_alloc(size_t align, size_t n);
void aligned_free(void* p);

// Calls `handler` on Ctrl-C (SIGINT; no SA_RESTART: a blocking read returns EINTR).
void on_interrupt(void (*handler)(int));
// The exit code of a command std::system ran (128 + the signal for one killed by a signal;
// -1 when it could not run).
int system_exit_code(int status);
// "Linux 6.1.0 x86_64", "Windows": what the benchmark reports as the system.
std::string system_name();
// The UTC calendar time of `t` (gmtime_r / gmtime_s).
struct UtcTime {
  int year, month, day, hour, minute, second;
};
UtcTime utc_time(int64_t t);

// Blocks while `word` holds `old` (it may return early: check again), and wakes one or all
// of the threads blocked on `word`: std::atomic's wait and notify, except on Windows, where
// MinGW's libstdc++ builds them on a condition-variable table that loses wake-ups (a pool
// thread then sleeps forever): WaitOnAddress and WakeByAddress there.
void wait_while(const std::atomic<uint32_t>& word, uint32_t old);
void wait_while(const std::atomic<int32_t>& word, int32_t old);
void wake_one(std::atomic<int32_t>& word);
void wake_all(std::atomic<uint32_t>& word);

size_t page_size();
uint64_t physical_memory();   // 0 when unknown
// What could be had without swapping; 0 when unknown (on Linux /proc/meminfo tells:
// mapped_file.h's mem_available_bytes reads it first).
uint64_t available_memory();
bool stderr_is_terminal();
bool stdout_is_terminal();

}  // namespace pi::os
