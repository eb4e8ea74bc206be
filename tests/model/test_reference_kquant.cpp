// K-quant weights (Q2_K..Q6_K) end to end: dense logits of tiny llama models (rows of 256,
// GGUF and PowerInfer files) against the float64 NumPy forward pass, which decodes the same
// blocks with tools/convert/quants.py (itself checked against gguf-py, tests/python).
//
// Bound: both sides use the same stored weights, so what remains is the activation
// quantization of the integer kernels. The K-quants quantize activations with one scale per
// 256-element super-block (amax/127; amax of 256 roughly Gaussian values ~3.5 x their rms),
// a relative rms error of eps_a = 3.5 / (254 sqrt 3) = 0.8% per quantized product (Q6_K on
// AVX2: blocks of 32, less). A logit sees two layers of ~3 successive quantized products plus
// the head: bound 6 x 0.8% = 4.8e-2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/model.h"
#include "model/reference_harness.h"
#include "runtime/context.h"
#include "tiny_model.h"

namespace {

using namespace pi;

struct KCase {
  DType type;
  bool pwri;
};

class KQuantReference : public ::testing::TestWithParam<KCase> {
 protected:
  void SetUp() override {
    if (!pi::testing::python_available()) GTEST_SKIP() << "no Python with NumPy at " PI_PYTHON;
  }
};

TEST_P(KQuantReference, DenseLogitsAgree) {
  const KCase c = GetParam();
  pi::testing::TinySpec s;
  s.wtype = c.type;
  s.pwri = c.pwri;
  s.n_embd = 256;
  s.n_ff = 512;
  s.n_vocab = 300;
  s.seed = 11;
  const std::string path = pi::testing::temp_path(std::string("kq_") + std::string(dtype_name(c.type)) +
                                                  (c.pwri ? ".pwri.gguf" : ".gguf"));
  ASSERT_TRUE(pi::testing::write_tiny_model(s, path).ok());
  auto m = model::Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const auto tokens = pi::testing::test_tokens(24, 3, 300, 5);
  auto ref = pi::testing::reference_logits(path, tokens);
  ASSERT_TRUE(ref.ok()) << ref.error().message;

  runtime::ContextOptions o;
  o.n_ctx = 64;
  o.dense = true;
  o.n_batch = 8;
  o.n_threads = 2;
  o.all_logits = true;
  auto ctx = runtime::Context::create(**m, o);
  ASSERT_TRUE(ctx.ok());
  std::vector<float> ours;
  ASSERT_TRUE((*ctx)->decode(tokens, &ours).ok());
  ASSERT_EQ(ours.size(), ref->size());
  double worst = 0;
  const size_t n_vocab = 300;
  for (size_t r = 0; r < tokens.size(); ++r) {
    double num = 0, den = 0;
    for (size_t j = 0; j < n_vocab; ++j) {
      num = std::max(num, std::fabs(static_cast<double>(ours[r * n_vocab + j]) - (*ref)[r * n_vocab + j]));
      den = std::max(den, std::fabs(static_cast<double>((*ref)[r * n_vocab + j])));
    }
    worst = std::max(worst, num / std::max(den, 1e-30));
  }
  const double bound = 4.8e-2;
  std::printf("  %s %s: rel error %.3g (bound %.3g)\n", std::string(dtype_name(c.type)).c_str(),
              c.pwri ? "pwri" : "gguf", worst, bound);
  EXPECT_LE(worst, bound);
}

std::string name(const ::testing::TestParamInfo<KCase>& info) {
  return std::string(dtype_name(info.param.type)) + (info.param.pwri ? "_pwri" : "_gguf");
}

INSTANTIATE_TEST_SUITE_P(Types, KQuantReference,
                         ::testing::Values(KCase{DType::Q4_K, false}, KCase{DType::Q4_K, true},
                                           KCase{DType::Q5_K, false}, KCase{DType::Q6_K, true},
                                           KCase{DType::Q3_K, false}, KCase{DType::Q2_K, true}),
                         name);

}  // namespace
