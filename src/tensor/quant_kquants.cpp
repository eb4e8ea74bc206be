// Reference (de)quantization of ggml's K-quants Q2_K, Q3_K, Q4_K and Q5_K (Q6_K is in
// quant_q6k.cpp; layouts in quant.h and docs/FORMATS.md). Dequantization is bit-exact with
// ggml: each element is (d * scale) * q - (dmin * min) in f32, two roundings, no fused
// multiply-add (the target is compiled with -ffp-contract=off). The quantizers are this
// engine's own: a least-squares fit per sub-block, integer scales relative to a super-scale
// rounded so that no sub-block scale is clipped, then every element requantized with the
// step it will be decoded with.
//
// Element placement. A super-block of 256 elements is cut into 32-element groups g = e / 32.
//   Q4_K, Q5_K: group g's quants are nibble g % 2 of qs[32 (g / 2) + l] (l = e % 32); Q5_K's
//     fifth bit is bit g of qh[l]. Group g is sub-block g.
//   Q2_K, Q3_K: group g's 2-bit quants are bits 2 (g % 4) of qs[32 (g / 4) + l]; Q3_K's third
//     bit is bit g of hmask[l]. Sub-block e / 16.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "tensor/quant_blocks.h"

namespace pi::detail {
namespace {

// Nearest integer (halves up) clamped to [lo, hi]; NaN gives lo. floor, not lround: it
// compiles to one instruction where lround is a library call, and quantizing a 7B model
// calls this ~10^11 times.
int round_clamp(float v, int lo, int hi) {
  if (!(v >= static_cast<float>(lo))) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(std::floor(v + 0.5f));
}

// x ~ scale * q + offset with q in 0..nmax, scale >= 0, offset <= 0 (the formats store
// -offset as a non-negative min). Candidates: the min-max grid and a few stretched grids,
// each refined once by least squares on its assignment; the lowest squared error wins.
struct Fit {
  float scale, min;  // x ~ scale * q - min
};

Fit fit_asymmetric(const float* x, int n, int nmax) {
  float lo = 0.0f, hi = x[0];
  for (int j = 0; j < n; ++j) {
    lo = std::fmin(lo, x[j]);
    hi = std::fmax(hi, x[j]);
  }
  if (!(hi > lo)) return Fit{0.0f, -lo};
  Fit best{(hi - lo) / static_cast<float>(nmax), -lo};
  double best_sse = -1.0;
  for (int k = 0; k <= 8; k += 2) {
    const float iscale = (static_cast<float>(nmax) - 0.4f + 0.1f * static_cast<float>(k)) / (hi - lo);
    int q[32];
    double sq = 0, sx = 0, sqq = 0, sqx = 0;
    for (int j = 0; j < n; ++j) {
      q[j] = round_clamp((x[j] - lo) * iscale, 0, nmax);
      sq += q[j];
      sx += x[j];
      sqq += static_cast<double>(q[j]) * q[j];
      sqx += static_cast<double>(q[j]) * x[j];
    }
    const double det = n * sqq - sq * sq;
    double s = 1.0 / iscale, off = lo;
    if (det > 0) {
      s = (n * sqx - sq * sx) / det;
      off = (sqq * sx - sq * sqx) / det;
    }
    if (off > 0) {  // the min must be <= 0: refit the scale alone
      off = 0;
      s = sqq > 0 ? sqx / sqq : 0.0;
    }
    if (s < 0) continue;
    double sse = 0;
    for (int j = 0; j < n; ++j) {
      const double e = s * q[j] + off - x[j];
      sse += e * e;
    }
    if (best_sse < 0 || sse < best_sse) {
      best_sse = sse;
      best = Fit{static_cast<float>(s), static_cast<float>(-off)};
    }
  }
  return best;
}

// x ~ step * q with q in qmin..qmax (qmin = -qmax - 1): step = max / c for the signed element
// of largest magnitude and c in +-[qmax, qmax + 1.5] by quarters; the lowest squared error wins.
float fit_symmetric(const float* x, int n, int qmax) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  if (amax == 0.0f) return 0.0f;
  float best = max / static_cast<float>(-qmax - 1);
  float best_sse = -1.0f;
  for (int k = 0; k <= 6; ++k) {
    for (float sign : {-1.0f, 1.0f}) {
      const float step = max / (sign * (static_cast<float>(qmax) + 0.25f * static_cast<float>(k)));
      float sse = 0.0f;
      for (int j = 0; j < n; ++j) {
        const float e = x[j] - step * static_cast<float>(round_clamp(x[j] / step, -qmax - 1, qmax));
        sse += e * e;
      }
      if (best_sse < 0.0f || sse < best_sse) {
        best_sse = sse;
        best = step;
      }
    }
  }
  return best;
}

// A super-scale (half bits) for sub-block values v[0..n) >= 0 stored as integers 0..imax, and
// the integers. The super-scale is max(v) / imax rounded up to a half, so no integer clips.
uint16_t super_scale(const float* v, int n, int imax, int* out) {
  float vmax = 0.0f;
  for (int j = 0; j < n; ++j) vmax = std::fmax(vmax, v[j]);
  if (!(vmax > 0.0f)) {
    for (int j = 0; j < n; ++j) out[j] = 0;
    return 0;
  }
  const uint16_t h = f16_at_least(vmax / static_cast<float>(imax));
  const float d = f16_to_f32(h);
  for (int j = 0; j < n; ++j) out[j] = round_clamp(v[j] / d, 0, imax);
  return h;
}

// The asymmetric formats: per sub-block of `sub` elements, integer scale sc and min m of
// `bits` bits; q[e] in 0..nmax.
void quantize_asymmetric(const float* x, int sub, int bits, int nmax, uint16_t& dh, uint16_t& mh,
                         int* sc, int* m, int* q) {
  const int nsub = kQK_K / sub;
  float scales[16], mins[16];
  for (int s = 0; s < nsub; ++s) {
    const Fit f = fit_asymmetric(x + s * sub, sub, nmax);
    scales[s] = f.scale;
    mins[s] = f.min;
  }
  const int imax = (1 << bits) - 1;
  dh = super_scale(scales, nsub, imax, sc);
  mh = super_scale(mins, nsub, imax, m);
  const float d = f16_to_f32(dh), dmin = f16_to_f32(mh);
  for (int s = 0; s < nsub; ++s) {
    const float ds = d * static_cast<float>(sc[s]);
    const float dm = dmin * static_cast<float>(m[s]);
    for (int j = 0; j < sub; ++j) {
      const int e = s * sub + j;
      q[e] = ds > 0.0f ? round_clamp((x[e] + dm) / ds, 0, nmax) : 0;
    }
  }
}

// 6-bit scales and mins of Q4_K/Q5_K, 12 bytes: bytes 0-3 hold sc[0..3] and the top two bits
// of sc[4..7], bytes 4-7 m[0..3] and the top bits of m[4..7], bytes 8-11 the low nibbles of
// sc[4..7] (low) and m[4..7] (high).
void pack_scales_k4(const int* sc, const int* m, uint8_t* out) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

void unpack_scales_k4(const uint8_t* in, int* sc, int* m) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = in[j] & 63;
    m[j] = in[j + 4] & 63;
    sc[j + 4] = (in[j + 8] & 15) | ((in[j] >> 6) << 4);
    m[j + 4] = (in[j + 8] >> 4) | ((in[j + 4] >> 6) << 4);
  }
}

