// KvCache metadata: slots, commits, truncation, overflow, several sequences (copy, remove,
// reuse of freed cells, per-sequence positions), attention lists; apply() is the only mutator
// and leaves the cache unchanged when it refuses an edit.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "backend/host_device.h"
#include "runtime/kv_cache.h"

namespace {

using pi::runtime::AttnLists;
using pi::runtime::KvCache;
using pi::runtime::KvEdit;
using pi::runtime::KvSlot;
using pi::runtime::kAllSeqs;
using pi::runtime::kPosEnd;
using pi::runtime::SeqId;

pi::model::HParams small_hparams() {
  pi::model::HParams hp;
  hp.n_layer = 3;
  hp.n_embd = 32;
  hp.n_head = 4;
  hp.n_head_kv = 2;
  hp.head_dim = 8;
  return hp;
}

// Plans n cells for sequence s at positions pos0.., or fails the test.
KvSlot plan(const KvCache& c, int64_t n, SeqId s, int32_t pos0) {
  auto slot = c.find_slot(n);
  EXPECT_TRUE(slot.ok()) << slot.error().message;
  KvSlot out = slot.ok() ? *slot : KvSlot{};
  out.assign_sequential(s, pos0);
  return out;
}

void append(KvCache& c, int64_t n, SeqId s, int32_t pos0) {
  const KvSlot slot = plan(c, n, s, pos0);
  pi::Status st = c.apply(KvEdit::commit(slot));
  ASSERT_TRUE(st.ok()) << st.error().message;
}

std::vector<int32_t> cells_of(const KvSlot& s) { return s.cells; }

// A snapshot of every cell's metadata, to check that refused edits change nothing.
std::vector<std::pair<int32_t, uint64_t>> snapshot(const KvCache& c) {
  std::vector<std::pair<int32_t, uint64_t>> v;
  for (int64_t i = 0; i < c.n_ctx(); ++i) v.emplace_back(c.cell_pos(i), c.cell_seqs(i));
  return v;
}

TEST(KvCache, StorageAndViewLayout) {
  pi::backend::CpuDevice dev(1);
  KvCache c(small_hparams(), 10,
            dev.alloc(KvCache::storage_bytes(small_hparams(), 10), "KV cache").value());
  EXPECT_EQ(c.n_ctx(), 10);
  EXPECT_EQ(c.n_used(), 0);
  EXPECT_EQ(c.nbytes(), 3u * 2 * 10 * 16 * sizeof(uint16_t));
  const auto& v = c.view();
  ASSERT_EQ(v.layers.size(), 3u);
  EXPECT_EQ(v.n_ctx, 10);
  // K and V of every layer are disjoint [n_ctx, n_embd_kv] regions.
  EXPECT_EQ(v.layers[0].v - v.layers[0].k, 10 * 16);
  EXPECT_EQ(v.layers[1].k - v.layers[0].v, 10 * 16);
  for (int64_t c0 = 0; c0 < 10; ++c0) EXPECT_EQ(c.cell_pos(c0), -1);
}

// Storage sized by the KV types: per layer K then V, each in its own type (Q8_0: 34 bytes per
// 32 values, Q4_0: 18), and the block types refused for a head_dim that is not a multiple of 32.
TEST(KvCache, StorageIsSizedByTheKvTypes) {
  pi::model::HParams hp = small_hparams();
  hp.head_dim = 32;
  hp.n_embd = 128;  // n_embd_kv 64
  const pi::runtime::KvTypes q8{pi::DType::Q8_0, pi::DType::Q8_0};
  const pi::runtime::KvTypes mixed{pi::DType::Q4_0, pi::DType::F16};
  EXPECT_EQ(KvCache::storage_bytes(hp, 10), 3u * 2 * 10 * 64 * 2);
  EXPECT_EQ(KvCache::storage_bytes(hp, 10, q8), 3u * 2 * 10 * 2 * 34);
  EXPECT_EQ(KvCache::storage_bytes(hp, {10, 10}, mixed, 0, 1), 10u * (2 * 18 + 64 * 2));
  pi::backend::CpuDevice dev(1);
  KvCache c(hp, 10, dev.alloc(KvCache::storage_bytes(hp, 10, mixed), "KV cache").value(), mixed);
  EXPECT_EQ(c.nbytes(), KvCache::storage_bytes(hp, 10, mixed));
  const auto& L = c.view().layers;
  const auto* k0 = reinterpret_cast<const uint8_t*>(L[0].k);
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(L[0].v) - k0, 10 * 2 * 18);
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(L[1].k) - k0, 10 * (2 * 18 + 64 * 2));
  EXPECT_EQ(L[2].k_type, pi::DType::Q4_0);
  EXPECT_EQ(L[2].v_type, pi::DType::F16);
  EXPECT_TRUE(pi::runtime::check_kv_types(hp, q8).ok());
  hp.head_dim = 16;
  const auto bad = pi::runtime::check_kv_types(hp, mixed);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message,
            "-ctk/--cache-type-k q4_0 needs a head_dim that is a multiple of 32; this model's "
            "head_dim is 16");
  EXPECT_TRUE(pi::runtime::check_kv_types(hp, {}).ok());
}

