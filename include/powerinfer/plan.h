// What the placement planner puts on the device for a VRAM budget, a context and a batch: per
// layer where attention lives, the hot neurons (or, in a mixture of experts, the most chosen
// experts), the activation mass they carry and the bytes; totals. The library's `powerinfer
// plan`. The plan comes from the GPU index beside the model when that index was solved for
// exactly this request (model, statistics, budget, granularity, context, batch), else it is
// solved and the index written. A PowerInfer file needs activation statistics (`powerinfer
// profile`, `synth --activation-dir`, tools/convert/convert_activations.py); a GGUF file is
// placed in whole layers (llama.cpp's -ngl).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "powerinfer/error.h"

namespace pi {

struct PlanParams {
  std::string model;
  double vram_budget_gib = -1;  // device memory to use, GiB (required)
  // Activation statistics; empty: MODEL.activations.gguf, else the original's activation/
  // folder beside the model, as a session finds them.
  std::string stats;
  int64_t n_ctx = 0;        // context the KV cache is sized for; 0: the model's, at most 4096
  int64_t n_batch = 512;    // tokens per step: sizes the scratch
  int64_t granularity = 32;  // device neuron rows are allocated in multiples of this
  std::string cache_type_k = "f16", cache_type_v = "f16";  // KV types counted: f16, q8_0, q4_0
  std::string index;           // the index file; empty: MODEL.generated.gpuidx
  bool reset_index = false;    // solve again even if the index matches
  bool disable_index = false;  // no FFN split: every neuron on the CPU; no index
  bool write_index = true;     // write the index after solving
  // Mixtures of experts, as llama.cpp's flags: every layer's (cpu_moe) or the first n_cpu_moe
  // layers' routers and experts, or the layers whose FFN matrices an override (-ot
  // REGEX=CPU) matches, stay on the CPU.
  bool cpu_moe = false;
  int64_t n_cpu_moe = 0;
  std::vector<std::string> override_tensor;
  int sweep = 0;  // > 0: the plan at this many budgets from 0 to everything (PlanReport::sweep)
};

struct PlanLayer {
  bool attn_on_device = false;
  bool split = false;        // its FFN is split between the devices (hot neurons or experts)
  int64_t device_units = 0;  // hot neurons (experts) on the device
  double mass_covered = 0;   // share of the layer's activation mass (routed tokens) they carry
  uint64_t device_bytes = 0;
  double cpu_bytes_per_token = 0;
};

struct PlanPoint {
  uint64_t budget_bytes = 0, device_bytes = 0;
  double mass_covered = 0;
  int64_t n_dense_layers = 0;
  double cpu_bytes_per_token = 0;
};

struct PlanReport {
  // The model: its architecture, kind, and the units placed (n_ff neurons or n_expert experts).
  std::string arch;
  bool powerinfer = false, experts = false;
  int64_t n_layer = 0, n_units = 0;
  std::string stats;  // the statistics used; empty: none
  // The request as resolved.
  uint64_t budget = 0;
  int64_t granularity = 0, n_ctx = 0, n_batch = 0;
  std::string kv_type_k, kv_type_v;
  // The index: its path, whether the plan came from it, and else why it was solved.
  std::string index_path;
  bool loaded = false;
  std::string reason;
  bool exact = true;  // false: greedy (3+ neuron row sizes)
  std::vector<PlanLayer> layers;
  int64_t n_dense_layers = 0;  // layers whose attention is on the device
  bool head_on_device = false;
  uint64_t scratch_bytes = 0, device_bytes = 0;
  int64_t device_units = 0;
  double mass_covered = 0;
  double cpu_bytes_per_token = 0, cpu_bytes_all_cpu = 0;
  std::vector<PlanPoint> sweep;  // PlanParams::sweep points, budgets ascending
};

// Fails with a one-line message for a bad budget, size, KV type or override, a model or
// statistics file that does not load or fit, or a PowerInfer file without statistics.
Result<PlanReport> plan_placement(const PlanParams& p);

}  // namespace pi
