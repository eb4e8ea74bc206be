// RoPE angles with position scaling, one formula for every device that rotates (the CPU
// kernels, the CUDA kernel; the reference in kernels/ref/rope.cpp is written out separately
// as the check). Linear scaling multiplies positions by freq_scale. YaRN (rope.scaling.type
// "yarn": Qwen2.5/Qwen3 long contexts, DeepSeek, gpt-oss) blends per dimension pair i between
// the scaled angle and the unscaled one, as ggml's rope does:
//   theta_extrap = pos * base^(-2i / n_rot),  theta_interp = freq_scale * theta_extrap,
//   mix = ext_factor * (1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1)),
//   theta = theta_interp * (1 - mix) + theta_extrap * mix,
// where [lo, hi] are the pairs whose wavelengths lie between n_ctx_orig / beta_fast and
// n_ctx_orig / beta_slow (lo = floor, hi = ceil as ggml rounds them, or unrounded where the
// model was trained so: gpt-oss's `truncate: false`; clamped to [0, n_rot - 1]); the fast pairs
// (below lo) keep their unscaled angle, the slow ones (above hi) are interpolated. Both cos
// and sin are multiplied by mscale = attn_factor * (1 + 0.1 ln(1 / freq_scale)) when
// ext_factor != 0, else attn_factor. Angles in double: they reach thousands of radians.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define PI_ROPE_HD __host__ __device__ inline
#else
#define PI_ROPE_HD inline
#endif

namespace pi {

// A model's YaRN settings (rope.scaling.yarn_*); ext_factor 0 is plain linear scaling.
struct RopeYarn {
  float ext_factor = 0.0f;
  float attn_factor = 1.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  int64_t n_ctx_orig = 0;  // rope.scaling.original_context_length
  // The ramp's ends rounded outwards to whole pairs (ggml, most models) or not (gpt-oss, as
  // OpenAI's and Hugging Face's implementations with truncate false).
  bool truncate = true;
};

// What the angle of every pair needs besides its position, computed once per op.
struct RopeAngles {
  double base = 10000.0;
  double freq_scale = 1.0;
  int64_t n_rot = 0;
  double ext = 0.0;       // YaRN's ext_factor (0: linear)
  double lo = 0.0, hi = 0.0;  // the blended pairs
  double mscale = 1.0;    // multiplies cos and sin
};

inline RopeAngles rope_angles(int64_t n_rot, float base, float freq_scale, const RopeYarn& y) {
  RopeAngles a;
  a.base = base;
  a.freq_scale = freq_scale;
  a.n_rot = n_rot;
  a.mscale = y.attn_factor;
  if (y.ext_factor == 0.0f || n_rot <= 0 || y.n_ctx_orig <= 0) return a;
  const double pi2 = 2.0 * 3.14159265358979323846;
  const auto corr = [&](double beta) {
    return static_cast<double>(n_rot) * std::log(static_cast<double>(y.n_ctx_orig) / (beta * pi2)) /
           (2.0 * std::log(static_cast<double>(base)));
  };
  a.ext = y.ext_factor;
  const double lo = corr(y.beta_fast), hi = corr(y.beta_slow);
  a.lo = std::fmax(0.0, y.truncate ? std::floor(lo) : lo);
  a.hi = std::fmin(static_cast<double>(n_rot - 1), y.truncate ? std::ceil(hi) : hi);
  a.mscale *= 1.0 + 0.1 * std::log(1.0 / static_cast<double>(freq_scale));
  return a;
}

// The angle of pair i at position pos.
PI_ROPE_HD double rope_theta(const RopeAngles& a, int64_t pos, int64_t i) {
  const double inv = pow(a.base, -2.0 * static_cast<double>(i) / static_cast<double>(a.n_rot));
  if (a.ext == 0.0) return static_cast<double>(pos) * a.freq_scale * inv;
  const double extrap = static_cast<double>(pos) * inv;
  const double y = (static_cast<double>(i) - a.lo) / fmax(0.001, a.hi - a.lo);
  const double mix = a.ext * (1.0 - fmin(1.0, fmax(0.0, y)));
  return a.freq_scale * extrap * (1.0 - mix) + extrap * mix;
}

}  // namespace pi
