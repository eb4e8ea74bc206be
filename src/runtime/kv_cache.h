// The KV cache: keys and values (f16, or Q8_0 / Q4_0 blocks of 32 along head_dim: KvTypes) for
// every layer and n_ctx cells, plus the metadata saying
// which position each cell holds and for which sequences. A cell is free or holds one position
// of a set of sequences (ids 0..63, a 64-bit mask): sequences share a cell after a copy, so a
// common prompt is stored once for all of them.
//
// Only apply() changes the metadata (the model writes cell contents through view(), but a
// written cell counts as used only once its batch is committed). The protocol for a batch:
// find_slot() (const) plans free cells, the caller fills in each token's position and
// sequence, attention_lists() says which cells each token attends, the model fills the cells,
// and apply(KvEdit::commit(slot)) records them.
//
// Positions are appended: a sequence's new positions must be greater than those it holds and
// increase within a batch, so no sequence ever holds a position twice.
//
// A single sequence (Context::decode, Session::prompt/advance) sees the simple layout: cell c
// holds position c of sequence 0 and the cells in use are [0, n_used()); find_slot() keeps
// a batch contiguous whenever a run of free cells is long enough.
// Thread-safety: none; one session owns a cache.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "backend/device.h"
#include "core/error.h"
#include "core/huge_region.h"
#include "model/hparams.h"
#include "model/kv_view.h"
#include "runtime/context_options.h"

namespace pi::runtime {

using SeqId = int32_t;
inline constexpr SeqId kMaxSeqs = 64;  // sequence ids are 0 .. kMaxSeqs - 1
inline constexpr SeqId kAllSeqs = -1;  // KvEdit::remove: every sequence
inline constexpr int32_t kPosEnd = -1;  // KvEdit ranges [p0, p1): p1 = kPosEnd means no bound

// Where a batch of tokens goes: token i is position pos[i] of sequence seq[i], stored in cell
// cells[i]. find_slot() plans `cells`; the caller fills `pos` and `seq` before committing.
struct KvSlot {
  std::vector<int32_t> cells;
  std::vector<int32_t> pos;
  std::vector<SeqId> seq;

  int64_t size() const { return static_cast<int64_t>(cells.size()); }
  // Token i of sequence `s` at position pos0 + i, for every token (the single-sequence case).
  void assign_sequential(SeqId s, int32_t pos0);
};

// The cells each token of a batch attends (KvCache::attention_lists): token i's cells are
// cells[begin[i] .. begin[i] + len[i]), in ascending position order. Tokens of one sequence
// share storage (each list is a prefix of its sequence's list).
struct AttnLists {
  std::vector<int32_t> cells;
  std::vector<int32_t> pos;  // the position each entry of `cells` holds
  std::vector<int64_t> begin, len;
  std::vector<std::pair<int32_t, int32_t>> scratch;  // (pos, cell) while sorting
};

// A change to the cache metadata.
struct KvEdit {
  enum class Kind {
    Commit,  // the cells of `slot` now hold their tokens' positions and sequences
    Remove,  // sequence `seq` (kAllSeqs: all) forgets its positions in [p0, p1)
    Copy,    // sequence `dst` also holds the cells of `seq`'s positions in [p0, p1)
  };
  Kind kind = Kind::Commit;
  const KvSlot* slot = nullptr;  // Commit; must outlive apply()
  SeqId seq = 0;                 // Remove, Copy (source)
  SeqId dst = 0;                 // Copy
  int32_t p0 = 0, p1 = kPosEnd;  // Remove, Copy

