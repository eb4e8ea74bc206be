// One inference context over a loaded model: the device it runs on (with the weights placed
// there), forward pass and KV cache. On a device that is not the host (sim, cuda) the context
// is hybrid: the plan of hybrid_plan.h puts what fits the VRAM budget there and the CPU runs
// the rest (a two-lane forward pass; sparse files split each layer's neurons with
// sparse::HybridFfn). decode() feeds tokens of sequence 0 after those already cached, in batches of
// n_batch (matrix x matrix products), and commits each batch to the cache. decode_batch()
// feeds tokens of several sequences (ids 0 .. n_seq_max-1) in one forward pass; seq_cp()
// shares a sequence's cells with another, seq_rm() forgets positions.
//
// A batch whose tokens are one sequence's next positions, in cells equal to their positions
// after the sequence's cells [0, pos0), runs the forward pass's contiguous path; any other
// batch runs the general path with per-token cell lists. Both give a token the same numbers
// when the kernels' many-token and one-token forms agree.
// Thread-safety: one thread drives a Context; the device runs the kernels.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/error.h"
#include "backend/device.h"
#include "model/expert_stream.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/placed_weights.h"
#include "powerinfer/batch.h"
#include "powerinfer/embedding.h"
#include "runtime/context_options.h"
#include "runtime/hybrid_plan.h"
#include "runtime/kv_cache.h"
#include "runtime/kv_state.h"
#include "sparse/profile_ffn.h"
#include "sparse/sparse_ffn.h"
#include "sparse/threshold_steps.h"

namespace pi::model {
class MoeFfn;
}  // namespace pi::model

namespace pi::runtime {

class Context {
 public:
  // Checks the options, makes the device, checks that everything fits its budget (failing with
  // the bytes needed, item by item, and the budget) and allocates every buffer (weights on a
  // device that cannot address the host, KV cache, step buffers, FFN scratch). On a device
  // that is not the host: plans the hybrid split and its ledger first (failing, with the
  // ledger, when the plan cannot fit), then allocates exactly what the ledger counts.
  static Result<std::unique_ptr<Context>> create(const model::Model& model, ContextOptions opts);

  const model::Model& model() const { return model_; }
  const ContextOptions& options() const { return opts_; }
  int64_t n_ctx() const { return cache_.n_ctx(); }
  // Positions sequence 0 holds (its highest + 1).
  int64_t n_past() const { return cache_.seq_pos_max(0) + 1; }

  // Evaluates `tokens` at positions n_past() .. n_past() + n - 1. Fails before computing
  // anything when they do not fit the context ("context overflow"). With all_logits and a
  // non-null `all`, the logits of every token are appended to *all (f32 [n, n_vocab]).
  // `stop`, if given, is asked before each batch; when it returns true decode stops with an
  // "interrupted" error, keeping the batches already committed.
  Status decode(std::span<const int32_t> tokens, std::vector<float>* all = nullptr,
                const std::function<bool()>& stop = {});

  // Logits of the last evaluated token of decode(), f32 [n_vocab].
  std::span<const float> logits() const;

  // Evaluates a batch of tokens of several sequences (any number: split into forward passes
  // of n_batch). Checks everything first and fails without changing the cache for: an empty
  // batch, a sequence id outside [0, n_seq_max), a token id outside the vocabulary, a position
  // that is negative or not above its sequence's earlier positions (in the cache and in the
  // batch), more than n_seq_max entries asking for logits, or tokens that do not fit the free
  // cells ("context overflow").
  Status decode_batch(std::span<const BatchToken> batch);
  // Logits of entry i of the last decode_batch() (it must have asked for them), f32 [n_vocab];
  // empty otherwise.
  std::span<const float> batch_logits(size_t i) const;

  // Embeddings. Evaluates each input as its sequence from position 0, all inputs together in
  // forward passes of up to n_batch tokens that end at the output norm (the head is not
  // computed), and writes input i's pooled vector (L2-normalised with p.normalize) to
  // out[i * n_embd, (i + 1) * n_embd): out f32 [inputs.size(), n_embd]; with Pooling::None,
  // every token's vector, input after input: out f32 [total tokens, n_embd]. The inputs' sequences
  // are emptied before and again after; other sequences are untouched. Fails, changing
  // nothing, for no inputs, an empty input, a sequence id outside [0, n_seq_max) or repeated,
  // a token id outside the vocabulary or `out` of the wrong size; and, the inputs' sequences
  // emptied, for inputs that do not fit the cells the others leave free ("context overflow")
  // or a failed pass. Leaves no logits.
  Status embed(std::span<const EmbedInput> inputs, const EmbedParams& p, std::span<float> out);

