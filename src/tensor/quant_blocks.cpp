// Reference (de)quantization of the 32-element block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// MXFP4.
// Byte layouts and the quantization rules are ggml's (docs/FORMATS.md, "Block layouts"), so a
// block written here is byte-identical to one written by ggml's reference quantizer and
// real model files decode exactly. Arithmetic is in f32 in the order ggml uses; the target
// is compiled with -ffp-contract=off so that no fused multiply-add changes a rounding.
#include <cmath>
#include <cstdint>

#include "tensor/quant_blocks.h"

namespace pi::detail {
namespace {

constexpr int kHalf = kQK / 2;

// The element of largest magnitude with its sign kept; the first one on ties.
float signed_absmax(const float* x, int n) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void min_max(const float* x, int n, float& lo, float& hi) {
  lo = x[0];
  hi = x[0];
  for (int j = 1; j < n; ++j) {
    if (x[j] < lo) lo = x[j];
    if (x[j] > hi) hi = x[j];
  }
}

// Truncates v toward zero and clamps to [0, hi], as the formats' integer casts do for the
// non-negative values they are designed to see. NaN gives 0.
int trunc_clamp(float v, int hi) {
  if (!(v > 0.0f)) return 0;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(v);
}

float inverse_or_zero(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

// Packs 32 quants q[0..31] (0..15) as nibbles: byte j holds q[j] low and q[j+16] high.
void pack_nibbles(const int* q, uint8_t* qs) {
  for (int j = 0; j < kHalf; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0f) | ((q[j + kHalf] & 0x0f) << 4));
  }
}

// Bit j of the little-endian u32 qh is bit 4 of q[j].
void pack_fifth_bits(const int* q, uint8_t* qh) {
  uint32_t bits = 0;
  for (int j = 0; j < kQK; ++j) bits |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  for (int k = 0; k < 4; ++k) qh[k] = static_cast<uint8_t>(bits >> (8 * k));
}

// Unpacks the nibbles (and, when qh is given, the fifth bits) into q[0..31].
void unpack(const uint8_t* qs, const uint8_t* qh, int* q) {
  uint32_t bits = 0;
  if (qh != nullptr) {
    for (int k = 0; k < 4; ++k) bits |= static_cast<uint32_t>(qh[k]) << (8 * k);
  }
  for (int j = 0; j < kHalf; ++j) {
    q[j] = qs[j] & 0x0f;
    q[j + kHalf] = qs[j] >> 4;
  }
  for (int j = 0; j < kQK; ++j) q[j] |= static_cast<int>((bits >> j) & 1u) << 4;
}

}  // namespace

// Q4_0: d = max / -8 where max is the signed value of largest magnitude, so that value maps
// to q = 0 exactly; q = min(15, trunc(x / d + 8.5)).
void quantize_block(const float* x, BlockQ4_0& b) {
  const float d = signed_absmax(x, kQK) / -8.0f;
  const float id = inverse_or_zero(d);
  int q[kQK];
  for (int j = 0; j < kQK; ++j) q[j] = trunc_clamp(x[j] * id + 8.5f, 15);
  b.d = f32_to_f16(d);
  pack_nibbles(q, b.qs);
}

void dequantize_block(const BlockQ4_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  int q[kQK];
  unpack(b.qs, nullptr, q);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(q[j] - 8) * d;
}

// Q4_1: d = (max - min) / 15, m = min; q = min(15, trunc((x - min) / d + 0.5)).
void quantize_block(const float* x, BlockQ4_1& b) {
  float lo = 0.0f, hi = 0.0f;
  min_max(x, kQK, lo, hi);
  const float d = (hi - lo) / 15.0f;
  const float id = inverse_or_zero(d);
  int q[kQK];
  for (int j = 0; j < kQK; ++j) q[j] = trunc_clamp((x[j] - lo) * id + 0.5f, 15);
  b.d = f32_to_f16(d);
  b.m = f32_to_f16(lo);
  pack_nibbles(q, b.qs);
}

void dequantize_block(const BlockQ4_1& b, float* y) {
  const float d = f16_to_f32(b.d);
  const float m = f16_to_f32(b.m);
  int q[kQK];
  unpack(b.qs, nullptr, q);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(q[j]) * d + m;
}