TEST(KvCache, FindSlotIsConstAndCommitAdvances) {
  KvCache c(small_hparams(), 10);
  KvSlot s = plan(c, 4, 0, 0);
  EXPECT_EQ(cells_of(s), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(c.n_used(), 0);  // planning changes nothing
  ASSERT_TRUE(c.apply(KvEdit::commit(s)).ok());
  EXPECT_EQ(c.n_used(), 4);
  EXPECT_EQ(c.n_free(), 6);
  EXPECT_EQ(c.seq_pos_max(0), 3);
  EXPECT_TRUE(c.holds_prefix(0, 4));
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(c.cell_pos(i), i);
    EXPECT_EQ(c.cell_seqs(i), 1u);
  }
  EXPECT_EQ(c.cell_pos(4), -1);
  s = plan(c, 6, 0, 4);
  EXPECT_EQ(s.cells.front(), 4);
  ASSERT_TRUE(c.apply(KvEdit::commit(s)).ok());
  EXPECT_EQ(c.n_free(), 0);
  EXPECT_TRUE(c.holds_prefix(0, 10));
}

TEST(KvCache, OverflowIsRefused) {
  KvCache c(small_hparams(), 8);
  append(c, 5, 0, 0);
  auto s = c.find_slot(4);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("context overflow"), std::string::npos) << s.error().message;
  EXPECT_TRUE(c.find_slot(3).ok());
  EXPECT_TRUE(c.find_slot(0).ok());
  EXPECT_FALSE(c.find_slot(-1).ok());
}

TEST(KvCache, BadCommitsChangeNothing) {
  KvCache c(small_hparams(), 8);
  const KvSlot first = plan(c, 3, 0, 0);
  ASSERT_TRUE(c.apply(KvEdit::commit(first)).ok());
  const auto before = snapshot(c);
  // Committing the same slot again would claim cells that are already in use.
  EXPECT_FALSE(c.apply(KvEdit::commit(first)).ok());
  KvSlot s;
  s.cells = {7, 8};  // runs past n_ctx
  s.assign_sequential(0, 3);
  EXPECT_FALSE(c.apply(KvEdit::commit(s)).ok());
  s.cells = {4, 4};  // the same cell twice
  EXPECT_FALSE(c.apply(KvEdit::commit(s)).ok());
  s.cells = {4, 5};
  s.assign_sequential(0, 2);  // position 2 is already held by sequence 0
  EXPECT_FALSE(c.apply(KvEdit::commit(s)).ok());
  s.pos = {6, 5};  // not increasing within the batch
  EXPECT_FALSE(c.apply(KvEdit::commit(s)).ok());
  s.assign_sequential(64, 0);  // sequence id out of range
  EXPECT_FALSE(c.apply(KvEdit::commit(s)).ok());
  s.assign_sequential(1, -1);  // negative position
  EXPECT_FALSE(c.apply(KvEdit::commit(s)).ok());
  s.assign_sequential(1, 0);
  s.pos.pop_back();  // sizes differ
  EXPECT_FALSE(c.apply(KvEdit::commit(s)).ok());
  EXPECT_EQ(snapshot(c), before);
  EXPECT_EQ(c.n_used(), 3);
  // A valid commit to other cells, of another sequence, still works afterwards.
  s.assign_sequential(1, 0);
  ASSERT_TRUE(c.apply(KvEdit::commit(s)).ok());
  EXPECT_EQ(c.cell_seqs(4), 2u);
  EXPECT_EQ(c.seq_pos_max(1), 1);
}

