// Row-level entry points of quant.h: validate the type and length, then convert element by
// element (plain types) or block by block (quant_blocks.cpp, quant_q6k.cpp, quant_kquants.cpp). Blocks are
// copied through a local struct, so rows may start at any byte address.
#include "tensor/quant.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "tensor/quant_blocks.h"

namespace pi {
namespace {

Status check_row(const char* what, DType t, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  const std::string name(info.name);
  if (!info.computable) {
    return err("%s: type %s has no reference implementation", what, name.c_str());
  }
  if (n < 0) return err("%s: negative element count %lld", what, static_cast<long long>(n));
  if (n % info.block_size != 0) {
    return err("%s: %lld elements is not a multiple of the %s block size %lld", what,
               static_cast<long long>(n), name.c_str(), static_cast<long long>(info.block_size));
  }
  return Status::Ok();
}

template <typename Block>
void quantize_blocks(const float* x, void* out, int64_t n, int64_t block_size) {
  auto* bytes = static_cast<unsigned char*>(out);
  for (int64_t i = 0; i < n / block_size; ++i) {
    Block b{};
    detail::quantize_block(x + i * block_size, b);
    std::memcpy(bytes + i * sizeof(Block), &b, sizeof(Block));
  }
}

template <typename Block>
void dequantize_blocks(const void* in, float* y, int64_t n, int64_t block_size) {
  const auto* bytes = static_cast<const unsigned char*>(in);
  for (int64_t i = 0; i < n / block_size; ++i) {
    Block b;
    std::memcpy(&b, bytes + i * sizeof(Block), sizeof(Block));
    detail::dequantize_block(b, y + i * block_size);
  }
}

// Plain element types: one element at a time through a local, so any alignment works.
template <typename Elem, typename Convert>
void store_elements(const float* x, void* out, int64_t n, Convert convert) {
  auto* bytes = static_cast<unsigned char*>(out);
  for (int64_t i = 0; i < n; ++i) {
    const Elem v = convert(x[i]);
    std::memcpy(bytes + i * sizeof(Elem), &v, sizeof(Elem));
  }
}

template <typename Elem, typename Convert>
void load_elements(const void* in, float* y, int64_t n, Convert convert) {
  const auto* bytes = static_cast<const unsigned char*>(in);
  for (int64_t i = 0; i < n; ++i) {
    Elem v;
    std::memcpy(&v, bytes + i * sizeof(Elem), sizeof(Elem));
    y[i] = convert(v);
  }
}

// I32 from float: round to nearest, ties to even, saturating at the int32 range; NaN gives 0.
int32_t float_to_i32(float f) {
  if (std::isnan(f)) return 0;
  const double r = std::nearbyint(static_cast<double>(f));
  if (r >= 2147483647.0) return INT32_MAX;
  if (r <= -2147483648.0) return INT32_MIN;
  return static_cast<int32_t>(r);
}

}  // namespace

namespace {

// Moves each block's scale and quants of a row of n elements between the Q4_0 layout (scale
// at 18 b, quants at 18 b + 2) and the Q4_0_SPLIT one (scale at 2 b, quants by
// q4_0_split_quant), either way, a 4-byte word at a time.
void move_q4_0_blocks(const void* in, void* out, int64_t n, bool to_split) {
  const auto* src = static_cast<const unsigned char*>(in);
  auto* dst = static_cast<unsigned char*>(out);
  const int64_t nb = n / 32;
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t scale[2] = {18 * b, 2 * b};
    std::memcpy(dst + scale[to_split], src + scale[!to_split], 2);
    for (int64_t w = 0; w < 4; ++w) {
      const int64_t word[2] = {18 * b + 2 + 4 * w, q4_0_split_quant(nb, b, 4 * w)};
      std::memcpy(dst + word[to_split], src + word[!to_split], 4);
    }
  }
}

// Moves every block of a group of 16 Q4_0 rows between the file's layout and Q4_0_R16's, a
// 4-byte word at a time, either way.
void move_q4_0_group(const unsigned char* src, unsigned char* dst, int64_t n, bool to_r16) {
  const int64_t nb = n / 32;
  const size_t rb = row_bytes(DType::Q4_0, n);
  for (int64_t i = 0; i < 16; ++i) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t file = static_cast<int64_t>(i * rb) + 18 * b;
      const int64_t scale[2] = {file, q4_0_r16_scale(b, i)};
      std::memcpy(dst + scale[to_r16], src + scale[!to_r16], 2);
      for (int64_t w = 0; w < 4; ++w) {
        const int64_t word[2] = {file + 2 + 4 * w, q4_0_r16_offset(b, i, 4 * w)};
        std::memcpy(dst + word[to_r16], src + word[!to_r16], 4);
      }
    }
  }
}

