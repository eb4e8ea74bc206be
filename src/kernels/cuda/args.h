// What the kernels' launchers take: device pointers, sizes and strides (no CUDA types, so
// the backend's host code includes these with the launcher headers).
#pragma once

#include <cstdint>

#include "kernels/cuda/hd_q8.h"
#include "tensor/dtype.h"

namespace pi::gpu {

// A weight matrix in device memory: rows of `cols` elements of `type`, `stride` bytes apart.
// data is 2-byte aligned (4-byte for F32); the backend copies a misaligned view first.
struct WeightRef {
  DType type = DType::F32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;
};

// Activations of m tokens: f32 rows x (ldx floats apart) and, for the integer path
// (q8_path(type)), their 8-bit quants q (cols bytes per row, 16-byte aligned) with one
// Q8Scale per 32 (cols / 32 per row).
struct ActRef {
  const float* x = nullptr;
  int64_t ldx = 0;
  const int8_t* q = nullptr;
  const Q8Scale* s = nullptr;
};

// Bytes of the 8-bit quants of m rows of cols activations (quants, then scales), 256-aligned.
inline int64_t q8_bytes(int64_t m, int64_t cols) {
  const int64_t q = (m * cols + 255) / 256 * 256;
  return q + (m * (cols / 32) * static_cast<int64_t>(sizeof(Q8Scale)) + 255) / 256 * 256;
}

}  // namespace pi::gpu
