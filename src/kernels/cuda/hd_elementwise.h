// Per-element functions of the GPU's elementwise kernels, host and device (hd.h), with the
// reference's special values: NaN stays NaN, silu and gelu of -inf are 0 and of +inf are +inf.
#pragma once

#include <cmath>

#include "kernels/cuda/hd_scalar.h"

namespace pi::gpu {

PI_HD bool is_inf(float x) { return (float_bits(x) & 0x7fffffffu) == 0x7f800000u; }

PI_HD float silu(float x) {
  if (is_inf(x)) return x > 0.0f ? x : 0.0f;
  return x / (1.0f + expf(-x));
}

// The tanh approximation: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
PI_HD float gelu(float x) {
  if (is_inf(x)) return x > 0.0f ? x : 0.0f;
  const float k = 0.7978845608028654f;
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

PI_HD float relu(float x) { return (x > 0.0f || x != x) ? x : 0.0f; }

// Activation codes of the kernels (backend::Activation's order).
enum ActCode : int { kSiLU = 0, kReLU = 1, kGELU = 2 };

PI_HD float activate(int act, float x) {
  return act == kSiLU ? silu(x) : act == kReLU ? relu(x) : gelu(x);
}

// gpt-oss's gated unit (backend::FfnKind::SwigluOai): g = min(gate, 7), u = clamp(up, -7, 7),
// g sigmoid(1.702 g) (u + 1); NaN stays NaN (fminf/fmaxf would drop it).
PI_HD float swiglu_oai(float gate, float up) {
  if (gate != gate || up != up) return gate + up;
  const float g = gate < 7.0f ? gate : 7.0f;
  const float u = up < -7.0f ? -7.0f : up > 7.0f ? 7.0f : up;
  // The numerator clamped at -200 as the CPU's: g -> -inf gives -0, not -inf / inf.
  return (g > -200.0f ? g : -200.0f) / (1.0f + expf(-1.702f * g)) * (u + 1.0f);
}

}  // namespace pi::gpu
