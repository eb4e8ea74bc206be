#include "synth_activity.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numbers>

namespace pi::workflows::synth {

namespace {

// The profile for one exponent, with the scale bisected so that the mean is `activity`.
// The mean grows monotonically with the scale, so bisection on log(scale) converges.
std::vector<double> profile(int64_t n, double alpha, double activity, double p_max,
                            double* scale_out) {
  std::vector<double> p(static_cast<size_t>(n));
  std::vector<double> shape(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    double r = (static_cast<double>(k) + 0.5) / static_cast<double>(n);
    shape[static_cast<size_t>(k)] = std::pow(r, -alpha);
  }
  double lo = std::log(1e-300), hi = std::log(p_max) + 1.0;  // scale = exp(.)
  for (int it = 0; it < 100; ++it) {
    double mid = 0.5 * (lo + hi), c = std::exp(mid), sum = 0;
    for (double s : shape) sum += std::min(p_max, c * s);
    if (sum / static_cast<double>(n) > activity)
      hi = mid;
    else
      lo = mid;
  }
  double c = std::exp(0.5 * (lo + hi));
  for (size_t k = 0; k < p.size(); ++k) p[k] = std::min(p_max, c * shape[k]);
  *scale_out = c;
  return p;
}

double top_share(const std::vector<double>& p, int64_t n_top) {
  double top = 0, all = 0;
  for (size_t k = 0; k < p.size(); ++k) {
    all += p[k];
    if (static_cast<int64_t>(k) < n_top) top += p[k];
  }
  return all > 0 ? top / all : 0;
}

}  // namespace

Result<PowerLaw> solve_power_law(int64_t n, double activity, double hot_fraction, double hot_share,
                                 double p_max) {
  const int64_t n_top =
      std::clamp<int64_t>(std::llround(hot_fraction * static_cast<double>(n)), 1, n);
  PowerLaw out;
  // The share of the top neurons grows with alpha (a steeper law concentrates activations).
  double lo = 0, hi = 16;
  double scale = 0;
  if (top_share(profile(n, hi, activity, p_max, &scale), n_top) < hot_share) {
    return err(
        "synth: no power law with mean %g puts %g of activations on the top %g of %lld "
        "neurons",
        activity, hot_share, hot_fraction, static_cast<long long>(n));
  }
  for (int it = 0; it < 60; ++it) {
    double mid = 0.5 * (lo + hi);
    if (top_share(profile(n, mid, activity, p_max, &scale), n_top) > hot_share)
      hi = mid;
    else
      lo = mid;
  }
  out.alpha = 0.5 * (lo + hi);
  out.p = profile(n, out.alpha, activity, p_max, &out.scale);
  return out;
}

double normal_quantile(double p) {
  // Acklam's rational approximation (relative error < 1.2e-9), then one Halley step on
  // Phi(x) - p using erfc, which brings it to machine precision.
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                 -2.759285104469687e+02, 1.383577518672690e+02,
                                 -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                 -1.556989798598866e+02, 6.680131188771972e+01,
                                 -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                 -2.400758277161838e+00, -2.549732539343734e+00,
                                 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                                 2.445134137142996e+00, 3.754408661907416e+00};
  const double lowp = 0.02425;
  double x;
  if (p < lowp) {
    double q = std::sqrt(-2 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (p <= 1 - lowp) {
    double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  } else {
    double q = std::sqrt(-2 * std::log1p(-p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  double e = 0.5 * std::erfc(-x / std::numbers::sqrt2) - p;
  double u = e * std::sqrt(2 * std::numbers::pi) * std::exp(x * x / 2);
  return x - u / (1 + x * u / 2);
}

Status write_npy_f32(const std::string& path, std::span<const float> values) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(values.size()) + ",), }";
  // Magic (6) + version (2) + length (2) + header + '\n' is padded to a multiple of 64.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::FILE* fp = std::fopen(path.c_str(), "wb");
  if (fp == nullptr) return err("%s: cannot create: %s", path.c_str(), std::strerror(errno));
  const auto hlen = static_cast<uint16_t>(header.size());
  const unsigned char pre[10] = {0x93,
                                 'N',
                                 'U',
                                 'M',
                                 'P',
                                 'Y',
                                 1,
                                 0,
                                 static_cast<unsigned char>(hlen & 0xff),
                                 static_cast<unsigned char>(hlen >> 8)};
  bool ok = std::fwrite(pre, 1, sizeof pre, fp) == sizeof pre &&
            std::fwrite(header.data(), 1, header.size(), fp) == header.size() &&
            std::fwrite(values.data(), sizeof(float), values.size(), fp) == values.size();
  ok = (std::fclose(fp) == 0) && ok;
  if (!ok) return err("%s: write failed", path.c_str());
  return Status::Ok();
}

}  // namespace pi::workflows::synth
