#include "runtime/kv_cache.h"

#include <algorithm>
#include <climits>
#include <iterator>
#include <new>
#include <string>
#include <utility>

namespace pi::runtime {
namespace {

bool valid_seq(SeqId s) { return s >= 0 && s < kMaxSeqs; }
uint64_t bit(SeqId s) { return uint64_t{1} << s; }

long long ll(int64_t v) { return static_cast<long long>(v); }

// "[p0, p1)" or "[p0, end)" for messages.
std::string range_text(int32_t p0, int32_t p1) {
  std::string s = "[";
  s += std::to_string(p0);
  s += ", ";
  s += p1 == kPosEnd ? std::string("end") : std::to_string(p1);
  s += ")";
  return s;
}

Status check_range(int32_t p0, int32_t p1) {
  if (p0 < 0 || (p1 != kPosEnd && p1 < p0))
    return err("KV cache: invalid position range %s", range_text(p0, p1).c_str());
  return Status::Ok();
}

}  // namespace

void KvSlot::assign_sequential(SeqId s, int32_t pos0) {
  pos.resize(cells.size());
  seq.assign(cells.size(), s);
  for (size_t i = 0; i < cells.size(); ++i) pos[i] = pos0 + static_cast<int32_t>(i);
}

Status check_kv_types(const model::HParams& hp, KvTypes t) {
  for (auto [type, flag] : {std::pair{t.k, "-ctk/--cache-type-k"}, std::pair{t.v, "-ctv/--cache-type-v"}}) {
    const std::string name(dtype_name(type));
    if (!backend::kv_type_supported(type))
      return err("%s %s: the KV cache stores f16, q8_0 or q4_0", flag, name.c_str());
    const int64_t bs = dtype_info(type).block_size;
    if (hp.head_dim % bs != 0)
      return err("%s %s needs a head_dim that is a multiple of %lld; this model's head_dim is %lld",
                 flag, name.c_str(), ll(bs), ll(hp.head_dim));
  }
  return Status::Ok();
}

KvCells kv_cells(const model::HParams& hp, const ContextOptions& opts) {
  KvCells c{opts.n_ctx, opts.n_ctx};
  if (hp.n_swa > 0 && !opts.swa_full) {
    const int64_t batch = std::min(opts.n_batch, opts.n_ctx);
    c.window = std::min(opts.n_ctx, static_cast<int64_t>(std::max(opts.n_seq_max, 1)) * (hp.n_swa - 1) + batch);
  }
  return c;
}

namespace {

// Bytes of one layer's K and V.
std::pair<size_t, size_t> layer_bytes(const model::HParams& hp, KvCells cells, KvTypes types, int64_t il) {
  const int64_t n = cells.of(hp, il) * hp.n_embd_kv();
  return {row_bytes(types.k, n), row_bytes(types.v, n)};
}

}  // namespace

uint64_t KvCache::storage_bytes(const model::HParams& hp, KvCells cells, KvTypes types, int64_t first, int64_t n) {
  const int64_t last = n < 0 ? hp.n_layer : std::min(hp.n_layer, first + n);
  uint64_t bytes = 0;
  for (int64_t il = first; il < last; ++il) {
    const auto [k, v] = layer_bytes(hp, cells, types, il);
    bytes += k + v;
  }
  return bytes;
}

namespace {

std::vector<KvStorage> one_block(const model::HParams& hp, backend::Buffer storage) {
  std::vector<KvStorage> v;
  v.push_back(KvStorage{std::move(storage), 0, hp.n_layer});
  return v;
}

}  // namespace

KvCache::KvCache(const model::HParams& hp, KvCells cells, backend::Buffer storage, KvTypes types)
    : KvCache(hp, cells, one_block(hp, std::move(storage)), types) {}

KvCache::KvCache(const model::HParams& hp, KvCells cells, std::vector<KvStorage> storage, KvTypes types)
    : n_ctx_(cells.n_ctx),
      window_(std::min(cells.window, cells.n_ctx)),
      n_swa_(hp.n_swa),
      types_(types),
      cells_(static_cast<size_t>(cells.n_ctx)),
      seq_max_(static_cast<size_t>(kMaxSeqs), -1),
      seq_entries_(static_cast<size_t>(kMaxSeqs)),
      storage_(std::move(storage)) {
  if (window_ < n_ctx_) {
    slot_of_cell_.assign(static_cast<size_t>(n_ctx_), -1);
    cell_of_slot_.assign(static_cast<size_t>(window_), -1);
  }
  view_.n_ctx = n_ctx_;
  view_.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) window_layers_.push_back(hp.layer_swa(il) ? 1 : 0);
  for (const KvStorage& block : storage_) {
    auto* base = block.buffer.as<uint8_t>();
    size_t at = 0;
    for (int64_t j = 0; j < block.n_layers; ++j) {
      const int64_t il = block.first_layer + j;
      if (il >= hp.n_layer) break;
      const auto [k_bytes, v_bytes] = layer_bytes(hp, KvCells{n_ctx_, window_}, types, il);
      model::KvLayer& L = view_.layers[static_cast<size_t>(il)];
      L.k = base != nullptr ? reinterpret_cast<uint16_t*>(base + at) : nullptr;
      L.v = base != nullptr ? reinterpret_cast<uint16_t*>(base + at + k_bytes) : nullptr;
      L.head_stride = KvCells{n_ctx_, window_}.of(hp, il) * hp.head_dim;
      L.cell_stride = hp.head_dim;
      L.k_type = types.k;
      L.v_type = types.v;
      at += k_bytes + v_bytes;
    }
  }
}

