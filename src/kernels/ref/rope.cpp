// Reference rotary position embedding, in double. Dimension pair i (0 <= i < n_rot / 2) of
// every head is rotated by theta_i = pos * freq_scale * base^(-2i / n_rot) (or YaRN's angle,
// below), times mscale (1 unless YaRN):
//   (x0, x1) -> (x0 cos theta - x1 sin theta, x0 sin theta + x1 cos theta)
// where the pair is (2i, 2i+1) in Normal mode and (i, i + n_rot/2) in NeoX mode. Dimensions
// n_rot..head_dim-1 are left as they are. n_rot must be even and at most head_dim.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "kernels/ref/ref.h"

namespace pi::ref {

void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos, float base,
          float freq_scale, RopeMode mode, const RopeYarn& yarn) {
  const int64_t half = n_rot / 2;
  // YaRN: pair i's wavelength 2 pi base^(2i / n_rot) against the original context. Pairs that
  // turn more than beta_fast times over it keep the unscaled angle, those that turn fewer than
  // beta_slow times take the scaled one, and a linear ramp over the pair index in between
  // (its ends rounded outwards to whole pairs, as ggml does, unless yarn.truncate is off).
  const bool yarn_on = yarn.ext_factor != 0.0f && yarn.n_ctx_orig > 0;
  double lo = 0, hi = 0, mscale = yarn.attn_factor;
  if (yarn_on) {
    const auto pair_turning = [&](double turns) {  // the pair index turning `turns` times
      return n_rot * std::log(static_cast<double>(yarn.n_ctx_orig) / (2.0 * std::numbers::pi * turns)) / (2.0 * std::log(static_cast<double>(base)));
    };
    const double fast = pair_turning(yarn.beta_fast), slow = pair_turning(yarn.beta_slow);
    lo = std::max(0.0, yarn.truncate ? std::floor(fast) : fast);
    hi = std::min(static_cast<double>(n_rot - 1), yarn.truncate ? std::ceil(slow) : slow);
    mscale *= 1.0 + 0.1 * std::log(1.0 / static_cast<double>(freq_scale));
  }
  for (int64_t h = 0; h < n_heads; ++h) {
    float* head = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const double unscaled = static_cast<double>(pos) * std::pow(static_cast<double>(base), -2.0 * i / static_cast<double>(n_rot));
      double theta = unscaled * freq_scale;
      if (yarn_on) {
        const double keep = (1.0 - std::clamp((i - lo) / std::max(0.001, hi - lo), 0.0, 1.0)) * yarn.ext_factor;
        theta = theta * (1.0 - keep) + unscaled * keep;
      }
      const double c = std::cos(theta) * mscale, s = std::sin(theta) * mscale;
      const int64_t i0 = mode == RopeMode::Normal ? 2 * i : i;
      const int64_t i1 = mode == RopeMode::Normal ? 2 * i + 1 : i + half;
      const double x0 = head[i0], x1 = head[i1];
      head[i0] = static_cast<float>(x0 * c - x1 * s);
      head[i1] = static_cast<float>(x0 * s + x1 * c);
    }
  }
}

}  // namespace pi::ref
