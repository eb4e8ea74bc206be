// core/os.h on POSIX systems (Linux first) and on Windows.
#include "core/os.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#ifdef _WIN32
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#include <io.h>
#else
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

namespace pi::os {

#ifdef _WIN32

namespace {
HANDLE handle(File f) { return reinterpret_cast<HANDLE>(f); }
}  // namespace

File open_read(const std::string& path, bool direct) {
  HANDLE h = CreateFileA(path.c_str(), GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_DELETE, nullptr, OPEN_EXISTING,
                         FILE_ATTRIBUTE_NORMAL | FILE_FLAG_BACKUP_SEMANTICS | (direct ? FILE_FLAG_NO_BUFFERING : 0),
                         nullptr);
  return h == INVALID_HANDLE_VALUE ? kNoFile : reinterpret_cast<File>(h);
}

void close(File f) {
  if (f != kNoFile) CloseHandle(handle(f));
}

bool regular_size(File f, uint64_t& size) {
  BY_HANDLE_FILE_INFORMATION info{};
  if (!GetFileInformationByHandle(handle(f), &info) || (info.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY) != 0)
    return false;
  size = (static_cast<uint64_t>(info.nFileSizeHigh) << 32) | info.nFileSizeLow;
  return true;
}

int64_t read_at(File f, void* buf, size_t n, uint64_t off) {
  OVERLAPPED o{};
  o.Offset = static_cast<DWORD>(off);
  o.OffsetHigh = static_cast<DWORD>(off >> 32);
  DWORD got = 0;
  const DWORD want = static_cast<DWORD>(n < (size_t{1} << 30) ? n : (size_t{1} << 30));
  if (!ReadFile(handle(f), buf, want, &got, &o)) return GetLastError() == ERROR_HANDLE_EOF ? 0 : -1;
  return static_cast<int64_t>(got);
}

std::string last_error() {
  const DWORD e = GetLastError();
  char buf[256] = {};
  const DWORD n = FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, nullptr, e, 0, buf,
                                 sizeof buf, nullptr);
  std::string s(buf, n);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == '.')) s.pop_back();
  return s.empty() ? "error " + std::to_string(e) : s;
}

void* map_anonymous(size_t n, bool accessible, bool) {
  // Windows commits what it gives (pages still come zeroed on first touch); address space
  // alone is reserved without access.
  return VirtualAlloc(nullptr, n, accessible ? MEM_RESERVE | MEM_COMMIT : MEM_RESERVE,
                      accessible ? PAGE_READWRITE : PAGE_NOACCESS);
}

void unmap(void* p, size_t) {
  if (p != nullptr) VirtualFree(p, 0, MEM_RELEASE);
}

bool protect(void* p, size_t n, Access a) {
  DWORD old = 0;
  const DWORD to = a == Access::None ? PAGE_NOACCESS : a == Access::Read ? PAGE_READONLY : PAGE_READWRITE;
  return VirtualProtect(p, n, to, &old) != 0;
}

void advise_huge(void*, size_t) {}
void advise_will_need(void*, size_t) {}
void advise_dont_need(void*, size_t) {}
bool populate_write(void*, size_t) { return false; }

bool lock(const void* p, size_t n) { return VirtualLock(const_cast<void*>(p), n) != 0; }

void* map_file(File f, size_t n) {
  HANDLE m = CreateFileMappingA(handle(f), nullptr, PAGE_READONLY, 0, 0, nullptr);
  if (m == nullptr) return nullptr;
  void* p = MapViewOfFile(m, FILE_MAP_READ, 0, 0, n);
  CloseHandle(m);  // the view keeps the mapping
  return p;
}

void unmap_file(void* p, size_t) {
  if (p != nullptr) UnmapViewOfFile(p);
}

void* aligned_alloc(size_t align, size_t n) { return _aligned_malloc(n, align); }
void aligned_free(void* p) { _aligned_free(p); }

void wait_while(const std::atomic<uint32_t>& word, uint32_t old) {
  WaitOnAddress(const_cast<std::atomic<uint32_t>*>(&word), &old, sizeof old, INFINITE);
}
void wait_while(const std::atomic<int32_t>& word, int32_t old) {
  WaitOnAddress(const_cast<std::atomic<int32_t>*>(&word), &old, sizeof old, INFINITE);
}
void wake_one(std::atomic<int32_t>& word) { WakeByAddressSingle(&word); }
void wake_all(std::atomic<uint32_t>& word) { WakeByAddressAll(&word); }

size_t page_size() {
  SYSTEM_INFO si{};
  GetSystemInfo(&si);
  return si.dwPageSize;
}