size_t KvCache::nbytes() const {
  size_t n = 0;
  for (const KvStorage& b : storage_) n += b.buffer.bytes();
  return n;
}

std::span<const std::pair<int32_t, int32_t>> KvCache::seq_entries(SeqId s) const {
  if (!valid_seq(s)) return {};
  return seq_entries_[static_cast<size_t>(s)];
}

backend::Device* KvCache::layer_device(int64_t il) const {
  for (const KvStorage& b : storage_)
    if (il >= b.first_layer && il < b.first_layer + b.n_layers) return b.buffer.device();
  return nullptr;
}

int32_t KvCache::seq_pos_max(SeqId s) const {
  return valid_seq(s) ? seq_max_[static_cast<size_t>(s)] : -1;
}

std::vector<int32_t> KvCache::seq_tokens(SeqId s) const {
  std::vector<int32_t> out;
  for (const auto& [pos, cell] : seq_entries(s)) {
    const int32_t t = cells_[static_cast<size_t>(cell)].token;
    if (pos != static_cast<int32_t>(out.size()) || t < 0) break;
    out.push_back(t);
  }
  return out;
}

int64_t KvCache::seq_cells(SeqId s) const {
  return valid_seq(s) ? static_cast<int64_t>(seq_entries_[static_cast<size_t>(s)].size()) : 0;
}

bool KvCache::holds_prefix(SeqId s, int64_t p) const {
  if (!valid_seq(s) || p < 0 || p > n_ctx_) return false;
  const SeqEntries& e = seq_entries_[static_cast<size_t>(s)];
  if (static_cast<int64_t>(e.size()) != p) return false;
  for (size_t i = 0; i < e.size(); ++i)
    if (e[i].first != static_cast<int32_t>(i) || e[i].second != static_cast<int32_t>(i)) return false;
  return true;
}

Result<KvSlot> KvCache::find_slot(int64_t n) const {
  if (n < 0) return err("invalid batch size %lld", ll(n));
  if (n > n_free()) {
    return with_code(err("context overflow: %lld tokens do not fit (context size %lld, %lld in use)",
                         ll(n), ll(n_ctx_), ll(n_used_)),
                     ErrorCode::ContextFull);
  }
  KvSlot slot;
  slot.cells.reserve(static_cast<size_t>(n));
  if (n == 0) return slot;
  // The first run of n free cells.
  int64_t run = 0;
  for (int64_t c = 0; c < n_ctx_; ++c) {
    run = cells_[static_cast<size_t>(c)].pos < 0 ? run + 1 : 0;
    if (run == n) {
      for (int64_t k = c - n + 1; k <= c; ++k) slot.cells.push_back(static_cast<int32_t>(k));
      return slot;
    }
  }
  // No run is long enough: the lowest free cells.
  for (int64_t c = 0; c < n_ctx_ && slot.size() < n; ++c)
    if (cells_[static_cast<size_t>(c)].pos < 0) slot.cells.push_back(static_cast<int32_t>(c));
  return slot;
}