TEST(KvCache, TruncateAndClear) {
  KvCache c(small_hparams(), 8);
  append(c, 6, 0, 0);
  ASSERT_TRUE(c.apply(KvEdit::truncate(4)).ok());
  EXPECT_EQ(c.n_used(), 4);
  EXPECT_EQ(c.seq_pos_max(0), 3);
  EXPECT_EQ(c.cell_pos(3), 3);
  EXPECT_EQ(c.cell_pos(4), -1);
  EXPECT_EQ(c.cell_pos(5), -1);
  ASSERT_TRUE(c.apply(KvEdit::truncate(7)).ok());  // beyond what is held: no-op
  EXPECT_EQ(c.n_used(), 4);
  EXPECT_FALSE(c.apply(KvEdit::truncate(-1)).ok());
  EXPECT_EQ(c.n_used(), 4);
  // Re-appending after a truncation reuses the freed cells, contiguously.
  EXPECT_EQ(plan(c, 2, 0, 4).cells, (std::vector<int32_t>{4, 5}));
  ASSERT_TRUE(c.apply(KvEdit::clear()).ok());
  EXPECT_EQ(c.n_used(), 0);
  EXPECT_EQ(c.seq_pos_max(0), -1);
  EXPECT_EQ(c.cell_pos(0), -1);
  EXPECT_EQ(c.find_slot(8)->cells.front(), 0);
}

TEST(KvCache, CopySharesCellsAndRemoveFreesOnlyUnsharedOnes) {
  KvCache c(small_hparams(), 16);
  append(c, 4, 0, 0);  // the shared prompt: cells 0..3
  ASSERT_TRUE(c.apply(KvEdit::copy(0, 1, 0, kPosEnd)).ok());
  ASSERT_TRUE(c.apply(KvEdit::copy(0, 2, 0, 2)).ok());  // only positions 0, 1
  EXPECT_EQ(c.n_used(), 4);                              // no new cells
  EXPECT_EQ(c.cell_seqs(0), 0b111u);
  EXPECT_EQ(c.cell_seqs(2), 0b011u);
  EXPECT_EQ(c.seq_pos_max(1), 3);
  EXPECT_EQ(c.seq_pos_max(2), 1);
  EXPECT_EQ(c.seq_cells(1), 4);
  EXPECT_TRUE(c.holds_prefix(1, 4));
  EXPECT_TRUE(c.holds_prefix(2, 2));
  EXPECT_FALSE(c.holds_prefix(2, 3));

  // One step for sequences 0 and 1, one further token each.
  KvSlot step = *c.find_slot(2);
  step.pos = {4, 4};
  step.seq = {0, 1};
  ASSERT_TRUE(c.apply(KvEdit::commit(step)).ok());
  EXPECT_EQ(step.cells, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(c.cell_seqs(5), 0b010u);
  EXPECT_FALSE(c.holds_prefix(1, 5));  // its position 4 is in cell 5

  // Removing sequence 0 frees its own cell 4 but not the shared prompt.
  ASSERT_TRUE(c.apply(KvEdit::remove(0, 0, kPosEnd)).ok());
  EXPECT_EQ(c.seq_pos_max(0), -1);
  EXPECT_EQ(c.cell_pos(4), -1);
  EXPECT_EQ(c.cell_seqs(0), 0b110u);
  EXPECT_EQ(c.n_used(), 5);
  // The freed cell is reused first.
  EXPECT_EQ(c.find_slot(1)->cells, (std::vector<int32_t>{4}));

  // Removing a middle range of one sequence; cells of nobody become free.
  ASSERT_TRUE(c.apply(KvEdit::remove(1, 2, 4)).ok());
  EXPECT_EQ(c.cell_pos(2), -1);
  EXPECT_EQ(c.cell_pos(3), -1);
  EXPECT_EQ(c.seq_pos_max(1), 4);
  EXPECT_EQ(c.seq_cells(1), 3);  // positions 0, 1, 4
  // Removing from all sequences.
  ASSERT_TRUE(c.apply(KvEdit::remove(kAllSeqs, 1, kPosEnd)).ok());
  EXPECT_EQ(c.seq_pos_max(1), 0);
  EXPECT_EQ(c.seq_pos_max(2), 0);
  EXPECT_EQ(c.n_used(), 1);
}

TEST(KvCache, BadCopiesAndRemovesChangeNothing) {
  KvCache c(small_hparams(), 8);
  append(c, 3, 0, 0);
  append(c, 2, 1, 0);
  const auto before = snapshot(c);
  EXPECT_FALSE(c.apply(KvEdit::copy(0, 0, 0, kPosEnd)).ok());   // to itself
  EXPECT_FALSE(c.apply(KvEdit::copy(0, 64, 0, kPosEnd)).ok());  // id out of range
  EXPECT_FALSE(c.apply(KvEdit::copy(-1, 2, 0, kPosEnd)).ok());
  EXPECT_FALSE(c.apply(KvEdit::copy(0, 2, 3, 1)).ok());        // empty range reversed
  EXPECT_FALSE(c.apply(KvEdit::copy(0, 2, -1, 2)).ok());
  auto dup = c.apply(KvEdit::copy(0, 1, 0, kPosEnd));          // 1 already holds 0, 1
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.error().message.find("already holds position"), std::string::npos);
  EXPECT_FALSE(c.apply(KvEdit::remove(64, 0, kPosEnd)).ok());
  EXPECT_FALSE(c.apply(KvEdit::remove(0, 2, 1)).ok());
  EXPECT_FALSE(c.apply(KvEdit::remove(-2, 0, kPosEnd)).ok());
  EXPECT_EQ(snapshot(c), before);
  // Copying the part sequence 1 does not hold is fine.
  ASSERT_TRUE(c.apply(KvEdit::copy(0, 1, 2, kPosEnd)).ok());
  EXPECT_EQ(c.seq_pos_max(1), 2);
}

