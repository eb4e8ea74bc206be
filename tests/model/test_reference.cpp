// Agreement with the independent float64 NumPy forward pass (tests/reference/
// reference_forward.py) on tiny random models of every architecture (llama, bamboo, falcon,
// opt, qwen2, qwen3, qwen3moe, smallthinker, gpt-oss), layout and weight format, dense GGUF and
// PowerInfer files alike (run dense here), and greedy continuations.
//
// Metric: for each token row, max_j |ours_j - ref_j| / max_j |ref_j|; the bound is on the
// worst row. Both sides use the same stored weights, so weight quantization itself cancels;
// what remains is how we compute. Bounds, derived from the storage and kernel precision:
//  - The KV cache stores keys and values as f16: relative rounding <= 2^-11 = 4.9e-4 per
//    element. Attention scores and outputs are weighted sums of such values, so the logits
//    move by at most about that much: bound 1e-3 (2 x 2^-11) vs the exact oracle for f32 and
//    f16 weights (measured 2e-4 .. 2.6e-4).
//  - Against the oracle that rounds its keys and values to f16 too (reference_f16kv.py) only
//    the f32 arithmetic remains: typically 1e-7 .. 1e-6, but a value that lies within ~1e-7 of
//    an f16 rounding midpoint rounds the other way on one side (about one such element per
//    model), which costs up to ~1e-4: bound 5e-4.
//  - q8_0/q4_0 weights: the kernels quantize activations to 8-bit blocks of 32 (scale
//    amax/127, error uniform in +-amax/254). With amax ~2.5 x the block rms that is a
//    relative rms error of eps_a = 2.5 / (254 sqrt 3) = 0.57% per quantized product. A logit
//    sees two layers of ~3 successive quantized products (projection, attention output or
//    FFN up/gate, FFN down) plus the head, each adding its own eps_a: bound 6 x eps_a =
//    3.5e-2 (measured 1.0% .. 1.6%).
// Greedy continuations of 64 tokens must be identical for f32 weights.
//
// Mixture-of-experts models (qwen3moe, Mixtral, smallthinker): routing is discontinuous. A token whose k-th and
// (k+1)-th router probabilities are closer than our rounding (8-bit activations perturb the
// router's input by about eps_a per product upstream, a few percent of a logit) may pick the
// other expert, which changes its row by far more than the bounds above. So the oracle
// computes with our routes forced (reference_forward.py --force-routes), the logits bounds
// apply to that, and every token we routed differently from the oracle's own top-k (under
// the probabilities of that same pass) must be a near-tie: logit(best left out) - logit(worst
// chosen) <= kRouteTie (f32/f16 weights: 1e-3, rounding alone; block formats: 0.05, a few
// eps_a of a router logit, whose scale is ~2; measured 0.006 on the one q4_0 tie).
//
// Without PI_REFERENCE_FULL: a subset that still covers every architecture, layout and format
// (label fast); with it, the rest of the matrix (label slow).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>

#ifndef PI_REFERENCE_FULL
#define PI_REFERENCE_FULL 0
#endif

#include "kernels/cpu/kernels.h"
#include "model/model.h"
#include "model/moe_ffn.h"
#include "model/reference_harness.h"
#include "runtime/context.h"

