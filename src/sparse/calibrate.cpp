#include "sparse/calibrate.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace pi::sparse {
namespace {

size_t sz(int64_t n) { return static_cast<size_t>(n); }

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
float float_of(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

}  // namespace

float host_activation(backend::Activation act, float x) {
  switch (act) {
    case backend::Activation::SiLU: return x / (1.0f + std::exp(-x));
    case backend::Activation::ReLU: return x > 0.0f ? x : 0.0f;
    case backend::Activation::GELU: {
      const float c = 0.7978845608f;  // sqrt(2 / pi)
      return 0.5f * x * (1.0f + std::tanh(c * (x + 0.044715f * x * x * x)));
    }
  }
  return x;
}

MagnitudeHistogram::MagnitudeHistogram() : bins_(sz(1u << (31 - kShift)), 0) {}

void MagnitudeHistogram::add(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t b = bits_of(x[i]) & 0x7fffffffu;
    if (b > 0x7f800000u) continue;  // NaN
    ++bins_[b >> kShift];
    ++n_;
  }
}

double MagnitudeHistogram::quantile(double q) const {
  if (q <= 0.0 || n_ == 0) return 0.0;
  const double want = q * static_cast<double>(n_);
  double below = 0;
  for (size_t i = 0; i < bins_.size(); ++i) {
    const double c = static_cast<double>(bins_[i]);
    if (below + c >= want && c > 0) {
      const double lo = float_of(static_cast<uint32_t>(i) << kShift);
      const double hi = float_of(static_cast<uint32_t>(i + 1) << kShift);
      return lo + (hi - lo) * (want - below) / c;
    }
    below += c;
  }
  return float_of(0x7f7fffffu);
}

Calibrator::Calibrator(int64_t n_layer) : n_layer_(n_layer) {
  for (auto& v : h_) v.resize(sz(n_layer));
}

void Calibrator::add(Site s, int64_t il, const float* x, int64_t n) {
  h_[static_cast<size_t>(s)][sz(il)].add(x, n);
}

ActSparsityCalibration Calibrator::result(SiteSet sites, double target,
                                          std::vector<double> levels) const {
  ActSparsityCalibration c;
  c.sites = sites;
  c.target = target;
  c.levels = std::move(levels);
  c.n_layer = n_layer_;
  c.tokens = tokens_;
  for (Site s : kAllSites) {
    if (!has_site(sites, s)) continue;
    std::vector<float>& t = c.thresholds[static_cast<size_t>(s)];
    for (int64_t l = 0; l < n_layer_; ++l) {
      for (double level : c.levels) {
        t.push_back(level <= 0.0 ? 0.0f : static_cast<float>(histogram(s, l).quantile(level)));
      }
    }
  }
  return c;
}

CalibratingProj::CalibratingProj(const model::HParams& hp, backend::Device& dev, Calibrator& cal)
    : hp_(hp), dev_(dev), cal_(cal), dense_(hp) {}

void CalibratingProj::qkv(int64_t il, backend::Ops& ops, const model::AttnWeights& w,
                          const model::QkvIo& io) {
  const int64_t n = io.m * hp_.n_embd;
  cal_.add(Site::AttnIn, il, static_cast<const float*>(dev_.map(io.h, sz(n) * sizeof(float))), n);
  if (il == 0) cal_.add_tokens(io.m);
  dense_.qkv(il, ops, w, io);
}

void CalibratingProj::out(int64_t il, backend::Ops& ops, const model::AttnWeights& w,
                          const float* A, int64_t m, float* Y) {
  const int64_t n = m * hp_.n_embd_q();
  cal_.add(Site::AttnOut, il, static_cast<const float*>(dev_.map(A, sz(n) * sizeof(float))), n);
  dense_.out(il, ops, w, A, m, Y);
}

CalibratingFfn::CalibratingFfn(const model::Model& model, const model::ModelWeights& weights,
                               backend::Device& dev, Calibrator& cal)
    : model_(model), w_(weights), dev_(dev), cal_(cal) {}

Result<std::unique_ptr<CalibratingFfn>> CalibratingFfn::create(const model::Model& model,
                                                               const model::ModelWeights& weights,
                                                               backend::Device& dev,
                                                               int64_t max_tokens,
                                                               Calibrator& cal) {
  const model::HParams& hp = model.hparams();
  if (hp.ffn != model::FfnKind::Gated || hp.arch == model::Arch::Falcon) {
    return err("%s: calibration needs a gated FFN (gate, up, down) of llama-style layers",
               model.file().path().c_str());
  }
  std::unique_ptr<CalibratingFfn> f(new CalibratingFfn(model, weights, dev, cal));
  const size_t bytes = sz(std::max<int64_t>(max_tokens, 1) * hp.n_ff) * sizeof(float);
  auto g = dev.alloc(bytes, "calibration FFN scratch");
  if (!g.ok()) return g.error();
  auto u = dev.alloc(bytes, "calibration FFN scratch");
  if (!u.ok()) return u.error();
  f->g_ = std::move(*g);
  f->u_ = std::move(*u);
  f->act_.resize(bytes / sizeof(float));
  f->all_inputs_ = model::iota_rows(hp.n_embd);
  f->all_neurons_ = model::iota_rows(hp.n_ff);
  return f;
}

void CalibratingFfn::run(int64_t il, const model::FfnInput& in, float* out) {
  const model::HParams& hp = model_.hparams();
  const model::FfnWeights& w = w_.layers[sz(il)].ffn;
  backend::Ops& ops = dev_.ops();
  const int64_t m = in.m, n_ff = hp.n_ff;
  float* g = g_.as<float>();
  float* u = u_.as<float>();
  cal_.add(Site::FfnIn, il,
           static_cast<const float*>(dev_.map(in.x, sz(m * hp.n_embd) * sizeof(float))),
           m * hp.n_embd);
  model::linear_any(ops, w.gate, w.gate_t, in.x, m, all_inputs_, g);
  const auto* hg = static_cast<const float*>(dev_.map(g, sz(m * n_ff) * sizeof(float)));
  for (int64_t k = 0; k < m * n_ff; ++k) act_[sz(k)] = host_activation(hp.act, hg[k]);
  cal_.add(Site::FfnGate, il, act_.data(), m * n_ff);
  ops.linear(w.up, in.x, m, u);
  ops.ffn_combine(hp.ffn, hp.act, g, u, m, n_ff);
  if (w.down_t.present()) {
    ops.linear_t(w.down_t, g, m, all_neurons_, out);
  } else {
    ops.linear(w.down, g, m, out);
  }
}

}  // namespace pi::sparse
