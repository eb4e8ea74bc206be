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
//
// Window cells: a sliding-window layer (HParams::layer_swa) reads only the W latest positions
// of a sequence, so its keys and values live in a smaller store of `window` cells (KvCells)
// instead of n_ctx. A cell holds a window cell while any sequence holding it may still read
// it there: its position lies above (that sequence's highest position + 1) - W. Before a batch
// runs, plan_window() gives each of its tokens a window cell (a free one, or one no sequence
// can read any more), window_lists() maps its attention lists to window cells, and the commit
// records them. A sequence cut back (remove) to a position whose window lost cells cannot go
// on there (can_truncate); planning a batch that would read a lost cell fails.
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
  std::vector<int32_t> window;  // each token's window cell (KvCache::plan_window), or empty
  std::vector<int32_t> token;   // each entry's token id (KvCache::seq_tokens), or empty: unknown

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

// The cells of each layer: n_ctx for a layer that attends every position, `window` for a
// sliding-window one (== n_ctx: no window store, every layer holds the whole context).
struct KvCells {
  int64_t n_ctx = 0;
  int64_t window = 0;
  // The cells layer il stores.
  int64_t of(const model::HParams& hp, int64_t il) const { return hp.layer_swa(il) ? window : n_ctx; }
  bool bounded() const { return window < n_ctx; }
};
// The cells a context of these options keeps: window = min(n_ctx, n_seq_max * (n_swa - 1) +
// n_batch) for a model with sliding-window layers, unless opts.swa_full.
KvCells kv_cells(const model::HParams& hp, const ContextOptions& opts);

// Cell contents of layers [first_layer, first_layer + n_layers) in one device's memory:
// storage_bytes(hp, cells, types, first_layer, n_layers) bytes holding, per layer, K then V,
// each (its cells) x n_embd_kv values of its type in KvLayer's head-major layout. A hybrid
// context keeps each layer's cells on the device that runs its attention.
struct KvStorage {
  backend::Buffer buffer;
  int64_t first_layer = 0;
  int64_t n_layers = 0;
};

class KvCache {
 public:
  // Cell contents live in `storage`, device memory of storage_bytes(hp, cells) bytes for
  // every layer. An empty storage gives a cache of metadata only (its view's layers point
  // nowhere). A plain n_ctx: every layer holds n_ctx cells.
  KvCache(const model::HParams& hp, KvCells cells, backend::Buffer storage = {}, KvTypes types = {});
  KvCache(const model::HParams& hp, int64_t n_ctx, backend::Buffer storage = {}, KvTypes types = {})
      : KvCache(hp, KvCells{n_ctx, n_ctx}, std::move(storage), types) {}
  // Cell contents in several blocks of layers (together covering every layer once).
  KvCache(const model::HParams& hp, KvCells cells, std::vector<KvStorage> storage, KvTypes types = {});
  // Bytes of layers [first, first + n) (n < 0: to the last layer).
  static uint64_t storage_bytes(const model::HParams& hp, KvCells cells, KvTypes types = {}, int64_t first = 0,
                                int64_t n = -1);
  static uint64_t storage_bytes(const model::HParams& hp, int64_t n_ctx, KvTypes types = {}) {
    return storage_bytes(hp, KvCells{n_ctx, n_ctx}, types);
  }
  KvTypes types() const { return types_; }
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int64_t n_ctx() const { return n_ctx_; }
  KvCells cells() const { return {n_ctx_, window_}; }
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
  // The token ids sequence s holds at positions 0, 1, ... up to its first missing position or
  // cell of unknown token (committed without KvSlot::token): what a new prompt can reuse.
  std::vector<int32_t> seq_tokens(SeqId s) const;
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

  // ---- window cells (a model with sliding-window layers and a bounded window store) ----
  // Gives each token of a planned slot (positions and sequences filled in) its window cell in
  // slot.window: a free one, else one whose cell no sequence can read through its window any
  // more, the oldest position first (so a sequence can be cut back by up to about n_batch
  // tokens: the store holds that much beyond the windows). `attended`: the batch runs (every token is read by the later ones of its sequence);
  // otherwise (a restore) only the tokens within their sequence's window get one (-1 the
  // others). Fails with ContextFull when too few are left (more sequences than n_seq_max).
  // A cache without a window store leaves slot.window empty.
  Status plan_window(KvSlot& slot, bool attended = true) const;
  // `lists` (attention_lists of `slot`) as window cells, entry for entry, into `out`; fails
  // when an entry within its token's window lost its window cell (a sequence cut back too
  // far, see can_truncate).
  Status window_lists(const KvSlot& slot, const AttnLists& lists, int64_t n_swa,
                      std::vector<int32_t>& out) const;
  // The window cell of cell c, -1 when none (a cache without a window store: c).
  int32_t window_cell(int64_t c) const {
    return window_ == n_ctx_ ? static_cast<int32_t>(c) : slot_of_cell_[static_cast<size_t>(c)];
  }
  // Whether sequence s cut back to positions [0, p0) can go on at p0: every position of its
  // window there still has its window cell (always without a window store, or for p0 = 0).
  bool can_truncate(SeqId s, int32_t p0, int64_t n_swa) const;
  // Whether layer il keeps window cells (a sliding-window layer of a cache with a window store).
  bool window_layer(int64_t il) const { return window_ < n_ctx_ && window_layers_[static_cast<size_t>(il)] != 0; }

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
    int32_t token = -1;  // the token whose K and V the cell holds; -1: unknown
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
  int64_t window_;  // window cells (== n_ctx_: no window store)
  int64_t n_swa_ = 0;
  KvTypes types_;
  int64_t n_used_ = 0;
  std::vector<Cell> cells_;        // [n_ctx]
  std::vector<int32_t> seq_max_;   // [kMaxSeqs] highest position, -1: none
  std::vector<SeqEntries> seq_entries_;  // [kMaxSeqs]
  std::vector<int32_t> slot_of_cell_;    // [n_ctx] window cell of each cell, -1: none
  std::vector<int32_t> cell_of_slot_;    // [window] cell of each window cell, -1: free
  std::vector<uint8_t> window_layers_;   // [n_layer] HParams::layer_swa
  std::vector<KvStorage> storage_;  // per block: [n_layers, {K, V}, n_head_kv, n_ctx, head_dim]
  model::KvView view_;
};

// Whether position p lies in [p0, p1) (p1 == kPosEnd: no upper bound).
inline bool in_range(int32_t p, int32_t p0, int32_t p1) {
  return p >= p0 && (p1 == kPosEnd || p < p1);
}

}  // namespace pi::runtime
