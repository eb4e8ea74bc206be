// Rotary position embedding (Ops::rope), in place: X f32 [m, n_heads * head_dim], token i
// at position pos[i] (device memory). The angle theta_p (pos * freq_scale *
// base^(-2p / n_rot), or YaRN's: kernels/rope_yarn.h, the CPU's formula) and its cosine and
// sine are computed in double (an f32 angle of thousands of radians is off by 1e-4), the
// rotation in f32, as the CPU kernels do. Pairs (2p, 2p + 1) (normal) or (p, p + n_rot / 2)
// (neox).
#pragma once

#include "kernels/cuda/runtime.h"
#include "kernels/rope_yarn.h"

namespace pi::gpu {

struct RopeArgs {
  int64_t head_dim = 0;
  RopeAngles angles;  // rope_angles(): base, freq_scale, n_rot and YaRN's blend
  bool neox = false;
};

cudaError_t rope(const RopeArgs& a, float* X, int64_t m, int64_t n_heads, const int32_t* pos,
                 cudaStream_t stream);

}  // namespace pi::gpu
