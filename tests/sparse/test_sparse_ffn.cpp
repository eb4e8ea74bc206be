// The sparse FFN core (SparseFfn::run_masked) against the dense FFN and the scalar reference,
// on tiny C++-written PowerInfer models of every architecture with a ReLU FFN (opt: with the
// up and down biases) and weight format:
//  - with the true activation mask (the neurons the dense FFN activates) it equals the dense
//    FFN: bit for bit for F32 weights, to the format's tolerance otherwise;
//  - with every neuron listed it equals the dense FFN bit for bit (batches of block-format
//    weights: within 1e-5, the down projection runs token by token);
//  - with random masks it matches a float64 computation from the pi::ref kernels;
//  - the batch paths (batched lists, union, dense) give bit-identical results, token by token
//    too for float weights (block formats: within 1e-5), and any thread count gives
//    bit-identical results.
//
// Tolerances (relative to max |reference output|): F32 1e-5 (float rounding of sums of ~100
// terms); F16 weights 1e-5 as well (the weights are exact f16 values on both sides; only the
// f32 accumulation differs); Q8_0/Q4_0 3e-2: the kernels quantize activations to 8-bit blocks
// (relative rms error 0.57% per product, see tests/model/test_reference.cpp), and an FFN chains
// two such products (gate/up, then down reads the rounded activations exactly) plus the
// ReLU boundary, where a gate value within rounding of 0 may switch a small neuron on or off.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "kernels/ref/ref.h"
#include "model/ffn.h"
#include "model/model.h"
#include "backend/host_device.h"
#include "model/tiny_model.h"
#include "sparse/sparse_ffn.h"

namespace {

using namespace pi;
using pi::testing::TinySpec;

struct Variant {
  const char* name;
  const char* arch;
  DType type;
  double tol;  // relative, vs float64 reference; 0 = bit-exact vs dense
};

constexpr Variant kVariants[] = {
    {"llama_f32", "llama", DType::F32, 1e-5},     {"bamboo_f32", "bamboo", DType::F32, 1e-5},
    {"falcon_f32", "falcon", DType::F32, 1e-5},   {"llama_f16", "llama", DType::F16, 1e-5},
    {"llama_q8_0", "llama", DType::Q8_0, 3e-2},   {"bamboo_q4_0", "bamboo", DType::Q4_0, 3e-2},
    {"falcon_q4_0", "falcon", DType::Q4_0, 3e-2}, {"llama_q4_0", "llama", DType::Q4_0, 3e-2},
    {"opt_f32", "opt", DType::F32, 1e-5},         {"opt_q4_0", "opt", DType::Q4_0, 3e-2},
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

std::unique_ptr<model::Model> tiny_pwri(const Variant& v) {
  TinySpec s;
  s.arch = v.arch;
  s.pwri = true;
  s.wtype = v.type;
  s.n_ff = 160;
  s.vocab = false;
  s.seed = 5;
  s.activation = "relu";
  const std::string path = pi::testing::temp_path(std::string("sparse_ffn_") + v.name + ".gguf");
  Status st = pi::testing::write_tiny_model(s, path);
  EXPECT_TRUE(st.ok()) << st.error().message;
  auto m = model::Model::load(path);
  EXPECT_TRUE(m.ok()) << m.error().message;
  return std::move(*m);
}

// FFN inputs with a positive constant channel (as real FFN inputs have), so that neurons
// fire with different frequencies.
std::vector<float> inputs(int64_t m, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * n));
  for (float& v : x) v = nd(rng);
  for (int64_t i = 0; i < m; ++i) x[static_cast<size_t>(i * n)] = 2.0f;
  return x;
}

sparse::RowLists lists_from(const std::vector<std::vector<int32_t>>& per_token) {
  sparse::RowLists l;
  l.m = static_cast<int64_t>(per_token.size());
  l.offsets.push_back(0);
  for (const auto& t : per_token) {
    l.idx.insert(l.idx.end(), t.begin(), t.end());
    l.offsets.push_back(static_cast<int64_t>(l.idx.size()));
  }
  return l;
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return num / std::max(den, 1e-30);
}

class SparseFfnTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    model_ = tiny_pwri(GetParam());
    ASSERT_NE(model_, nullptr);
  }
  const model::HParams& hp() const { return model_->hparams(); }

  std::vector<float> dense(ThreadPool& pool, int64_t il, const std::vector<float>& x, int64_t m) {
    backend::CpuDevice dev(pool.size());
    auto ffn = model::DenseFfn::create(*model_, model_->weights(), dev, m).value();
    std::vector<float> out(static_cast<size_t>(m * hp().n_embd));
    ffn->run(il, model::FfnInput{x.data(), x.data(), m}, out.data());
    return out;
  }

  std::vector<float> sparse(ThreadPool& pool, int64_t il, const std::vector<float>& x, int64_t m,
                            const sparse::RowLists& lists, int forced_path = -1) {
    backend::CpuDevice dev(pool.size());
    auto ffn = sparse::SparseFfn::create(*model_, model_->weights(), dev, m, {}, {}).value();
    if (forced_path >= 0) ffn->force_path(static_cast<sparse::RowsPath>(forced_path));
    std::vector<float> out(static_cast<size_t>(m * hp().n_embd), -7.0f);
    ffn->run_masked(il, model::FfnInput{x.data(), nullptr, m}, lists, out.data());
    return out;
  }

  // Activations of the dense FFN in float64 from the scalar reference (ref::matvec).
  std::vector<double> ref_activations(int64_t il, const float* x) {
    const model::FfnWeights& w = model_->weights().layers[static_cast<size_t>(il)].ffn;
    const int64_t n_ff = hp().n_ff;
    std::vector<float> g(static_cast<size_t>(n_ff)), u(static_cast<size_t>(n_ff));
    if (w.gate.present()) ref::matvec(w.gate.type, w.gate.data, n_ff, w.gate.cols, x, g.data());
    ref::matvec(w.up.type, w.up.data, n_ff, w.up.cols, x, u.data());
    std::vector<double> a(static_cast<size_t>(n_ff));
    for (int64_t j = 0; j < n_ff; ++j) {
      const double gj = g[static_cast<size_t>(j)];
      const double uj = static_cast<double>(u[static_cast<size_t>(j)]) +
                        (w.up_b.present() ? w.up_b.data[j] : 0.0);
      switch (hp().ffn) {
        case model::FfnKind::Plain:
          a[static_cast<size_t>(j)] = std::max(uj, 0.0);
          break;
        case model::FfnKind::Gated:
          a[static_cast<size_t>(j)] = std::max(gj, 0.0) * uj;
          break;
        case model::FfnKind::GatedBoth:
          a[static_cast<size_t>(j)] = std::max(gj, 0.0) * std::max(uj, 0.0);
          break;
        case model::FfnKind::SwigluOai:
          ADD_FAILURE() << "no sparse FFN has gpt-oss's unit";
          break;
      }
    }
    return a;
  }

  // The true activation mask: the neurons the dense FFN (same kernels) activates.
  sparse::RowLists true_mask(ThreadPool& pool, int64_t il, const std::vector<float>& x, int64_t m) {
    const model::FfnWeights& w = model_->weights().layers[static_cast<size_t>(il)].ffn;
    const int64_t n_ff = hp().n_ff;
    backend::CpuDevice dev(pool.size());
    backend::Ops& ops = dev.ops();
    std::vector<float> g(static_cast<size_t>(m * n_ff)), u(g.size());
    if (w.gate.present()) ops.linear(w.gate, x.data(), m, g.data());
    ops.linear(w.up, x.data(), m, u.data());
    if (w.up_b.present()) ops.add_bias(u.data(), w.up_b, m, n_ff);
    ops.ffn_combine(hp().ffn, hp().act, g.data(), u.data(), m, n_ff);
    std::vector<std::vector<int32_t>> per(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n_ff; ++j)
        if (g[static_cast<size_t>(i * n_ff + j)] != 0.0f)
          per[static_cast<size_t>(i)].push_back(static_cast<int32_t>(j));
    return lists_from(per);
  }

  // out = sum over listed j of a_j down_t[j, :] (+ down_b) in float64 (ref activations, ref
  // axpy rows).
  std::vector<float> ref_masked(int64_t il, const std::vector<float>& x, int64_t m,
                                const sparse::RowLists& l) {
    const model::Matrix& d = model_->weights().layers[static_cast<size_t>(il)].ffn.down_t;
    std::vector<float> out(static_cast<size_t>(m * hp().n_embd));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t c = 0; c < hp().n_embd; ++c)
        out[static_cast<size_t>(i * hp().n_embd + c)] = down_b(il, c);
    for (int64_t i = 0; i < m; ++i) {
      const auto a = ref_activations(il, x.data() + i * hp().n_embd);
      std::vector<float> af(a.begin(), a.end());
      ref::axpy_rows(d.type, d.data, d.cols, l.idx.data() + l.offsets[static_cast<size_t>(i)],
                     l.count(i), af.data(), out.data() + i * hp().n_embd);
    }
    return out;
  }

  // The FFN's output bias (opt), 0 for the architectures without one.
  float down_b(int64_t il, int64_t c) const {
    const model::Vector& b = model_->weights().layers[static_cast<size_t>(il)].ffn.down_b;
    return b.present() ? b.data[c] : 0.0f;
  }

  std::unique_ptr<model::Model> model_;
};

