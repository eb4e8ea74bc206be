// Reference (de)quantization of Q6_K, ggml's 6-bit K-quant (docs/FORMATS.md, "Block layouts").
//
// A 256-element super-block has 16 sub-blocks of 16 elements. Element e has the 6-bit quant
// q[e] (0..63) and decodes as x = d * scales[e / 16] * (q[e] - 32), computed in f32 as
// (d * scale) * (q - 32). Dequantization is bit-exact with ggml. The quantizer is this
// engine's own simple scale search, not ggml's; it writes valid blocks whose error bound is
// stated at quantize_block below.
#include <cmath>
#include <cstdint>

#include "tensor/quant_blocks.h"

namespace pi::detail {
namespace {

constexpr int kSub = 16;                  // elements per sub-block
constexpr int kNumSub = kQK_K / kSub;     // sub-blocks per super-block
constexpr int kQMin = -32, kQMax = 31;    // signed quant range

// Where the 6 bits of element e (0..255) live. The block is two halves of 128 elements;
// within a half, element p = 32 * g + l (g = 0..3, l = 0..31) keeps its low 4 bits in
// ql[64 * half + l + 32 * (g & 1)] (low nibble for g < 2, high nibble for g >= 2) and its
// high 2 bits in qh[32 * half + l] at bit 2 * g.
struct Q6Slot {
  int ql_index, ql_shift, qh_index, qh_shift;
};

Q6Slot slot_of(int e) {
  const int half = e / 128;
  const int p = e % 128;
  const int g = p / 32;
  const int l = p % 32;
  return Q6Slot{64 * half + l + 32 * (g & 1), g >= 2 ? 4 : 0, 32 * half + l, 2 * g};
}

int quantize_one(float x, float step) {
  if (step == 0.0f) return 0;
  const float r = std::round(x / step);
  if (!(r >= static_cast<float>(kQMin))) return std::isnan(r) ? 0 : kQMin;
  if (r > static_cast<float>(kQMax)) return kQMax;
  return static_cast<int>(r);
}

float squared_error(const float* x, float step) {
  float sse = 0.0f;
  for (int j = 0; j < kSub; ++j) {
    const float e = x[j] - step * static_cast<float>(quantize_one(x[j], step));
    sse += e * e;
  }
  return sse;
}

// The sub-block's real-valued step: max / c for c in +-{28, 28.5, ..., 32}, where max is the
// signed element of largest magnitude, choosing the smallest squared error (first on ties).
// Every candidate has |step| in [amax / 32, amax / 28]; negative c let max use level -32.
float search_step(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kSub; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  if (amax == 0.0f) return 0.0f;
  float best_step = max / -32.0f;
  float best_sse = squared_error(x, best_step);
  for (float c = 28.0f; c <= 32.0f; c += 0.5f) {
    for (float sign : {-1.0f, 1.0f}) {
      const float step = max / (sign * c);
      const float sse = squared_error(x, step);
      if (sse < best_sse) {
        best_sse = sse;
        best_step = step;
      }
    }
  }
  return best_step;
}

}  // namespace

uint16_t f16_at_least(float v) {
  uint16_t h = f32_to_f16(v);
  if (f16_to_f32(h) < v && h < 0x7c00u) ++h;
  return h;
}

// Quantizer: each sub-block gets a real step s from search_step; the super-scale is
// d = max|s| / 127 rounded up to a half, the integer scales are round(s / d) (so |scale| <= 127),
// and every element is requantized with the stored step e = d * scale. Error bound, for
// finite inputs: |x - x'| <= amax_sub / 32 + 16 * d, where amax_sub is the sub-block's
// largest magnitude (|e| >= amax_sub / 32 - d / 2, so rounding costs at most |e| / 2 and
// clamping at level 31 at most amax_sub - 31 |e|).
void quantize_block(const float* x, BlockQ6_K& b) {
  float steps[kNumSub];
  float max_step = 0.0f;
  for (int s = 0; s < kNumSub; ++s) {
    steps[s] = search_step(x + s * kSub);
    max_step = std::fmax(max_step, std::fabs(steps[s]));
  }

  b = BlockQ6_K{};
  if (max_step == 0.0f) {
    // All zeros: d = 0, scales 0 and every quant at level 0 (stored value 32).
    for (int e = 0; e < kQK_K; ++e) {
      const Q6Slot at = slot_of(e);
      b.qh[at.qh_index] |= static_cast<uint8_t>(2u << at.qh_shift);
    }
    return;
  }

  b.d = f16_at_least(max_step / 127.0f);
  const float d = f16_to_f32(b.d);
  for (int s = 0; s < kNumSub; ++s) {
    const float r = std::round(steps[s] / d);
    b.scales[s] = static_cast<int8_t>(std::fmin(127.0f, std::fmax(-127.0f, r)));
  }

  for (int e = 0; e < kQK_K; ++e) {
    const float step = d * static_cast<float>(b.scales[e / kSub]);
    const int q = quantize_one(x[e], step) - kQMin;  // 0..63
    const Q6Slot at = slot_of(e);
    b.ql[at.ql_index] |= static_cast<uint8_t>((q & 0x0f) << at.ql_shift);
    b.qh[at.qh_index] |= static_cast<uint8_t>(((q >> 4) & 0x03) << at.qh_shift);
  }
}

void dequantize_block(const BlockQ6_K& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int e = 0; e < kQK_K; ++e) {
    const Q6Slot at = slot_of(e);
    const int low = (b.ql[at.ql_index] >> at.ql_shift) & 0x0f;
    const int high = (b.qh[at.qh_index] >> at.qh_shift) & 0x03;
    const int q = (low | (high << 4)) + kQMin;
    y[e] = (d * static_cast<float>(b.scales[e / kSub])) * static_cast<float>(q);
  }
}

}  // namespace pi::detail
