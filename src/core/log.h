// Minimal leveled logging to stderr. Library code logs diagnostics here; results go
// through return values. The level is process-wide and set once by main().
#pragma once

namespace pi {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3, Silent = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();

void log_debug(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace pi