void KvCache::attention_lists(const KvSlot& slot, AttnLists& out) const {
  const auto m = static_cast<size_t>(slot.size());
  out.cells.clear();
  out.pos.clear();
  out.begin.resize(m);
  out.len.resize(m);
  uint64_t done = 0;
  for (size_t i = 0; i < m; ++i) {
    const SeqId s = slot.seq[i];
    if ((done & bit(s)) != 0) continue;
    done |= bit(s);
    // The sequence's cached cells in position order, then its tokens of this batch, whose
    // positions are above the cached ones and increase (what a commit checks).
    const SeqEntries& cached = seq_entries_[static_cast<size_t>(s)];
    const auto begin = static_cast<int64_t>(out.cells.size());
    for (const auto& e : cached) {
      out.cells.push_back(e.second);
      out.pos.push_back(e.first);
    }
    auto n = static_cast<int64_t>(cached.size());
    for (size_t j = i; j < m; ++j) {
      if (slot.seq[j] != s) continue;
      out.cells.push_back(slot.cells[j]);
      out.pos.push_back(slot.pos[j]);
      out.begin[j] = begin;
      out.len[j] = ++n;
    }
  }
}

Status KvCache::apply(const KvEdit& edit) {
  switch (edit.kind) {
    case KvEdit::Kind::Commit:
      if (edit.slot == nullptr) return err("KV cache: commit without a slot");
      return commit(*edit.slot);
    case KvEdit::Kind::Remove:
      return remove(edit.seq, edit.p0, edit.p1);
    case KvEdit::Kind::Copy:
      return copy(edit.seq, edit.dst, edit.p0, edit.p1);
  }
  return err("KV cache: unknown edit");
}

Status KvCache::commit(const KvSlot& slot) {
  const auto m = static_cast<size_t>(slot.size());
  if (slot.pos.size() != m || slot.seq.size() != m) {
    return err("KV cache: commit of %zu cells with %zu positions and %zu sequence ids", m,
               slot.pos.size(), slot.seq.size());
  }
  int32_t last[kMaxSeqs];
  std::copy(seq_max_.begin(), seq_max_.end(), last);
  for (size_t i = 0; i < m; ++i) {
    const int32_t c = slot.cells[i];
    const SeqId s = slot.seq[i];
    if (c < 0 || c >= n_ctx_ || cells_[static_cast<size_t>(c)].pos >= 0) {
      return err("KV cache: cannot commit cell %d (context size %lld, %lld in use)", c,
                 ll(n_ctx_), ll(n_used_));
    }
    if (!valid_seq(s))
      return err("KV cache: sequence id %d outside [0, %d)", s, kMaxSeqs);
    if (slot.pos[i] <= last[s]) {
      return err("KV cache: position %d of sequence %d does not follow its position %d", slot.pos[i],
                 s, last[s]);
    }
    last[s] = slot.pos[i];
  }
  // Repeated cells: mark each cell (pos -2) and undo the marks whatever happens.
  bool repeated = false;
  size_t marked = 0;
  for (; marked < m; ++marked) {
    Cell& cell = cells_[static_cast<size_t>(slot.cells[marked])];
    if (cell.pos == -2) {
      repeated = true;
      break;
    }
    cell.pos = -2;
  }
  for (size_t i = 0; i < marked; ++i) cells_[static_cast<size_t>(slot.cells[i])].pos = -1;
  if (repeated) return err("KV cache: cell %d planned twice in one batch", slot.cells[marked]);

  if (window_ < n_ctx_ && slot.window.size() != m)
    return err("KV cache: commit of %zu cells with %zu window cells (plan_window first)", m, slot.window.size());
  for (size_t i = 0; i < m; ++i) {
    cells_[static_cast<size_t>(slot.cells[i])] =
        Cell{slot.pos[i], bit(slot.seq[i]), slot.token.size() == m ? slot.token[i] : -1};
    seq_entries_[static_cast<size_t>(slot.seq[i])].emplace_back(slot.pos[i], slot.cells[i]);
    if (window_ < n_ctx_ && slot.window[i] >= 0) {
      // The window cell's earlier cell (one no sequence reads there any more) loses it.
      int32_t& held = cell_of_slot_[static_cast<size_t>(slot.window[i])];
      if (held >= 0) slot_of_cell_[static_cast<size_t>(held)] = -1;
      held = slot.cells[i];
      slot_of_cell_[static_cast<size_t>(slot.cells[i])] = slot.window[i];
    }
  }
  std::copy(last, last + kMaxSeqs, seq_max_.begin());
  n_used_ += static_cast<int64_t>(m);
  return Status::Ok();
}

