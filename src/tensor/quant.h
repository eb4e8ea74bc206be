// Block formats with the exact ggml/GGUF byte layout, and the scalar reference for
// quantizing and dequantizing rows. These are the oracle for every optimised kernel.
// All functions are pure and thread-safe.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "tensor/dtype.h"

namespace pi {

// IEEE half and bfloat16 <-> float. f32_to_f16/bf16 round to nearest even; NaN stays NaN,
// overflow becomes Inf.
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t h);

// Scales d (and minimums m) are IEEE half bit patterns.
struct BlockQ4_0 {  // x = d * (q - 8), q in 0..15; qs[j] holds q[j] (low) and q[j+16] (high)
  uint16_t d;
  uint8_t qs[16];
};
struct BlockQ4_1 {  // x = d * q + m
  uint16_t d, m;
  uint8_t qs[16];
};
struct BlockQ5_0 {  // x = d * (q - 16); qh bit j is bit 4 of q[j]
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ5_1 {  // x = d * q + m
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ8_0 {  // x = d * q
  uint16_t d;
  int8_t qs[32];
};
// MXFP4 (OCP microscaling, as gpt-oss ships its experts): 32 elements, one E8M0 exponent
// byte e and 32 E2M1 codes as nibbles (byte j: element j low, j + 16 high, as Q4_0). Code c
// means kMxfp4Values[c] (E2M1 doubled, so all integers) times e8m0_half(e) = 2^(e - 128).
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[16];
};
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// 2^(e - 128) as ggml computes it (exact: a subnormal for e 0 and 1); e = 255 gives 2^127.
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}
struct BlockQ6_K {  // 256 values: 16 sub-blocks of 16, 6-bit quants, 8-bit sub-block scales
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
// K-quant super-blocks of 256 elements (ggml's layouts; quant_kquants.cpp gives each
// element's place). Q4_K/Q5_K: 8 sub-blocks of 32 with 6-bit scale and min packed in 12
// bytes, x = d * sc * q - dmin * m. Q2_K: 16 sub-blocks of 16, 4-bit scale (low nibble) and
// min (high nibble), x = d * sc * q - dmin * m, q in 0..3. Q3_K: 16 sub-blocks of 16, 6-bit
// scales s (stored s + 32) packed in 12 bytes, x = d * s * q, q in -4..3 (2 low bits in qs,
// the third in hmask, clear meaning -4).
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ6_K) == 210 &&
              sizeof(BlockMXFP4) == 17);

// Quantizes n floats into `out` (row_bytes(t, n) bytes). Fails for types without a
// reference (dtype_info(t).computable == false) and when n % block_size != 0.
// F32/F16/BF16/I32 are handled as plain element conversions (I32: round to nearest even,
// saturating, NaN -> 0). Q4_0..Q8_0 blocks are byte-identical to ggml's reference quantizer;
// the K-quants (Q2_K..Q6_K) use this engine's own scale searches (quant_q6k.cpp,
// quant_kquants.cpp), writing valid ggml blocks. MXFP4 blocks are ggml's too: e =
// floor(log2(amax)) - 2 + 127 (0 for amax below 2^-125, where ggml's cast is undefined), each
// element the nearest code, the lowest code on ties.
// Inputs to the block formats must be finite. `out` needs no particular alignment.
Status quantize_row(DType t, const float* x, void* out, int64_t n);
// Dequantizes n values; same preconditions as quantize_row, checked here as well. Decoding
// is bit-exact with ggml for every computable type. `in` needs no particular alignment.
// Q4_0_SPLIT (dtype.h) is a row layout: quantize_row and dequantize_row take whole rows.
Status dequantize_row(DType t, const void* in, float* y, int64_t n);

// A Q4_0 row of n elements rearranged as a Q4_0_SPLIT row (the same bytes, scales first):
// exact, so the split row dequantizes to the same values. `out` must not overlap `in`.
void split_q4_0_row(const void* in, void* out, int64_t n);
// The inverse: a Q4_0_SPLIT row of n elements back in the Q4_0 layout (the file's), exactly.
// `out` must not overlap `in`.
void join_q4_0_row(const void* in, void* out, int64_t n);

