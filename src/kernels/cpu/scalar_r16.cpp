// Portable R16 leaves (r16.h): the order of operations every ISA's R16 leaves follow, in
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

// One Q4_K_R16 super-block's activation (r16.h): 256 quants with one scale, their sums per 32.
void prepare_k(const float* x, uint8_t* a) {
  float amax = 0.0f;
  bool nan = false;
  for (int j = 0; j < 256; ++j) {
    nan = nan || std::isnan(x[j]);
    const float v = std::fabs(x[j]);
    amax = v > amax ? v : amax;
  }
  const float d = nan ? __builtin_nanf("") : amax / 127.0f;
  const float id = amax > 0.0f && amax <= 3.4e38f ? 127.0f / amax : 0.0f;
  for (int j = 0; j < 8; ++j) {
    int32_t sum = 0;
    for (int e = 32 * j; e < 32 * j + 32; ++e) {
      const int8_t q = quant_elem(x[e] * id);
      std::memcpy(a + e, &q, 1);
      sum += q;
    }
    const auto s16 = static_cast<int16_t>(sum);
    std::memcpy(a + 256 + 2 * j, &s16, 2);
  }
  std::memcpy(a + 272, &d, 4);
  std::memset(a + 276, 0, kR16KActBytes - 276);
}

// Q4_K_R16 (r16.h's order): rows [k0, k1) x tokens [0, m).
void dot_k(const DotTask& t) {
  const int64_t nsb = t.cols / 256;
  r16_walk<1>(t, [&](auto, const uint8_t* G, const uint8_t* const* acts, float* const* ys, const uint8_t*) {
    const uint8_t* act = acts[0];
    float acc[kR16Rows] = {};
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* p = G + s * kR16KBlockBytes;
      const uint8_t* a = act + s * kR16KActBytes;
      const auto* q = reinterpret_cast<const int8_t*>(a);
      float dx;
      std::memcpy(&dx, a + 272, 4);
      for (int64_t r = 0; r < kR16Rows; ++r) {
        uint8_t packed[12];
        for (int w = 0; w < 3; ++w) std::memcpy(packed + 4 * w, p + 64 + 64 * w + 4 * r, 4);
        int32_t isum = 0, imin = 0;
        for (int j = 0; j < 8; ++j) {
          // The 6-bit scale and min of sub-block j (ggml's Q4_K packing).
          const int sc = j < 4 ? packed[j] & 63 : (packed[j + 4] & 15) | ((packed[j - 4] >> 6) << 4);
          const int mn = j < 4 ? packed[j + 4] & 63 : (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
          int32_t sj = 0;
          for (int l = 0; l < 32; ++l) {
            const int byte_index = 32 * (j / 2) + l;  // sub-blocks 2c and 2c+1 share quant bytes 32c..
            const uint8_t byte = p[256 + 64 * (byte_index / 4) + 4 * r + byte_index % 4];
            const int z = j % 2 == 0 ? byte & 15 : byte >> 4;
            sj += z * q[32 * j + l];
          }
          int16_t bsum;
          std::memcpy(&bsum, a + 256 + 2 * j, 2);
          isum += sc * sj;
          imin += mn * bsum;
        }
        const float d = half_to_float(load_u16(p + 2 * r)) * dx;
        const float dmin = half_to_float(load_u16(p + 32 + 2 * r)) * dx;
        acc[r] = std::fma(static_cast<float>(isum), d, acc[r]);
        acc[r] = std::fma(static_cast<float>(imin), -dmin, acc[r]);
      }
    }
    for (int64_t r = 0; r < kR16Rows; ++r) ys[0][r] = acc[r];
  });
}

void prepare_32(const float* x, int64_t cols, int32_t offset, uint8_t* out) {
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
    const int32_t off = -offset * sum;
    std::memcpy(a + 32, &d, 4);
    std::memcpy(a + 36, &off, 4);
  }
}

}  // namespace

void scalar_r16_prepare(DType t, const float* x, int64_t cols, uint8_t* out) {
  if (t == DType::Q4_K_R16) {
    for (int64_t s = 0; s < cols / 256; ++s) prepare_k(x + 256 * s, out + s * kR16KActBytes);
  } else {
    prepare_32(x, cols, r16_act_offset(t), out);
  }
}

void scalar_r16_dot(const DotTask& t) {
  if (t.type == DType::Q4_K_R16) return dot_k(t);
  const int64_t nb = t.cols / 32;
  const bool q8 = t.type == DType::Q8_0_R16;
  const bool mx = t.type == DType::MXFP4_R16;
  const size_t block_bytes = r16_block_bytes(t.type);
  r16_walk<1>(t, [&](auto, const uint8_t* G, const uint8_t* const* acts, float* const* ys, const uint8_t*) {
    const uint8_t* act = acts[0];
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
        } else if (mx) {
          for (int c = 0; c < 16; ++c) {
            const uint8_t byte = p[16 + 64 * (c / 4) + 4 * r + c % 4];
            s += (kMxfp4Values[byte & 15] + 12) * q[c] + (kMxfp4Values[byte >> 4] + 12) * q[16 + c];
          }
        } else {
          for (int c = 0; c < 16; ++c) {
            const uint8_t byte = p[32 + 64 * (c / 4) + 4 * r + c % 4];
            s += (byte & 15) * q[c] + (byte >> 4) * q[16 + c];
          }
        }
        const float scale = (mx ? mxfp4_r16_scale(p[r]) : half_to_float(load_u16(p + 2 * r))) * d;
        acc[r] = std::fma(static_cast<float>(s), scale, acc[r]);
      }
    }
    for (int64_t r = 0; r < kR16Rows; ++r) ys[0][r] = acc[r];
  });
}

}  // namespace pi::cpu::detail