// Q5_0: as Q4_0 with 32 levels: d = max / -16, q = min(31, trunc(x / d + 16.5)).
void quantize_block(const float* x, BlockQ5_0& b) {
  const float d = signed_absmax(x, kQK) / -16.0f;
  const float id = inverse_or_zero(d);
  int q[kQK];
  for (int j = 0; j < kQK; ++j) q[j] = trunc_clamp(x[j] * id + 16.5f, 31);
  b.d = f32_to_f16(d);
  pack_fifth_bits(q, b.qh);
  pack_nibbles(q, b.qs);
}

void dequantize_block(const BlockQ5_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  int q[kQK];
  unpack(b.qs, b.qh, q);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(q[j] - 16) * d;
}

// Q5_1: as Q4_1 with 32 levels: d = (max - min) / 31, m = min.
void quantize_block(const float* x, BlockQ5_1& b) {
  float lo = 0.0f, hi = 0.0f;
  min_max(x, kQK, lo, hi);
  const float d = (hi - lo) / 31.0f;
  const float id = inverse_or_zero(d);
  int q[kQK];
  for (int j = 0; j < kQK; ++j) q[j] = trunc_clamp((x[j] - lo) * id + 0.5f, 31);
  b.d = f32_to_f16(d);
  b.m = f32_to_f16(lo);
  pack_fifth_bits(q, b.qh);
  pack_nibbles(q, b.qs);
}

void dequantize_block(const BlockQ5_1& b, float* y) {
  const float d = f16_to_f32(b.d);
  const float m = f16_to_f32(b.m);
  int q[kQK];
  unpack(b.qs, b.qh, q);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(q[j]) * d + m;
}

// Q8_0: d = amax / 127, q = round(x / d) with halves away from zero (C roundf).
void quantize_block(const float* x, BlockQ8_0& b) {
  const float d = std::fabs(signed_absmax(x, kQK)) / 127.0f;
  const float id = inverse_or_zero(d);
  for (int j = 0; j < kQK; ++j) {
    const float r = std::round(x[j] * id);
    const float clamped = std::isnan(r) ? 0.0f : std::fmin(127.0f, std::fmax(-128.0f, r));
    b.qs[j] = static_cast<int8_t>(clamped);
  }
  b.d = f32_to_f16(d);
}

void dequantize_block(const BlockQ8_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
}

// MXFP4: e from the largest magnitude, then each element's nearest code by a scan of the 16
// codes in order, the first (lowest) code winning ties, as ggml's best_index_mxfp4.
void quantize_block(const float* x, BlockMXFP4& b) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = std::fabs(x[j]) > amax ? std::fabs(x[j]) : amax;
  int e = 0;
  if (amax > 0.0f) {
    // In float, clamped before the cast (an infinite amax would overflow int): finite inputs
    // give 0..252 as ggml's does.
    const float l = std::floor(std::log2(amax)) - 2.0f + 127.0f;
    e = l < 0.0f ? 0 : l > 255.0f ? 255 : static_cast<int>(l);
  }
  b.e = static_cast<uint8_t>(e);
  const float d = e8m0_half(b.e);
  int q[kQK];
  for (int j = 0; j < kQK; ++j) {
    int best = 0;
    float best_err = std::fabs(static_cast<float>(kMxfp4Values[0]) * d - x[j]);
    for (int c = 1; c < 16; ++c) {
      const float err = std::fabs(static_cast<float>(kMxfp4Values[c]) * d - x[j]);
      if (err < best_err) {
        best = c;
        best_err = err;
      }
    }
    q[j] = best;
  }
  pack_nibbles(q, b.qs);
}

void dequantize_block(const BlockMXFP4& b, float* y) {
  const float d = e8m0_half(b.e);
  for (int j = 0; j < kHalf; ++j) {
    y[j] = static_cast<float>(kMxfp4Values[b.qs[j] & 0x0f]) * d;
    y[j + kHalf] = static_cast<float>(kMxfp4Values[b.qs[j] >> 4]) * d;
  }
}

}  // namespace pi::detail