Status KvCache::remove(SeqId seq, int32_t p0, int32_t p1) {
  PI_TRY(check_range(p0, p1));
  if (seq != kAllSeqs && !valid_seq(seq))
    return err("KV cache: sequence id %d outside [0, %d)", seq, kMaxSeqs);
  for (SeqId s = 0; s < kMaxSeqs; ++s) {
    if (seq != kAllSeqs && s != seq) continue;
    SeqEntries& e = seq_entries_[static_cast<size_t>(s)];
    const auto lo = std::lower_bound(e.begin(), e.end(), std::make_pair(p0, INT32_MIN));
    const auto hi = p1 == kPosEnd ? e.end()
                                  : std::lower_bound(lo, e.end(), std::make_pair(p1, INT32_MIN));
    drop_entries(s, static_cast<size_t>(lo - e.begin()), static_cast<size_t>(hi - e.begin()));
  }
  return Status::Ok();
}

void KvCache::drop_entries(SeqId s, size_t first, size_t last) {
  SeqEntries& e = seq_entries_[static_cast<size_t>(s)];
  if (first >= last) return;
  for (size_t k = first; k < last; ++k) {
    Cell& cell = cells_[static_cast<size_t>(e[k].second)];
    cell.seqs &= ~bit(s);
    if (cell.seqs == 0) {
      cell.pos = -1;
      --n_used_;
      if (window_ < n_ctx_) {
        int32_t& w = slot_of_cell_[static_cast<size_t>(e[k].second)];
        if (w >= 0) cell_of_slot_[static_cast<size_t>(w)] = -1;
        w = -1;
      }
    }
  }
  e.erase(e.begin() + static_cast<std::ptrdiff_t>(first), e.begin() + static_cast<std::ptrdiff_t>(last));
  seq_max_[static_cast<size_t>(s)] = e.empty() ? -1 : e.back().first;
}

Status KvCache::copy(SeqId src, SeqId dst, int32_t p0, int32_t p1) {
  PI_TRY(check_range(p0, p1));
  if (!valid_seq(src) || !valid_seq(dst)) {
    return err("KV cache: sequence ids %d -> %d: both must be in [0, %d)", src, dst, kMaxSeqs);
  }
  if (src == dst) return err("KV cache: cannot copy sequence %d to itself", src);
  SeqEntries& d = seq_entries_[static_cast<size_t>(dst)];
  for (const auto& [pos, c] : d) {
    if (in_range(pos, p0, p1) && (cells_[static_cast<size_t>(c)].seqs & bit(src)) == 0) {
      return err("KV cache: sequence %d already holds position %d of the range %s copied from %d",
                 dst, pos, range_text(p0, p1).c_str(), src);
    }
  }
  SeqEntries added;
  for (const auto& [pos, c] : seq_entries_[static_cast<size_t>(src)]) {
    Cell& cell = cells_[static_cast<size_t>(c)];
    if (!in_range(pos, p0, p1) || (cell.seqs & bit(dst)) != 0) continue;
    cell.seqs |= bit(dst);
    added.emplace_back(pos, c);
  }
  if (!added.empty()) {
    SeqEntries merged;
    merged.reserve(d.size() + added.size());
    std::merge(d.begin(), d.end(), added.begin(), added.end(), std::back_inserter(merged));
    d = std::move(merged);
    seq_max_[static_cast<size_t>(dst)] = d.back().first;
  }
  return Status::Ok();
}

