// ProfilingFfn (the FFN step of `powerinfer profile`) and the planner's input built from a
// loaded model: true per-neuron costs, KV cache and predictor bytes, whole layers for GGUF.
#include <gtest/gtest.h>

#include <random>

#include "backend/host_device.h"
#include "core/thread_pool.h"
#include "model/ffn.h"
#include "model/model.h"
#include "model/tiny_model.h"
#include "sparse/placement_model.h"
#include "sparse/predictor.h"
#include "sparse/profile_ffn.h"

namespace pi::sparse {
namespace {

std::unique_ptr<model::Model> tiny(bool pwri, DType t, const char* name) {
  pi::testing::TinySpec s;
  s.pwri = pwri;
  s.wtype = t;
  s.vocab = false;
  s.activation = "relu";
  s.n_layer = 3;
  const std::string path = pi::testing::temp_path(name);
  Status st = pi::testing::write_tiny_model(s, path);
  EXPECT_TRUE(st.ok()) << st.error().message;
  auto m = model::Model::load(path);
  EXPECT_TRUE(m.ok()) << m.error().message;
  return m.ok() ? std::move(*m) : nullptr;
}

std::vector<float> inputs(int64_t m, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * n));
  for (float& v : x) v = nd(rng);
  return x;
}

// Same output as DenseFfn bit for bit; counts = tokens with a nonzero activation.
TEST(ProfilingFfn, EqualsDenseAndCountsNonzeroActivations) {
  for (bool pwri : {true, false}) {
    auto m = tiny(pwri, DType::F32, pwri ? "profile.pwri.gguf" : "profile.gguf");
    ASSERT_NE(m, nullptr);
    const model::HParams& hp = m->hparams();
    backend::CpuDevice dev(2);
    backend::Ops& ops = dev.ops();
    const int64_t n = 9;
    auto profiled = ProfilingFfn::create(*m, m->weights(), dev, n).value();
    auto dense_ffn = model::DenseFfn::create(*m, m->weights(), dev, n).value();
    ProfilingFfn& prof = *profiled;
    model::DenseFfn& dense = *dense_ffn;
    std::vector<uint64_t> expect(static_cast<size_t>(hp.n_ff), 0);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      const auto x = inputs(n, hp.n_embd, static_cast<uint32_t>(il + 1));
      std::vector<float> a(static_cast<size_t>(n * hp.n_embd)), b(a.size());
      prof.run(il, model::FfnInput{x.data(), x.data(), n}, a.data());
      dense.run(il, model::FfnInput{x.data(), x.data(), n}, b.data());
      EXPECT_EQ(a, b) << "layer " << il;
      if (il != 1) continue;
      // Layer 1's activations, computed here with the same Ops calls.
      const model::FfnWeights& w = m->weights().layers[1].ffn;
      std::vector<float> g(static_cast<size_t>(n * hp.n_ff)), u(g.size());
      ops.linear(w.gate, x.data(), n, g.data());
      ops.linear(w.up, x.data(), n, u.data());
      ops.ffn_combine(hp.ffn, hp.act, g.data(), u.data(), n, hp.n_ff);
      for (size_t k = 0; k < g.size(); ++k) expect[k % static_cast<size_t>(hp.n_ff)] += g[k] != 0.0f;
    }
    const ActivationStats s = prof.stats();
    EXPECT_EQ(s.n_tokens, static_cast<uint64_t>(n));
    ASSERT_EQ(s.n_layer(), hp.n_layer);
    uint64_t fired = 0;
    for (int64_t i = 0; i < hp.n_ff; ++i) {
      EXPECT_EQ(s.counts[1][static_cast<size_t>(i)], static_cast<float>(expect[static_cast<size_t>(i)])) << i;
      fired += expect[static_cast<size_t>(i)];
    }
    EXPECT_GT(fired, 0u);                                             // some fire
    EXPECT_LT(fired, static_cast<uint64_t>(n * hp.n_ff));             // not all (ReLU)
  }
}

