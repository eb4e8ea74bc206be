// Calibration of activation thresholds (`powerinfer calibrate`, act_sparsity.h): while a text
// runs densely through the model, CalibratingProj and CalibratingFfn record the magnitudes
// of every site's entries in per-layer histograms (Calibrator); the threshold of sparsity
// level s is then the s-quantile of the magnitudes: zeroing |x| < t zeroes a share s of the
// entries seen. The forward pass's output is the dense model's.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/device.h"
#include "core/error.h"
#include "model/ffn.h"
#include "model/proj.h"
#include "sparse/act_sparsity.h"

namespace pi::sparse {

// Counts of |x| in bins of the float's exponent and top 6 mantissa bits: 64 bins per octave
// (bin width <= 1.6% of the value), covering every finite float; NaN is not counted.
class MagnitudeHistogram {
 public:
  MagnitudeHistogram();
  void add(const float* x, int64_t n);
  uint64_t count() const { return n_; }
  // The t at which a share q of the recorded magnitudes lies below t (linear within a bin);
  // 0 for q <= 0 or an empty histogram.
  double quantile(double q) const;

 private:
  static constexpr int kShift = 17;  // float bits >> 17: sign-free exponent and 6 mantissa bits
  std::vector<uint64_t> bins_;
  uint64_t n_ = 0;
};

// Histograms of every site of every layer.
class Calibrator {
 public:
  explicit Calibrator(int64_t n_layer);
  // Records n host values of site s in layer il (their magnitudes).
  void add(Site s, int64_t il, const float* x, int64_t n);
  const MagnitudeHistogram& histogram(Site s, int64_t il) const {
    return h_[static_cast<size_t>(s)][static_cast<size_t>(il)];
  }
  // The calibration of `sites` at `levels` (ascending from 0; level 0 gets threshold 0).
  ActSparsityCalibration result(SiteSet sites, double target, std::vector<double> levels) const;
  uint64_t tokens() const { return tokens_; }
  void add_tokens(int64_t m) { tokens_ += static_cast<uint64_t>(m); }

 private:
  int64_t n_layer_;
  std::array<std::vector<MagnitudeHistogram>, kNumSites> h_;
  uint64_t tokens_ = 0;
};

// The attention projections, dense (DenseProj), recording attn_in (h) and attn_out (the
// attention output) of every token. Runs on one host-addressable or mappable device.
class CalibratingProj final : public model::ProjStep {
 public:
  CalibratingProj(const model::HParams& hp, backend::Device& dev, Calibrator& cal);
  void qkv(int64_t il, backend::Ops& ops, const model::AttnWeights& w,
           const model::QkvIo& io) override;
  void out(int64_t il, backend::Ops& ops, const model::AttnWeights& w, const float* A, int64_t m,
           float* Y) override;

 private:
  const model::HParams& hp_;
  backend::Device& dev_;
  Calibrator& cal_;
  model::DenseProj dense_;
};

// The dense gated FFN, recording ffn_in (x) and ffn_gate (act(gate · x)) of every token.
class CalibratingFfn final : public model::FfnStep {
 public:
  static Result<std::unique_ptr<CalibratingFfn>> create(const model::Model& model,
                                                        const model::ModelWeights& weights,
                                                        backend::Device& dev, int64_t max_tokens,
                                                        Calibrator& cal);
  void run(int64_t il, const model::FfnInput& in, float* out) override;

 private:
  CalibratingFfn(const model::Model& model, const model::ModelWeights& weights,
                 backend::Device& dev, Calibrator& cal);
  const model::Model& model_;
  const model::ModelWeights& w_;
  backend::Device& dev_;
  Calibrator& cal_;
  backend::Buffer g_, u_;  // f32 [max_tokens, n_ff]
  std::vector<float> act_;  // host [max_tokens * n_ff]: act(gate)
  std::vector<int32_t> all_inputs_, all_neurons_;
};

// act(x) on the host, as the kernels define it (GELU: the tanh approximation).
float host_activation(backend::Activation act, float x);

}  // namespace pi::sparse