  static KvEdit commit(const KvSlot& s) { return {Kind::Commit, &s, 0, 0, 0, kPosEnd}; }
  static KvEdit remove(SeqId seq, int32_t p0, int32_t p1) {
    return {Kind::Remove, nullptr, seq, 0, p0, p1};
  }
  static KvEdit copy(SeqId src, SeqId dst, int32_t p0, int32_t p1) {
    return {Kind::Copy, nullptr, src, dst, p0, p1};
  }
  // Every sequence forgets its positions >= n (n = 0 clears the cache).
  static KvEdit truncate(int64_t n) {
    return remove(kAllSeqs, n < 0 ? -1 : static_cast<int32_t>(std::min<int64_t>(n, INT32_MAX)),
                  kPosEnd);
  }
  static KvEdit clear() { return truncate(0); }
};

// The types the cache stores keys and values in (llama.cpp's -ctk/-ctv): F16, Q8_0 or Q4_0
// (backend::kv_type_supported); the block types need head_dim to be a multiple of 32.
// (KvTypes is in context_options.h.)
// Whether the model's head_dim suits the types: an error naming the flag and head_dim if not.
Status check_kv_types(const model::HParams& hp, KvTypes t);

// Cell contents of layers [first_layer, first_layer + n_layers) in one device's memory:
// storage_bytes(hp, n_ctx, n_layers, types) bytes holding, per layer, K then V, each n_ctx x
// n_embd_kv values of its type in KvLayer's head-major layout. A hybrid context keeps each layer's cells on the
// device that runs its attention.
struct KvStorage {
  backend::Buffer buffer;
  int64_t first_layer = 0;
  int64_t n_layers = 0;
};

class KvCache {
 public:
  // Cell contents live in `storage`, device memory of storage_bytes(hp, n_ctx) bytes for
  // every layer. An empty storage gives a cache of metadata only (its view's layers point
  // nowhere).
  KvCache(const model::HParams& hp, int64_t n_ctx, backend::Buffer storage = {},
          KvTypes types = {});
  // Cell contents in several blocks of layers (together covering every layer once).
  KvCache(const model::HParams& hp, int64_t n_ctx, std::vector<KvStorage> storage,
          KvTypes types = {});
  static uint64_t storage_bytes(const model::HParams& hp, int64_t n_ctx, KvTypes types = {});
  static uint64_t storage_bytes(const model::HParams& hp, int64_t n_ctx, int64_t n_layers,
                                KvTypes types = {});
  KvTypes types() const { return types_; }
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_used() const { return n_used_; }  // cells holding a position
  int64_t n_free() const { return n_ctx_ - n_used_; }
  // Position held by cell c, or -1 when the cell is free.
  int32_t cell_pos(int64_t c) const { return cells_[static_cast<size_t>(c)].pos; }
  // Sequences holding cell c (bit s: sequence s); 0 when free.
  uint64_t cell_seqs(int64_t c) const { return cells_[static_cast<size_t>(c)].seqs; }
  // Highest position sequence s holds, -1 when it holds none (or s is out of range).
  int32_t seq_pos_max(SeqId s) const;
  // Cells sequence s holds.
  int64_t seq_cells(SeqId s) const;
  // True when sequence s holds exactly positions 0..p-1 in cells 0..p-1 (cell c: position c):
  // the layout the forward pass's contiguous fast path reads.
  bool holds_prefix(SeqId s, int64_t p) const;
  size_t nbytes() const;
  // Sequence s's (position, cell) entries in ascending position order; empty for an id out of
  // range.
  std::span<const std::pair<int32_t, int32_t>> seq_entries(SeqId s) const;
  // The device whose memory holds layer il's cells (copies to and from it go through its
  // queues); nullptr for a cache of metadata only.
  backend::Device* layer_device(int64_t il) const;

  // Plans where n tokens go: the first run of n free cells, else the n lowest free cells.
  // Fails with a context-overflow message when fewer than n cells are free.
  Result<KvSlot> find_slot(int64_t n) const;

  // For a planned slot with positions and sequences filled in (not yet committed): the cells
  // each token attends, those of its sequence holding positions <= its own (the batch's earlier
  // tokens and its own cell included), in ascending position order. `slot` must satisfy what
  // a commit checks.
  void attention_lists(const KvSlot& slot, AttnLists& out) const;

  // The single mutator of the metadata. A refused edit changes nothing. Refused:
  // - Commit: cells out of range, repeated or in use; sizes that differ; a sequence id outside
  //   [0, 64); a position < 0, not above the sequence's highest one, or not increasing within
  //   the batch.
  // - Remove: p0 < 0, p1 < p0 (unless kPosEnd), a sequence id outside [0, 64) and not kAllSeqs.
  // - Copy: ids outside [0, 64), src == dst, a bad range, or dst holding a position in the
  //   range in a cell src does not hold (it would hold that position twice).
  Status apply(const KvEdit& edit);

  // Storage for the forward pass; the contents of free cells are scratch.
  const model::KvView& view() const { return view_; }

 private:
  struct Cell {
    int32_t pos = -1;   // -1: free
    uint64_t seqs = 0;  // bit s: sequence s holds this cell
  };
  Status commit(const KvSlot& slot);
  Status remove(SeqId seq, int32_t p0, int32_t p1);
  Status copy(SeqId src, SeqId dst, int32_t p0, int32_t p1);
  // Sequence s stops holding the cells of its entries [first, last); freed cells are counted.
  void drop_entries(SeqId s, size_t first, size_t last);

  // A sequence's (position, cell) entries in ascending position order, kept by every edit so
  // that a step's bookkeeping (attention_lists, seq_pos_max, seq_cells) reads only the
  // sequences in the batch instead of scanning all n_ctx cells.
  using SeqEntries = std::vector<std::pair<int32_t, int32_t>>;

  int64_t n_ctx_;
  KvTypes types_;
  int64_t n_used_ = 0;
  std::vector<Cell> cells_;        // [n_ctx]
  std::vector<int32_t> seq_max_;   // [kMaxSeqs] highest position, -1: none
  std::vector<SeqEntries> seq_entries_;  // [kMaxSeqs]
  std::vector<KvStorage> storage_;  // per block: [n_layers, {K, V}, n_head_kv, n_ctx, head_dim]
  model::KvView view_;
};

// Whether position p lies in [p0, p1) (p1 == kPosEnd: no upper bound).
inline bool in_range(int32_t p, int32_t p0, int32_t p1) {
  return p >= p0 && (p1 == kPosEnd || p < p1);
}

}  // namespace pi::runtime