// Q3_K's 16 6-bit scales u (stored scale + 32), 12 bytes: byte i < 8 holds the low nibbles of
// u[i] (low) and u[i + 8] (high); byte 8 + k holds the top two bits of u[k + 4 g] at bit 2 g.
void pack_scales_q3(const int* u, uint8_t* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>((u[i] & 15) | ((u[i + 8] & 15) << 4));
  for (int k = 0; k < 4; ++k) {
    int v = 0;
    for (int g = 0; g < 4; ++g) v |= ((u[k + 4 * g] >> 4) & 3) << (2 * g);
    out[8 + k] = static_cast<uint8_t>(v);
  }
}

int unpack_scale_q3(const uint8_t* in, int i) {
  const int low = i < 8 ? in[i] & 15 : in[i - 8] >> 4;
  const int high = (in[8 + i % 4] >> (2 * (i / 4))) & 3;
  return (low | (high << 4)) - 32;
}

}  // namespace

namespace {

// Q4_K (qh null, nmax 15) and Q5_K (nmax 31): the shared header and nibble placement.
void quantize_k45(const float* x, int nmax, uint16_t& d, uint16_t& dmin, uint8_t* scales, uint8_t* qs,
                  uint8_t* qh) {
  int sc[8], m[8], q[kQK_K];
  quantize_asymmetric(x, 32, 6, nmax, d, dmin, sc, m, q);
  pack_scales_k4(sc, m, scales);
  for (int e = 0; e < kQK_K; ++e) {
    const int g = e / 32, l = e % 32;
    qs[32 * (g / 2) + l] |= static_cast<uint8_t>((q[e] & 15) << (4 * (g % 2)));
    if (qh != nullptr) qh[l] |= static_cast<uint8_t>(((q[e] >> 4) & 1) << g);
  }
}

void dequantize_k45(uint16_t dh, uint16_t mh, const uint8_t* scales, const uint8_t* qs, const uint8_t* qh,
                    float* y) {
  int sc[8], m[8];
  unpack_scales_k4(scales, sc, m);
  const float d = f16_to_f32(dh), dmin = f16_to_f32(mh);
  for (int e = 0; e < kQK_K; ++e) {
    const int g = e / 32, l = e % 32;
    int q = (qs[32 * (g / 2) + l] >> (4 * (g % 2))) & 15;
    if (qh != nullptr) q |= ((qh[l] >> g) & 1) << 4;
    y[e] = (d * static_cast<float>(sc[g])) * static_cast<float>(q) - dmin * static_cast<float>(m[g]);
  }
}

}  // namespace

