// The threshold steps a session over a calibrated file runs (act_sparsity.h): the FFN step
// and the attention projections' step, built from the file's calibration at the sparsity and
// sites asked for. The runtime installs them into the forward pass.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "backend/device.h"
#include "core/error.h"
#include "model/model.h"
#include "sparse/act_sparsity.h"
#include "sparse/threshold_ffn.h"
#include "sparse/threshold_proj.h"

namespace pi::sparse {

struct ThresholdOptions {
  std::optional<double> sparsity;    // unset: the file's target
  std::optional<std::string> sites;  // comma-separated site names; unset: every calibrated site
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

// Device bytes make_threshold_steps() allocates.
uint64_t threshold_scratch_bytes(const model::HParams& hp, int64_t max_tokens);

}  // namespace pi::sparse
