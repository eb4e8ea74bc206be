// Portable dot and axpy leaves for every supported weight type: decode a block to f32, then
// multiply in f32 with eight partial sums. The reference for the ISA files' structure and the
// fallback for types they do not vectorise; compiled without ISA flags.
#include <cmath>
#include <cstdint>

#include "kernels/cpu/q4_groups.h"
#include "kernels/cpu/scalar_blocks.h"
#include "kernels/cpu/scalar_leaves.h"
#include "tensor/quant.h"

namespace pi::cpu::detail {
namespace {

constexpr int kAcc = 8;

float finish(const float* acc) {
  const float a = (acc[0] + acc[4]) + (acc[2] + acc[6]);
  const float b = (acc[1] + acc[5]) + (acc[3] + acc[7]);
  return a + b;
}

float dot_row(DType t, const uint8_t* w, const float* x, int64_t cols) {
  float acc[kAcc] = {};
  switch (t) {
    case DType::F32: {
      for (int64_t j = 0; j < cols; ++j) {
        float v;
        std::memcpy(&v, w + 4 * j, 4);
        acc[j % kAcc] += v * x[j];
      }
      break;
    }
    case DType::F16:
      for (int64_t j = 0; j < cols; ++j) acc[j % kAcc] += half_to_float(load_u16(w + 2 * j)) * x[j];
      break;
    case DType::BF16:
      for (int64_t j = 0; j < cols; ++j) acc[j % kAcc] += bf16_to_float(load_u16(w + 2 * j)) * x[j];
      break;
    default: {
      const int be = block_elems(t);
      const size_t bb = row_bytes(t, be);
      float buf[256];
      for (int64_t b = 0; b < cols / be; ++b) {
        decode_block(t, w + b * bb, buf);
        const float* xb = x + b * be;
        for (int j = 0; j < be; ++j) acc[j % kAcc] += buf[j] * xb[j];
      }
    }
  }
  return finish(acc);
}

void axpy_row(DType t, const uint8_t* w, float c, int64_t c0, int64_t c1, float* y) {
  switch (t) {
    case DType::F32:
      for (int64_t j = c0; j < c1; ++j) {
        float v;
        std::memcpy(&v, w + 4 * j, 4);
        y[j] += c * v;
      }
      return;
    case DType::F16:
      for (int64_t j = c0; j < c1; ++j) y[j] += c * half_to_float(load_u16(w + 2 * j));
      return;
    case DType::BF16:
      for (int64_t j = c0; j < c1; ++j) y[j] += c * bf16_to_float(load_u16(w + 2 * j));
      return;
    default: {
      const int be = block_elems(t);
      const size_t bb = row_bytes(t, be);
      float buf[256];
      for (int64_t b = c0 / be; b < c1 / be; ++b) {
        decode_block(t, w + b * bb, buf);
        float* yb = y + b * be;
        for (int j = 0; j < be; ++j) yb[j] += c * buf[j];
      }
    }
  }
}

}  // namespace

void scalar_dot(const DotTask& t) {
  for (int64_t k = t.k0; k < t.k1; ++k) {
    const int64_t row = t.idx != nullptr ? t.idx[k] : k;
    const uint8_t* w = t.W + static_cast<size_t>(row) * t.row_bytes;
    for (int64_t i = 0; i < t.m; ++i) {
      if (t.masks != nullptr && ((t.masks[k] >> i) & 1u) == 0) continue;
      t.Y[i * t.ldy + row] = dot_row(t.type, w, t.x + i * t.x_stride, t.cols);
    }
  }
}

// One group of the Q4_0 integer axpy (q4_groups.h) over the blocks [b0, b1) of y. Rows are
// Q4_0 (split == 0) or Q4_0_SPLIT rows of `split` blocks (tensor/quant.h, q4_0_split_quant).
void q4_group(const Q4Group& grp, int64_t b0, int64_t b1, float* y, int64_t split) {
  const auto scale_at = [split](int64_t b) { return split > 0 ? 2 * b : b * kQ4Bytes; };
  const auto quant_at = [split](int64_t b, int c) { return split > 0 ? q4_0_split_quant(split, b, c) : b * kQ4Bytes + 2 + c; };
  for (int64_t b = b0; b < b1; ++b) {
    float v[kQ4Window];
    float amax = 0.0f;
    bool bad = false;
    for (int r = 0; r < grp.g; ++r) {
      v[r] = grp.coef[r] * half_to_float(load_u16(grp.rows[r] + scale_at(b)));
      const float a = std::fabs(v[r]);
      bad |= !(a < INFINITY);
      amax = a > amax ? a : amax;
    }
    if (bad) {
      for (int c = 0; c < 32; ++c) y[32 * b + c] = std::fma(0.0f, NAN, y[32 * b + c]);
      continue;
    }
    const bool small = amax < FLT_MIN;
    const float inv = small ? 0.0f : 127.0f / amax;
    const float s = small ? 0.0f : amax / 127.0f;
    int32_t sum[32] = {};
    int32_t ksum = 0;
    for (int r = 0; r < grp.g; ++r) {
      const auto k = static_cast<int32_t>(std::nearbyint(v[r] * inv));
      ksum += k;
      for (int c = 0; c < 16; ++c) {
        const uint8_t q = grp.rows[r][quant_at(b, c)];
        sum[c] += k * (q & 0x0f);
        sum[c + 16] += k * (q >> 4);
      }
    }
    for (int c = 0; c < 32; ++c)
      y[32 * b + c] = std::fma(static_cast<float>(sum[c] - 8 * ksum), s, y[32 * b + c]);
  }
}

void scalar_axpy(const AxpyTask& t) {
  if (t.type == DType::Q4_0 || t.type == DType::Q4_0_SPLIT) {
    const int64_t split = t.type == DType::Q4_0_SPLIT ? static_cast<int64_t>(t.row_bytes / kQ4Bytes) : 0;
    for_each_q4_group(t, [&](const Q4Group& grp, float* y, const Q4Next&) { q4_group(grp, t.c0 / 32, t.c1 / 32, y, split); });
    return;
  }
  for (int64_t k = 0; k < t.n; ++k) {
    const uint8_t* w = t.D + static_cast<size_t>(t.rows[k]) * t.row_bytes;
    for (int64_t i = 0; i < t.m; ++i) {
      const float c = t.coef[k * t.m + i];
      if (c != 0.0f) axpy_row(t.type, w, c, t.c0, t.c1, t.Y + i * t.ldy);
    }
  }
}

}  // namespace pi::cpu::detail