void quantize_block(const float* x, BlockQ4_K& b) {
  b = BlockQ4_K{};
  quantize_k45(x, 15, b.d, b.dmin, b.scales, b.qs, nullptr);
}

void dequantize_block(const BlockQ4_K& b, float* y) { dequantize_k45(b.d, b.dmin, b.scales, b.qs, nullptr, y); }

void quantize_block(const float* x, BlockQ5_K& b) {
  b = BlockQ5_K{};
  quantize_k45(x, 31, b.d, b.dmin, b.scales, b.qs, b.qh);
}

void dequantize_block(const BlockQ5_K& b, float* y) { dequantize_k45(b.d, b.dmin, b.scales, b.qs, b.qh, y); }

void quantize_block(const float* x, BlockQ2_K& b) {
  int sc[16], m[16], q[kQK_K];
  b = BlockQ2_K{};
  quantize_asymmetric(x, 16, 4, 3, b.d, b.dmin, sc, m, q);
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<uint8_t>(sc[s] | (m[s] << 4));
  for (int e = 0; e < kQK_K; ++e) {
    const int g = e / 32, l = e % 32;
    b.qs[32 * (g / 4) + l] |= static_cast<uint8_t>(q[e] << (2 * (g % 4)));
  }
}

void dequantize_block(const BlockQ2_K& b, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  for (int e = 0; e < kQK_K; ++e) {
    const int g = e / 32, l = e % 32;
    const int s = b.scales[e / 16];
    const int q = (b.qs[32 * (g / 4) + l] >> (2 * (g % 4))) & 3;
    y[e] = (d * static_cast<float>(s & 15)) * static_cast<float>(q) - dmin * static_cast<float>(s >> 4);
  }
}

void quantize_block(const float* x, BlockQ3_K& b) {
  b = BlockQ3_K{};
  float steps[16], amax[16];
  for (int s = 0; s < 16; ++s) {
    steps[s] = fit_symmetric(x + 16 * s, 16, 3);
    amax[s] = std::fabs(steps[s]);
  }
  // Integer scales in -32..31: the super-scale covers the largest |step| at 31.
  int mag[16], u[16];
  b.d = super_scale(amax, 16, 31, mag);
  const float d = f16_to_f32(b.d);
  for (int s = 0; s < 16; ++s) {
    const int si = d > 0.0f ? round_clamp(steps[s] / d, -32, 31) : 0;
    u[s] = si + 32;
    const float dl = d * static_cast<float>(si);
    for (int j = 0; j < 16; ++j) {
      const int e = 16 * s + j;
      const int q = dl != 0.0f ? round_clamp(x[e] / dl, -4, 3) : 0;
      const int v = q + 4;  // 0..7: low two bits in qs, the third in hmask
      const int g = e / 32, l = e % 32;
      b.qs[32 * (g / 4) + l] |= static_cast<uint8_t>((v & 3) << (2 * (g % 4)));
      b.hmask[l] |= static_cast<uint8_t>((v >> 2) << g);
    }
  }
  pack_scales_q3(u, b.scales);
}

void dequantize_block(const BlockQ3_K& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int e = 0; e < kQK_K; ++e) {
    const int g = e / 32, l = e % 32;
    const int low = (b.qs[32 * (g / 4) + l] >> (2 * (g % 4))) & 3;
    const int q = low - (((b.hmask[l] >> g) & 1) != 0 ? 0 : 4);
    y[e] = (d * static_cast<float>(unpack_scale_q3(b.scales, e / 16))) * static_cast<float>(q);
  }
}

}  // namespace pi::detail