uint64_t physical_memory() {
  MEMORYSTATUSEX m{};
  m.dwLength = sizeof m;
  return GlobalMemoryStatusEx(&m) ? m.ullTotalPhys : 0;
}

uint64_t available_memory() {
  MEMORYSTATUSEX m{};
  m.dwLength = sizeof m;
  return GlobalMemoryStatusEx(&m) ? m.ullAvailPhys : 0;
}

bool stderr_is_terminal() { return _isatty(_fileno(stderr)) != 0; }
bool stdout_is_terminal() { return _isatty(_fileno(stdout)) != 0; }

void on_interrupt(void (*handler)(int)) { std::signal(SIGINT, handler); }

int system_exit_code(int status) { return status; }

std::string system_name() { return "Windows"; }


#else

File open_read(const std::string& path, bool direct) {
  int fd = -1;
#ifdef O_DIRECT
  if (direct) fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  else fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
#else
  if (direct) {
    errno = EINVAL;
    return kNoFile;
  }
  fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
#endif
  return fd < 0 ? kNoFile : static_cast<File>(fd);
}

void close(File f) {
  if (f != kNoFile) ::close(static_cast<int>(f));
}

bool regular_size(File f, uint64_t& size) {
  struct stat st {};
  if (::fstat(static_cast<int>(f), &st) != 0) return false;
  if (!S_ISREG(st.st_mode)) {
    errno = EISDIR;
    return false;
  }
  size = static_cast<uint64_t>(st.st_size);
  return true;
}

int64_t read_at(File f, void* buf, size_t n, uint64_t off) {
  while (true) {
    const ssize_t r = ::pread(static_cast<int>(f), buf, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    return r;
  }
}

std::string last_error() { return std::strerror(errno); }

void* map_anonymous(size_t n, bool accessible, bool overcommit) {
  void* p = mmap(nullptr, n, accessible ? PROT_READ | PROT_WRITE : PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | (overcommit ? MAP_NORESERVE : 0), -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void unmap(void* p, size_t n) {
  if (p != nullptr) munmap(p, n);
}

bool protect(void* p, size_t n, Access a) {
  const int to = a == Access::None ? PROT_NONE : a == Access::Read ? PROT_READ : PROT_READ | PROT_WRITE;
  return mprotect(p, n, to) == 0;
}

void advise_huge(void* p, size_t n) {
#ifdef MADV_HUGEPAGE
  madvise(p, n, MADV_HUGEPAGE);
#endif
}

void advise_will_need(void* p, size_t n) { madvise(p, n, MADV_WILLNEED); }

void advise_dont_need(void* p, size_t n) { madvise(p, n, MADV_DONTNEED); }

bool populate_write(void* p, size_t n) {
#ifdef MADV_POPULATE_WRITE
  return madvise(p, n, MADV_POPULATE_WRITE) == 0;
#else
  return false;
#endif
}

bool lock(const void* p, size_t n) { return ::mlock(p, n) == 0; }

void* map_file(File f, size_t n) {
  void* p = mmap(nullptr, n, PROT_READ, MAP_SHARED, static_cast<int>(f), 0);
  return p == MAP_FAILED ? nullptr : p;
}

void unmap_file(void* p, size_t n) {
  if (p != nullptr) munmap(p, n);
}

void* aligned_alloc(size_t align, size_t n) { return std::aligned_alloc(align, (n + align - 1) / align * align); }
void aligned_free(void* p) { std::free(p); }

void wait_while(const std::atomic<uint32_t>& word, uint32_t old) { word.wait(old, std::memory_order_seq_cst); }
void wait_while(const std::atomic<int32_t>& word, int32_t old) { word.wait(old, std::memory_order_acquire); }
void wake_one(std::atomic<int32_t>& word) { word.notify_one(); }
void wake_all(std::atomic<uint32_t>& word) { word.notify_all(); }

size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

uint64_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

uint64_t available_memory() { return 0; }  // Linux: /proc/meminfo (mapped_file.cpp)

bool stderr_is_terminal() { return isatty(STDERR_FILENO) != 0; }
bool stdout_is_terminal() { return isatty(STDOUT_FILENO) != 0; }

void on_interrupt(void (*handler)(int)) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
}

int system_exit_code(int status) {
  return status == -1 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string system_name() {
  utsname u{};
  return uname(&u) == 0 ? std::string(u.sysname) + " " + u.release + " " + u.machine : std::string();
}

#endif

UtcTime utc_time(int64_t t) {
  const std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
#ifdef _WIN32
  gmtime_s(&tm, &tt);
#else
  gmtime_r(&tt, &tm);
#endif
  return {tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec};
}

}  // namespace pi::os
