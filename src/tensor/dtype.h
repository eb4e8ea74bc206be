// Element and block types. The numeric values are the ggml/GGUF type ids, so a DType read
// from a file header is cast directly. Block-quantized types store `block_size` elements in
// `type_size` bytes; a row's element count must be a multiple of block_size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace pi {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  // Internal to this engine, never in a file (dtype_info(uint32_t) does not know it): Q4_0
  // rows whose block scales are split from their quants, [n/32 f16 scales][n/32 x 16 quant
  // bytes], the same bytes as a Q4_0 row, each four blocks' quants transposed by 4-byte words
  // (q4_0_split_quant, quant.h). The CPU repacks the transposed Q4_0 matrices of calibrated
  // files into it for its AVX-512 axpy (backend::Device::transposed_layout).
  Q4_0_SPLIT = 0x10000,
  // Internal too: a Q4_0 matrix of a multiple of 16 rows held as groups of 16 rows, each
  // group's blocks side by side so that one 64-byte load holds the same 4 quant bytes of 16
  // rows: group g (rows 16g .. 16g+15) starts at 16 g row_bytes(Q4_0, n); its block b is 288
  // bytes at 288 b: the 16 rows' f16 scales, then 4 x 64 bytes, where bytes 4i .. 4i+3 of part
  // k are quant bytes 4k .. 4k+3 of row 16g+i (q4_0_r16_offset, quant.h). Same bytes as the
  // Q4_0 matrix; a row is not contiguous, so only the dense matrix kernels read it
  // (cpu::dot_layout: the AVX-512 and AVX2 prompt GEMM and decode matvec).
  Q4_0_R16 = 0x10001,
  // The same for Q8_0: block b of a group is 544 bytes at 544 b: the 16 rows' f16 scales,
  // then 8 x 64 bytes where bytes 4i .. 4i+3 of part k are quants 4k .. 4k+3 of row 16g+i,
  // each stored as q + 128 (an unsigned byte: q8_0_r16_offset, quant.h).
  Q8_0_R16 = 0x10002,
  // The same for Q4_K: super-block s of a group is 2304 bytes at 2304 s: the 16 rows' f16 d,
  // then their f16 dmin, then their 12 scale bytes as 3 x 64 bytes (word w of row i at
  // 64 + 64 w + 4 i), then 32 x 64 bytes where bytes 4i .. 4i+3 of part k are quant bytes
  // 4k .. 4k+3 of row 16g+i (q4_k_r16_offset, quant.h). Same bytes as the Q4_K matrix.
  Q4_K_R16 = 0x10003,
  // The same for MXFP4: block b of a group is 272 bytes at 272 b: the 16 rows' E8M0 exponent
  // bytes, then 4 x 64 bytes where bytes 4i .. 4i+3 of part k are code bytes 4k .. 4k+3 of row
  // 16g+i (mxfp4_r16_offset, quant.h). Same bytes as the MXFP4 matrix.
  MXFP4_R16 = 0x10004,
};

struct DTypeInfo {
  DType type;
  std::string_view name;  // as ggml names it: "f32", "q4_0", ...
  int64_t block_size;     // elements per block (1 for plain types)
  size_t type_size;       // bytes per block
  bool quantized;
  // True when this engine has reference (de)quantization for the type. Other known types
  // can be read and inspected but not computed with.
  bool computable;
};

// Info for a known type id, or nullopt for an id no ggml version defines.
std::optional<DTypeInfo> dtype_info(uint32_t id);
const DTypeInfo& dtype_info(DType t);
std::string_view dtype_name(DType t);
// Parses "q4_0", "Q4_0", "f16", "bf16", ... (case-insensitive).
std::optional<DType> dtype_from_name(std::string_view name);

// The original PowerInfer's GPU index files (`*.generated.gpuidx`: PWRI magic and
// general.architecture = "generic.gpu_index") number I8/I16/I32 as 16/17/18, the ggml of
// late 2023, where today's ggml uses 24/25/26 and 16..18 are IQ2_XXS/IQ2_XS/IQ3_XXS. These two
// translate between that numbering and DType; every other id is unchanged.
std::optional<DTypeInfo> dtype_info_gpu_index(uint32_t id);
uint32_t gpu_index_type_id(DType t);

// Bytes of one row of `n` elements; requires n % block_size == 0.
size_t row_bytes(DType t, int64_t n);

}  // namespace pi
