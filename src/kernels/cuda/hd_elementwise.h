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

}  // namespace pi::gpu
