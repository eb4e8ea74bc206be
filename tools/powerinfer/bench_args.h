// `powerinfer bench`: the options and the checks that turn the flags' text into a test grid.
// Lists are given comma-separated or by repeating the flag (`-t 1,2` == `-t 1 -t 2`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "llama_flags.h"

namespace pi::cli {

enum class BenchMode { Dense, Sparse };
enum class BenchFormat { Markdown, Json, Csv };

// What the command line asked for, as typed (strings), before validation.
struct BenchFlags : ModelFlags {
  std::vector<std::string> models;   // -m, comma lists allowed
  std::vector<std::string> prompts;  // -p
  std::vector<std::string> gens;     // -n
  std::vector<std::string> threads;  // -t
  std::vector<std::string> modes;    // --mode
  bool dense = false;                // --dense
  bool sparse = false;               // --sparse
  int reps = 3;                      // -r
  int64_t n_batch = 512;             // -b
  bool probe_only = false;           // --probe
  std::string output = "md";         // -o
  int64_t probe_mib = 1024;          // --probe-mib
  int probe_passes = 5;              // --probe-passes
  int warmup_gen = 8;                // --warmup-gen
  ModelLoad load = ModelLoad::Auto;  // --mmap, --no-mmap
  std::string device = "cpu";        // --device (sim or cuda: hybrid rows, one per budget)
  std::vector<std::string> sparsities;  // --sparsity (calibrated files)
  std::string sparsity_sites;           // --sparsity-sites
  double scatter_fraction = 0.10;       // --scatter-fraction
};

// The validated grid. Rows are models x modes x threads x tests, in that nesting order; a
// prompt test (n_prompt > 0) or a generation test (n_gen > 0) per list entry, 0s skipped.
struct BenchOptions {
  std::vector<std::string> models;
  std::vector<int64_t> n_prompt;  // prompt tests, in order given, 0s removed
  std::vector<int64_t> n_gen;     // generation tests, in order given, 0s removed
  std::vector<int> threads;
  // Empty: each model's natural mode (sparse for PowerInfer files, dense otherwise). Else the
  // modes to run; sparse runs only for PowerInfer files (an explicit sparse-only request on a
  // dense file is an error found when the files are opened).
  std::vector<BenchMode> modes;
  int reps = 3;
  int64_t n_batch = 512;
  bool probe_only = false;
  BenchFormat format = BenchFormat::Markdown;
  size_t probe_bytes = size_t{1} << 30;
  int probe_passes = 5;
  int warmup_gen = 8;  // generated tokens in a generation test's untimed warm-up run
  ModelLoad load = ModelLoad::Auto;  // --mmap, --no-mmap
  ModelFlags model_flags;  // -ngl, --mlock, --check-tensors, ... (llama_flags.h)
  std::string device = "cpu";
  // --vram-budget list (bytes), one row each; {nullopt}: one row, the device's default.
  std::vector<std::optional<uint64_t>> budgets{std::nullopt};
  // Calibrated files (powerinfer calibrate) in sparse mode: one row per sparsity (empty: the
  // file's target), with these sites (empty: every calibrated site).
  std::vector<double> sparsities;
  std::string sparsity_sites;
  // Share of rows the scattered probe reads (a sparse run's density: 1 - its sparsity).
  double scatter_fraction = 0.10;
};

// Checks every list and value; messages name the flag and the offending item.
Result<BenchOptions> validate_bench_flags(const BenchFlags& f, int default_threads);

// Splits "a,b,,c" lists (already split on repeated flags) into trimmed items; empty items are
// an error naming `flag`.
Result<std::vector<std::string>> split_list(const char* flag, const std::vector<std::string>& v);

const char* mode_name(BenchMode m);
const char* format_name(BenchFormat f);

}  // namespace pi::cli
