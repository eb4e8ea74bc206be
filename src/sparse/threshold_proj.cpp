#include "sparse/threshold_proj.h"

#include <algorithm>
#include <chrono>

#include "sparse/magnitude_mask.h"

namespace pi::sparse {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
int64_t width(const model::HParams& hp) { return std::max(hp.n_embd, hp.n_embd_q()); }

}  // namespace

ThresholdProj::ThresholdProj(const model::Model& model, backend::Device& dev,
                             const SiteThresholds& thr)
    : hp_(model.hparams()), dev_(dev), thr_(thr), dense_(model.hparams()) {}

uint64_t ThresholdProj::scratch_bytes(const model::HParams& hp, int64_t max_tokens) {
  return static_cast<uint64_t>(std::max<int64_t>(max_tokens, 1) * width(hp)) * sizeof(float);
}

Result<std::unique_ptr<ThresholdProj>> ThresholdProj::create(const model::Model& model,
                                                             backend::Device& dev,
                                                             int64_t max_tokens,
                                                             const SiteThresholds& thr) {
  const model::HParams& hp = model.hparams();
  if (hp.arch == model::Arch::Falcon)
    return err("%s: input thresholding needs separate q/k/v projections (llama-style layers)",
               model.file().path().c_str());
  std::unique_ptr<ThresholdProj> p(new ThresholdProj(model, dev, thr));
  max_tokens = std::max<int64_t>(max_tokens, 1);
  auto xs = dev.alloc(scratch_bytes(hp, max_tokens), "threshold projection scratch");
  if (!xs.ok()) return xs.error();
  p->xs_ = std::move(*xs);
  p->lists_.idx.resize(static_cast<size_t>(max_tokens * width(hp)));
  p->lists_.offsets.assign(static_cast<size_t>(max_tokens + 1), 0);
  for (Site s : {Site::AttnIn, Site::AttnOut})
    if (thr.on(s)) p->stats_[static_cast<size_t>(s)].resize(static_cast<size_t>(hp.n_layer));
  return p;
}

void ThresholdProj::reset_stats() {
  for (auto& v : stats_) std::fill(v.begin(), v.end(), SiteLayerStats{});
}

float* ThresholdProj::mask(const float* X, int64_t m, int64_t n, float t, SiteLayerStats& st) {
  const size_t bytes = static_cast<size_t>(m * n) * sizeof(float);
  const auto* hx = static_cast<const float*>(dev_.map(X, bytes));
  auto* hy = static_cast<float*>(dev_.map(xs_.data(), bytes));
  st.kept += mask_small(hx, m, n, t, hy, lists_);
  st.entries += m * n;
  st.tokens += m;
  return xs_.as<float>();
}

void ThresholdProj::qkv(int64_t il, backend::Ops& ops, const model::AttnWeights& w,
                        const model::QkvIo& io) {
  if (!thr_.on(Site::AttnIn)) return dense_.qkv(il, ops, w, io);
  SiteLayerStats& st = stats_[static_cast<size_t>(Site::AttnIn)][static_cast<size_t>(il)];
  const auto t0 = Clock::now();
  const float* xs = mask(io.h, io.m, hp_.n_embd, thr_.at(Site::AttnIn, il), st);
  st.bytes += masked_product(ops, w.q, w.q_t, xs, lists_, io.q);
  st.bytes += masked_product(ops, w.k, w.k_t, xs, lists_, io.k);
  st.bytes += masked_product(ops, w.v, w.v_t, xs, lists_, io.v);
  st.seconds += seconds_since(t0);
}

void ThresholdProj::out(int64_t il, backend::Ops& ops, const model::AttnWeights& w,
                        const float* A, int64_t m, float* Y) {
  if (!thr_.on(Site::AttnOut)) return dense_.out(il, ops, w, A, m, Y);
  SiteLayerStats& st = stats_[static_cast<size_t>(Site::AttnOut)][static_cast<size_t>(il)];
  const auto t0 = Clock::now();
  const float* xs = mask(A, m, hp_.n_embd_q(), thr_.at(Site::AttnOut, il), st);
  st.bytes += masked_product(ops, w.out, w.out_t, xs, lists_, Y);
  st.seconds += seconds_since(t0);
}

}  // namespace pi::sparse
