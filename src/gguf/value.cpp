#include "gguf/value.h"

#include <cstdio>

namespace pi::gguf {

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::Bool: return "bool";
    case ValueType::String: return "str";
    case ValueType::Array: return "arr";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
  }
  return "?";
}

std::optional<int64_t> Value::as_int() const {
  return std::visit(
      [](const auto& v) -> std::optional<int64_t> {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, uint64_t>) {
          if (v > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
          return static_cast<int64_t>(v);
        } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          return static_cast<int64_t>(v);
        } else {
          return std::nullopt;
        }
      },
      data);
}

std::optional<double> Value::as_number() const {
  return std::visit(
      [](const auto& v) -> std::optional<double> {
        using T = std::decay_t<decltype(v)>;
        if constexpr ((std::is_integral_v<T> && !std::is_same_v<T, bool>) ||
                      std::is_floating_point_v<T>) {
          return static_cast<double>(v);
        } else {
          return std::nullopt;
        }
      },
      data);
}

namespace {
std::string quote(const std::string& s, size_t max_len) {
  std::string out = "\"";
  size_t n = 0;
  for (char c : s) {
    if (n++ == max_len) {
      out += "...";
      break;
    }
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}
}  // namespace

std::string Value::to_string(size_t max_items) const {
  return std::visit(
      [&](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return quote(v, 200);
        } else if constexpr (std::is_same_v<T, Array>) {
          std::string s = "[";
          size_t n = v.items.size();
          for (size_t i = 0; i < n && i < max_items; ++i) {
            if (i) s += ", ";
            s += v.items[i].to_string(max_items);
          }
          if (n > max_items) s += ", ... (" + std::to_string(n) + " items)";
          return s + "]";
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_floating_point_v<T>) {
          char buf[32];
          // Shortest form that round-trips for the stored precision.
          std::snprintf(buf, sizeof buf, std::is_same_v<T, float> ? "%.7g" : "%.15g",
                        static_cast<double>(v));
          return buf;
        } else {
          return std::to_string(v);
        }
      },
      data);
}

}  // namespace pi::gguf
