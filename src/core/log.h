// Minimal leveled logging. Library code logs diagnostics here; results go through return
// values. The level and the sink (stderr unless an embedder set one) are the public ones of
// powerinfer/log.h.
#pragma once

#include "powerinfer/log.h"

namespace pi {

void log_debug(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace pi
