// KvCache metadata: slots, commits, truncation, overflow; apply() is the only mutator and
// leaves the cache unchanged when it refuses an edit.
#include <gtest/gtest.h>

#include "runtime/kv_cache.h"

namespace {

using pi::runtime::KvCache;
using pi::runtime::KvEdit;
using pi::runtime::KvSlot;

pi::model::HParams small_hparams() {
  pi::model::HParams hp;
  hp.n_layer = 3;
  hp.n_embd = 32;
  hp.n_head = 4;
  hp.n_head_kv = 2;
  hp.head_dim = 8;
  return hp;
}

TEST(KvCache, StorageAndViewLayout) {
  KvCache c(small_hparams(), 10);
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

TEST(KvCache, FindSlotIsConstAndCommitAdvances) {
  KvCache c(small_hparams(), 10);
  auto s = c.find_slot(4);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->pos0, 0);
  EXPECT_EQ(s->n, 4);
  EXPECT_EQ(c.n_used(), 0);  // planning changes nothing
  ASSERT_TRUE(c.apply(KvEdit::commit(*s)).ok());
  EXPECT_EQ(c.n_used(), 4);
  EXPECT_EQ(c.n_free(), 6);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(c.cell_pos(i), i);
  EXPECT_EQ(c.cell_pos(4), -1);
  s = c.find_slot(6);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->pos0, 4);
  ASSERT_TRUE(c.apply(KvEdit::commit(*s)).ok());
  EXPECT_EQ(c.n_free(), 0);
}

TEST(KvCache, OverflowIsRefused) {
  KvCache c(small_hparams(), 8);
  ASSERT_TRUE(c.apply(KvEdit::commit(*c.find_slot(5))).ok());
  auto s = c.find_slot(4);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("context overflow"), std::string::npos) << s.error().message;
  EXPECT_TRUE(c.find_slot(3).ok());
  EXPECT_TRUE(c.find_slot(0).ok());
}

TEST(KvCache, StaleOrOversizedCommitChangesNothing) {
  KvCache c(small_hparams(), 8);
  const KvSlot first = *c.find_slot(3);
  ASSERT_TRUE(c.apply(KvEdit::commit(first)).ok());
  // Committing the same slot again would claim cells that are already in use.
  EXPECT_FALSE(c.apply(KvEdit::commit(first)).ok());
  EXPECT_FALSE(c.apply(KvEdit::commit(KvSlot{3, 6})).ok());  // runs past n_ctx
  EXPECT_FALSE(c.apply(KvEdit::commit(KvSlot{4, 1})).ok());  // leaves a hole
  EXPECT_EQ(c.n_used(), 3);
  EXPECT_EQ(c.cell_pos(3), -1);
}

TEST(KvCache, TruncateAndClear) {
  KvCache c(small_hparams(), 8);
  ASSERT_TRUE(c.apply(KvEdit::commit(*c.find_slot(6))).ok());
  ASSERT_TRUE(c.apply(KvEdit::truncate(4)).ok());
  EXPECT_EQ(c.n_used(), 4);
  EXPECT_EQ(c.cell_pos(3), 3);
  EXPECT_EQ(c.cell_pos(4), -1);
  EXPECT_EQ(c.cell_pos(5), -1);
  ASSERT_TRUE(c.apply(KvEdit::truncate(7)).ok());  // beyond n_used: no-op
  EXPECT_EQ(c.n_used(), 4);
  EXPECT_FALSE(c.apply(KvEdit::truncate(-1)).ok());
  ASSERT_TRUE(c.apply(KvEdit::clear()).ok());
  EXPECT_EQ(c.n_used(), 0);
  EXPECT_EQ(c.cell_pos(0), -1);
  EXPECT_EQ(c.find_slot(8)->pos0, 0);
}

}  // namespace
