// Training-free activation sparsity for ordinary (SiLU) models, calibrated on a text
// (docs/ACT_SPARSITY.md): the library's `powerinfer calibrate`.
//
// The text runs densely through the model in chunks of n_ctx tokens (each from an empty cache,
// BOS in front when the vocabulary adds one); per layer and site the magnitudes of the entries
// are histogrammed and the thresholds that zero a share 0, 0.05, ..., 0.90 (and the target) of
// them are written, with the projections a site thresholds stored transposed so that a skipped
// input channel skips one contiguous row. Then, unless `alloc` is off, a greedy search chooses
// the level of each site for model-wide sparsities up to `alloc_max`: from every site at 0 it
// raises, one step at a time, the site whose next step costs the least accuracy (mean KL
// divergence of the next-token distributions from the file run with no threshold) per byte
// left unread, and the file is rewritten with that path. Cost: about (sites) x (steps)
// evaluations of `alloc_tokens` tokens.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "powerinfer/error.h"

namespace pi {

struct CalibrateParams {
  std::string model;      // a GGUF file with llama-style layers (q/k/v/output, gate/up/down)
  std::string output;     // the calibrated file written (via OUTPUT.part)
  std::string text_name;  // the text's name recorded in the file's metadata
  // The file's default level: the model-wide sparsity (share of the layers' weight bytes left
  // unread) the allocation runs at; with alloc off, the share of entries zeroed at each site.
  double sparsity = 0.4;
  std::string sites = "attn_in,attn_out,ffn_in,ffn_gate";  // comma-separated
  int64_t n_ctx = 512;     // tokens per chunk (>= 2)
  int64_t n_batch = 512;   // tokens per forward pass (>= 1)
  int n_threads = 0;       // 0: every hardware thread
  int64_t max_tokens = 0;  // calibrate on at most this many tokens; 0: the whole text
  bool progress = false;   // progress bars on stderr (when it is a terminal)
  bool alloc = true;       // the greedy per-site allocation
  int64_t alloc_tokens = 2048;  // tokens of the text each candidate of the search runs
  double alloc_step = 0.05;     // site level step of the search, in [0.01, 0.5]
  double alloc_max = -1;        // model-wide level the search reaches; < 0: min(0.9, sparsity + 0.2)
};

// One point of the allocation: the model-wide sparsity, each calibrated site's level (every
// layer alike, in the order of CalibrateReport::sites) and the mean KL divergence from no
// threshold, in nats.
struct CalibrateAllocPoint {
  double model_wide = 0;
  std::vector<double> level;
  double kl = 0;
};

struct CalibrateReport {
  uint64_t n_tokens = 0;  // tokens calibrated on
  int n_threads = 0;      // threads used
  std::vector<std::string> sites;  // the calibrated sites, in the file's order
  // Per layer, each site's threshold at the target sparsity.
  std::vector<std::vector<double>> thresholds;
  std::vector<CalibrateAllocPoint> allocation;  // empty without alloc; first point all zero
  int n_transposed = 0;                // matrices stored transposed
  std::vector<std::string> fallbacks;  // transposed tensors written F16 (rows not block-aligned)
  uint64_t file_in = 0, file_out = 0;  // bytes of the source and of the written file
};

// Fails with a one-line message for bad sizes or levels, unknown sites, a text without tokens,
// a model it cannot calibrate (PowerInfer files, mixtures of experts, other layouts, files
// already calibrated or storing projections transposed), or an output that cannot be written.
Result<CalibrateReport> calibrate_model(const CalibrateParams& p, std::string_view text);

}  // namespace pi
