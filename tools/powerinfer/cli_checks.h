// Limits on flag values shared by the subcommands, so that absurd values are refused with a
// message naming the flag instead of reaching an allocation or thread creation that throws.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "powerinfer/engine.h"

namespace pi::cli {

// Most threads a subcommand starts. More than this is never useful on one machine and can
// exceed the process's thread limit.
inline constexpr int64_t kMaxThreads = 256;

// Checks a thread count given with `flag`: an error below `min` (1, or 0 where 0 means "all")
// or above kMaxThreads; a warning (once per value) above the machine's hardware threads.
Status check_threads(const char* flag, int64_t n, int64_t min = 1);

// Logs the error's message and returns a subcommand's failing exit code (1):
// `if (!x.ok()) return fail(x.error());`.
int fail(const Error& e);
int fail(const Status& s);
int fail(const std::string& message);

// Seconds elapsed since t0 on the steady clock.
double seconds_since(std::chrono::steady_clock::time_point t0);

// Session options holding what the CLI takes from the environment: the original's
// LLAMA_SPARSE_PRED_THRESHOLD (below --sparse-threshold). The library reads no environment;
// every command starts its SessionOptions here.
SessionOptions env_session_options();

}  // namespace pi::cli