TEST(PlacementModel, PowerInferCostsPerNeuronAndLayer) {
  auto m = tiny(true, DType::Q8_0, "plan_model.pwri.gguf");
  ASSERT_NE(m, nullptr);
  const model::HParams& hp = m->hparams();
  PlacementRequest req;
  req.budget = 1 << 20;
  req.n_ctx = 128;
  req.n_batch = 16;
  auto none = placement_problem(*m, nullptr, req);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("powerinfer profile"), std::string::npos);

  ActivationStats s;
  s.n_tokens = 10;
  s.counts.assign(static_cast<size_t>(hp.n_layer), std::vector<float>(static_cast<size_t>(hp.n_ff), 5.0f));
  auto p = placement_problem(*m, &s, req);
  ASSERT_TRUE(p.ok()) << p.error().message;
  const auto& L0 = m->weights().layers[0];
  // One neuron: a gate, an up and a down_t row of n_embd Q8_0 elements (34 bytes per 32).
  const uint64_t row = static_cast<uint64_t>(hp.n_embd) / 32 * 34;
  EXPECT_EQ(L0.ffn.gate.row_stride(), row);
  EXPECT_EQ(p->layers[0].neuron_bytes, 3 * row);
  EXPECT_TRUE(p->layers[0].split);
  EXPECT_FLOAT_EQ(p->layers[0].freq[0], 0.5f);
  const uint64_t kv = 2ull * 128 * static_cast<uint64_t>(hp.n_embd_kv()) * 2;
  EXPECT_EQ(kv_layer_bytes(hp, 128), kv);
  auto preds = load_predictors(*m);
  ASSERT_TRUE(preds.ok());
  const uint64_t pred = preds->empty() ? 0 : (*preds)[0].nbytes();
  const uint64_t attn = L0.attn.q.nbytes() + L0.attn.k.nbytes() + L0.attn.v.nbytes() + L0.attn.out.nbytes() +
                        2 * static_cast<uint64_t>(hp.n_embd) * 4;  // attn_norm, ffn_norm
  EXPECT_EQ(p->layers[0].dense_bytes, attn + pred + kv);
  EXPECT_EQ(p->head_bytes, m->weights().output.nbytes() + static_cast<uint64_t>(hp.n_embd) * 4);
  EXPECT_EQ(p->scratch_bytes, step_scratch_bytes(hp, 16, 1));
  // Statistics of another shape.
  s.counts.pop_back();
  EXPECT_FALSE(placement_problem(*m, &s, req).ok());
}

TEST(PlacementModel, GgufFilesAreWholeLayers) {
  auto m = tiny(false, DType::F16, "plan_model.gguf");
  ASSERT_NE(m, nullptr);
  PlacementRequest req;
  req.n_ctx = 64;
  auto p = placement_problem(*m, nullptr, req);
  ASSERT_TRUE(p.ok()) << p.error().message;
  const auto& f = m->weights().layers[2].ffn;
  for (const LayerCost& L : p->layers) {
    EXPECT_FALSE(L.split);
    EXPECT_TRUE(L.freq.empty());
    EXPECT_GT(L.dense_bytes, f.gate.nbytes() + f.up.nbytes() + f.down.nbytes());
  }
  // The plan puts every layer on the device when everything fits.
  uint64_t all = p->head_bytes + p->scratch_bytes;
  for (const LayerCost& L : p->layers) all += L.dense_bytes;
  p->budget = all;
  auto plan = solve_placement(*p);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->n_dense_layers, 3);
  EXPECT_TRUE(plan->head_on_device);
  EXPECT_EQ(plan->cpu_bytes_per_token, 0.0);
  p->budget = all - 1;
  plan = solve_placement(*p);
  ASSERT_TRUE(plan.ok());
  EXPECT_GT(plan->cpu_bytes_per_token, 0.0);
}

TEST(PlacementModel, FingerprintFollowsTypesAndShapes) {
  auto a = tiny(true, DType::F32, "fp_a.pwri.gguf");
  auto b = tiny(true, DType::F32, "fp_b.pwri.gguf");
  auto c = tiny(true, DType::F16, "fp_c.pwri.gguf");
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(model_fingerprint(a->file()), model_fingerprint(b->file()));
  EXPECT_NE(model_fingerprint(a->file()), model_fingerprint(c->file()));
  EXPECT_EQ(model_fingerprint(a->file()).rfind("fnv1a64:", 0), 0u);
}

}  // namespace
}  // namespace pi::sparse
