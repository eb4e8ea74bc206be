// Internal: portable decoding of weight blocks and half/bfloat16 values for the scalar leaves
// and the ISA files' tails. Functions have internal linkage (unnamed namespace) so that a
// copy compiled with ISA flags can never be picked by the linker for another file.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cpu/dispatch.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

namespace pi::cpu::detail {
namespace {

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);  // Inf / NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {
    // Subnormal half: normalise.
    exp = 113;
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The tokens of task t that row entry k is computed for (all of them when t.masks is null):
// their indices into sel (room for kMaxMaskTokens), in order; returns their count.
inline int select_tokens(const DotTask& t, int64_t k, int* sel) {
  int n = 0;
  for (int64_t i = 0; i < t.m; ++i)
    if (t.masks == nullptr || ((t.masks[k] >> i) & 1u) != 0) sel[n++] = static_cast<int>(i);
  return n;
}

// Elements per block and bytes per block of the matrix kernels' weight types.
inline int block_elems(DType t) {
  switch (t) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
    case DType::MXFP4:
      return 32;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return 256;
    default:
      return 1;
  }
}

// Decodes the block (or plain element) at p into block_elems(t) floats, with the same
// arithmetic as the reference dequantizers (tensor/quant_blocks.cpp, quant_q6k.cpp).
inline void decode_block(DType t, const uint8_t* p, float* y) {
  switch (t) {
    case DType::F32:
      std::memcpy(y, p, 4);
      return;
    case DType::F16:
      y[0] = half_to_float(load_u16(p));
      return;
    case DType::BF16:
      y[0] = bf16_to_float(load_u16(p));
      return;
    case DType::Q4_0: {
      const float d = half_to_float(load_u16(p));
      for (int j = 0; j < 16; ++j) {
        y[j] = static_cast<float>((p[2 + j] & 0x0f) - 8) * d;
        y[j + 16] = static_cast<float>((p[2 + j] >> 4) - 8) * d;
      }
      return;
    }
    case DType::Q4_1: {
      const float d = half_to_float(load_u16(p));
      const float m = half_to_float(load_u16(p + 2));
      for (int j = 0; j < 16; ++j) {
        y[j] = static_cast<float>(p[4 + j] & 0x0f) * d + m;
        y[j + 16] = static_cast<float>(p[4 + j] >> 4) * d + m;
      }
      return;
    }
    case DType::Q5_0: {
      const float d = half_to_float(load_u16(p));
      const uint32_t qh = load_u32(p + 2);
      for (int j = 0; j < 16; ++j) {
        const int lo = (p[6 + j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
        const int hi = (p[6 + j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
        y[j] = static_cast<float>(lo - 16) * d;
        y[j + 16] = static_cast<float>(hi - 16) * d;
      }
      return;
    }
    case DType::Q5_1: {
      const float d = half_to_float(load_u16(p));
      const float m = half_to_float(load_u16(p + 2));
      const uint32_t qh = load_u32(p + 4);
      for (int j = 0; j < 16; ++j) {
        const int lo = (p[8 + j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
        const int hi = (p[8 + j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
        y[j] = static_cast<float>(lo) * d + m;
        y[j + 16] = static_cast<float>(hi) * d + m;
      }
      return;
    }
    case DType::Q8_0: {
      const float d = half_to_float(load_u16(p));
      for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(p[2 + j])) * d;
      return;
    }
    case DType::MXFP4: {
      const float d = e8m0_half(p[0]);
      for (int j = 0; j < 16; ++j) {
        y[j] = static_cast<float>(kMxfp4Values[p[1 + j] & 0x0f]) * d;
        y[j + 16] = static_cast<float>(kMxfp4Values[p[1 + j] >> 4]) * d;
      }
      return;
    }
    case DType::Q6_K: {
      // ql[128] qh[64] scales[16] d: see tensor/quant_q6k.cpp for the element placement.
      const uint8_t* ql = p;
      const uint8_t* qh = p + 128;
      const int8_t* sc = reinterpret_cast<const int8_t*>(p + 192);
      const float d = half_to_float(load_u16(p + 208));
      for (int half = 0; half < 2; ++half) {
        for (int l = 0; l < 32; ++l) {
          const int h = qh[32 * half + l];
          const int a = ql[64 * half + l], b = ql[64 * half + l + 32];
          const int q[4] = {(a & 0x0f) | ((h & 3) << 4), (b & 0x0f) | (((h >> 2) & 3) << 4),
                            (a >> 4) | (((h >> 4) & 3) << 4), (b >> 4) | (((h >> 6) & 3) << 4)};
          for (int g = 0; g < 4; ++g) {
            const int e = 128 * half + 32 * g + l;
            y[e] = (d * static_cast<float>(sc[e / 16])) * static_cast<float>(q[g] - 32);
          }
        }
      }
      return;
    }
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
      // The reference decoder (pi_tensor, compiled for the baseline ISA): the portable
      // leaves are not what the K-quant kernels' speed depends on.
      (void)dequantize_row(t, p, y, 256);
      return;
    default:
      return;
  }
}

// The rows of a DotTask: row entry k is row idx[k] (idx set) or k.
inline int64_t row_of(const DotTask& t, int64_t k) { return t.idx != nullptr ? t.idx[k] : k; }
inline const uint8_t* row_ptr(const DotTask& t, int64_t k) {
  return t.W + static_cast<size_t>(row_of(t, k)) * t.row_bytes;
}

// The row-group driver of the AVX2 and NEON dot leaves: rows4(rows, next, out) for groups of 4
// rows x 1 token when the task is a plain one-token product (next: the 4 rows after them, to
// prefetch), row1(row, out) for its leftover rows, else tokens(row, sel, nt, out) for 1 row x
// up to 4 selected tokens.
template <typename Rows4, typename Row1, typename Tokens>
void drive_rows4(const DotTask& t, Rows4 rows4, Row1 row1, Tokens tokens) {
  if (t.m == 1 && t.masks == nullptr) {
    int64_t k = t.k0;
    for (; k + 4 <= t.k1; k += 4) {
      const uint8_t* rows[4];
      const uint8_t* next[4];
      float out[4];
      for (int r = 0; r < 4; ++r) {
        rows[r] = row_ptr(t, k + r);
        next[r] = k + 4 + r < t.k1 ? row_ptr(t, k + 4 + r) : rows[r];
      }
      rows4(rows, next, out);
      for (int r = 0; r < 4; ++r) t.Y[row_of(t, k + r)] = out[r];
    }
    for (; k < t.k1; ++k) {
      const uint8_t* row = row_ptr(t, k);
      float out;
      row1(row, &out);
      t.Y[row_of(t, k)] = out;
    }
    return;
  }
  for (int64_t k = t.k0; k < t.k1; ++k) {
    const uint8_t* row = row_ptr(t, k);
    int sel[kMaxMaskTokens];
    const int n = select_tokens(t, k, sel);
    for (int g = 0; g < n; g += 4) {
      const int nt = n - g < 4 ? n - g : 4;
      float out[4];
      tokens(row, sel + g, nt, out);
      for (int i = 0; i < nt; ++i) t.Y[sel[g + i] * t.ldy + row_of(t, k)] = out[i];
    }
  }
}

}  // namespace
}  // namespace pi::cpu::detail