  // Forgets every cached position after the first n of every sequence (0: start over).
  Status truncate(int64_t n) {
    if (n < 0) return cache_.apply(KvEdit::truncate(n));  // (refused: an invalid range)
    return seq_rm(kAllSeqs, static_cast<int32_t>(std::min<int64_t>(n, INT32_MAX)), kPosEnd);
  }
  // Sequence seq (kAllSeqs: all) forgets positions [p0, p1) (p1 = kPosEnd: to the end). Cutting
  // a sequence back to p0 > 0 is refused (BadRequest, nothing changed) where its sliding-window
  // layers no longer hold the window before p0 (can_truncate).
  Status seq_rm(SeqId seq, int32_t p0, int32_t p1);
  // Whether sequence seq cut back to [0, p0) could go on at p0 (always without sliding-window
  // layers or with --swa-full; otherwise only while its window before p0 is still held).
  bool can_truncate(SeqId seq, int32_t p0) const;
  // Sequence dst also holds src's positions [p0, p1), sharing their cells (no data copied).
  Status seq_cp(SeqId src, SeqId dst, int32_t p0, int32_t p1);
  // Highest position sequence s holds, -1 when none.
  int32_t seq_pos_max(SeqId s) const { return cache_.seq_pos_max(s); }
  // The tokens sequence s holds from position 0 (KvCache::seq_tokens).
  std::vector<int32_t> seq_tokens(SeqId s) const { return cache_.seq_tokens(s); }
  // Sequence s (holding nothing) takes the saved tokens of `file`: the rows of tokens [0, n-1)
  // are written to free cells and committed, the last token is evaluated (its logits are
  // logits() and batch_logits(0)). Fails without changing the cache when s is out of range or
  // holds positions, or the tokens do not fit.
  Status restore_seq(SeqId s, SeqStateFile& file);

  model::Forward& forward() { return *forward_; }
  // The device of the options (the GPU-like one of a hybrid context).
  backend::Device& device() { return *dev_; }
  // Hybrid contexts: the plan, the ledger and the FFN split; nullptr otherwise.
  const HybridSetup* hybrid() const { return hybrid_ ? &*hybrid_ : nullptr; }
  const sparse::HybridFfn* hybrid_ffn() const { return hybrid_ffn_; }
  // The expert split of a hybrid mixture of experts placed expert by expert, else nullptr.
  const model::HybridMoeFfn* hybrid_moe() const { return hybrid_moe_; }
  // The mixture-of-experts FFN step of a MoE model on one device, else nullptr.
  model::MoeFfn* moe_ffn() const { return moe_; }
  // ContextOptions::profile on a model without experts: the step counting neurons, else nullptr.
  const sparse::ProfilingFfn* profiler() const { return profiler_; }
  // The experts read from the file on demand (ContextOptions::moe_ram), else nullptr.
  const model::ExpertStream* expert_stream() const { return stream_.get(); }
  model::ExpertStream* expert_stream() { return stream_.get(); }
  // Every mixture-of-experts FFN step (a hybrid context has one per lane that runs an FFN;
  // each counts the layers it ran).
  const std::vector<model::MoeFfn*>& moe_ffns() const { return moe_all_; }
  // The weights as the device sees them.
  const model::ModelWeights& weights() const { return weights_.weights; }
  const KvCache& cache() const { return cache_; }
  // Host memory this context allocated (KV cache, step buffers, scratch; what a hybrid
  // context keeps on the host: the KV cache of the CPU's layers), line by line as counted
  // before allocation. The model's own memory is the Model's (file, layouts()).
  const std::vector<LedgerLine>& host_memory() const { return host_memory_; }
  // The sparse FFN step when this context runs sparse, else nullptr; and its threshold.
  sparse::SparseFfn* sparse_ffn() { return sparse_; }
  const sparse::SparseFfn* sparse_ffn() const { return sparse_; }
  const sparse::Threshold& sparse_threshold() const { return threshold_; }
  // The threshold steps when this context runs a calibrated file thresholded, else nullptr.
  sparse::ThresholdFfn* threshold_ffn() const { return threshold_ffn_; }
  sparse::ThresholdProj* threshold_proj() const { return threshold_proj_; }
  const sparse::SiteThresholds& site_thresholds() const { return site_thresholds_; }