namespace {

using namespace pi;
using pi::testing::TinyPyModel;

struct Case {
  TinyPyModel model;
  double tol_exact;  // vs the unmodified oracle
  double tol;        // vs the oracle with the f16 KV storage emulated
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.model.file_name(); }

constexpr double kFloatTolExact = 1e-3, kFloatTol = 5e-4;  // f32, f16 weights
constexpr double kQuantTol = 3.5e-2;                       // q8_0, q4_0 weights
// gpt-oss with 8-bit activations: each layer has four quantized products (attention in and
// out, the experts' gate/up and down) and its gated unit's outputs are heavy-tailed (block
// amax / rms 3.7, against ~2.4 for a normalized input: eps_a x 1.5 for the down product);
// measured 3.4% (MXFP4 experts) and 4.4% (q8_0 everywhere, tied head). With the scalar
// kernels, whose activations stay f32, the same files agree within the float bounds (the
// ctest entry test_model_reference_scalar), so the excess is the activations' rounding.
constexpr double kGptOssQuantTol = 6e-2;
constexpr double kRouteTieFloat = 1e-3, kRouteTieQuant = 0.05;

// PI_KERNELS_ISA=scalar: products in f32 (no 8-bit activations).
bool scalar_kernels() { return pi::cpu::default_isa() == pi::cpu::Isa::Scalar; }

double rel_error(const std::vector<float>& ours, const std::vector<float>& ref, int64_t n_vocab) {
  double worst = 0;
  for (size_t r = 0; r * n_vocab < ref.size(); ++r) {
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

// Our logits for every token, prompt fed in batches of n_batch.
std::vector<float> our_logits(const model::Model& m, const std::vector<int32_t>& tokens,
                              int64_t n_batch, int n_threads) {
  runtime::ContextOptions o;
  o.n_ctx = 128;
  o.dense = true;  // PowerInfer files too: this compares the dense forward pass
  o.n_batch = n_batch;
  o.n_threads = n_threads;
  o.all_logits = true;
  auto ctx = runtime::Context::create(m, o);
  EXPECT_TRUE(ctx.ok());
  std::vector<float> all;
  Status s = (*ctx)->decode(tokens, &all);
  EXPECT_TRUE(s.ok()) << s.error().message;
  return all;
}

std::vector<int32_t> our_greedy(const model::Model& m, const std::vector<int32_t>& prompt, int n) {
  runtime::ContextOptions o;
  o.n_ctx = 128;
  o.dense = true;  // PowerInfer files too: this compares the dense forward pass
  o.n_batch = 16;
  o.n_threads = 2;
  auto ctx = runtime::Context::create(m, o);
  EXPECT_TRUE(ctx.ok());
  EXPECT_TRUE((*ctx)->decode(prompt).ok());
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    auto l = (*ctx)->logits();
    const auto t = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    out.push_back(t);
    EXPECT_TRUE((*ctx)->decode(std::vector<int32_t>{t}).ok());
  }
  return out;
}

class ReferenceTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!pi::testing::python_available()) GTEST_SKIP() << "no Python with NumPy at " PI_PYTHON;
  }
};

struct MoeRun {
  std::vector<float> logits;
  std::vector<int32_t> routes;  // [n_layer, n_tokens, K]
};

// Our logits and routes for every token, prompt fed in batches of n_batch (MoE models).
MoeRun our_moe_run(const model::Model& m, const std::vector<int32_t>& tokens, int64_t n_batch, int n_threads) {
  runtime::ContextOptions o;
  o.n_ctx = 128;
  o.n_batch = n_batch;
  o.n_threads = n_threads;
  o.all_logits = true;
  auto ctx = runtime::Context::create(m, o);
  EXPECT_TRUE(ctx.ok());
  auto* moe = dynamic_cast<model::MoeFfn*>(&(*ctx)->forward().ffn());
  EXPECT_NE(moe, nullptr);
  moe->trace_routes(true);
  MoeRun r;
  Status s = (*ctx)->decode(tokens, &r.logits);
  EXPECT_TRUE(s.ok()) << s.error().message;
  for (const auto& layer : moe->routes()) r.routes.insert(r.routes.end(), layer.begin(), layer.end());
  return r;
}

// The worst logit(best left out) - logit(worst chosen) over the tokens we routed differently
// from the oracle's own top-k, and how many there were. probs f64 [n_layer, n_tokens, n_expert]:
// softmax probabilities (logit differences are ln p differences) or sigmoids (the logit is
// ln(p / (1 - p))).
std::pair<double, int> route_ties(const std::vector<int32_t>& routes, const std::vector<double>& probs,
                                  int64_t n_expert, int64_t k, model::Gating gating) {
  const auto logit = [&](double p) {
    return gating == model::Gating::Sigmoid ? std::log(p) - std::log1p(-p) : std::log(p);
  };
  double worst = 0;
  int differ = 0;
  for (size_t t = 0; t * static_cast<size_t>(n_expert) < probs.size(); ++t) {
    const double* p = probs.data() + t * static_cast<size_t>(n_expert);
    std::vector<bool> ours(static_cast<size_t>(n_expert));
    double worst_chosen = 1;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = routes[t * static_cast<size_t>(k) + static_cast<size_t>(j)];
      ours[static_cast<size_t>(e)] = true;
      worst_chosen = std::min(worst_chosen, p[e]);
    }
    double best_left = 0;
    for (int64_t e = 0; e < n_expert; ++e)
      if (!ours[static_cast<size_t>(e)]) best_left = std::max(best_left, p[e]);
    if (best_left > worst_chosen) {
      ++differ;
      worst = std::max(worst, logit(best_left) - logit(worst_chosen));
    }
  }
  return {worst, differ};
}

