// The options of a runtime::Context (context.h); their own header so that the hybrid planner
// (hybrid_plan.h) can read them without the Context.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "backend/registry.h"
#include "sparse/threshold_steps.h"
#include "tensor/dtype.h"

namespace pi::sparse {
class Calibrator;
}  // namespace pi::sparse

namespace pi::runtime {

// The types the KV cache stores keys and values in (kv_cache.h).
struct KvTypes {
  DType k = DType::F16;
  DType v = DType::F16;
};

struct ContextOptions {
  int64_t n_ctx = 0;      // KV cells; 0: the model's training context, at most 4096
  int64_t n_batch = 512;  // most tokens per forward call (clamped to n_ctx)
  int n_threads = 1;
  // The device (backend/registry.h): a host device (cpu, ref) runs everything, with every
  // buffer counted against its budget before the first allocation; any other (sim, cuda)
  // runs what the hybrid plan puts on it and the CPU the rest (see below). Its thread count
  // is n_threads (the CPU lane's too).
  backend::DeviceOptions device;
  bool all_logits = false;  // keep logits of every token (tests, perplexity)
  // PowerInfer (PWRI) files run the sparse FFN (src/sparse) unless `dense` is set; a PWRI file
  // without predictors runs dense (with a warning). Ordinary GGUF files always run dense, except
  // that ReGLU experts (smallthinker) skip the rows of their zero gates unless `dense` is set.
  bool dense = false;
  // Predictor threshold; unset: sparse_threshold_env (LLAMA_SPARSE_PRED_THRESHOLD as the front
  // end read it) when not empty, else powerinfer.sparse_threshold,
  // else 0 (sparse::resolve_threshold).
  std::optional<float> sparse_threshold;
  std::string sparse_threshold_env;
  bool check_predictor = false;  // sparse only: also run the dense FFN and measure the predictor
  // Measuring runs (powerinfer profile and calibrate, on a host device): `profile` counts how
  // often each FFN neuron fires (Context::profiler(); a mixture of experts runs its own step,
  // which traces routes and counts expert neurons on request); `calibrator` (it must outlive
  // the context) records the activations of every FFN and projection site into it. Both run
  // the dense computation, every neuron computed.
  bool profile = false;
  sparse::Calibrator* calibrator = nullptr;
  // Files calibrated by `powerinfer calibrate` run with activation thresholds unless `dense`
  // is set (sparse/threshold_steps.h: sparsity, sites).
  sparse::ThresholdOptions thresholds;
  int n_seq_max = 1;             // sequences the cache holds (1..64): ids 0 .. n_seq_max-1
  // Sliding-window layers (gpt-oss, SmallThinker) keep only the cells their window can still
  // read: n_seq_max * (window - 1) + n_batch of them, not n_ctx (KvCache, "window cells").
  // swa_full keeps the whole context there too (llama.cpp's --swa-full): more memory, and a
  // sequence may then be cut back to any position (a bounded one only to where its window is
  // still held).
  bool swa_full = false;
  // The types of the cached keys and values (llama.cpp's -ctk/-ctv): F16, Q8_0 or Q4_0, the
  // block types for models whose head_dim is a multiple of 32 (check_kv_types).
  KvTypes kv_types;

  // ---- Hybrid execution: a device that is not the host (sim, cuda) runs what fits ----
  // Device bytes the context may use there (weights, KV cache, per-step buffers, the runtime
  // margin); unset: the device's free memory. Every byte is counted before allocation
  // (runtime/ledger.h); the plan decides what goes there (runtime/hybrid_plan.h).
  std::optional<uint64_t> vram_budget;
  // Activation statistics for the hot/cold split; empty: <model>.activations.gguf if present.
  std::string stats_path;
  // Dense placements (GGUF files, --dense): this many whole layers on the device (llama.cpp
  // -ngl; more than n_layer also puts the head there); -1: the planner decides.
  int n_gpu_layers = -1;
  // Mixtures of experts: the router and experts of the first n_cpu_moe layers stay on the CPU
  // even in layers placed on the device (llama.cpp's --n-cpu-moe; --cpu-moe: INT32_MAX).
  int n_cpu_moe = 0;
  // Mixtures of experts placed by --vram-budget: per layer (not kept on the CPU), this many
  // device slots of the budget hold recently used experts (an LRU cache: an expert the CPU
  // ran is uploaded for the steps after it), beside the static set the planner chooses.
  int expert_cache = 0;
  // Mixtures of experts larger than memory, on the CPU (--moe-ram): the weights take this many
  // bytes of RAM, those besides the experts resident and the rest an LRU cache of experts read
  // from the file on demand (model/expert_stream.h); 0: every weight in memory.
  uint64_t moe_ram = 0;
  // llama.cpp's -ot/--override-tensor, "REGEX=TARGET" each (a comma-separated list in one
  // string also works); the first pattern that finds a tensor's name decides: a layer any of
  // whose FFN matrices go to CPU keeps its whole FFN group on the CPU; another target is the
  // device (placed by -ngl / the budget); CPU for a non-FFN matrix is an error.
  std::vector<std::string> tensor_overrides;
  std::string gpu_index_path;     // empty: <model>.generated.gpuidx
  bool reset_gpu_index = false;   // solve again even when the index matches
  bool disable_gpu_index = false; // every FFN neuron on the CPU; no index read or written
  int64_t granularity = 32;       // device neuron rows are planned in multiples of this
};

}  // namespace pi::runtime