 private:
  Context(const model::Model& model, ContextOptions opts, std::unique_ptr<backend::Device> dev,
          model::PlacedWeights weights, std::vector<KvStorage> kv_storage);
  // The hybrid path of create() (context_hybrid.cpp).
  static Result<std::unique_ptr<Context>> create_hybrid(const model::Model& model,
                                                        ContextOptions opts,
                                                        std::unique_ptr<backend::Device> dev);
  Status build_hybrid_forward();
  // Device bytes everything a context allocates needs, checked against the device's free
  // memory: an error names each item and the budget.
  static Status check_budget(const model::Model& model, const ContextOptions& o,
                             const backend::Device& dev, bool sparse);
  // The items check_budget counts, in order (device bytes; weights cost none on the host).
  static Result<std::vector<LedgerLine>> budget_items(const model::Model& model,
                                                      const ContextOptions& o,
                                                      const backend::Device& dev, bool sparse);
  // Builds the forward pass with the SparseFfn or the DenseFfn (see ContextOptions).
  Status build_forward();
  Status check_seq(SeqId s) const;
  // Evaluates one forward pass of slot.size() <= n_batch tokens placed by `slot` (positions
  // and sequences filled in) and commits it. Logits: those of the tokens listed in `outputs`
  // (ascending) are in forward().logits(), or with outputs empty those decode() keeps.
  // With Head::Hidden: forward().hidden() holds every token's normalized hidden state.
  Status eval_slot(std::span<const int32_t> tokens, KvSlot& slot,
                   std::span<const int32_t> outputs, model::Head head = model::Head::Logits);
  Status check_embed(std::span<const EmbedInput> inputs, const EmbedParams& p, size_t out_size) const;

  const model::Model& model_;
  ContextOptions opts_;
  std::unique_ptr<backend::Device> dev_;
  std::unique_ptr<backend::Device> host_;  // hybrid: the CPU lane's device
  model::PlacedWeights weights_;           // the weights as dev_ sees them
  std::optional<HybridSetup> hybrid_;
  sparse::HybridFfn* hybrid_ffn_ = nullptr;  // owned by forward_
  model::HybridMoeFfn* hybrid_moe_ = nullptr;  // owned by forward_
  KvCache cache_;
  std::unique_ptr<model::Forward> forward_;
  sparse::SparseFfn* sparse_ = nullptr;  // owned by forward_
  model::MoeFfn* moe_ = nullptr;         // owned by forward_
  sparse::ProfilingFfn* profiler_ = nullptr;  // owned by forward_
  std::vector<model::MoeFfn*> moe_all_;  // owned by forward_
  std::unique_ptr<model::ExpertStream> stream_;  // moe_ram: the experts' slots
  sparse::Threshold threshold_;
  sparse::ThresholdFfn* threshold_ffn_ = nullptr;    // owned by forward_
  sparse::ThresholdProj* threshold_proj_ = nullptr;  // owned by forward_
  std::vector<LedgerLine> host_memory_;
  sparse::SiteThresholds site_thresholds_;
  // decode_batch() scratch, allocated by create().
  AttnLists lists_;
  std::vector<int32_t> window_cells_;  // lists_ as window cells (KvCache::window_lists)
  std::vector<int32_t> chunk_tokens_, chunk_outputs_;  // [n_batch]
  std::vector<int32_t> all_rows_;                      // 0 .. n_batch-1
  std::vector<float> batch_logits_;                    // f32 [n_out, n_vocab]
  std::vector<int32_t> batch_row_;                     // entry -> row of batch_logits_, -1: none
};

// n_ctx the options resolve to for this model (0 -> training context, capped at 4096).
int64_t resolve_n_ctx(const model::HParams& hp, int64_t requested);

}  // namespace pi::runtime
