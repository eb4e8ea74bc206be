// Sparse logits against the float64 NumPy oracle of predictor-masked inference
// (tests/reference/reference_forward.py --sparse), on tiny PowerInfer files of every
// architecture with a ReLU FFN (llama, bamboo, falcon, opt) written by make_tiny_model.py --pwri (predictor ranks differ per layer; layers
// alternate exact and imperfect predictors) and by `powerinfer synth --pwri`. Skips without
// Python.
//
// Bounds are those of the dense reference tests (tests/model/test_reference.cpp): 1e-3 relative
// for f32/f16 weights (the f16 KV cache), 3.5e-2 for q8_0/q4_0 (8-bit activation blocks in the
// kernels). Sparse mode adds one effect: a neuron whose predictor logit lies within rounding of
// the threshold may be on in one computation and off in the other. For exact predictors such a
// neuron's activation is near zero, and the measured errors stay within the dense bounds.
// Greedy continuations of f32 models must equal the oracle's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

#include "cli/run_command.h"
#include "model/model.h"
#include "model/reference_harness.h"
#include "model/tiny_model.h"
#include "runtime/context.h"

namespace {

using namespace pi;
using pi::testing::TinyPyModel;

const std::string kPython = PI_PYTHON;
const std::string kOracle = std::string(PI_SOURCE_DIR) + "/tests/reference/reference_forward.py";

std::string join(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i > 0 ? "," : "") + std::to_string(v[i]);
  return s;
}

// reference_forward.py --sparse [--threshold T] --out: logits f32 [n, n_vocab].
std::vector<float> oracle_logits(const std::string& path, const std::vector<int32_t>& tokens,
                                 const std::string& threshold) {
  const std::string out = path + ".sparse" + threshold + ".logits.bin";
  std::string cmd =
      kPython + " " + kOracle + " " + path + " --sparse --tokens " + join(tokens) + " --out " + out;
  if (!threshold.empty()) cmd += " --threshold=" + threshold;
  auto r = pi::testing::run_command(cmd);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(out, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> l(bytes.size() / sizeof(float));
  std::memcpy(l.data(), bytes.data(), l.size() * sizeof(float));
  return l;
}

std::vector<int32_t> oracle_greedy(const std::string& path, const std::vector<int32_t>& tokens,
                                   int n) {
  auto r = pi::testing::run_command(kPython + " " + kOracle + " " + path + " --sparse --tokens " +
                                    join(tokens) + " --greedy " + std::to_string(n));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<int32_t> ids;
  std::istringstream ss(r.output);
  int32_t t;
  while (ss >> t) ids.push_back(t);
  return ids;
}

double rel_error(const std::vector<float>& ours, const std::vector<float>& ref, int64_t n_vocab) {
  double worst = 0;
  for (size_t r = 0; r * static_cast<size_t>(n_vocab) < ref.size(); ++r) {
    double num = 0, den = 0;
    for (int64_t j = 0; j < n_vocab; ++j) {
      const size_t k = r * static_cast<size_t>(n_vocab) + static_cast<size_t>(j);
      num = std::max(num, std::fabs(static_cast<double>(ours[k]) - ref[k]));
      den = std::max(den, std::fabs(static_cast<double>(ref[k])));
    }
    worst = std::max(worst, num / std::max(den, 1e-30));
  }
  return worst;
}

std::unique_ptr<runtime::Context> sparse_context(const model::Model& m, std::optional<float> thr,
                                                 bool all_logits, int64_t n_batch = 16) {
  runtime::ContextOptions o;
  o.n_ctx = 128;
  o.n_batch = n_batch;
  o.n_threads = 2;
  o.all_logits = all_logits;
  o.sparse_threshold = thr;
  auto c = runtime::Context::create(m, o);
  EXPECT_TRUE(c.ok()) << c.error().message;
  EXPECT_NE((*c)->sparse_ffn(), nullptr);
  return std::move(*c);
}

struct Case {
  std::string name;
  std::string path_spec;  // "py:<arch>:<type>:<kv>" or "synth:<arch>:<type>"
  double tol;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::string model_path(const Case& c) {
  std::vector<std::string> f;
  std::stringstream ss(c.path_spec);
  for (std::string part; std::getline(ss, part, ':');) f.push_back(part);
  if (f[0] == "py") {
    TinyPyModel m;
    m.arch = f[1];
    m.outtype = f[2];
    m.kv_heads = std::stoi(f[3]);
    m.pwri = true;
    auto p = pi::testing::make_py_model(m);
    EXPECT_TRUE(p.ok()) << p.error().message;
    return p.ok() ? *p : "";
  }
  const std::string path = pi::testing::temp_path("ref_synth_" + f[1] + "_" + f[2] + ".pwri.gguf");
  if (!std::filesystem::exists(path)) {
    auto r = pi::testing::run_command(
        std::string(PI_BIN_DIR) + "/powerinfer synth --preset tiny --pwri --no-progress --arch " +
        f[1] + " --type " + f[2] + " -o " + path);
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  return path;
}

class SparseReferenceTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!pi::testing::python_available()) GTEST_SKIP() << "no Python with NumPy at " PI_PYTHON;
  }
};

