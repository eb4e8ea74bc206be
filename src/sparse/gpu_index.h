// The GPU index file: the original PowerInfer's `<model>.generated.gpuidx`, a GGUF v3 file
// with PWRI magic and
//   general.architecture = "generic.gpu_index"
//   generic.gpu_index.block_count  u32  layers
//   split.vram_capacity            u64  the budget (bytes) it was solved for
//   blk.N.gpu_idx     I32 [n_ff]   1 = neuron on the device
//   blk.N.gpu_bucket  I32 [n_hot]  the device neuron ids, ascending
// whose I32 tensors carry ggml type id 18 (the original's numbering; gguf/reader.h). Tensors are
// found by name, never by position. We add (the original ignores unknown keys):
//   powerinfer.gpu_index.model_fingerprint  str  model_fingerprint() of the model
//   powerinfer.gpu_index.stats_fingerprint  str  ActivationStats fingerprint (stats_fingerprint)
//   powerinfer.gpu_index.granularity        u32
//   powerinfer.gpu_index.n_ctx              u64  context and batch the scratch and KV were sized for
//   powerinfer.gpu_index.n_batch            u64
//   powerinfer.gpu_index.kv_type_k          u32  the KV cache's key and value types (ggml ids;
//   powerinfer.gpu_index.kv_type_v          u32  absent in files written before -ctk/-ctv: f16)
//   powerinfer.gpu_index.dense_layers       u32  layers 0..n-1 have their dense block on the device
//   powerinfer.gpu_index.head_on_device     bool
// A cached index is used only when every one of these and the budget equal the request;
// otherwise the plan is solved again and the file rewritten (the original reuses an index
// whenever the new budget is at least the recorded one, and ignores the model and statistics).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "sparse/activation_stats.h"
#include "sparse/placement.h"
#include "tensor/dtype.h"

namespace pi::gguf {
class File;
}

namespace pi::sparse {

struct PlacementRequest;  // sparse/placement_model.h

// What a plan was solved for; an index matches a request when all fields are equal, except
// that an empty stats_fingerprint (a run without statistics) accepts any statistics.
struct IndexKey {
  std::string model_fingerprint;
  std::string stats_fingerprint;
  int64_t granularity = 0;
  uint64_t budget = 0;
  int64_t n_ctx = 0;
  int64_t n_batch = 0;
  DType kv_type_k = DType::F16;  // the KV bytes counted per layer depend on them
  DType kv_type_v = DType::F16;
  uint64_t reserved = 0;  // budget bytes held back beside the plan (--expert-cache's slots)
  int64_t n_window = 0;   // cells of a sliding-window layer (0: n_ctx, or an older file)
};

struct GpuIndex {
  uint64_t vram_capacity = 0;
  std::vector<int64_t> n_ff;                // per layer: length of gpu_idx
  std::vector<std::vector<int32_t>> hot;    // per layer: gpu_bucket (ascending)
  bool has_key = false;                     // our metadata present (absent in the original's files)
  IndexKey key;
  int64_t n_dense_layers = 0;
  bool head_on_device = false;
};

// `<model path>.generated.gpuidx`, where the original looks.
std::string gpu_index_path(const std::string& model_path);

// "fnv1a64:<hex>" over n_tokens and every count of every layer.
std::string stats_fingerprint(const ActivationStats& s);

// The key of a request: the model file's and the statistics' fingerprints (none when stats is
// null) and the request's budget, granularity, context and batch.
IndexKey index_key(const gguf::File& model, const ActivationStats* stats, const PlacementRequest& req);

// Writes the plan's device neurons and our metadata.
Status write_gpu_index(const std::string& path, const PlacementPlan& plan, const IndexKey& key,
                       const std::vector<int64_t>& n_ff);

// Reads and checks an index: PWRI magic, architecture, block count, both tensors of every layer
// by name, I32, gpu_idx values 0/1, gpu_bucket ascending and equal to the ones of gpu_idx.
Result<GpuIndex> read_gpu_index(const std::string& path);

// Fails, naming the first field that differs, when `idx` was not solved for `key` on a model
// of these layer sizes (or has no metadata of ours).
Status check_index_matches(const GpuIndex& idx, const IndexKey& key,
                           const std::vector<int64_t>& n_ff, const std::string& path);

struct IndexOptions {
  bool reset = false;    // --reset-gpu-index: solve again even when the index matches
  bool disable = false;  // --disable-gpu-index: no neuron split, no index read or written
  bool write = true;     // write the index after solving
  // false: a failed write is reported in IndexedPlan::reason instead of failing (a model in a
  // read-only directory still runs).
  bool write_errors_fatal = true;
};

struct IndexedPlan {
  PlacementPlan plan;
  bool loaded = false;  // true: taken from the index file
  std::string reason;   // why it was solved rather than loaded ("" when loaded)
};

// The plan for `problem`: from the index at `path` when it matches `key` and its plan fits the
// problem's budget, else solved (and written unless opts.write is false or opts.disable).
// A missing, stale, foreign or damaged index is not an error: the reason says why it was
// solved. Fails only when solving or writing fails.
Result<IndexedPlan> plan_with_index(const std::string& path, const PlacementProblem& problem,
                                    const IndexKey& key, const IndexOptions& opts);

}  // namespace pi::sparse
