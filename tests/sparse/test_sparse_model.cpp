// Whole-model sparse inference on synthetic PowerInfer files (`powerinfer synth --preset tiny
// --pwri`, whose predictors really predict: ~10% of neurons fire, recall ~0.97), run through
// runtime::Context:
//  - the predictor's lists equal a float64 evaluation of fc2 · ReLU(fc1 · h) >= threshold
//    (except logits within rounding of the threshold);
//  - threshold -inf (every neuron predicted) gives exactly the logits and tokens of --dense
//    (prompt batches of block-format weights: logits within 1e-5, same tokens);
//  - 1, 2 and 3 threads give bit-identical logits and tokens;
//  - batch splits (1, 7, 512) give the same masks, the same greedy tokens and logits equal
//    within rounding (the kernels' one-token and many-token forms sum in different orders);
//  - the predictor check changes nothing and reports a good recall;
//  - files without predictors run dense; partial predictors are an error (non-ReLU PowerInfer
//    files are rejected by the model loader already).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "cli/run_command.h"
#include "gguf/writer.h"
#include "kernels/ref/ref.h"
#include "model/model.h"
#include "model/tiny_model.h"
#include "runtime/context.h"
#include "backend/host_device.h"
#include "sparse/sparse_ffn.h"
#include "tensor/quant.h"

namespace {

using namespace pi;

const std::string kBin = PI_BIN_DIR;
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Synth {
  const char* arch;
  const char* type;
  double batch_tol;  // relative logit difference between batch splits
};

void PrintTo(const Synth& s, std::ostream* os) { *os << s.arch << "_" << s.type; }

std::string synth_path(const Synth& s) {
  const std::string path =
      pi::testing::temp_path(std::string("synth_") + s.arch + "_" + s.type + ".pwri.gguf");
  if (!std::filesystem::exists(path)) {
    auto r = pi::testing::run_command(
        kBin + "/powerinfer synth --preset tiny --pwri --no-progress --arch " + s.arch +
        " --type " + s.type + " -o " + path);
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  return path;
}

std::unique_ptr<runtime::Context> context(const model::Model& m, int64_t n_batch, int n_threads,
                                          bool dense = false, std::optional<float> thr = {},
                                          bool check = false) {
  runtime::ContextOptions o;
  o.n_ctx = 96;
  o.n_batch = n_batch;
  o.n_threads = n_threads;
  o.all_logits = true;
  o.dense = dense;
  o.sparse_threshold = thr;
  o.check_predictor = check;
  auto c = runtime::Context::create(m, o);
  EXPECT_TRUE(c.ok()) << c.error().message;
  return std::move(*c);
}

std::vector<int32_t> prompt() {
  return {1, 17, 250, 3, 99, 42, 7, 7, 7, 180, 5, 64, 128, 255, 2, 33, 77, 11, 12, 13};
}

struct Outcome {
  std::vector<float> logits;       // prompt logits, every token
  std::vector<int32_t> tokens;     // greedy continuation
  std::vector<int64_t> predicted;  // per layer, summed over tokens
};

Outcome run(runtime::Context& c, int n_gen = 16) {
  Outcome r;
  Status s = c.decode(prompt(), &r.logits);
  EXPECT_TRUE(s.ok()) << s.error().message;
  for (int i = 0; i < n_gen; ++i) {
    auto l = c.logits();
    r.tokens.push_back(static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin()));
    EXPECT_TRUE(c.decode(std::vector<int32_t>{r.tokens.back()}).ok());
  }
  if (c.sparse_ffn() != nullptr)
    for (const auto& st : c.sparse_ffn()->stats()) r.predicted.push_back(st.predicted);
  return r;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return num / den;
}

class SparseModelTest : public ::testing::TestWithParam<Synth> {
 protected:
  void SetUp() override {
    auto m = model::Model::load(synth_path(GetParam()));
    ASSERT_TRUE(m.ok()) << m.error().message;
    model_ = std::move(*m);
  }
  std::unique_ptr<model::Model> model_;
};

TEST_P(SparseModelTest, RunsSparseWithTheFileThreshold) {
  auto c = context(*model_, 7, 2);
  ASSERT_NE(c->sparse_ffn(), nullptr);
  EXPECT_EQ(c->sparse_threshold().source, sparse::ThresholdSource::File);
  EXPECT_LT(c->sparse_threshold().value, 0.0f);  // synth's margin below 0
  ASSERT_EQ(c->sparse_ffn()->predictors().size(), 2u);
  EXPECT_EQ(c->sparse_ffn()->predictors()[0].rank(), 64);  // read from the fc1 tensor
  const Outcome r = run(*c);
  for (const auto& st : c->sparse_ffn()->stats()) {
    const double frac =
        static_cast<double>(st.predicted) / static_cast<double>(st.tokens * model_->hparams().n_ff);
    EXPECT_GT(frac, 0.04);
    EXPECT_LT(frac, 0.25);
    EXPECT_LE(st.computed, st.predicted);
    EXPECT_EQ(st.tokens, static_cast<int64_t>(prompt().size()) + 16);
  }
  EXPECT_EQ(context(*model_, 7, 2, /*dense=*/true)->sparse_ffn(), nullptr);
}

TEST_P(SparseModelTest, PredictorMatchesFloat64) {
  const model::HParams& hp = model_->hparams();
  backend::CpuDevice dev(2);
  auto ffn = sparse::SparseFfn::create(*model_, model_->weights(), dev, 8, sparse::SparseConfig{-0.01f, false});
  ASSERT_TRUE(ffn.ok()) << ffn.error().message;
  // Predictor inputs shaped like synth's residual stream: the constant block and noise.
  std::vector<float> h(static_cast<size_t>(8 * hp.n_embd));
  uint32_t x = 12345;
  for (size_t k = 0; k < h.size(); ++k) {
    x = x * 1664525u + 1013904223u;
    h[k] = (k % static_cast<size_t>(hp.n_embd)) < 32
               ? 2.0f
               : static_cast<float>(static_cast<int32_t>(x >> 8) % 2000) / 1000.0f - 1.0f;
  }
  const bool quant = std::strcmp(GetParam().type, "f32") != 0;
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const sparse::PredictorWeights& p = (*ffn)->predictors()[static_cast<size_t>(il)];
    const sparse::RowLists& got = (*ffn)->predict(il, h.data(), 8);
    ASSERT_EQ(got.m, 8);
    int64_t mismatches = 0, near = 0;
    for (int64_t i = 0; i < 8; ++i) {
      std::vector<float> z(static_cast<size_t>(p.rank())), l(static_cast<size_t>(hp.n_ff));
      ref::matvec(p.fc1.type, p.fc1.data, p.rank(), hp.n_embd, h.data() + i * hp.n_embd, z.data());
      for (float& v : z) v = std::max(v, 0.0f);
      ref::matvec(p.fc2.type, p.fc2.data, hp.n_ff, p.rank(), z.data(), l.data());
      double scale = 0;
      for (float v : l) scale = std::max(scale, static_cast<double>(std::fabs(v)));
      // f32: float rounding only; quantized: the kernels' 8-bit activations (~1% of the scale).
      const double tol = (quant ? 2e-2 : 1e-5) * scale;
      std::vector<char> listed(static_cast<size_t>(hp.n_ff), 0);
      for (int64_t k = got.offsets[static_cast<size_t>(i)];
           k < got.offsets[static_cast<size_t>(i) + 1]; ++k)
        listed[static_cast<size_t>(got.idx[static_cast<size_t>(k)])] = 1;
      for (int64_t j = 0; j < hp.n_ff; ++j) {
        const double v = l[static_cast<size_t>(j)] - (-0.01);
        if (std::fabs(v) < tol) {
          ++near;
          continue;
        }
        mismatches += (v >= 0) != (listed[static_cast<size_t>(j)] != 0) ? 1 : 0;
      }
    }
    EXPECT_EQ(mismatches, 0) << "layer " << il << " (" << near
                             << " logits within rounding of the threshold)";
  }
}

