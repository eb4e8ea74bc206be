// Portable Q4_0_R16 leaves (r16.h): the order of operations every ISA's R16 leaves follow, in
// plain C++, so that they are the bit-exact reference of the vector ones.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/r16.h"
#include "kernels/cpu/scalar_blocks.h"

namespace pi::cpu::detail {
namespace {

// x * id rounded to nearest even and saturated to int8, as vcvtps2dq + vpmovsdb do (a NaN or
// out-of-range product converts to INT32_MIN, which saturates to -128).
int8_t quant_elem(float v) {
  if (!(v >= -2147483648.0f && v < 2147483648.0f)) return -128;
  const float r = std::nearbyint(v);
  return static_cast<int8_t>(r > 127.0f ? 127 : r < -128.0f ? -128 : static_cast<int>(r));
}

}  // namespace

void scalar_r16_prepare(const float* x, int64_t cols, uint8_t* out) {
  for (int64_t b = 0; b < cols / 32; ++b) {
    const float* xb = x + 32 * b;
    uint8_t* a = out + b * kR16ActBytes;
    float amax = 0.0f;
    bool nan = false;
    for (int j = 0; j < 32; ++j) {
      nan = nan || std::isnan(xb[j]);
      const float v = std::fabs(xb[j]);
      amax = v > amax ? v : amax;
    }
    const float d = nan ? __builtin_nanf("") : amax / 127.0f;
    const float id = amax > 0.0f && amax <= 3.4e38f ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < 32; ++j) {
      const int8_t q = quant_elem(xb[j] * id);
      std::memcpy(a + j, &q, 1);
      sum += q;
    }
    const int32_t off = -8 * sum;
    std::memcpy(a + 32, &d, 4);
    std::memcpy(a + 36, &off, 4);
  }
}

void scalar_r16_dot(const DotTask& t) {
  const int64_t nb = t.cols / 32;
  const bool q8 = t.type == DType::Q8_0_R16;
  const size_t block_bytes = r16_block_bytes(t.type);
  const size_t group_bytes = static_cast<size_t>(kR16Rows) * t.row_bytes;
  for (int64_t g = t.k0 / kR16Rows; g < t.k1 / kR16Rows; ++g) {
    const uint8_t* G = t.W + static_cast<size_t>(g) * group_bytes;
    for (int64_t i = 0; i < t.m; ++i) {
      const uint8_t* act = t.act + i * t.act_stride;
      float acc[kR16Rows] = {};
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* p = G + b * block_bytes;
        const uint8_t* a = act + b * kR16ActBytes;
        const auto* q = reinterpret_cast<const int8_t*>(a);
        float d;
        int32_t off;
        std::memcpy(&d, a + 32, 4);
        std::memcpy(&off, a + 36, 4);
        for (int64_t r = 0; r < kR16Rows; ++r) {
          int32_t s = q8 ? 16 * off : off;
          if (q8) {
            for (int c = 0; c < 32; ++c) s += p[32 + 64 * (c / 4) + 4 * r + c % 4] * q[c];
          } else {
            for (int c = 0; c < 16; ++c) {
              const uint8_t byte = p[32 + 64 * (c / 4) + 4 * r + c % 4];
              s += (byte & 15) * q[c] + (byte >> 4) * q[16 + c];
            }
          }
          const float scale = half_to_float(load_u16(p + 2 * r)) * d;
          acc[r] = std::fma(static_cast<float>(s), scale, acc[r]);
        }
      }
      float* y = t.Y + i * t.ldy + g * kR16Rows;
      for (int64_t r = 0; r < kR16Rows; ++r) y[r] = acc[r];
    }
  }
}

}  // namespace pi::cpu::detail
