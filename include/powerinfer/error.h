// The public error type of the engine (include/powerinfer/): functions that can fail return
// Result<T> (or Status for no value). Only main() turns an error into an exit code. Messages
// are one line and name what failed and where ("model.gguf: offset 1234: tensor 'x' data runs
// past end of file"); the code says what kind of failure it is.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <variant>

namespace pi {

// What kind of failure an Error is, for callers that act on it (an HTTP server maps it to a
// status code). Most errors are Internal; the runtime tags the ones a caller can act on.
enum class ErrorCode {
  Internal = 0,     // anything else: a bug, an I/O failure, a malformed file
  BadRequest,       // the caller passed invalid arguments (ids, sizes, parameter ranges)
  ContextFull,      // the tokens do not fit the free KV cells ("context overflow")
  Cancelled,        // a stop check returned true ("interrupted")
  OutOfMemory,      // an allocation failed
};

// "internal", "bad_request", "context_full", "cancelled", "out_of_memory".
inline const char* error_code_name(ErrorCode c) {
  switch (c) {
    case ErrorCode::BadRequest: return "bad_request";
    case ErrorCode::ContextFull: return "context_full";
    case ErrorCode::Cancelled: return "cancelled";
    case ErrorCode::OutOfMemory: return "out_of_memory";
    case ErrorCode::Internal: break;
  }
  return "internal";
}

struct Error {
  std::string message;
  ErrorCode code = ErrorCode::Internal;
};

// The same error tagged with a code: `return with_code(err(...), ErrorCode::ContextFull)`.
[[nodiscard]] inline Error with_code(Error e, ErrorCode c) {
  e.code = c;
  return e;
}

// Builds an Error from a printf-style format. Used as `return err("...", args)`.
template <typename... Args>
[[nodiscard]] Error err(const char* fmt, Args... args) {
  if constexpr (sizeof...(Args) == 0) {
    return Error{fmt};
  } else {
    int n = std::snprintf(nullptr, 0, fmt, args...);
    std::string s(n > 0 ? static_cast<size_t>(n) : 0, '\0');
    std::snprintf(s.data(), s.size() + 1, fmt, args...);
    return Error{std::move(s)};
  }
}

// A value or an error. Deliberately small: construct from T or Error, test with ok(),
// read with value()/error(). Accessing the wrong alternative is a programming error
// (std::get throws std::bad_variant_access).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Error e) : v_(std::move(e)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const Error& error() const { return std::get<1>(v_); }

  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Error> v_;
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error e) : err_(std::move(e)), failed_(true) {}
  static Status Ok() { return Status(); }

  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return err_; }

 private:
  Error err_;
  bool failed_ = false;
};

}  // namespace pi

// Propagates a failed Status/Result out of the current function. The only macro in the
// project: it hides no locals beyond the temporary it names.
#define PI_TRY(expr)                                 \
  do {                                               \
    auto pi_try_result_ = (expr);                    \
    if (!pi_try_result_.ok()) return pi_try_result_.error(); \
  } while (0)