TEST(KvCache, FragmentedFreeCellsStillFitABatch) {
  KvCache c(small_hparams(), 8);
  for (SeqId s = 0; s < 4; ++s) append(c, 2, s, 0);  // cells 2s, 2s+1
  ASSERT_TRUE(c.apply(KvEdit::remove(1, 1, kPosEnd)).ok());  // frees cell 3
  ASSERT_TRUE(c.apply(KvEdit::remove(3, 0, kPosEnd)).ok());  // frees cells 6, 7
  EXPECT_EQ(c.find_slot(2)->cells, (std::vector<int32_t>{6, 7}));  // a contiguous run first
  EXPECT_EQ(c.find_slot(3)->cells, (std::vector<int32_t>{3, 6, 7}));
  EXPECT_FALSE(c.find_slot(4).ok());
}

TEST(KvCache, SixtyFourSequencesAndNoMore) {
  KvCache c(small_hparams(), 128);
  for (SeqId s = 0; s < 64; ++s) append(c, 1, s, 0);
  EXPECT_FALSE(c.apply(KvEdit::copy(63, 0, 0, 1)).ok());  // 0 holds position 0
  EXPECT_EQ(c.cell_seqs(63), uint64_t{1} << 63);
  EXPECT_EQ(c.seq_pos_max(63), 0);
  KvSlot s = plan(c, 1, 64, 1);
  EXPECT_FALSE(c.apply(KvEdit::commit(s)).ok());
}