Status KvCache::plan_window(KvSlot& slot, bool attended) const {
  slot.window.clear();
  if (window_ == n_ctx_) return Status::Ok();
  const auto m = static_cast<size_t>(slot.size());
  // Each batch sequence's last position here: a restore's tokens below its window need none.
  int32_t last[kMaxSeqs];
  std::copy(seq_max_.begin(), seq_max_.end(), last);
  for (size_t i = 0; i < m; ++i)
    if (valid_seq(slot.seq[i])) last[slot.seq[i]] = std::max(last[slot.seq[i]], slot.pos[i]);
  // A held window cell may be given again when every sequence holding its cell reads from
  // above (its highest position + 1) - W on: the batch's tokens of a sequence come after it.
  const auto readable = [&](const Cell& cell) {
    for (SeqId s = 0; s < kMaxSeqs; ++s)
      if ((cell.seqs & bit(s)) != 0 && cell.pos > seq_max_[static_cast<size_t>(s)] + 1 - n_swa_) return true;
    return false;
  };
  // Free window cells first, then the ones no sequence reads any more, oldest position first:
  // a dead cell kept longest lets a sequence be cut back furthest (can_truncate).
  std::vector<std::pair<int32_t, int32_t>> order;  // (position, window cell); -1: free
  for (size_t w = 0; w < cell_of_slot_.size(); ++w) {
    const int32_t held = cell_of_slot_[w];
    if (held < 0) {
      order.emplace_back(-1, static_cast<int32_t>(w));
    } else if (const Cell& cell = cells_[static_cast<size_t>(held)]; !readable(cell)) {
      order.emplace_back(cell.pos, static_cast<int32_t>(w));
    }
  }
  std::sort(order.begin(), order.end());
  slot.window.assign(m, -1);
  size_t next = 0;
  for (size_t i = 0; i < m; ++i) {
    if (!attended && slot.pos[i] <= last[slot.seq[i]] + 1 - n_swa_) continue;
    if (next == order.size()) {
      slot.window.clear();
      return with_code(err("the sliding-window layers' %lld cells are all in use (more sequences than the "
                           "context was made for; --swa-full keeps the whole context there)",
                           ll(window_)),
                       ErrorCode::ContextFull);
    }
    slot.window[i] = order[next++].second;
  }
  return Status::Ok();
}

Status KvCache::window_lists(const KvSlot& slot, const AttnLists& lists, int64_t n_swa,
                             std::vector<int32_t>& out) const {
  out.resize(lists.cells.size());
  if (window_ == n_ctx_) {
    std::copy(lists.cells.begin(), lists.cells.end(), out.begin());
    return Status::Ok();
  }
  // The batch's own cells are not committed yet: their window cells are the plan's.
  std::vector<std::pair<int32_t, int32_t>> planned(static_cast<size_t>(slot.size()));
  for (size_t i = 0; i < planned.size(); ++i) planned[i] = {slot.cells[i], slot.window[i]};
  std::sort(planned.begin(), planned.end());
  for (size_t k = 0; k < lists.cells.size(); ++k) {
    const int32_t c = lists.cells[k];
    const auto it = std::lower_bound(planned.begin(), planned.end(), std::make_pair(c, INT32_MIN));
    out[k] = it != planned.end() && it->first == c ? it->second : slot_of_cell_[static_cast<size_t>(c)];
  }
  for (size_t i = 0; i < static_cast<size_t>(slot.size()); ++i) {
    for (int64_t k = lists.begin[i]; k < lists.begin[i] + lists.len[i]; ++k) {
      const auto at = static_cast<size_t>(k);
      if (lists.pos[at] > slot.pos[i] - n_swa && out[at] < 0) {
        return err("sequence %d: position %d's window reads position %d, which the sliding-window layers no "
                   "longer hold (the sequence was cut back further than its window; evaluate it again from "
                   "position 0, or use --swa-full)",
                   slot.seq[i], slot.pos[i], lists.pos[at]);
      }
    }
  }
  return Status::Ok();
}

bool KvCache::can_truncate(SeqId s, int32_t p0, int64_t n_swa) const {
  if (window_ == n_ctx_ || p0 <= 0 || !valid_seq(s)) return true;
  for (const auto& [pos, c] : seq_entries_[static_cast<size_t>(s)])
    if (pos > p0 - n_swa && pos < p0 && slot_of_cell_[static_cast<size_t>(c)] < 0) return false;
  return true;
}

}  // namespace pi::runtime