TEST_P(SparseModelTest, ThresholdMinusInfEqualsDenseExactly) {
  for (int64_t b : {1, 7}) {
    // A PowerInfer file's FFN stays in the file's layout for --dense too (the attention takes
    // the CPU's R16 layouts in both), so the two sum alike.
    auto all = context(*model_, b, 2, false, -kInf);
    ASSERT_NE(all->sparse_ffn(), nullptr);
    auto dense = context(*model_, b, 2, true);
    const Outcome s = run(*all), d = run(*dense);
    // Block formats in batches: the sparse down projection runs token by token, the dense one
    // through the many-token axpy, which sums in another order (see test_sparse_ffn.cpp).
    const bool block = GetParam().type[0] == 'q';
    if (b == 1 || !block) {
      EXPECT_EQ(s.logits, d.logits) << "batch " << b;
    } else {
      EXPECT_LE(max_rel_diff(s.logits, d.logits), 1e-5) << "batch " << b;
    }
    EXPECT_EQ(s.tokens, d.tokens) << "batch " << b;
    for (int64_t p : s.predicted)
      EXPECT_EQ(p, (static_cast<int64_t>(prompt().size()) + 16) * model_->hparams().n_ff);
  }
}

TEST_P(SparseModelTest, ThreadCountDoesNotChangeAnything) {
  const Outcome one = run(*context(*model_, 7, 1));
  for (int t : {2, 3}) {
    const Outcome r = run(*context(*model_, 7, t));
    EXPECT_EQ(r.logits, one.logits) << t << " threads";
    EXPECT_EQ(r.tokens, one.tokens) << t << " threads";
    EXPECT_EQ(r.predicted, one.predicted) << t << " threads";
  }
}