TEST_P(SparseReferenceTest, LogitsAgreeWithSparseOracle) {
  const std::string path = model_path(GetParam());
  auto m = model::Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const int64_t n_vocab = (*m)->hparams().n_vocab;
  const auto tokens = pi::testing::test_tokens(40, 3, static_cast<int32_t>(n_vocab), 7);
  std::vector<float> ours;
  ASSERT_TRUE(sparse_context(**m, {}, true)->decode(tokens, &ours).ok());
  const auto ref = oracle_logits(path, tokens, "");
  ASSERT_EQ(ours.size(), ref.size());
  const double e = rel_error(ours, ref, n_vocab);
  std::printf("  %-22s sparse rel error %.3g (bound %.3g)\n", GetParam().name.c_str(), e,
              GetParam().tol);
  EXPECT_LE(e, GetParam().tol);

  // Every neuron predicted: the oracle's --threshold -inf is its dense FFN.
  std::vector<float> all;
  ASSERT_TRUE(sparse_context(**m, -std::numeric_limits<float>::infinity(), true)
                  ->decode(tokens, &all)
                  .ok());
  const auto ref_all = oracle_logits(path, tokens, "-inf");
  const double e_all = rel_error(all, ref_all, n_vocab);
  std::printf("  %-22s threshold -inf rel error %.3g (bound %.3g)\n", GetParam().name.c_str(),
              e_all, GetParam().tol);
  EXPECT_LE(e_all, GetParam().tol);
}

std::vector<Case> cases() {
  constexpr double kFloat = 1e-3, kQuant = 3.5e-2;
  return {
      {"py_llama_f32", "py:llama:f32:2", kFloat},
      {"py_bamboo_f32", "py:bamboo:f32:2", kFloat},
      {"py_falcon7_f32", "py:falcon:f32:1", kFloat},
      {"py_falcon40_f32", "py:falcon:f32:2", kFloat},
      {"py_llama_f16", "py:llama:f16:2", kFloat},
      {"py_llama_q8_0", "py:llama:q8_0:2", kQuant},
      {"py_bamboo_q4_0", "py:bamboo:q4_0:2", kQuant},
      // The predictor's decisions on this random model move with the Q4_0 down projection's
      // 8-bit coefficients (q4_groups.h): 0.021 with f32 coefficients, 0.039 with them (its
      // dense FFN: 0.011 both ways).
      {"py_falcon40_q4_0", "py:falcon:q4_0:2", 5e-2},
      {"py_opt_f32", "py:opt:f32:4", kFloat},
      {"py_opt_q8_0", "py:opt:q8_0:4", kQuant},
      {"synth_llama_f32", "synth:llama:f32", kFloat},
      {"synth_llama_q4_0", "synth:llama:q4_0", kQuant},
  };
}

INSTANTIATE_TEST_SUITE_P(Models, SparseReferenceTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// Greedy continuations (prompt in batches, then one token at a time) equal the oracle's for
// f32 weights of every architecture.
class SparseGreedyTest : public SparseReferenceTest {};

TEST_P(SparseGreedyTest, GreedyEqualsSparseOracle) {
  const std::string path = model_path(GetParam());
  auto m = model::Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const auto prompt =
      pi::testing::test_tokens(20, 3, static_cast<int32_t>((*m)->hparams().n_vocab), 11);
  auto c = sparse_context(**m, {}, false, 7);
  ASSERT_TRUE(c->decode(prompt).ok());
  std::vector<int32_t> ours;
  for (int i = 0; i < 24; ++i) {
    auto l = c->logits();
    ours.push_back(static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin()));
    ASSERT_TRUE(c->decode(std::vector<int32_t>{ours.back()}).ok());
  }
  EXPECT_EQ(ours, oracle_greedy(path, prompt, 24));
}

std::vector<Case> f32_cases() {
  std::vector<Case> f32;
  for (const Case& c : cases())
    if (c.name.size() > 4 && c.name.substr(c.name.size() - 4) == "_f32") f32.push_back(c);
  return f32;
}

INSTANTIATE_TEST_SUITE_P(F32Models, SparseGreedyTest, ::testing::ValuesIn(f32_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

}  // namespace