// The same for a group of 16 Q8_0 rows and Q8_0_R16, a byte at a time (flipping the sign bit).
void move_q8_0_group(const unsigned char* src, unsigned char* dst, int64_t n, bool to_r16) {
  const int64_t nb = n / 32;
  const size_t rb = row_bytes(DType::Q8_0, n);
  for (int64_t i = 0; i < 16; ++i) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t file = static_cast<int64_t>(i * rb) + 34 * b;
      const int64_t scale[2] = {file, q8_0_r16_scale(b, i)};
      std::memcpy(dst + scale[to_r16], src + scale[!to_r16], 2);
      for (int64_t c = 0; c < 32; ++c) {
        const int64_t at[2] = {file + 2 + c, q8_0_r16_offset(b, i, c)};
        dst[at[to_r16]] = static_cast<unsigned char>(src[at[!to_r16]] ^ 0x80u);
      }
    }
  }
}

// The same for a group of 16 Q4_K rows and Q4_K_R16, a 2- or 4-byte word at a time.
void move_q4_k_group(const unsigned char* src, unsigned char* dst, int64_t n, bool to_r16) {
  const int64_t nsb = n / 256;
  const size_t rb = row_bytes(DType::Q4_K, n);
  for (int64_t i = 0; i < 16; ++i) {
    for (int64_t s = 0; s < nsb; ++s) {
      const int64_t file = static_cast<int64_t>(i * rb) + 144 * s;
      for (int64_t h = 0; h < 2; ++h) {  // d, dmin
        const int64_t at[2] = {file + 2 * h, q4_k_r16_d(s, i) + 32 * h};
        std::memcpy(dst + at[to_r16], src + at[!to_r16], 2);
      }
      for (int64_t w = 0; w < 3; ++w) {
        const int64_t at[2] = {file + 4 + 4 * w, q4_k_r16_scales(s, i, w)};
        std::memcpy(dst + at[to_r16], src + at[!to_r16], 4);
      }
      for (int64_t w = 0; w < 32; ++w) {
        const int64_t at[2] = {file + 16 + 4 * w, q4_k_r16_offset(s, i, 4 * w)};
        std::memcpy(dst + at[to_r16], src + at[!to_r16], 4);
      }
    }
  }
}

// The same for a group of 16 MXFP4 rows and MXFP4_R16, a byte or a 4-byte word at a time.
void move_mxfp4_group(const unsigned char* src, unsigned char* dst, int64_t n, bool to_r16) {
  const int64_t nb = n / 32;
  const size_t rb = row_bytes(DType::MXFP4, n);
  for (int64_t i = 0; i < 16; ++i) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t file = static_cast<int64_t>(i * rb) + 17 * b;
      const int64_t e[2] = {file, mxfp4_r16_exponent(b, i)};
      dst[e[to_r16]] = src[e[!to_r16]];
      for (int64_t w = 0; w < 4; ++w) {
        const int64_t word[2] = {file + 1 + 4 * w, mxfp4_r16_offset(b, i, 4 * w)};
        std::memcpy(dst + word[to_r16], src + word[!to_r16], 4);
      }
    }
  }
}

// Every group of 16 rows of a Q4_0, Q8_0, Q4_K or MXFP4 matrix [rows, n] through `move` (either way).
using GroupMove = void (*)(const unsigned char*, unsigned char*, int64_t, bool);
void move_groups(GroupMove move, DType t, const void* in, void* out, int64_t rows, int64_t n, bool to_r16) {
  const size_t group = 16 * row_bytes(t, n);
  for (int64_t g = 0; g < rows / 16; ++g) {
    move(static_cast<const unsigned char*>(in) + g * group, static_cast<unsigned char*>(out) + g * group, n,
         to_r16);
  }
}

}  // namespace

void interleave_q8_0_rows(const void* in, void* out, int64_t rows, int64_t n) {
  move_groups(move_q8_0_group, DType::Q8_0, in, out, rows, n, true);
}
void deinterleave_q8_0_rows(const void* in, void* out, int64_t rows, int64_t n) {
  move_groups(move_q8_0_group, DType::Q8_0, in, out, rows, n, false);
}

void interleave_q4_0_rows(const void* in, void* out, int64_t rows, int64_t n) {
  move_groups(move_q4_0_group, DType::Q4_0, in, out, rows, n, true);
}
void deinterleave_q4_0_rows(const void* in, void* out, int64_t rows, int64_t n) {
  move_groups(move_q4_0_group, DType::Q4_0, in, out, rows, n, false);
}

bool is_r16(DType t) {
  return t == DType::Q4_0_R16 || t == DType::Q8_0_R16 || t == DType::Q4_K_R16 || t == DType::MXFP4_R16;
}

DType r16_file_type(DType t) {
  switch (t) {
    case DType::Q4_0_R16: return DType::Q4_0;
    case DType::Q8_0_R16: return DType::Q8_0;
    case DType::Q4_K_R16: return DType::Q4_K;
    case DType::MXFP4_R16: return DType::MXFP4;
    default: return t;
  }
}

namespace {

GroupMove group_move(DType r16) {
  switch (r16) {
    case DType::Q8_0_R16: return move_q8_0_group;
    case DType::Q4_K_R16: return move_q4_k_group;
    case DType::MXFP4_R16: return move_mxfp4_group;
    default: return move_q4_0_group;
  }
}

}  // namespace

