// SessionOptions by name: the one table through which bindings set a session's options (the
// Python package's keywords), with SessionOptions' own defaults for whatever is not named.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "powerinfer/engine.h"

namespace pi {

// A value as a binding has it: none (an optional option unset), a bool, an integer, a number
// or text. Integers are accepted where numbers are.
using OptionValue = std::variant<std::monostate, bool, int64_t, double, std::string>;

struct OptionInfo {
  std::string name;   // "n_ctx", "temperature", "cache_type_k", ...
  std::string kind;   // "int", "bytes", "float", "bool", "text", or "text|none"/"bytes|none"
  std::string help;   // one line
};

// Every option set_session_option knows, in a stable order.
const std::vector<OptionInfo>& session_option_list();

// Sets option `name` of `o`. Errors (ErrorCode::BadRequest) name the option: an unknown name
// (with the known ones), a value of the wrong kind, one out of range (a negative count, an
// unknown KV cache type).
Status set_session_option(SessionOptions& o, std::string_view name, const OptionValue& value);

}  // namespace pi
