// The placement planner: what lives on the device under a byte budget so that the bytes the
// CPU reads per generated token are fewest. Pure data in, a plain PlacementPlan out; the
// executor consumes the plan and never re-derives it.
//
// The problem (all sizes in bytes):
//   - each layer has a dense block (attention weights, the layer's KV cache, predictor and
//     norms; for a dense GGUF file also the whole FFN) that lives on the device or on the CPU
//     as a whole; on the CPU it costs dense_read_bytes per token;
//   - each FFN neuron of a `split` layer (its gate, up and down_t rows move together) lives on
//     the device or on the CPU; on the CPU it costs neuron_bytes * freq per token (it is read
//     only when it fires);
//   - the output head lives on the device or on the CPU (head_bytes per token there);
//   - the device holds the chosen dense blocks, the head, the hot neuron rows of each layer
//     padded up to a multiple of `granularity` rows (the kernels' tile), and the per-step
//     buffers each kind of work needs (the scratch_* fields); all of it <= budget.
// solve_placement() is exact over every choice of neuron sets, with the dense blocks on the
// device forming a prefix of the layers (layers 0..P-1, as llama.cpp -ngl and the original
// offload them) and the head on or off. When every layer's dense block has the same size and
// read cost (as in every published model) a prefix is no restriction: any P layers are as good
// as the first P, so the plan is optimal over all placements. Method: for each of the
// 2 (n_layer + 1) dense choices, the remaining budget buys the K most valuable neuron groups
// (a layer's neurons sorted by frequency, cut into groups of `granularity`; equal-cost groups
// make top-K exact). Layers whose neuron rows differ in size form cost classes: two classes
// are solved exactly by enumeration, more greedily by value per byte (plan.exact = false).
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"

namespace pi::sparse {

struct LayerCost {
  uint64_t dense_bytes = 0;       // device bytes of the layer's dense block
  uint64_t dense_read_bytes = 0;  // CPU bytes read per token while it stays on the CPU
  uint64_t cpu_read_bytes = 0;    // CPU bytes read per token wherever the rest goes (an FFN
                                  // kept on the CPU: --cpu-moe, -ot)
  bool split = true;              // false: no neuron split (dense GGUF: FFN in the dense block)
  uint64_t neuron_bytes = 0;      // one neuron's gate + up + down_t rows (split layers)
  std::vector<float> freq;        // [n_ff] firing frequency per token in [0, 1] (split layers)
};

struct PlacementProblem {
  std::vector<LayerCost> layers;
  uint64_t head_bytes = 0;     // output head and output norm: device bytes = bytes per token
  // Per-step device buffers (and other fixed costs), counted once each when the plan needs
  // them: scratch_bytes when anything is placed; scratch_lane_bytes when a dense block or the
  // head is (the device's residual stream); the others when any dense block, the head, or any
  // neuron is on the device (the hybrid executor's buffers for each kind of work).
  uint64_t scratch_bytes = 0;
  uint64_t scratch_lane_bytes = 0;
  uint64_t scratch_dense_bytes = 0;
  uint64_t scratch_head_bytes = 0;
  uint64_t scratch_neuron_bytes = 0;
  uint64_t budget = 0;         // device bytes available
  int64_t granularity = 32;    // device neuron rows are allocated in multiples of this (>= 1)
  bool allow_neurons = true;   // false (--disable-gpu-index): every FFN neuron stays on the CPU
  bool allow_dense = true;     // false: no dense block on the device (it cannot run their types)
  bool allow_head = true;      // false: the head stays on the CPU
};

struct LayerPlan {
  bool dense_on_device = false;
  std::vector<int32_t> device_neurons;  // ascending neuron ids on the device
  uint64_t device_bytes = 0;            // dense block (if on device) + padded neuron rows
  double mass_total = 0;                // sum of the layer's frequencies
  double mass_device = 0;               // sum over device_neurons
  double cpu_bytes_per_token = 0;       // expected bytes this layer reads on the CPU per token
};

struct PlacementPlan {
  std::vector<LayerPlan> layers;
  int64_t n_dense_layers = 0;  // layers 0 .. n-1 have their dense block on the device
  bool head_on_device = false;
  int64_t granularity = 0;
  uint64_t budget = 0;
  uint64_t scratch_bytes = 0;  // the problem's scratch_* the plan needs, summed
  uint64_t device_bytes = 0;   // everything placed, scratch included; <= budget
  double cpu_bytes_per_token = 0;
  double cpu_bytes_all_cpu = 0;  // the same with nothing on the device
  bool exact = true;             // false only for 3+ neuron cost classes (see above)

  int64_t n_device_neurons() const;
  // Activation mass the device serves: sum of device frequencies / sum of all (0 when none).
  double mass_covered() const;
};

// Checks sizes, frequencies (finite, in [0, 1]), granularity and that the total bytes do not
// overflow; fails with a message naming the layer or field.
Status validate_problem(const PlacementProblem& p);

Result<PlacementPlan> solve_placement(const PlacementProblem& p);

// The plan of a given assignment (dense prefix, head, per-layer neuron ids in any order,
// duplicates rejected): bytes, mass and per-token cost computed as the solver does. Fails
// when an id is out of range, a non-split layer lists neurons, or the plan exceeds the budget.
Result<PlacementPlan> evaluate_placement(const PlacementProblem& p, int64_t n_dense_layers,
                                         bool head_on_device,
                                         const std::vector<std::vector<int32_t>>& neurons);

// --vram-budget in GiB -> bytes. Fails for NaN, negative, infinite and absurd (> 1 PiB)
// values, naming the flag value.
Result<uint64_t> budget_from_gib(double gib);

}  // namespace pi::sparse