void interleave_rows(DType r16, const void* in, void* out, int64_t rows, int64_t n) {
  move_groups(group_move(r16), r16_file_type(r16), in, out, rows, n, true);
}

void deinterleave_rows(DType r16, const void* in, void* out, int64_t rows, int64_t n) {
  move_groups(group_move(r16), r16_file_type(r16), in, out, rows, n, false);
}

void split_q4_0_row(const void* in, void* out, int64_t n) { move_q4_0_blocks(in, out, n, true); }

void join_q4_0_row(const void* in, void* out, int64_t n) { move_q4_0_blocks(in, out, n, false); }

Status quantize_row(DType t, const float* x, void* out, int64_t n) {
  PI_TRY(check_row("quantize_row", t, n));
  if (t == DType::Q4_0_SPLIT) {
    std::vector<unsigned char> row(row_bytes(DType::Q4_0, n));
    PI_TRY(quantize_row(DType::Q4_0, x, row.data(), n));
    split_q4_0_row(row.data(), out, n);
    return Status::Ok();
  }
  const int64_t bs = dtype_info(t).block_size;
  switch (t) {
    case DType::F32: store_elements<float>(x, out, n, [](float f) { return f; }); break;
    case DType::F16: store_elements<uint16_t>(x, out, n, f32_to_f16); break;
    case DType::BF16: store_elements<uint16_t>(x, out, n, f32_to_bf16); break;
    case DType::I32: store_elements<int32_t>(x, out, n, float_to_i32); break;
    case DType::Q4_0: quantize_blocks<BlockQ4_0>(x, out, n, bs); break;
    case DType::Q4_1: quantize_blocks<BlockQ4_1>(x, out, n, bs); break;
    case DType::Q5_0: quantize_blocks<BlockQ5_0>(x, out, n, bs); break;
    case DType::Q5_1: quantize_blocks<BlockQ5_1>(x, out, n, bs); break;
    case DType::Q8_0: quantize_blocks<BlockQ8_0>(x, out, n, bs); break;
    case DType::MXFP4: quantize_blocks<BlockMXFP4>(x, out, n, bs); break;
    case DType::Q6_K: quantize_blocks<BlockQ6_K>(x, out, n, bs); break;
    case DType::Q2_K: quantize_blocks<BlockQ2_K>(x, out, n, bs); break;
    case DType::Q3_K: quantize_blocks<BlockQ3_K>(x, out, n, bs); break;
    case DType::Q4_K: quantize_blocks<BlockQ4_K>(x, out, n, bs); break;
    case DType::Q5_K: quantize_blocks<BlockQ5_K>(x, out, n, bs); break;
    default:
      return err("quantize_row: type %s is computable but has no quantizer",
                 std::string(dtype_name(t)).c_str());
  }
  return Status::Ok();
}

Status dequantize_row(DType t, const void* in, float* y, int64_t n) {
  PI_TRY(check_row("dequantize_row", t, n));
  if (t == DType::Q4_0_SPLIT) {
    std::vector<unsigned char> row(row_bytes(DType::Q4_0, n));
    move_q4_0_blocks(in, row.data(), n, false);
    return dequantize_row(DType::Q4_0, row.data(), y, n);
  }
  const int64_t bs = dtype_info(t).block_size;
  switch (t) {
    case DType::F32: load_elements<float>(in, y, n, [](float f) { return f; }); break;
    case DType::F16: load_elements<uint16_t>(in, y, n, f16_to_f32); break;
    case DType::BF16: load_elements<uint16_t>(in, y, n, bf16_to_f32); break;
    case DType::I32:
      load_elements<int32_t>(in, y, n, [](int32_t v) { return static_cast<float>(v); });
      break;
    case DType::Q4_0: dequantize_blocks<BlockQ4_0>(in, y, n, bs); break;
    case DType::Q4_1: dequantize_blocks<BlockQ4_1>(in, y, n, bs); break;
    case DType::Q5_0: dequantize_blocks<BlockQ5_0>(in, y, n, bs); break;
    case DType::Q5_1: dequantize_blocks<BlockQ5_1>(in, y, n, bs); break;
    case DType::Q8_0: dequantize_blocks<BlockQ8_0>(in, y, n, bs); break;
    case DType::MXFP4: dequantize_blocks<BlockMXFP4>(in, y, n, bs); break;
    case DType::Q6_K: dequantize_blocks<BlockQ6_K>(in, y, n, bs); break;
    case DType::Q2_K: dequantize_blocks<BlockQ2_K>(in, y, n, bs); break;
    case DType::Q3_K: dequantize_blocks<BlockQ3_K>(in, y, n, bs); break;
    case DType::Q4_K: dequantize_blocks<BlockQ4_K>(in, y, n, bs); break;
    case DType::Q5_K: dequantize_blocks<BlockQ5_K>(in, y, n, bs); break;
    default:
      return err("dequantize_row: type %s is computable but has no dequantizer",
                 std::string(dtype_name(t)).c_str());
  }
  return Status::Ok();
}

}  // namespace pi
