// Flags carried over from llama.cpp that every model-loading subcommand (run, batched,
// batched-bench, bench, perplexity) accepts, and the spellings main() rewrites or refuses
// before CLI11 parses (CLI11 reads `-ngl` as `-n gl`, `-fa` as `-f a`, `-hf` as `-h f`).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "powerinfer/engine.h"

namespace pi::cli {

struct ModelFlags {
  // -ngl/--n-gpu-layers: whole layers on the device for dense placements (-1: all, and the
  // head); PowerInfer files run sparse are placed by --vram-budget instead. Meaningful with a
  // device that is not the host (--device sim|cuda); warned about otherwise.
  int64_t n_gpu_layers = 0;
  bool ngl_given = false;
  // --cpu-moe / --n-cpu-moe N: mixture-of-experts layers whose router and experts stay on the
  // CPU while the rest of the layer may go to the device (all of them / the first N).
  bool cpu_moe = false;
  int64_t n_cpu_moe = 0;
  int64_t expert_cache = 0;  // --expert-cache N
  std::string moe_ram;       // --moe-ram GiB: experts read from the file into a cache (CPU)
  // -ot/--override-tensor REGEX=CPU[,...] (repeatable): layers whose FFN matrices match keep
  // their FFN on the CPU.
  std::vector<std::string> override_tensor;
  // Hybrid execution (--device sim|cuda; SessionOptions): --vram-budget GiB (bench: a
  // comma-separated list, one row each), --stats FILE, --gpu-index FILE, --reset-gpu-index,
  // --disable-gpu-index.
  std::string vram_budget;
  std::string stats;
  std::string gpu_index;
  bool reset_gpu_index = false;
  bool disable_gpu_index = false;
  std::string flash_attn;            // -fa/--flash-attn on|off|auto: accepted, no effect
  std::string cache_type_k = "f16";  // -ctk/--cache-type-k: f16, q8_0, q4_0
  std::string cache_type_v = "f16";  // -ctv/--cache-type-v: f16, q8_0, q4_0
  bool mlock = false;                // --mlock: lock the model in RAM
  bool check_tensors = false;        // --check-tensors: scan every weight for NaN/Inf at load
  bool repack = true;                // --no-repack: transposed weights as in the file on the CPU
  bool swa_full = false;             // --swa-full: sliding-window layers keep the whole context
};

// Registers -ngl/--n-gpu-layers, --flash-attn, --cache-type-k, --cache-type-v, --mlock,
// --check-tensors and --no-repack on `sub` (main() maps -fa, -ctk, -ctv onto the long names).
void add_model_flags(CLI::App* sub, ModelFlags& f);

// Refuses unsupported values (cache types other than f16, q8_0 and q4_0, -ngl below -1, -fa values other
// than on/off/auto) and logs the notes for accepted no-ops (-ngl without a GPU, -fa).
Status check_model_flags(const ModelFlags& f);

LoadOptions load_options(const ModelFlags& f, ModelLoad load);

// --mmap and --no-mmap (one at most): how the model file gets into memory. Neither: `load`
// stays ModelLoad::Auto (read into huge pages when the file and 1 GiB fit in the memory
// available, else mapped).
void add_load_flags(CLI::App* sub, ModelLoad& load);

// --dense: what it turns off, said once for every command that has it.
inline constexpr const char* kDenseHelp =
    "Compute every FFN neuron: PowerInfer files all of them (still ReLU) instead of the predicted ones, "
    "ReGLU experts (smallthinker) every row of up and down, calibrated files without activation thresholds";

// --vram-budget GiB as bytes (one value); unset when the flag is absent.
Result<std::optional<uint64_t>> vram_budget_bytes(const std::string& gib);
// --moe-ram GiB as bytes; 0 when the flag is absent.
Result<uint64_t> moe_ram_bytes(const std::string& gib);

// The hybrid flags into `so` (its device already set): the budget, statistics, index and -ngl;
// warns when they cannot apply (a host device). Also --no-repack and the KV cache types
// (-ctk/-ctv), which apply everywhere.
Status apply_hybrid_flags(const ModelFlags& f, SessionOptions& so);

// Rewrites llama.cpp's one-dash spellings to the names CLI11 knows (-ngl, -fa [on|off|auto],
// -ctk, -ctv, -np, -npp, -ntg, -npl, -pps) and removes --log-disable (setting *log_disable).
// An error names a llama.cpp flag this program does not implement (e.g. -hf) or another
// one-dash word CLI11 would split into letters.
Result<std::vector<std::string>> normalize_args(const std::vector<std::string>& args,
                                                bool* log_disable);

}  // namespace pi::cli