// Where quant byte c (0..15) of block b lies in a Q4_0_SPLIT row of nb blocks (dtype.h): after
// the nb scales, each whole four-block unit (blocks 4U .. 4U + 3) is 64 bytes holding the
// blocks' 4-byte words transposed (word 4 L + i is word L of block 4U + i), and the blocks past
// the last whole unit follow as they are.
inline int64_t q4_0_split_quant(int64_t nb, int64_t b, int64_t c) {
  if (b >= nb / 4 * 4) return 2 * nb + 16 * b + c;
  return 2 * nb + 16 * (b - b % 4) + 16 * (c / 4) + 4 * (b % 4) + c % 4;
}

// Q4_0_R16 (dtype.h): where quant byte c (0..15) of block b of row i (0..15) of a group lies,
// from the group's first byte, and where the row's f16 scale of block b lies.
inline int64_t q4_0_r16_offset(int64_t b, int64_t i, int64_t c) {
  return 288 * b + 32 + 64 * (c / 4) + 4 * i + c % 4;
}
inline int64_t q4_0_r16_scale(int64_t b, int64_t i) { return 288 * b + 2 * i; }

// A Q4_0 matrix [rows, n] rearranged as Q4_0_R16 (rows a multiple of 16), and back: exact,
// the same bytes moved. `out` must not overlap `in`.
void interleave_q4_0_rows(const void* in, void* out, int64_t rows, int64_t n);
void deinterleave_q4_0_rows(const void* in, void* out, int64_t rows, int64_t n);

// Q8_0_R16 (dtype.h): where quant c (0..31) of block b of row i of a group lies, and its scale.
inline int64_t q8_0_r16_offset(int64_t b, int64_t i, int64_t c) {
  return 544 * b + 32 + 64 * (c / 4) + 4 * i + c % 4;
}
inline int64_t q8_0_r16_scale(int64_t b, int64_t i) { return 544 * b + 2 * i; }
// A Q8_0 matrix [rows, n] as Q8_0_R16 and back, exactly (each quant q stored as q + 128).
void interleave_q8_0_rows(const void* in, void* out, int64_t rows, int64_t n);
void deinterleave_q8_0_rows(const void* in, void* out, int64_t rows, int64_t n);

// Q4_K_R16 (dtype.h): where quant byte t (0..127) of super-block s of row i of a group lies,
// where the row's f16 d (dmin 32 bytes on) lies, and where its scale word w (bytes 4w .. 4w+3
// of the block's 12 scale bytes) lies.
inline int64_t q4_k_r16_offset(int64_t s, int64_t i, int64_t t) {
  return 2304 * s + 256 + 64 * (t / 4) + 4 * i + t % 4;
}
inline int64_t q4_k_r16_d(int64_t s, int64_t i) { return 2304 * s + 2 * i; }
inline int64_t q4_k_r16_scales(int64_t s, int64_t i, int64_t w) { return 2304 * s + 64 + 64 * w + 4 * i; }

// MXFP4_R16 (dtype.h): where code byte c (0..15) of block b of row i of a group lies, and its
// E8M0 exponent byte.
inline int64_t mxfp4_r16_offset(int64_t b, int64_t i, int64_t c) {
  return 272 * b + 16 + 64 * (c / 4) + 4 * i + c % 4;
}
inline int64_t mxfp4_r16_exponent(int64_t b, int64_t i) { return 272 * b + i; }

// The 16-row layouts (Q4_0_R16, Q8_0_R16, Q4_K_R16, MXFP4_R16), in one place: whether t is one, the file type it
// holds (t itself for any other type), and a matrix [rows, n] (rows a multiple of 16) moved
// into the layout `r16` from its file type, and back. `out` must not overlap `in`.
bool is_r16(DType t);
DType r16_file_type(DType t);
void interleave_rows(DType r16, const void* in, void* out, int64_t rows, int64_t n);
void deinterleave_rows(DType r16, const void* in, void* out, int64_t rows, int64_t n);

}  // namespace pi
