// The threshold steps a session over a calibrated file runs (act_sparsity.h): the FFN step
// and the attention projections' step, built from the file's calibration at the sparsity and
// sites asked for. The runtime installs them into the forward pass.
#pragma once

#include <cstdint>
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/device.h"
#include "core/error.h"
#include "model/model.h"
#include "sparse/act_sparsity.h"
#include "sparse/threshold_ffn.h"
#include "sparse/threshold_proj.h"

namespace pi::sparse {

struct ThresholdOptions {
  std::optional<double> sparsity;    // unset: the file's target (model-wide with an allocation)
  std::optional<std::string> sites;  // comma-separated site names; unset: every calibrated site
  std::optional<std::string> site_levels;  // "ffn_in=0.3,attn_out=0.6": levels of single sites
  bool uniform = false;                    // ignore the file's allocation
};

struct ThresholdSteps {
  SiteThresholds thresholds;
  std::unique_ptr<ThresholdFfn> ffn;
  std::unique_ptr<ThresholdProj> proj;
};

// Reads the calibration of `model`'s file (it must have one: has_act_sparsity), resolves the
// thresholds and builds both steps on `dev` for batches of max_tokens. Errors name the file
// and key, or the flag (--sparsity, --sparsity-sites) whose value does not fit the file.
Result<ThresholdSteps> make_threshold_steps(const model::Model& model,
                                            const model::ModelWeights& weights,
                                            backend::Device& dev, int64_t max_tokens,
                                            const ThresholdOptions& o);

// Per site, the bytes of one layer's projections whose reads it cuts (attn_in: q, k, v;
// attn_out: output; ffn_in: gate; ffn_gate: up and down), and all projections of one layer:
// sums over the layers of `model`, in either layout (original or transposed).
struct SiteBytes {
  std::array<std::vector<uint64_t>, kNumSites> per_layer;  // [site][layer]
  uint64_t total = 0;                                       // every projection of every layer
  // Per site, its share of `total` (the weights of model_wide()).
  std::array<double, kNumSites> shares() const;
};
SiteBytes site_bytes(const model::Model& model);

// Device bytes make_threshold_steps() allocates.
uint64_t threshold_scratch_bytes(const model::HParams& hp, int64_t max_tokens);

}  // namespace pi::sparse