TEST_P(SparseFfnTest, TrueActivationMaskEqualsDense) {
  ThreadPool pool(2);
  const bool exact = GetParam().type == DType::F32;
  for (int64_t m : {1, 7, 20}) {
    for (int64_t il = 0; il < hp().n_layer; ++il) {
      const auto x = inputs(m, hp().n_embd, static_cast<uint32_t>(m * 10 + il));
      const auto mask = true_mask(pool, il, x, m);
      ASSERT_GT(mask.size(), 0);
      ASSERT_LT(mask.size(), m * hp().n_ff);  // really sparse
      const auto d = dense(pool, il, x, m);
      const auto s = sparse(pool, il, x, m, mask);
      if (exact) {
        EXPECT_EQ(s, d) << "m=" << m << " layer " << il;
      } else {
        EXPECT_LE(rel_diff(s, d), GetParam().tol) << "m=" << m << " layer " << il;
      }
    }
  }
}

TEST_P(SparseFfnTest, AllNeuronsEqualDense) {
  ThreadPool pool(2);
  for (int64_t m : {1, 7}) {
    const auto x = inputs(m, hp().n_embd, 3);
    std::vector<int32_t> all(static_cast<size_t>(hp().n_ff));
    std::iota(all.begin(), all.end(), 0);
    const auto lists = lists_from(std::vector<std::vector<int32_t>>(static_cast<size_t>(m), all));
    // Every neuron listed: bit-identical to the dense FFN (the same kernels and the same
    // nonzero activations in the same order), except that batches of block-format weights
    // accumulate the down projection token by token, where the dense FFN uses the many-token
    // axpy, which sums in another order.
    const auto s = sparse(pool, 1, x, m, lists), d = dense(pool, 1, x, m);
    if (m == 1 || GetParam().type == DType::F32 || GetParam().type == DType::F16) {
      EXPECT_EQ(s, d) << "m=" << m;
    } else {
      EXPECT_LE(rel_diff(s, d), 1e-5) << "m=" << m;
    }
  }
}