TEST(KvCache, AttentionListsFollowPositionsOfEachSequence) {
  KvCache c(small_hparams(), 16);
  append(c, 3, 0, 0);                                            // cells 0..2
  ASSERT_TRUE(c.apply(KvEdit::copy(0, 1, 0, kPosEnd)).ok());
  append(c, 1, 1, 3);                                            // cell 3: seq 1 pos 3
  append(c, 1, 0, 3);                                            // cell 4: seq 0 pos 3
  // Sequence 2 holds position 1 in cell 6 only.
  KvSlot s2 = *c.find_slot(2);                                   // cells 5, 6
  s2.seq = {2, 2};
  s2.pos = {0, 1};
  ASSERT_TRUE(c.apply(KvEdit::commit(s2)).ok());
  ASSERT_TRUE(c.apply(KvEdit::remove(2, 0, 1)).ok());            // frees cell 5 (pos 0)

  // A batch: seq 1 pos 4, seq 0 pos 4 and 5, seq 2 pos 2.
  KvSlot b = *c.find_slot(4);
  EXPECT_EQ(b.cells, (std::vector<int32_t>{7, 8, 9, 10}));
  b.seq = {1, 0, 0, 2};
  b.pos = {4, 4, 5, 2};
  AttnLists lists;
  c.attention_lists(b, lists);
  auto list = [&](size_t i) {
    return std::vector<int32_t>(lists.cells.begin() + lists.begin[i],
                                lists.cells.begin() + lists.begin[i] + lists.len[i]);
  };
  EXPECT_EQ(list(0), (std::vector<int32_t>{0, 1, 2, 3, 7}));
  EXPECT_EQ(list(1), (std::vector<int32_t>{0, 1, 2, 4, 8}));
  EXPECT_EQ(list(2), (std::vector<int32_t>{0, 1, 2, 4, 8, 9}));
  EXPECT_EQ(list(3), (std::vector<int32_t>{6, 10}));
  EXPECT_EQ(lists.begin[1], lists.begin[2]);  // one sequence, shared storage
  ASSERT_TRUE(c.apply(KvEdit::commit(b)).ok());
  EXPECT_EQ(c.seq_pos_max(0), 5);
  EXPECT_EQ(c.n_used(), 10);
}

// The per-sequence index the cache keeps incrementally agrees, after every edit of a random
// mix of commits, copies and removals, with a scan of all cells.
TEST(KvCache, PerSequenceIndexAgreesWithAFullScan) {
  KvCache c(small_hparams(), 96);
  std::mt19937 rng(7);
  constexpr SeqId kSeqs = 5;
  auto check = [&](int step) {
    int64_t used = 0;
    for (int64_t i = 0; i < c.n_ctx(); ++i) used += c.cell_pos(i) >= 0 ? 1 : 0;
    ASSERT_EQ(c.n_used(), used) << "step " << step;
    for (SeqId s = 0; s < kSeqs; ++s) {
      std::vector<std::pair<int32_t, int32_t>> scan;  // (pos, cell)
      for (int64_t i = 0; i < c.n_ctx(); ++i)
        if ((c.cell_seqs(i) >> s) & 1) scan.emplace_back(c.cell_pos(i), static_cast<int32_t>(i));
      std::sort(scan.begin(), scan.end());
      ASSERT_EQ(c.seq_cells(s), static_cast<int64_t>(scan.size())) << "step " << step;
      ASSERT_EQ(c.seq_pos_max(s), scan.empty() ? -1 : scan.back().first) << "step " << step;
      // One token above the sequence's highest position, in a cell outside the cache.
      AttnLists lists;
      KvSlot one;
      one.cells = {1000 + s};
      one.seq = {s};
      one.pos = {c.seq_pos_max(s) + 1};
      c.attention_lists(one, lists);
      std::vector<int32_t> want;
      for (const auto& e : scan) want.push_back(e.second);
      want.push_back(1000 + s);
      ASSERT_EQ(lists.cells, want) << "step " << step << " seq " << s;
    }
  };
  for (int step = 0; step < 400; ++step) {
    const int what = static_cast<int>(rng() % 4);
    const SeqId s = static_cast<SeqId>(rng() % kSeqs);
    if (what <= 1) {
      const int64_t n = 1 + rng() % 6;
      if (c.n_free() < n) continue;
      append(c, n, s, c.seq_pos_max(s) + 1 + static_cast<int32_t>(rng() % 3));
    } else if (what == 2) {
      const SeqId d = static_cast<SeqId>(rng() % kSeqs);
      if (d == s) continue;
      const int32_t p0 = static_cast<int32_t>(rng() % 20);
      (void)c.apply(KvEdit::copy(s, d, p0, rng() % 2 ? kPosEnd : p0 + 5));  // may be refused
    } else {
      const int32_t p0 = static_cast<int32_t>(rng() % 30);
      ASSERT_TRUE(c.apply(KvEdit::remove(rng() % 8 == 0 ? kAllSeqs : s, p0,
                                         rng() % 2 ? kPosEnd : p0 + 4)).ok());
    }
    check(step);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