TEST_P(SparseModelTest, BatchSplitKeepsMasksAndTokens) {
  const Outcome b1 = run(*context(*model_, 1, 2));
  for (int64_t b : {7, 512}) {
    const Outcome r = run(*context(*model_, b, 2));
    const double d = max_rel_diff(r.logits, b1.logits);
    std::printf("  %s_%s batch %lld vs 1: logits %.3g (bound %.3g)\n", GetParam().arch,
                GetParam().type, static_cast<long long>(b), d, GetParam().batch_tol);
    EXPECT_LE(d, GetParam().batch_tol);
    EXPECT_EQ(r.tokens, b1.tokens) << "batch " << b;
    EXPECT_EQ(r.predicted, b1.predicted) << "batch " << b;
  }
}

TEST_P(SparseModelTest, PredictorCheckChangesNothingAndMeasuresRecall) {
  auto plain = context(*model_, 7, 2);
  auto checked = context(*model_, 7, 2, false, {}, true);
  const Outcome a = run(*plain), b = run(*checked);
  EXPECT_EQ(a.logits, b.logits);
  EXPECT_EQ(a.tokens, b.tokens);
  for (const auto& st : checked->sparse_ffn()->stats()) {
    ASSERT_GT(st.truly_active, 0);
    const double recall = static_cast<double>(st.caught) / static_cast<double>(st.truly_active);
    const double precision = static_cast<double>(st.caught) / static_cast<double>(st.predicted);
    std::printf("  %s_%s recall %.4f precision %.4f ffn dev %.3g of max %.3g\n", GetParam().arch,
                GetParam().type, recall, precision, st.max_abs_dev, st.max_abs_dense);
    EXPECT_GE(recall, 0.85);
    EXPECT_GE(precision, 0.6);
    EXPECT_LT(st.max_abs_dev, 0.5 * st.max_abs_dense);
    EXPECT_GT(st.max_abs_dev, 0.0);  // some neuron was missed somewhere
  }
}

INSTANTIATE_TEST_SUITE_P(
    Synth, SparseModelTest,
    ::testing::Values(Synth{"llama", "f32", 1e-4}, Synth{"bamboo", "f16", 1e-4},
                      Synth{"falcon", "f32", 1e-4}, Synth{"llama", "q4_0", 1e-3},
                      Synth{"bamboo", "q8_0", 1e-3}, Synth{"falcon", "q4_0", 1e-3}),
    [](const ::testing::TestParamInfo<Synth>& i) {
      return std::string(i.param.arch) + "_" + i.param.type;
    });

// Copies a GGUF file, leaving out one tensor.
Status copy_gguf(const std::string& src, const std::string& dst, const std::string& drop) {
  auto f = gguf::File::open(src);
  if (!f.ok()) return f.error();
  gguf::Writer w(f->magic());
  for (const gguf::KeyValue& kv : f->metadata()) {
    if (kv.key == "general.alignment") continue;
    PI_TRY(w.add_kv(kv.key, kv.value));
  }
  for (const gguf::TensorInfo& t : f->tensors())
    if (t.name != drop) PI_TRY(w.add_tensor(t.name, t.type, t.shape));
  PI_TRY(w.begin(dst));
  for (const gguf::TensorInfo& t : f->tensors()) {
    if (t.name == drop) continue;
    const gguf::TensorView v = f->view(t);
    PI_TRY(w.write({v.data, static_cast<size_t>(v.nbytes())}));
  }
  return w.finish();
}

TEST(SparseModelFiles, WithoutPredictorsRunsDense) {
  pi::testing::TinySpec s;
  s.pwri = true;
  s.vocab = false;
  const std::string path = pi::testing::temp_path("nopred.pwri.gguf");
  ASSERT_TRUE(pi::testing::write_tiny_model(s, path).ok());
  auto m = model::Model::load(path);
  ASSERT_TRUE(m.ok());
  auto c = context(**m, 4, 1);
  EXPECT_EQ(c->sparse_ffn(), nullptr);
}

TEST(SparseModelFiles, PartialPredictorsAreErrors) {
  const std::string src = synth_path({"llama", "f32", 0});
  const std::string partial = pi::testing::temp_path("partial.pwri.gguf");
  ASSERT_TRUE(copy_gguf(src, partial, "blk.1.fc2.weight").ok());
  auto m = model::Model::load(partial);
  ASSERT_TRUE(m.ok()) << m.error().message;
  runtime::ContextOptions o;
  o.n_ctx = 32;
  auto c = runtime::Context::create(**m, o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("blk.1.fc2.weight"), std::string::npos) << c.error().message;
  o.dense = true;  // --dense needs no predictor
  EXPECT_TRUE(runtime::Context::create(**m, o).ok());
}

}  // namespace
