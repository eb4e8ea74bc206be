// The KV cache of one sequence: f16 keys and values for every layer and n_ctx cells, plus the
// metadata saying which cells hold which positions. Cell c holds position c; the cells in use
// are always [0, n_used()).
//
// Only apply() changes the metadata (the model writes cell contents through view(), but a
// written cell counts as used only once its batch is committed). find_slot() is const: it
// says where the next batch goes. A later multi-sequence cache keeps this shape: plan a slot,
// let the model fill it, commit it.
// Thread-safety: none; one session owns a cache.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "model/hparams.h"
#include "model/kv_view.h"

namespace pi::runtime {

// Where a batch of tokens goes: cells [pos0, pos0 + n).
struct KvSlot {
  int64_t pos0 = 0;
  int64_t n = 0;
};

// A change to the cache metadata.
struct KvEdit {
  enum class Kind {
    Commit,    // the cells of `slot` now hold valid positions (slot must start at n_used())
    Truncate,  // forget every position >= n (n = 0 clears the cache)
  };
  Kind kind = Kind::Commit;
  KvSlot slot;    // Commit
  int64_t n = 0;  // Truncate

  static KvEdit commit(KvSlot s) { return {Kind::Commit, s, 0}; }
  static KvEdit truncate(int64_t n) { return {Kind::Truncate, {}, n}; }
  static KvEdit clear() { return truncate(0); }
};

class KvCache {
 public:
  // Allocates n_layer x {K, V} x n_ctx x n_embd_kv f16 values (zeroed).
  KvCache(const model::HParams& hp, int64_t n_ctx);
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_used() const { return n_used_; }
  int64_t n_free() const { return n_ctx_ - n_used_; }
  // Position held by cell c, or -1 when the cell is free.
  int32_t cell_pos(int64_t c) const { return cell_pos_[static_cast<size_t>(c)]; }
  size_t nbytes() const { return storage_.size() * sizeof(uint16_t); }

  // Where the next n tokens go. Fails with a context-overflow message when they do not fit.
  Result<KvSlot> find_slot(int64_t n) const;

  // The single mutator of the metadata. Fails (changing nothing) for a Commit whose slot does
  // not start at n_used() or runs past n_ctx, and for a negative Truncate.
  Status apply(const KvEdit& edit);

  // Storage for the forward pass; cell contents at and beyond n_used() are scratch.
  const model::KvView& view() const { return view_; }

 private:
  int64_t n_ctx_;
  int64_t n_used_ = 0;
  std::vector<int32_t> cell_pos_;  // [n_ctx]
  std::vector<uint16_t> storage_;  // f16 [n_layer, 2, n_ctx, n_embd_kv]
  model::KvView view_;
};

}  // namespace pi::runtime
