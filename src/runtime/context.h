// One inference context over a loaded model: thread pool, kernels boundary, forward pass and
// KV cache of a single sequence. decode() feeds tokens after those already cached, in batches
// of n_batch (matrix x matrix products), and commits each batch to the cache.
// Thread-safety: one thread drives a Context; the pool runs the kernels.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/ops.h"
#include "runtime/kv_cache.h"
#include "sparse/sparse_ffn.h"

namespace pi::runtime {

struct ContextOptions {
  int64_t n_ctx = 0;      // KV cells; 0: the model's training context, at most 4096
  int64_t n_batch = 512;  // most tokens per forward call (clamped to n_ctx)
  int n_threads = 1;
  bool all_logits = false;  // keep logits of every token (tests, perplexity)
  // PowerInfer (PWRI) files run the sparse FFN (src/sparse) unless `dense` is set; a PWRI file
  // without predictors runs dense (with a warning). Ordinary GGUF files always run dense.
  bool dense = false;
  // Predictor threshold; unset: $LLAMA_SPARSE_PRED_THRESHOLD, else powerinfer.sparse_threshold,
  // else 0 (sparse::resolve_threshold).
  std::optional<float> sparse_threshold;
  bool check_predictor = false;  // sparse only: also run the dense FFN and measure the predictor
};

class Context {
 public:
  // Checks the options and allocates every buffer (KV cache, step buffers, FFN scratch).
  static Result<std::unique_ptr<Context>> create(const model::Model& model, ContextOptions opts);

  const model::Model& model() const { return model_; }
  const ContextOptions& options() const { return opts_; }
  int64_t n_ctx() const { return cache_.n_ctx(); }
  int64_t n_past() const { return cache_.n_used(); }

  // Evaluates `tokens` at positions n_past() .. n_past() + n - 1. Fails before computing
  // anything when they do not fit the context ("context overflow"). With all_logits and a
  // non-null `all`, the logits of every token are appended to *all (f32 [n, n_vocab]).
  // `stop`, if given, is asked before each batch; when it returns true decode stops with an
  // "interrupted" error, keeping the batches already committed.
  Status decode(std::span<const int32_t> tokens, std::vector<float>* all = nullptr,
                const std::function<bool()>& stop = {});

  // Logits of the last evaluated token, f32 [n_vocab].
  std::span<const float> logits() const;

  // Forgets every cached position after the first n (0: start over).
  Status truncate(int64_t n) { return cache_.apply(KvEdit::truncate(n)); }

  model::Forward& forward() { return *forward_; }
  model::Ops& ops() { return ops_; }
  const KvCache& cache() const { return cache_; }
  // The sparse FFN step when this context runs sparse, else nullptr; and its threshold.
  sparse::SparseFfn* sparse_ffn() { return sparse_; }
  const sparse::SparseFfn* sparse_ffn() const { return sparse_; }
  const sparse::Threshold& sparse_threshold() const { return threshold_; }

 private:
  Context(const model::Model& model, ContextOptions opts);
  // Installs the SparseFfn for PWRI files unless opts_.dense (see ContextOptions).
  Status install_ffn();

  const model::Model& model_;
  ContextOptions opts_;
  ThreadPool pool_;
  model::Ops ops_;
  KvCache cache_;
  std::unique_ptr<model::Forward> forward_;
  sparse::SparseFfn* sparse_ = nullptr;  // owned by forward_
  sparse::Threshold threshold_;
};

// n_ctx the options resolve to for this model (0 -> training context, capped at 4096).
int64_t resolve_n_ctx(const model::HParams& hp, int64_t requested);

}  // namespace pi::runtime