TEST_P(ReferenceTest, LogitsAgree) {
  const Case& c = GetParam();
  auto path = pi::testing::make_py_model(c.model);
  ASSERT_TRUE(path.ok()) << path.error().message;
  auto m = model::Model::load(*path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const auto tokens =
      pi::testing::test_tokens(40, 3, static_cast<int32_t>((*m)->hparams().n_vocab), 7);
  const model::HParams& hp = (*m)->hparams();
  if (hp.is_moe()) {
    const MoeRun ours = our_moe_run(**m, tokens, 16, 2);
    ASSERT_EQ(ours.routes.size(), static_cast<size_t>(hp.n_layer) * tokens.size() * static_cast<size_t>(hp.n_expert_used));
    auto exact = pi::testing::reference_forced_routes(*path, tokens, ours.routes, pi::testing::Oracle::Exact);
    ASSERT_TRUE(exact.ok()) << exact.error().message;
    auto f16kv = pi::testing::reference_forced_routes(*path, tokens, ours.routes, pi::testing::Oracle::F16Kv);
    ASSERT_TRUE(f16kv.ok()) << f16kv.error().message;
    ASSERT_EQ(ours.logits.size(), exact->logits.size());
    const double e_exact = rel_error(ours.logits, exact->logits, hp.n_vocab);
    const double e_f16kv = rel_error(ours.logits, f16kv->logits, hp.n_vocab);
    const auto [tie, differ] = route_ties(ours.routes, exact->probs, hp.n_expert, hp.n_expert_used, hp.gating);
    const double tie_bound =
        (c.model.outtype[0] == 'q' || c.model.outtype == "mxfp4") && !scalar_kernels() ? kRouteTieQuant : kRouteTieFloat;
    std::printf("  %-40s rel error %.3g vs exact (bound %.3g), %.3g vs f16-KV oracle (bound %.3g), "
                "%d of %zu routes differ, by <= %.3g in ln p (bound %.3g)\n",
                c.model.file_name().c_str(), e_exact, c.tol_exact, e_f16kv, c.tol, differ,
                ours.routes.size() / static_cast<size_t>(hp.n_expert_used), tie, tie_bound);
    EXPECT_LE(e_exact, c.tol_exact) << c.model.file_name();
    EXPECT_LE(e_f16kv, c.tol) << c.model.file_name();
    EXPECT_LE(tie, tie_bound) << c.model.file_name();
    return;
  }
  auto exact = pi::testing::reference_logits(*path, tokens, pi::testing::Oracle::Exact);
  ASSERT_TRUE(exact.ok()) << exact.error().message;
  auto f16kv = pi::testing::reference_logits(*path, tokens, pi::testing::Oracle::F16Kv);
  ASSERT_TRUE(f16kv.ok()) << f16kv.error().message;
  const std::vector<float> ours = our_logits(**m, tokens, 16, 2);
  ASSERT_EQ(ours.size(), exact->size());
  const int64_t n_vocab = (*m)->hparams().n_vocab;
  const double e_exact = rel_error(ours, *exact, n_vocab);
  const double e_f16kv = rel_error(ours, *f16kv, n_vocab);
  std::printf("  %-40s rel error %.3g vs exact (bound %.3g), %.3g vs f16-KV oracle (bound %.3g)\n",
              c.model.file_name().c_str(), e_exact, c.tol_exact, e_f16kv, c.tol);
  EXPECT_LE(e_exact, c.tol_exact) << c.model.file_name();
  EXPECT_LE(e_f16kv, c.tol) << c.model.file_name();
}

TinyPyModel py(const char* arch, const char* fmt, bool pwri, int kv_heads, const char* act = "",
               bool tied = false) {
  TinyPyModel m;
  m.arch = arch;
  m.outtype = fmt;
  m.pwri = pwri;
  m.kv_heads = kv_heads;
  m.act = act;
  m.tied = tied;
  return m;
}

TinyPyModel with_head_dim(TinyPyModel m, int head_dim) {
  m.head_dim = head_dim;
  return m;
}

TinyPyModel with_experts(TinyPyModel m, int n, int used, int width = 0) {
  m.experts = n;
  m.experts_used = used;
  m.expert_ff = width;
  return m;
}

TinyPyModel with_swa(TinyPyModel m, int window) {
  m.swa = window;
  return m;
}

TinyPyModel with_gating(TinyPyModel m, const char* gating) {
  m.gating = gating;
  return m;
}

TinyPyModel with_yarn(TinyPyModel m, int factor) {
  m.yarn = factor;
  return m;
}

TinyPyModel with_down_t(TinyPyModel m) {
  m.transpose_down = true;
  return m;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const char* formats[] = {"f32", "f16", "q8_0", "q4_0"};
  const bool full = PI_REFERENCE_FULL;
  for (int fi = 0; fi < 4; ++fi) {
    const char* fmt = formats[fi];
    const bool quant = fmt[0] == 'q';
    const double te = quant ? kQuantTol : kFloatTolExact, t = quant ? kQuantTol : kFloatTol;
    for (int pi = 0; pi < 2; ++pi) {
      const bool pwri = pi == 1;
      const TinyPyModel ms[] = {py("llama", fmt, pwri, 2), py("bamboo", fmt, pwri, 2),
                                py("falcon", fmt, pwri, 1), py("falcon", fmt, pwri, 2)};
      for (int j = 0; j < 4; ++j) {
        // The fast subset: every f32 model; for each other format one GGUF and one PWRI
        // model, rotating through the architectures and layouts. The slow binary runs the rest.
        const bool in_fast = fi == 0 || j == (fi + 2 * pi) % 4;
        if (in_fast != full) cases.push_back({ms[j], te, t});
      }
    }
  }
  if (!full) {
    cases.push_back({py("llama", "f32", false, 4, "relu", true), kFloatTolExact, kFloatTol});
    cases.push_back({py("llama", "f32", false, 1, "gelu"), kFloatTolExact, kFloatTol});
  }
  // opt (learned positions, biases everywhere; GGUF and PowerInfer files, the latter run
  // dense here) and qwen2 (q/k/v biases, NeoX RoPE with base 1e6): f32 and one block format
  // of each in the fast subset, the other formats in the slow binary.
  struct Extra {
    TinyPyModel model;
    bool fast;
  };
  const Extra extra[] = {
      {py("opt", "f32", false, 4), true},
      {py("opt", "f32", true, 4), true},
      {py("opt", "q4_0", true, 4), true},
      {py("opt", "f16", false, 4), false},
      {py("opt", "q8_0", false, 4), false},
      {py("opt", "q8_0", true, 4), false},
      {py("qwen2", "f32", false, 2), true},
      {py("qwen2", "q8_0", false, 2), true},
      {py("qwen2", "f32", false, 1, "", true), true},
      {py("qwen2", "f16", false, 2), false},
      {py("qwen2", "q4_0", false, 2, "", true), false},
      // qwen3: per-head q/k RMS norms before NeoX RoPE, a head width that is not n_embd / n_head.
      {py("qwen3", "f32", false, 2), true},
      {with_head_dim(py("qwen3", "q8_0", false, 2, "", true), 32), true},
      {with_head_dim(py("qwen3", "f32", false, 1), 32), false},
      {py("qwen3", "f16", false, 2), false},
      {py("qwen3", "q4_0", false, 2), false},
      // qwen3moe: softmax routing over all experts, top-k renormalized, SwiGLU experts.
      {py("qwen3moe", "f32", false, 2), true},
      {with_experts(with_head_dim(py("qwen3moe", "q8_0", false, 1, "", true), 32), 6, 3, 32), true},
      {py("qwen3moe", "q4_0", false, 2), true},
      {with_experts(py("qwen3moe", "f16", false, 2), 4, 4), false},
      {with_experts(py("qwen3moe", "f32", false, 2), 16, 1), false},
      // smallthinker: the router on the layer input before attn_norm, sigmoid or softmax
      // gating, ReGLU experts (sparse inside: only positive gates' rows), layer 0 NoPE and
      // global, layer 1 through a sliding window (3 positions, so the test's sequences cross it).
      {with_swa(py("smallthinker", "f32", false, 2), 3), true},
      {with_gating(with_experts(py("smallthinker", "q8_0", false, 1, "", true), 6, 3, 32), "softmax"), true},
      {with_down_t(with_swa(py("smallthinker", "q4_0", false, 2), 3)), true},
      {with_down_t(py("smallthinker", "f16", false, 2)), false},
      // YaRN (rope.scaling.type yarn, factor 8 over an original context of 4096): unscaled,
      // blended and interpolated pairs, cos and sin times 1 + 0.1 ln 8; normal and NeoX pairs.
      {with_yarn(py("llama", "f32", false, 2), 8), true},
      {with_yarn(py("qwen3", "q8_0", false, 2), 8), true},
      {with_yarn(py("qwen2", "f16", false, 2), 4), false},
      // gpt-oss: biases on q/k/v/o, the router and every expert, a sink per head, layers 0, 2, ..
      // through a window of 3 (the sequences cross it) and the others global, the clamped
      // SwiGLU (active on some neurons), NeoX RoPE; MXFP4 experts as released, YaRN.
      {py("gpt-oss", "f32", false, 2), true},
      {with_yarn(py("gpt-oss", "mxfp4", false, 2), 32), true},
      {with_experts(with_swa(py("gpt-oss", "q8_0", false, 1, "", true), 2), 4, 4), true},
      {with_head_dim(py("gpt-oss", "mxfp4", false, 2), 32), false},
      // Mixtral: llama with llama.expert_count, experts feed_forward_length wide.
      {with_experts(py("llama", "f32", false, 2), 8, 2), true},
      {with_experts(py("llama", "q8_0", false, 1, "", true), 4, 2, 96), true},
      {with_experts(py("llama", "q4_0", false, 2), 8, 2), false},
  };
  for (const Extra& e : extra) {
    // (mxfp4: MXFP4 experts, whose products quantize their activations to 8 bits as q8_0's do;
    // the scalar kernels keep f32 activations: the float bounds hold for every format)
    const bool quant = (e.model.outtype[0] == 'q' || e.model.outtype == "mxfp4") && !scalar_kernels();
    const double qt = e.model.arch == std::string("gpt-oss") ? kGptOssQuantTol : kQuantTol;
    if (e.fast != full) cases.push_back({e.model, quant ? qt : kFloatTolExact, quant ? qt : kFloatTol});
  }
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string n = info.param.model.file_name();
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Models, ReferenceTest, ::testing::ValuesIn(all_cases()), case_name);

// Greedy continuations of 64 tokens equal the oracle's, for f32 weights of every
// architecture and layout (the prompt is fed in batches, then one token at a time).
class GreedyTest : public ::testing::TestWithParam<TinyPyModel> {
 protected:
  void SetUp() override {
    if (!pi::testing::python_available()) GTEST_SKIP() << "no Python with NumPy at " PI_PYTHON;
  }
};

TEST_P(GreedyTest, SixtyFourTokensIdentical) {
  auto path = pi::testing::make_py_model(GetParam());
  ASSERT_TRUE(path.ok()) << path.error().message;
  auto m = model::Model::load(*path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const auto prompt =
      pi::testing::test_tokens(20, 3, static_cast<int32_t>((*m)->hparams().n_vocab), 11);
  auto ref = pi::testing::reference_greedy(*path, prompt, 64);
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  ASSERT_EQ(ref->size(), 64u);
  EXPECT_EQ(our_greedy(**m, prompt, 64), *ref);
}

std::vector<TinyPyModel> greedy_models() {
  if (PI_REFERENCE_FULL) {
    return {py("llama", "f32", true, 2),  py("bamboo", "f32", true, 2),
            py("falcon", "f32", false, 2), py("falcon", "f32", true, 1),
            py("llama", "f32", false, 4, "relu", true), py("opt", "f32", true, 4),
            py("qwen2", "f32", false, 1, "", true)};
  }
  return {py("llama", "f32", false, 2),  py("bamboo", "f32", false, 2),
          py("falcon", "f32", false, 1), py("falcon", "f32", true, 2),
          py("opt", "f32", false, 4),    py("qwen2", "f32", false, 2),
          with_head_dim(py("qwen3", "f32", false, 2), 32), py("qwen3moe", "f32", false, 2),
          with_experts(py("llama", "f32", false, 2), 8, 2), with_down_t(with_swa(py("smallthinker", "f32", false, 2), 3)),
          py("gpt-oss", "f32", false, 2)};
}

std::string model_name(const ::testing::TestParamInfo<TinyPyModel>& info) {
  std::string n = info.param.file_name();
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(F32Models, GreedyTest, ::testing::ValuesIn(greedy_models()), model_name);

}  // namespace
