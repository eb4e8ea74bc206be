// `powerinfer bench`: runs the test grid and collects everything the reports print.
//
// For each model, mode (dense / sparse), thread count and test, one untimed warm-up run and
// then `reps` timed repetitions:
//  - prompt test ppP: P random (fixed-seed) token ids in [0, n_vocab) fed by Session::prompt
//    in batches of -b; tokens/s = P / time of the prompt() call;
//  - generation test tgN: the context holds one token (BOS), then N tokens are generated
//    greedily (sample + advance), never stopping at end-of-text; only the N steps are timed.
// Generation rows also get the bytes read per token (weights + KV cache), the effective GB/s
// (bytes per token x median tokens/s) and its ratio to the read probe measured on the same
// number of threads around the row's repetitions (the probe passes alternate with the runs, so
// both see the same machine conditions).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_args.h"
#include "bench_hybrid.h"
#include "bench_machine.h"
#include "core/disk_probe.h"
#include "core/error.h"
#include "powerinfer/engine.h"
#include "powerinfer/placement.h"

namespace pi::cli {

struct ModelSummary {
  std::string path;
  std::string name;         // general.name, may be empty
  std::string arch;         // general.architecture
  std::string type;         // weight type holding the most bytes, e.g. "q4_0"
  bool powerinfer = false;  // PWRI file
  bool has_predictors = false;
  bool calibrated = false;  // activation thresholds (powerinfer calibrate)
  bool sparse_experts = false;  // ReGLU experts (smallthinker): sparse unless run dense
  std::string activation;
  double synth_activity = -1;  // synth.activity of `powerinfer synth` files, else -1
  uint64_t file_bytes = 0;
  bool mmap = true;              // mapped, or read into memory (--no-mmap)
  uint64_t huge_page_bytes = 0;  // read into memory: bytes in huge pages
  // Weights in the CPU's layouts (transposed for its axpy, R16 for its dense products): all of
  // them (repacked_bytes), of which held
  // in place in the model's memory (read into memory: no extra RAM) and copied (mapped, or
  // a device that wanted the other layout: extra RAM).
  uint64_t repacked_bytes = 0, repacked_in_place_bytes = 0, layout_copy_bytes = 0;
  // This process's resident memory just before the model was loaded (the read probe's buffer,
  // an earlier model's pages not yet returned) and its peak from then to the model's last row
  // (VmHWM, reset at the load).
  uint64_t rss_before_load = 0, peak_rss = 0;
  int64_t params = 0;            // elements of every tensor, predictors included
  int64_t predictor_params = 0;  // elements of fc1/fc2
  int64_t n_layer = 0, n_embd = 0, n_ff = 0, n_head = 0, n_head_kv = 0, n_vocab = 0;
  uint64_t weight_bytes_per_token = 0;  // the dense step: every matrix once (no predictors)
  uint64_t ffn_bytes = 0;               // FFN matrices of all layers (part of the above)
  uint64_t predictor_bytes = 0;         // fc1 + fc2 of all layers
  uint64_t kv_bytes_per_cell = 0;       // f16 K and V of one position, all layers
  // Elements of the matrices a token multiplies in a dense forward: every layer matrix once
  // (attention and FFN; not the predictors) and the output head (a head tied to the token
  // embedding counts once, as a multiply; the embedding's row lookup is no multiply).
  int64_t layer_matrix_params = 0, head_params = 0;
};

struct ProbeStats {
  int threads = 0;
  std::vector<double> passes;  // GB/s of each pass, in order
  double median = 0, min = 0, max = 0;
  // Scattered passes (kScatterChunkBytes chunks, --scatter-fraction of them;
  // BandwidthProbe::scattered_pass), GB/s of each and their median: in the probe table, and
  // around a sparse generation row's repetitions (as the sequential passes).
  std::vector<double> scattered_passes;
  double scattered = 0;
};

// The compute probe of one path on one thread count (core/compute_probe.h), GMAC/s.
struct ComputeStats {
  int threads = 0;
  std::string path;          // compute_path_name, e.g. "int8_vnni_zmm"
  std::string instructions;  // compute_path_instructions, e.g. "vpdpbusd zmm"
  std::vector<double> passes;  // each pass, in order
  double median = 0, min = 0, max = 0;
};

// Per generated token (generation tests only), in bytes.
struct ByteBreakdown {
  double other_weights = 0;  // attention, norms, output head: every non-FFN matrix
  double ffn = 0;            // FFN rows read (dense: all of them)
  double predictors = 0;     // sparse only
  double kv = 0;             // K and V cells attention reads, mean over the generated tokens
  double total() const { return other_weights + ffn + predictors + kv; }
};

// A row on a GPU-like device (--device sim|cuda): the plan, the measured host <-> device
// traffic and the roofline-style model of the hybrid step (bench_hybrid.h).
struct HybridRow {
  bool present = false;
  std::string device;
  bool has_budget = false;
  uint64_t budget = 0;      // --vram-budget of the row (bytes)
  PlacementInfo placement;  // after the timed repetitions (traffic counters included)
  // Measured per token over the timed repetitions.
  double bytes_to_device = 0, bytes_from_device = 0, copies = 0, ops = 0;
  // Generation rows: the model's tokens/s, the rates it used, and measured / model.
  double model_ts = 0, model_ratio = 0;
  DeviceRates device_rates;
  double cpu_gbps = 0, cpu_scattered_gbps = 0;
};

struct BenchRow {
  size_t model = 0;  // index into BenchReport::models
  BenchMode mode = BenchMode::Dense;
  int threads = 0;
  int64_t n_batch = 0;
  int64_t n_prompt = 0, n_gen = 0;  // one of them is 0
  std::string test;                 // "pp512", "tg128"
  std::vector<double> samples;      // tokens/s of each repetition
  double ts_median = 0, ts_min = 0, ts_max = 0, ts_stddev = 0;
  // Sparse mode: predicted-active and accumulated neuron fractions over the timed tokens and
  // layers; -1 in dense mode.
  double active_fraction = -1, computed_fraction = -1;
  bool has_bytes = false;  // generation tests
  ByteBreakdown bytes;
  double gbps = 0;         // bytes.total() x ts_median / 1e9
  ProbeStats probe;        // passes run around this row's repetitions
  double probe_ratio = 0;  // gbps / probe.median
  // ts_median / the roofline: weights and cache read at probe.median, except sparse FFN rows,
  // which are scattered and read at probe.median x (probe.scattered / probe.median, both
  // measured around the row's repetitions). Equals probe_ratio for dense rows. 0 without bytes.
  double roofline_ratio = 0;
  // Dense prompt rows with an int8 path for the kernels' ISA (has_int8): multiply-accumulates
  // per prompt token (ModelSummary: every layer matrix, the head once per batch), the int8
  // peak on as many threads (BenchReport::compute, GMAC/s) and MACs x t/s / that peak.
  bool has_int8 = false;
  double macs_per_token = 0, int8_peak_gmacs = 0, int8_ratio = 0;
  double load_1m = -1;     // load average when the row started
  HybridRow hybrid;
  double act_sparsity = -1;  // calibrated files in sparse mode: the sparsity run, else -1
  uint64_t peak_rss = 0;     // the process's peak resident bytes since the model's load, after the row
  // --moe-ram: the experts read from the file over the timed repetitions (summed), per token,
  // and the t/s the disk's direct-read rate allows for them (BenchReport::disk) with
  // ts_median / that.
  ExpertReads expert_reads;
  double expert_bytes_per_token = 0, disk_bound_ts = 0, disk_ratio = 0;
};

// The direct-read probe of a model's file (--moe-ram, or --probe with -m).
struct DiskStats {
  std::string path;
  DiskProbe probe;
};

struct BenchReport {
  MachineInfo machine;
  BuildInfo build;
  BenchOptions options;
  std::string probe_isa;
  size_t probe_bytes = 0;
  std::vector<ProbeStats> probe;  // one per thread count, measured before the models
  // The compute probe, measured after the read probe for each thread count: every available
  // path for --probe, else the int8 path of the kernels' ISA alone (int8_path; empty for the
  // scalar kernels: no compute rows, no prompt shares). Paths this CPU lacks: compute_skipped.
  std::string int8_path;
  std::vector<ComputeStats> compute;
  std::vector<std::string> compute_skipped;
  std::vector<ModelSummary> models;
  std::vector<DiskStats> disk;
  std::vector<BenchRow> rows;
  LoadAverage load_start, load_end;
};

// Runs the probe table and (unless probe_only) the grid. Progress goes to the log (stderr).
// Fails on the first file that cannot be opened or run in a requested mode, before any timing
// starts where this can be known from the file.
Result<BenchReport> run_bench(const BenchOptions& o);

// Sample statistics of tokens/s: median, min, max, standard deviation (n - 1; 0 for n < 2).
void summarize(BenchRow& row);

}  // namespace pi::cli
