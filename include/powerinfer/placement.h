// Hybrid execution in the public API: what a session put on its device (a GPU, or the
// simulated one of the tests) and what it left on the CPU, the exact account of the device's
// memory, and the traffic between them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pi {

struct DeviceMemoryLine {
  std::string what;     // "attention weights", "KV cache", "hot neuron rows", ...
  int64_t count = 0;    // allocations
  uint64_t bytes = 0;   // device bytes they take
};

// One layer's share per generated token, as the plan expects it (weight bytes; the KV cache is
// apart because what it costs depends on the context in use).
struct LayerPlacement {
  bool attn_on_device = false;  // attention, norms, predictor, KV cache of the layer
  double dense_bytes = 0;       // attention + norms + predictor weights read per token
  double kv_bytes_per_cell = 0; // f16 K and V of one cached position of this layer
  double hot_bytes = 0;         // expected FFN rows read on the device per token
  double cold_bytes = 0;        // expected FFN rows (or experts) read on the CPU per token
  int64_t hot_neurons = 0;      // or experts
};

struct PlacementInfo {
  bool hybrid = false;  // false: everything runs on one device (the fields below are empty)
  std::string device;   // "sim", "cuda"
  std::string origin;   // how the plan was made: "loaded from PATH", "solved (...)", "-ngl N"
  std::string stats;    // activation statistics used; empty: none
  uint64_t budget = 0;  // device bytes the session may use
  uint64_t device_bytes = 0;  // what the ledger counts (allocations + runtime margin), <= budget
  int64_t n_layer = 0;
  int64_t layers_on_device = 0;  // layers whose attention (and KV cache) live on the device
  bool head_on_device = false;
  // A mixture of experts placed expert by expert: hot_neurons counts the experts on the device,
  // n_neurons all of them (n_layer x n_expert), mass_covered the share of routed tokens.
  bool experts = false;
  int64_t hot_neurons = 0;       // FFN neurons whose rows live on the device
  int64_t n_neurons = 0;         // FFN neurons of the model (n_layer x n_ff)
  double mass_covered = 0;       // share of the measured activations the hot neurons carry
  // Experts: measured since the session began, the (token, expert) pairs the device computed
  // and those the CPU did, and what the expert cache uploaded (--expert-cache).
  int64_t expert_pairs_device = 0, expert_pairs_cpu = 0;
  int64_t expert_uploads = 0;
  uint64_t expert_upload_bytes = 0;
  // Expected weight and KV bytes read per generated token (the plan's model): on the CPU and
  // on the device.
  double cpu_bytes_per_token = 0;
  double device_bytes_per_token = 0;
  double head_bytes = 0;                 // output head read per token (where head_on_device)
  std::vector<LayerPlacement> layers;
  std::vector<DeviceMemoryLine> memory;  // the ledger, line by line
  // Host <-> device copies since the session was created.
  uint64_t bytes_to_device = 0, bytes_from_device = 0;
  uint64_t copies_to_device = 0, copies_from_device = 0;
  uint64_t device_ops = 0;  // ops the device was given (kernel launches)
};

}  // namespace pi
