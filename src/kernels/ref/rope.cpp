// Reference rotary position embedding, in double. Dimension pair i (0 <= i < n_rot / 2) of
// every head is rotated by theta_i = pos * freq_scale * base^(-2i / n_rot):
//   (x0, x1) -> (x0 cos theta - x1 sin theta, x0 sin theta + x1 cos theta)
// where the pair is (2i, 2i+1) in Normal mode and (i, i + n_rot/2) in NeoX mode. Dimensions
// n_rot..head_dim-1 are left as they are. n_rot must be even and at most head_dim.
#include <cmath>

#include "kernels/ref/ref.h"

namespace pi::ref {

void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos, float base,
          float freq_scale, RopeMode mode) {
  const int64_t half = n_rot / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* head = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const double theta = static_cast<double>(pos) * freq_scale *
                           std::pow(static_cast<double>(base), -2.0 * i / static_cast<double>(n_rot));
      const double c = std::cos(theta), s = std::sin(theta);
      const int64_t i0 = mode == RopeMode::Normal ? 2 * i : i;
      const int64_t i1 = mode == RopeMode::Normal ? 2 * i + 1 : i + half;
      const double x0 = head[i0], x1 = head[i1];
      head[i0] = static_cast<float>(x0 * c - x1 * s);
      head[i1] = static_cast<float>(x0 * s + x1 * c);
    }
  }
}

}  // namespace pi::ref
