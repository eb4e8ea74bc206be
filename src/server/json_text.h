// JSON serialisation shared by the server's responses: one line, invalid UTF-8 (a byte token on
// its own) replaced by U+FFFD instead of throwing.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace pi::server {

inline std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace pi::server
