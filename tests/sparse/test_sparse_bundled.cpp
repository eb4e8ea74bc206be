// Sparse vs dense greedy generation on the bundled model (models/kjv-relu/*.pwri.gguf, a small
// ReLU model trained by tools/train with its predictors), over the prompts of
// models/kjv-relu/prompts.txt. Label slow; skips when the model is absent.
//
// For each prompt, 32 tokens are generated greedily by the sparse session while a dense session
// is fed the same tokens (teacher forcing), so every step compares the two next-token choices
// on the same sequence. The test quantifies how often they agree and checks that they differ
// only where the predictor missed: a step whose argmax differs must come after at least one
// truly active neuron was not predicted (with no miss, the sparse FFN computes exactly the
// dense FFN's nonzero activations, bit for bit). It also checks threshold -inf equals dense
// and that 1 and 2 threads generate the same tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "powerinfer/engine.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace pi;

std::string bundled_model() {
  const std::filesystem::path dir = std::filesystem::path(PI_SOURCE_DIR) / "models" / "kjv-relu";
  if (!std::filesystem::exists(dir)) return "";
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.size() > 10 && n.substr(n.size() - 10) == ".pwri.gguf") return e.path().string();
  }
  return "";
}

std::vector<std::string> prompts() {
  std::ifstream in(std::string(PI_SOURCE_DIR) + "/models/kjv-relu/prompts.txt");
  std::vector<std::string> p;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) p.push_back(line);
  return p;
}

int32_t argmax(std::span<const float> l) {
  return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
}

std::unique_ptr<Session> session(const Engine& e, bool dense, int threads,
                                 std::optional<float> thr = {}, bool check = false) {
  SessionOptions o;
  o.n_ctx = 256;
  o.n_batch = 16;
  o.n_threads = threads;
  o.sampling.temperature = 0.0f;
  o.sparse.dense = dense;
  o.sparse.threshold = thr;
  o.sparse.check_predictor = check;
  auto s = Session::create(e, o);
  EXPECT_TRUE(s.ok()) << s.error().message;
  return std::move(*s);
}

std::vector<int32_t> generate(Session& s, const std::vector<int32_t>& prompt, int n) {
  EXPECT_TRUE(s.prompt(prompt).ok());
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(argmax(s.logits()));
    EXPECT_TRUE(s.advance(out.back()).ok());
  }
  return out;
}

int64_t misses(const SparsityReport& r) {
  int64_t n = 0;
  for (const LayerSparsity& l : r.layers) n += l.truly_active - l.caught;
  return n;
}

class BundledModel : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = bundled_model();
    if (path.empty()) GTEST_SKIP() << "no models/kjv-relu/*.pwri.gguf";
    auto e = Engine::load(path);
    ASSERT_TRUE(e.ok()) << e.error().message;
    engine_ = std::move(*e);
    ASSERT_NE(engine_->vocabulary(), nullptr);
    for (const std::string& p : prompts())
      prompts_.push_back(engine_->vocabulary()->encode(p, engine_->vocabulary()->add_bos(), false));
    ASSERT_FALSE(prompts_.empty());
  }
  std::unique_ptr<Engine> engine_;
  std::vector<std::vector<int32_t>> prompts_;
};

TEST_F(BundledModel, SparseGreedyDiffersFromDenseOnlyWherePredictorMisses) {
  constexpr int kTokens = 32;
  int64_t agree = 0, total = 0, identical_runs = 0;
  for (const auto& prompt : prompts_) {
    auto sp = session(*engine_, false, 2, {}, /*check=*/true);
    auto de = session(*engine_, true, 2);
    ASSERT_TRUE(sp->sparsity().sparse);
    ASSERT_TRUE(sp->prompt(prompt).ok());
    ASSERT_TRUE(de->prompt(prompt).ok());
    bool all_same = true;
    for (int i = 0; i < kTokens; ++i) {
      const int32_t ts = argmax(sp->logits()), td = argmax(de->logits());
      ++total;
      if (ts == td) {
        ++agree;
      } else {
        all_same = false;
        EXPECT_GT(misses(sp->sparsity()), 0)
            << "argmax differs at step " << i << " without a predictor miss";
      }
      ASSERT_TRUE(sp->advance(ts).ok());
      ASSERT_TRUE(
          de->advance(ts).ok());  // teacher forcing: the dense run follows the sparse tokens
    }
    identical_runs += all_same ? 1 : 0;
    const SparsityReport r = sp->sparsity();
    int64_t caught = 0, active = 0, predicted = 0, slots = 0;
    for (const LayerSparsity& l : r.layers) {
      caught += l.caught;
      active += l.truly_active;
      predicted += l.predicted;
      slots += l.tokens * l.n_ff;
    }
    std::printf(
        "  prompt of %zu tokens: predicted %.3f, recall %.4f, argmax agreement so far %lld/%lld\n",
        prompt.size(), static_cast<double>(predicted) / static_cast<double>(slots),
        active > 0 ? static_cast<double>(caught) / static_cast<double>(active) : 1.0,
        static_cast<long long>(agree), static_cast<long long>(total));
  }
  std::printf(
      "  greedy next-token agreement sparse vs dense: %lld/%lld steps (%.1f%%), %lld/%zu prompts "
      "identical\n",
      static_cast<long long>(agree), static_cast<long long>(total),
      100.0 * static_cast<double>(agree) / static_cast<double>(total),
      static_cast<long long>(identical_runs), prompts_.size());
}

TEST_F(BundledModel, EveryNeuronPredictedEqualsDense) {
  for (const auto& prompt : prompts_) {
    auto all = session(*engine_, false, 2, -std::numeric_limits<float>::infinity());
    auto de = session(*engine_, true, 2);
    EXPECT_EQ(generate(*all, prompt, 32), generate(*de, prompt, 32));
  }
}

TEST_F(BundledModel, OneAndTwoThreadsGenerateTheSame) {
  for (const auto& prompt : prompts_) {
    auto one = session(*engine_, false, 1);
    auto two = session(*engine_, false, 2);
    EXPECT_EQ(generate(*one, prompt, 32), generate(*two, prompt, 32));
  }
}

}  // namespace
