#include "core/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string>

namespace pi {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::Info)};

struct Sink {
  LogSink fn = nullptr;
  void* user = nullptr;
};
std::mutex g_sink_mutex;
Sink g_sink;  // guarded by g_sink_mutex

void vlog(LogLevel level, const char* prefix, const char* fmt, va_list ap) {
  if (static_cast<int>(level) < g_level.load(std::memory_order_relaxed)) return;
  Sink sink;
  {
    std::lock_guard<std::mutex> lock(g_sink_mutex);
    sink = g_sink;
  }
  if (sink.fn == nullptr) {
    std::fputs(prefix, stderr);
    std::vfprintf(stderr, fmt, ap);
    std::fputc('\n', stderr);
    return;
  }
  va_list again;
  va_copy(again, ap);
  char small[512];
  const int n = std::vsnprintf(small, sizeof small, fmt, ap);
  if (n < 0) {
    va_end(again);
    return;
  }
  // The sink gets the text without the newline stderr would end it with (nor one the message
  // ended with itself: a table).
  const auto trimmed = [](char* text, size_t len) {
    while (len > 0 && text[len - 1] == '\n') text[--len] = '\0';
    return text;
  };
  if (static_cast<size_t>(n) < sizeof small) {
    va_end(again);
    sink.fn(level, trimmed(small, static_cast<size_t>(n)), sink.user);
    return;
  }
  std::string big(static_cast<size_t>(n) + 1, '\0');
  std::vsnprintf(big.data(), big.size(), fmt, again);
  va_end(again);
  sink.fn(level, trimmed(big.data(), static_cast<size_t>(n)), sink.user);
}
}  // namespace

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }

void set_log_sink(LogSink sink, void* user) {
  std::lock_guard<std::mutex> lock(g_sink_mutex);
  g_sink = {sink, user};
}

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
