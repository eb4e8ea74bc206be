#include "sparse/threshold_steps.h"

namespace pi::sparse {

Result<ThresholdSteps> make_threshold_steps(const model::Model& model,
                                            const model::ModelWeights& weights,
                                            backend::Device& dev, int64_t max_tokens,
                                            const ThresholdOptions& o) {
  // The steps filter their inputs on the host, in the device's memory.
  if (!dev.host_addressable())
    return err("activation thresholds run on a host device (cpu, ref), not %s", dev.name().c_str());
  auto cal = read_act_sparsity(model.file(), model.hparams().n_layer);
  if (!cal.ok()) return cal.error();
  SiteSet sites = cal->sites;
  if (o.sites) {
    auto s = parse_sites(*o.sites, "--sparsity-sites");
    if (!s.ok()) return s.error();
    sites = *s;
  }
  LevelRequest req;
  req.sparsity = o.sparsity;
  req.uniform = o.uniform;
  if (o.site_levels) PI_TRY(parse_level_request(*o.site_levels, "--sparsity", req));
  auto thr = resolve_thresholds(*cal, req, sites, "--sparsity");
  if (!thr.ok()) return thr.error();
  ThresholdSteps steps;
  steps.thresholds = std::move(*thr);
  auto ffn = ThresholdFfn::create(model, weights, dev, max_tokens, steps.thresholds);
  if (!ffn.ok()) return ffn.error();
  steps.ffn = std::move(*ffn);
  auto proj = ThresholdProj::create(model, dev, max_tokens, steps.thresholds);
  if (!proj.ok()) return proj.error();
  steps.proj = std::move(*proj);
  return steps;
}

std::array<double, kNumSites> SiteBytes::shares() const {
  std::array<double, kNumSites> w{};
  for (size_t i = 0; i < kNumSites; ++i) {
    uint64_t b = 0;
    for (uint64_t x : per_layer[i]) b += x;
    w[i] = total > 0 ? static_cast<double>(b) / static_cast<double>(total) : 0.0;
  }
  return w;
}

SiteBytes site_bytes(const model::Model& model) {
  SiteBytes r;
  for (const model::LayerWeights& L : model.weights().layers) {
    for (Site s : kAllSites) {
      const uint64_t b = model::site_matrix_bytes(L, s);
      r.per_layer[static_cast<size_t>(s)].push_back(b);
      r.total += b;
    }
  }
  return r;
}

uint64_t threshold_scratch_bytes(const model::HParams& hp, int64_t max_tokens) {
  return ThresholdFfn::scratch_bytes(hp, max_tokens) + ThresholdProj::scratch_bytes(hp, max_tokens);
}

}  // namespace pi::sparse
