// Writes a synthetic model file (and optionally its activation statistics) by streaming:
// rows are generated and quantized in chunks by a thread pool and appended to the file, so
// memory stays O(chunk) whatever the model size, and the bytes do not depend on the thread
// count.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "synth_spec.h"

namespace pi::workflows::synth {

struct Report {
  int n_tensors = 0;
  uint64_t file_bytes = 0;
  double alpha = 0;              // solved power-law exponent
  double expected_activity = 0;  // mean of the written per-neuron probabilities
  int n_activation_files = 0;
};

// With an activation directory: DIR/activation_N.npy per layer and DIR/<kStatsFileName>, the
// same frequencies in the statistics file `powerinfer plan --stats` reads, with the model's
// fingerprint.
inline constexpr const char* kStatsFileName = "activation_stats.gguf";

Result<Report> write_model(const Spec& s, int threads, bool progress);

}  // namespace pi::workflows::synth