TEST_P(SparseFfnTest, RandomMasksMatchReference) {
  ThreadPool pool(3);
  std::mt19937 rng(11);
  std::bernoulli_distribution keep(0.3);
  for (int64_t m : {1, 5, 70}) {
    std::vector<std::vector<int32_t>> per(static_cast<size_t>(m));
    for (auto& t : per)
      for (int32_t j = 0; j < hp().n_ff; ++j)
        if (keep(rng)) t.push_back(j);
    if (m > 1) per[1].clear();
    const auto lists = lists_from(per);
    const auto x = inputs(m, hp().n_embd, static_cast<uint32_t>(m));
    const auto ref = ref_masked(0, x, m, lists);
    const auto s = sparse(pool, 0, x, m, lists);
    if (m > 1)  // a token with nothing predicted outputs the bias alone (zeros without one)
      for (int64_t c = 0; c < hp().n_embd; ++c)
        EXPECT_EQ(s[static_cast<size_t>(hp().n_embd + c)], down_b(0, c));
    const double e = rel_diff(s, ref);
    std::printf("  %-12s m=%-3lld random 30%% masks: rel error %.3g (bound %.3g)\n",
                GetParam().name, static_cast<long long>(m), e, GetParam().tol);
    EXPECT_LE(e, GetParam().tol) << "m=" << m;
  }
}

TEST_P(SparseFfnTest, BatchPathsAgreeBitForBit) {
  ThreadPool pool(2);
  std::mt19937 rng(5);
  std::bernoulli_distribution keep(0.4);
  for (int64_t m : {2, 7, 20, 70}) {
    std::vector<std::vector<int32_t>> per(static_cast<size_t>(m));
    for (auto& t : per)
      for (int32_t j = 0; j < hp().n_ff; ++j)
        if (keep(rng)) t.push_back(j);
    const auto lists = lists_from(per);
    const auto x = inputs(m, hp().n_embd, 17);
    const auto by_lists = sparse(pool, 0, x, m, lists, static_cast<int>(sparse::RowsPath::Lists));
    EXPECT_EQ(sparse(pool, 0, x, m, lists, static_cast<int>(sparse::RowsPath::Union)), by_lists)
        << "m=" << m;
    EXPECT_EQ(sparse(pool, 0, x, m, lists, static_cast<int>(sparse::RowsPath::Dense)), by_lists)
        << "m=" << m;
    EXPECT_EQ(sparse(pool, 0, x, m, lists), sparse(pool, 0, x, m, lists))
        << "m=" << m;  // the cost model's pick is deterministic
    // Token by token uses the one-token kernels, which sum in another order for block formats.
    const auto by_token =
        sparse(pool, 0, x, m, lists, static_cast<int>(sparse::RowsPath::PerToken));
    if (GetParam().type == DType::F32 || GetParam().type == DType::F16) {
      EXPECT_EQ(by_token, by_lists) << "m=" << m;
    } else {
      EXPECT_LE(rel_diff(by_token, by_lists), 1e-5) << "m=" << m;
    }
  }
}

TEST_P(SparseFfnTest, ThreadCountDoesNotChangeBits) {
  std::mt19937 rng(9);
  std::bernoulli_distribution keep(0.2);
  for (int64_t m : {1, 9}) {
    std::vector<std::vector<int32_t>> per(static_cast<size_t>(m));
    for (auto& t : per)
      for (int32_t j = 0; j < hp().n_ff; ++j)
        if (keep(rng)) t.push_back(j);
    const auto lists = lists_from(per);
    const auto x = inputs(m, hp().n_embd, 23);
    ThreadPool p1(1), p2(2), p3(3);
    const auto one = sparse(p1, 1, x, m, lists);
    EXPECT_EQ(sparse(p2, 1, x, m, lists), one);
    EXPECT_EQ(sparse(p3, 1, x, m, lists), one);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, SparseFfnTest, ::testing::ValuesIn(kVariants),
                         [](const ::testing::TestParamInfo<Variant>& i) {
                           return std::string(i.param.name);
                         });

}  // namespace
