// The greedy per-site allocation `powerinfer calibrate` adds to a calibrated file
// (docs/ACT_SPARSITY.md, "Allocation"). From every site at level 0 it raises, one step at a
// time, the site whose next step costs the least accuracy per byte saved: each candidate (one
// site one step higher) runs the allocation text and is scored by the mean KL divergence of
// its next-token distributions from those of the file run with no threshold, divided by the
// model-wide sparsity the step adds (the site's share of the layers' projection bytes times
// the step). The path from 0 to the highest model-wide level asked for is the allocation: a
// run at a model-wide sparsity between two of its points interpolates between them.
// Cost: about (calibrated sites) x (steps) evaluations of the text.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "sparse/act_sparsity.h"

namespace pi::workflows {

struct AllocOptions {
  int64_t n_ctx = 512;      // tokens per chunk, each from an empty cache
  int n_threads = 1;
  double step = 0.05;       // site level step
  double max_level = 0.6;   // stop once the model-wide level reaches this
  bool progress = true;
};

struct AllocPoint {
  double model_wide = 0;                         // sum of share[s] * level[s]
  std::array<double, sparse::kNumSites> level{};  // per site (every layer alike)
  double kl = 0;                                 // mean KL divergence from no threshold, nats
};

// Runs the greedy search on the calibrated file at `path` (its thresholds for the sites in
// `sites`, no allocation) over `chunks` (each a full chunk of tokens, BOS already in place);
// `share` is each site's share of the projection bytes (SiteBytes::shares()). Returns the path,
// first point all zero.
Result<std::vector<AllocPoint>> allocate_greedy(const std::string& path,
                                                const std::vector<std::vector<int32_t>>& chunks,
                                                sparse::SiteSet sites, double last_level,
                                                const std::array<double, sparse::kNumSites>& share,
                                                const AllocOptions& o);

// Stores `path` as c's allocation (same level in every layer).
void set_allocation(const std::vector<AllocPoint>& path, sparse::ActSparsityCalibration& c);

}  // namespace pi::workflows
