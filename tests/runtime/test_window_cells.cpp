// Sliding-window layers keep a smaller store (runtime/kv_cache.h, "window cells"): a tiny
// gpt-oss (windows of 3 on even layers) computes the same logits bit for bit with the store
// bounded as with the whole context there (--swa-full), for one sequence in any batch split
// and thread count and for several sequences decoded together; the store holds n_seq x
// (window - 1) + n_batch cells per window layer; a sequence is cut back only where its
// window is still held, and a plan that would read a lost cell fails instead of computing.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "model/model.h"
#include "model/tiny_model.h"
#include "runtime/context.h"

namespace {

using pi::runtime::Context;
using pi::runtime::ContextOptions;

pi::testing::TinySpec gpt_oss() {
  pi::testing::TinySpec s;
  s.arch = "gpt-oss";
  s.vocab = false;
  s.wtype = pi::DType::F32;
  s.expert_wtype = pi::DType::MXFP4;
  s.n_layer = 3;  // windows on layers 0 and 2
  s.n_swa = 3;
  return s;
}

std::unique_ptr<pi::model::Model> load() {
  const std::string path = pi::testing::temp_path("window_cells_gpt_oss.gguf");
  EXPECT_TRUE(pi::testing::write_tiny_model(gpt_oss(), path).ok());
  auto m = pi::model::Model::load(path);
  EXPECT_TRUE(m.ok()) << m.error().message;
  return m.ok() ? std::move(*m) : nullptr;
}

ContextOptions options(bool full, int64_t n_batch, int threads, int n_seq = 1) {
  ContextOptions o;
  o.n_ctx = 64;
  o.n_batch = n_batch;
  o.n_threads = threads;
  o.n_seq_max = n_seq;
  o.all_logits = true;
  o.swa_full = full;
  return o;
}

std::vector<int32_t> tokens(size_t n, int32_t salt = 0) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 37 + 11 + salt * 101) % 300);
  return t;
}

