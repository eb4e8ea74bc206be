#include "cli_checks.h"

#include <cstdlib>
#include <thread>

#include "core/log.h"

namespace pi::cli {

Status check_threads(const char* flag, int64_t n, int64_t min) {
  if (n < min || n > kMaxThreads) {
    return err("%s %lld: the thread count must be in [%lld, %lld]", flag,
               static_cast<long long>(n), static_cast<long long>(min),
               static_cast<long long>(kMaxThreads));
  }
  const unsigned hw = std::thread::hardware_concurrency();
  if (hw > 0 && n > static_cast<int64_t>(hw)) {
    log_warn("%s %lld: more threads than the %u hardware threads of this machine (slower, not "
             "faster)", flag, static_cast<long long>(n), hw);
  }
  return Status::Ok();
}

int fail(const std::string& message) {
  log_error("%s", message.c_str());
  return 1;
}

int fail(const Error& e) { return fail(e.message); }

int fail(const Status& s) { return fail(s.error().message); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

SessionOptions env_session_options() {
  SessionOptions so;
  if (const char* v = std::getenv("LLAMA_SPARSE_PRED_THRESHOLD"); v != nullptr) so.sparse.threshold_env = v;
  return so;
}

}  // namespace pi::cli
