// Neuron firing probabilities for `powerinfer synth`: a clipped power law over neuron rank,
// solved so that the mean is the requested activity and the hottest fraction of neurons
// carries the requested share of activations; and the .npy files that record them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"

namespace pi::workflows::synth {

struct PowerLaw {
  // p[k] = min(p_max, scale * ((k + 0.5) / n)^(-alpha)), k = 0 (hottest) .. n-1: descending.
  std::vector<double> p;
  double alpha = 0;
  double scale = 0;
};

// Solves for alpha and scale: mean(p) = activity and sum(top round(hot_fraction*n)) /
// sum(p) = hot_share, both to ~1e-9. Requires 0 < activity < p_max and
// hot_fraction <= hot_share < the largest share reachable under the clip.
Result<PowerLaw> solve_power_law(int64_t n, double activity, double hot_fraction, double hot_share,
                                 double p_max);

// Phi^{-1}(p): the standard normal quantile, for 0 < p < 1 (about 1e-15 relative error).
double normal_quantile(double p);

// Writes a NumPy .npy (format 1.0) file holding a 1-D little-endian float32 array.
Status write_npy_f32(const std::string& path, std::span<const float> values);

}  // namespace pi::workflows::synth
