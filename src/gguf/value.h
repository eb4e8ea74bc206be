// GGUF metadata values. The alternatives of Value::Data are ordered so that
// Data::index() equals the GGUF value-type code (uint8 = 0 ... float64 = 12).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

namespace pi::gguf {

enum class ValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};
constexpr uint32_t kNumValueTypes = 13;

std::string_view value_type_name(ValueType t);

struct Value;

// A homogeneous array. `elem_type` is kept even when empty; nested arrays are allowed.
struct Array {
  ValueType elem_type = ValueType::U8;
  std::vector<Value> items;
};

struct Value {
  using Data = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                            std::string, Array, uint64_t, int64_t, double>;
  Data data;

  Value() = default;
  template <typename T>
    requires(!std::is_same_v<std::decay_t<T>, Value>)
  Value(T v) : data(std::move(v)) {}

  ValueType type() const { return static_cast<ValueType>(data.index()); }

  // Integer of any width and signedness, if this is an integer that fits in int64.
  std::optional<int64_t> as_int() const;
  // Any integer or float, widened to double.
  std::optional<double> as_number() const;
  const std::string* as_string() const { return std::get_if<std::string>(&data); }
  const Array* as_array() const { return std::get_if<Array>(&data); }

  // Human-readable rendering; arrays longer than `max_items` are abbreviated.
  std::string to_string(size_t max_items = 8) const;
};

}  // namespace pi::gguf
