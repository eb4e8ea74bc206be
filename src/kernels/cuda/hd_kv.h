// The KV cache's element arithmetic on the GPU, host and device (hd.h): rows of f16 values, or
// of Q8_0 / Q4_0 blocks of 32 (tensor/quant.h layouts: an f16 scale d, then 32 int8 quants or
// 16 bytes of nibbles), read one element at a time by attention and written one block at a
// time by the KV store. The block writer is the reference quantizer's rule, rounding for
// rounding (src/tensor/quant_blocks.cpp), so the GPU stores the same bytes as the CPU.
#pragma once

#include <cstdint>

#include "kernels/cuda/hd.h"
#include "kernels/cuda/hd_scalar.h"

namespace pi::gpu {

// The KV types (backend::KvLayer's F16, Q8_0, Q4_0) as the kernels name them.
enum KvKind : int32_t { kKvF16 = 0, kKvQ8_0 = 1, kKvQ4_0 = 2 };

constexpr int kKvBlock = 32;
constexpr int64_t kKvQ8Bytes = 34;  // f16 d, int8 qs[32]
constexpr int64_t kKvQ4Bytes = 18;  // f16 d, uint8 qs[16]

// Bytes of n values of a kind (n a multiple of 32 for the block kinds).
PI_HD int64_t kv_bytes(int32_t kind, int64_t n) {
  if (kind == kKvQ8_0) return n / kKvBlock * kKvQ8Bytes;
  if (kind == kKvQ4_0) return n / kKvBlock * kKvQ4Bytes;
  return n * 2;
}

PI_HD uint16_t kv_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (static_cast<uint16_t>(p[1]) << 8));
}

// Element d of a row: exactly what the reference dequantizer gives (d * q is exact in f32).
PI_HD float kv_elem(int32_t kind, const uint8_t* row, int64_t d) {
  if (kind == kKvQ8_0) {
    const uint8_t* b = row + d / kKvBlock * kKvQ8Bytes;
    const int8_t q = static_cast<int8_t>(b[2 + d % kKvBlock]);
    return mul_rn(static_cast<float>(q), half_to_float(kv_u16(b)));
  }
  if (kind == kKvQ4_0) {
    const uint8_t* b = row + d / kKvBlock * kKvQ4Bytes;
    const int j = static_cast<int>(d % kKvBlock);
    const int q = j < 16 ? (b[2 + j] & 0x0F) : (b[2 + j - 16] >> 4);
    return mul_rn(static_cast<float>(q - 8), half_to_float(kv_u16(b)));
  }
  const uint8_t* p = row + 2 * d;
  return half_to_float(kv_u16(p));
}

// One block of 32 values x into out (kv_bytes(kind, 32) bytes), as quantize_row writes it.
PI_HD void kv_quantize_block(int32_t kind, const float* x, uint8_t* out) {
  float amax = 0.0f, max = 0.0f;  // the largest magnitude, with its sign; the first on ties
  for (int j = 0; j < kKvBlock; ++j) {
    if (fabsf(x[j]) > amax) {
      amax = fabsf(x[j]);
      max = x[j];
    }
  }
  if (kind == kKvQ8_0) {
    const float d = fabsf(max) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < kKvBlock; ++j) {
      const float r = roundf(mul_rn(x[j], id));
      const float c = r != r ? 0.0f : fminf(127.0f, fmaxf(-128.0f, r));
      out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(c));
    }
    const uint16_t h = float_to_half(d);
    out[0] = static_cast<uint8_t>(h & 0xFF);
    out[1] = static_cast<uint8_t>(h >> 8);
    return;
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  int q[kKvBlock];
  for (int j = 0; j < kKvBlock; ++j) {
    const float v = add_rn(mul_rn(x[j], id), 8.5f);
    q[j] = !(v > 0.0f) ? 0 : (v >= 15.0f ? 15 : static_cast<int>(v));
  }
  for (int j = 0; j < 16; ++j)
    out[2 + j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
  const uint16_t h = float_to_half(d);
  out[0] = static_cast<uint8_t>(h & 0xFF);
  out[1] = static_cast<uint8_t>(h >> 8);
}

}  // namespace pi::gpu