std::vector<float> run(const pi::model::Model& m, const ContextOptions& o, const std::vector<int32_t>& t) {
  auto c = Context::create(m, o);
  EXPECT_TRUE(c.ok()) << c.error().message;
  if (!c.ok()) return {};
  std::vector<float> out;
  const pi::Status s = (*c)->decode(t, &out);
  EXPECT_TRUE(s.ok()) << s.error().message;
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(WindowCells, OneSequenceMatchesTheWholeContextForAnySplit) {
  auto m = load();
  ASSERT_NE(m, nullptr);
  const auto t = tokens(50);  // far beyond the window of 3 and the store of 2 + n_batch
  const std::vector<float> want = run(*m, options(true, 50, 2), t);
  ASSERT_FALSE(want.empty());
  for (int threads : {1, 2}) {
    for (int64_t batch : {1, 4, 7, 50}) {
      EXPECT_TRUE(same_bits(run(*m, options(false, batch, threads), t), want)) << threads << " threads, batch " << batch;
      EXPECT_TRUE(same_bits(run(*m, options(true, batch, threads), t), want)) << "full, batch " << batch;
    }
  }
}

TEST(WindowCells, TheStoreIsBoundedByTheWindow) {
  auto m = load();
  ASSERT_NE(m, nullptr);
  const pi::model::HParams& hp = m->hparams();
  auto bounded = Context::create(*m, options(false, 8, 1, 2));
  auto full = Context::create(*m, options(true, 8, 1, 2));
  ASSERT_TRUE(bounded.ok() && full.ok());
  const pi::runtime::KvCells cells = (*bounded)->cache().cells();
  EXPECT_EQ(cells.n_ctx, 64);
  EXPECT_EQ(cells.window, 2 * (3 - 1) + 8);
  EXPECT_FALSE((*full)->cache().cells().bounded());
  // Per layer K and V of n_embd_kv f16 values per cell: two window layers of 12 cells, one of 64.
  const uint64_t cell = static_cast<uint64_t>(hp.n_embd_kv()) * 2 * 2;
  EXPECT_EQ((*bounded)->cache().nbytes(), cell * (2 * 12 + 64));
  EXPECT_EQ((*full)->cache().nbytes(), cell * 3 * 64);
  // The store stays the same size however long the context: a 1024-cell context's window
  // layers still hold 12 cells.
  ContextOptions big = options(false, 8, 1, 2);
  big.n_ctx = 1024;
  EXPECT_EQ(pi::runtime::KvCache::storage_bytes(hp, pi::runtime::kv_cells(hp, big)), cell * (2 * 12 + 1024));
}

TEST(WindowCells, SequencesDecodedTogetherMatchTheWholeContext) {
  auto m = load();
  ASSERT_NE(m, nullptr);
  // Three sequences interleaved, unequal lengths, three tokens per step.
  const std::vector<std::vector<int32_t>> seqs = {tokens(30, 1), tokens(23, 2), tokens(17, 3)};
  std::vector<pi::BatchToken> steps;
  for (size_t i = 0; i < 30; ++i)
    for (int32_t s = 0; s < 3; ++s)
      if (i < seqs[static_cast<size_t>(s)].size())
        steps.push_back({seqs[static_cast<size_t>(s)][i], s, static_cast<int32_t>(i), true});
  std::vector<float> got[2];
  for (bool full : {false, true}) {
    ContextOptions o = options(full, 5, 2, 3);
    o.n_ctx = 128;  // the 70 tokens of the three
    o.all_logits = false;
    auto c = Context::create(*m, o);
    ASSERT_TRUE(c.ok()) << c.error().message;
    for (size_t at = 0; at < steps.size(); at += 3) {  // (at most n_seq_max logit rows a batch)
      const std::span<const pi::BatchToken> step(steps.data() + at, std::min<size_t>(3, steps.size() - at));
      const pi::Status st = (*c)->decode_batch(step);
      ASSERT_TRUE(st.ok()) << st.error().message;
      for (size_t i = 0; i < step.size(); ++i) {
        auto l = (*c)->batch_logits(i);
        got[full].insert(got[full].end(), l.begin(), l.end());
      }
    }
  }
  ASSERT_EQ(got[0].size(), steps.size() * static_cast<size_t>(m->hparams().n_vocab));
  EXPECT_TRUE(same_bits(got[0], got[1]));
}

TEST(WindowCells, ASequenceIsCutBackOnlyWhereItsWindowIsHeld) {
  auto m = load();
  ASSERT_NE(m, nullptr);
  const auto t = tokens(40);
  auto c = Context::create(*m, options(false, 4, 1));
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->decode(std::span(t).first(30)).ok());
  // Position 10's window (8, 9) was given to later positions long ago.
  EXPECT_FALSE((*c)->can_truncate(0, 10));
  const pi::Status refused = (*c)->seq_rm(0, 10, -1);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("sequence 0 cannot be cut back to position 10"), std::string::npos)
      << refused.error().message;
  EXPECT_EQ((*c)->seq_pos_max(0), 29);  // nothing changed
  EXPECT_FALSE((*c)->truncate(10).ok());
  // Cut back to 28 (its window 26, 27 is held), then on: the whole context's logits.
  EXPECT_TRUE((*c)->can_truncate(0, 28));
  ASSERT_TRUE((*c)->seq_rm(0, 28, -1).ok());
  std::vector<float> after;
  ASSERT_TRUE((*c)->decode(std::span(t).subspan(28), &after).ok());
  std::vector<float> whole = run(*m, options(true, 4, 1), t);
  whole.erase(whole.begin(), whole.begin() + 28 * m->hparams().n_vocab);
  EXPECT_TRUE(same_bits(after, whole));
  // Back to 0 always works.
  EXPECT_TRUE((*c)->can_truncate(0, 0));
  EXPECT_TRUE((*c)->truncate(0).ok());
  // With the whole context kept, any point.
  auto f = Context::create(*m, options(true, 4, 1));
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->decode(std::span(t).first(30)).ok());
  EXPECT_TRUE((*f)->can_truncate(0, 10));
  EXPECT_TRUE((*f)->seq_rm(0, 10, -1).ok());
}

TEST(WindowCells, APlanThatWouldReadALostCellFails) {
  // A middle cut (not checked: positions [5, 25) go, the end stays) leaves position 30's
  // window intact; a copy of an old prefix into another sequence reads positions whose
  // window cells are gone: the next batch of that sequence is refused, not computed.
  auto m = load();
  ASSERT_NE(m, nullptr);
  const auto t = tokens(40);
  auto c = Context::create(*m, options(false, 4, 1, 2));
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->decode(std::span(t).first(30)).ok());
  ASSERT_TRUE((*c)->seq_cp(0, 1, 0, 12).ok());
  const pi::BatchToken next{5, 1, 12, true};
  const pi::Status st = (*c)->decode_batch(std::span(&next, 1));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("no longer hold"), std::string::npos) << st.error().message;
  // Sequence 0 goes on unharmed.
  const pi::BatchToken on{t[30], 0, 30, true};
  EXPECT_TRUE((*c)->decode_batch(std::span(&on, 1)).ok());
}

}  // namespace
