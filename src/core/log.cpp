#include "core/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace pi {
namespace {
// The one process-wide setting; written by main() before threads start.
std::atomic<int> g_level{static_cast<int>(LogLevel::Info)};

void vlog(LogLevel level, const char* prefix, const char* fmt, va_list ap) {
  if (static_cast<int>(level) < g_level.load(std::memory_order_relaxed)) return;
  std::fputs(prefix, stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
}
}  // namespace

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }

#define PI_DEFINE_LOG(fn, level, prefix) \
  void fn(const char* fmt, ...) {        \
    va_list ap;                          \
    va_start(ap, fmt);                   \
    vlog(level, prefix, fmt, ap);        \
    va_end(ap);                          \
  }
PI_DEFINE_LOG(log_debug, LogLevel::Debug, "debug: ")
PI_DEFINE_LOG(log_info, LogLevel::Info, "")
PI_DEFINE_LOG(log_warn, LogLevel::Warn, "warning: ")
PI_DEFINE_LOG(log_error, LogLevel::Error, "error: ")
#undef PI_DEFINE_LOG

}  // namespace pi
