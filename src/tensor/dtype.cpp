#include "tensor/dtype.h"

#include <array>
#include <cctype>
#include <string>

namespace pi {
namespace {

// Sizes follow the ggml block structs (e.g. Q4_0: one f16 scale + 16 bytes of nibbles).
constexpr std::array kTypes = {
    DTypeInfo{DType::F32, "f32", 1, 4, false, true},
    DTypeInfo{DType::F16, "f16", 1, 2, false, true},
    DTypeInfo{DType::Q4_0, "q4_0", 32, 18, true, true},
    DTypeInfo{DType::Q4_1, "q4_1", 32, 20, true, true},
    DTypeInfo{DType::Q5_0, "q5_0", 32, 22, true, true},
    DTypeInfo{DType::Q5_1, "q5_1", 32, 24, true, true},
    DTypeInfo{DType::Q8_0, "q8_0", 32, 34, true, true},
    DTypeInfo{DType::Q8_1, "q8_1", 32, 36, true, false},
    DTypeInfo{DType::Q2_K, "q2_K", 256, 84, true, true},
    DTypeInfo{DType::Q3_K, "q3_K", 256, 110, true, true},
    DTypeInfo{DType::Q4_K, "q4_K", 256, 144, true, true},
    DTypeInfo{DType::Q5_K, "q5_K", 256, 176, true, true},
    DTypeInfo{DType::Q6_K, "q6_K", 256, 210, true, true},
    DTypeInfo{DType::Q8_K, "q8_K", 256, 292, true, false},
    DTypeInfo{DType::IQ2_XXS, "iq2_xxs", 256, 66, true, false},
    DTypeInfo{DType::IQ2_XS, "iq2_xs", 256, 74, true, false},
    DTypeInfo{DType::IQ3_XXS, "iq3_xxs", 256, 98, true, false},
    DTypeInfo{DType::IQ1_S, "iq1_s", 256, 50, true, false},
    DTypeInfo{DType::IQ4_NL, "iq4_nl", 32, 18, true, false},
    DTypeInfo{DType::IQ3_S, "iq3_s", 256, 110, true, false},
    DTypeInfo{DType::IQ2_S, "iq2_s", 256, 82, true, false},
    DTypeInfo{DType::IQ4_XS, "iq4_xs", 256, 136, true, false},
    DTypeInfo{DType::I8, "i8", 1, 1, false, false},
    DTypeInfo{DType::I16, "i16", 1, 2, false, false},
    DTypeInfo{DType::I32, "i32", 1, 4, false, true},
    DTypeInfo{DType::I64, "i64", 1, 8, false, false},
    DTypeInfo{DType::F64, "f64", 1, 8, false, false},
    DTypeInfo{DType::IQ1_M, "iq1_m", 256, 56, true, false},
    DTypeInfo{DType::BF16, "bf16", 1, 2, false, true},
    DTypeInfo{DType::TQ1_0, "tq1_0", 256, 54, true, false},
    DTypeInfo{DType::TQ2_0, "tq2_0", 256, 66, true, false},
    DTypeInfo{DType::MXFP4, "mxfp4", 32, 17, true, true},
};

// Layouts this engine makes in memory only: not file type ids, not names users pass.
constexpr std::array kInternalTypes = {
    DTypeInfo{DType::Q4_0_SPLIT, "q4_0_split", 32, 18, true, true},
    // Not computable by row: quantize_row / dequantize_row refuse it (rows are interleaved).
    DTypeInfo{DType::Q4_0_R16, "q4_0_r16", 32, 18, true, false},
    DTypeInfo{DType::Q8_0_R16, "q8_0_r16", 32, 34, true, false},
    DTypeInfo{DType::Q4_K_R16, "q4_k_r16", 256, 144, true, false},
    DTypeInfo{DType::MXFP4_R16, "mxfp4_r16", 32, 17, true, false},
};

}  // namespace

std::optional<DTypeInfo> dtype_info(uint32_t id) {
  for (const auto& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == id) return t;
  }
  return std::nullopt;
}

std::optional<DTypeInfo> dtype_info_gpu_index(uint32_t id) {
  switch (id) {
    case 16: return dtype_info(DType::I8);
    case 17: return dtype_info(DType::I16);
    case 18: return dtype_info(DType::I32);
    default: return dtype_info(id);
  }
}

uint32_t gpu_index_type_id(DType t) {
  switch (t) {
    case DType::I8: return 16;
    case DType::I16: return 17;
    case DType::I32: return 18;
    default: return static_cast<uint32_t>(t);
  }
}

const DTypeInfo& dtype_info(DType t) {
  for (const auto& info : kTypes) {
    if (info.type == t) return info;
  }
  for (const auto& info : kInternalTypes) {
    if (info.type == t) return info;
  }
  return kTypes[0];  // unreachable for valid enumerators
}

std::string_view dtype_name(DType t) { return dtype_info(t).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& t : kTypes) {
    std::string n(t.name);
    for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (n == lower) return t.type;
  }
  return std::nullopt;
}

size_t row_bytes(DType t, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  return static_cast<size_t>(n / info.block_size) * info.type_size;
}

}  // namespace pi
