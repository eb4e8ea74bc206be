// The hybrid FFN step (hot neurons on the simulated GPU, cold ones on the CPU) against the CPU's
// sparse FFN on the same inputs, layer by layer, for every FFN kind (llama ReGLU, bamboo ReLU
// on both, falcon without gate), one token and batches, attention on either side:
//   - a layer whose neurons are all on one side gives the CPU's output bit for bit;
//   - a split layer sums its two halves apart: within the float error of reassociating the
//     output sum, 2 n u sum_r |a_r D[r, c]| for n listed neurons (u = 2^-24), never more.
// The race checker sees no hazard.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "backend/host_device.h"
#include "backend/sim/sim_device.h"
#include "cli/run_command.h"
#include "model/model.h"
#include "model/tiny_model.h"
#include "sparse/hybrid_ffn.h"
#include "tensor/quant.h"

namespace pi::sparse {
namespace {

constexpr int64_t kMaxTokens = 6;

std::unique_ptr<model::Model> synth(const std::string& arch) {
  const std::string path = testing::temp_path("hybrid_ffn_" + arch + ".pwri.gguf");
  if (!std::filesystem::exists(path)) {
    auto r = testing::run_command(std::string(PI_BIN_DIR) + "/powerinfer synth --preset tiny --arch " +
                                  arch + " --layers 4 --pwri --no-progress --type q8_0 -o " + path);
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  auto m = model::Model::load(path);
  EXPECT_TRUE(m.ok()) << m.error().message;
  return m.ok() ? std::move(*m) : nullptr;
}

std::vector<float> gaussian(size_t n, std::mt19937& rng, float sigma) {
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Layers: 0 every neuron hot, attention on the device; 1 none hot, attention on the CPU;
// 2 split, attention on the device; 3 split, attention on the CPU.
HybridLayout layout(int64_t n_layer, int64_t n_ff) {
  HybridLayout l;
  l.attn_on_device.resize(static_cast<size_t>(n_layer));
  l.hot.resize(static_cast<size_t>(n_layer));
  for (int64_t il = 0; il < n_layer; ++il) {
    const auto k = static_cast<size_t>(il);
    l.attn_on_device[k] = il % 2 == 0;
    for (int32_t i = 0; i < n_ff; ++i) {
      const bool hot = il % 4 == 0 || (il % 4 >= 2 && (i % 3 == 0 || i < n_ff / 4));
      if (hot) l.hot[k].push_back(i);
    }
  }
  return l;
}

void check_model(const model::Model& m, const std::string& what) {
  const model::HParams& hp = m.hparams();
  backend::CpuDevice host(2);
  auto sim = backend::SimDevice::create(backend::SimOptions{}, 1, cpu::default_isa());
  ASSERT_TRUE(sim.ok()) << sim.error().message;
  backend::SimDevice& dev = **sim;
  SparseConfig cfg;
  auto cpu = SparseFfn::create(m, m.weights(), host, kMaxTokens, cfg);
  ASSERT_TRUE(cpu.ok()) << cpu.error().message;
  const HybridLayout lay = layout(hp.n_layer, hp.n_ff);
  auto hyb = HybridFfn::create(m, host, dev, lay, kMaxTokens, cfg);
  ASSERT_TRUE(hyb.ok()) << hyb.error().message;

  std::mt19937 rng(7);
  const auto n_embd = static_cast<size_t>(hp.n_embd);
  auto xin = dev.alloc(kMaxTokens * n_embd * 4, "x").value();
  auto pin = dev.alloc(kMaxTokens * n_embd * 4, "pred_in").value();
  auto dout = dev.alloc(kMaxTokens * n_embd * 4, "out").value();
  for (int64_t m_tok : {int64_t{1}, int64_t{5}}) {
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      const std::string at = what + " layer " + std::to_string(il) + " m=" + std::to_string(m_tok);
      const size_t n = static_cast<size_t>(m_tok) * n_embd;
      const std::vector<float> x = gaussian(n, rng, 1.0f), pred = gaussian(n, rng, 1.0f);
      std::vector<float> want(n), got(n);
      (*cpu)->run(il, model::FfnInput{x.data(), pred.data(), m_tok}, want.data());
      if (lay.attn_on_device[static_cast<size_t>(il)]) {
        dev.upload(xin.data(), x.data(), n * 4);
        dev.upload(pin.data(), pred.data(), n * 4);
        (*hyb)->run(il, model::FfnInput{xin.as<float>(), pin.as<float>(), m_tok}, dout.as<float>());
        dev.sync_all();
        dev.download(got.data(), dout.data(), n * 4);
      } else {
        (*hyb)->run(il, model::FfnInput{x.data(), pred.data(), m_tok}, got.data());
      }
      const auto& hot = lay.hot[static_cast<size_t>(il)];
      if (hot.empty() || static_cast<int64_t>(hot.size()) == hp.n_ff) {
        EXPECT_EQ(std::memcmp(got.data(), want.data(), n * 4), 0) << at << ": not bit-identical";
        continue;
      }
      // The two sides compute the same activations a_r of the listed neurons; only the order of
      // the output sum sum_r a_r D[r, c] differs, so |got - want| <= 2 n u sum_r |a_r D[r, c]|
      // (n listed neurons, u = 2^-24), with the a_r recomputed here in double.
      const RowLists& lists = (*cpu)->predict(il, pred.data(), m_tok);
      const model::FfnWeights& f = m.weights().layers[static_cast<size_t>(il)].ffn;
      std::vector<float> g_row(n_embd), u_row(n_embd), d_row(n_embd);
      double worst = 0, biggest = 0;
      for (int64_t i = 0; i < m_tok; ++i) {
        std::vector<double> mag(n_embd, 0.0);
        const float* xi = x.data() + static_cast<size_t>(i) * n_embd;
        const int64_t n_listed = lists.count(i);
        for (int64_t k = lists.offsets[static_cast<size_t>(i)]; k < lists.offsets[static_cast<size_t>(i) + 1]; ++k) {
          const int32_t r = lists.idx[static_cast<size_t>(k)];
          double gv = 0, uv = 0;
          ASSERT_TRUE(dequantize_row(f.up.type, f.up.row(r), u_row.data(), hp.n_embd).ok());
          for (size_t c = 0; c < n_embd; ++c) uv += static_cast<double>(u_row[c]) * xi[c];
          double a = std::max(uv, 0.0);
          if (f.gate.present()) {
            ASSERT_TRUE(dequantize_row(f.gate.type, f.gate.row(r), g_row.data(), hp.n_embd).ok());
            for (size_t c = 0; c < n_embd; ++c) gv += static_cast<double>(g_row[c]) * xi[c];
            a = std::max(gv, 0.0) * (hp.ffn == model::FfnKind::GatedBoth ? std::max(uv, 0.0) : uv);
          }
          ASSERT_TRUE(dequantize_row(f.down_t.type, f.down_t.row(r), d_row.data(), hp.n_embd).ok());
          for (size_t c = 0; c < n_embd; ++c) mag[c] += std::fabs(a * d_row[c]);
        }
        for (size_t c = 0; c < n_embd; ++c) {
          const size_t e = static_cast<size_t>(i) * n_embd + c;
          const double tol = 2.0 * static_cast<double>(n_listed + 1) * 5.96e-8 * mag[c] + 1e-30;
          worst = std::max(worst, std::fabs(static_cast<double>(got[e]) - want[e]) / tol);
          biggest = std::max(biggest, std::fabs(static_cast<double>(want[e])));
        }
      }
      EXPECT_LE(worst, 1.0) << at << ": split layer off by more than the reassociation bound";
      EXPECT_GT(biggest, 0.0) << at << ": the FFN output is all zero (a useless check)";
    }
  }
  EXPECT_TRUE(dev.hazards().empty()) << dev.hazards().front();
  // Every hot-capable layer handed off in both directions at least once.
  int64_t in = 0, out = 0;
  for (const HybridCounters& c : (*hyb)->counters()) {
    in += c.copies_in;
    out += c.copies_out;
  }
  EXPECT_GT(in, 0) << what;
  EXPECT_GT(out, 0) << what;
}

TEST(HybridFfn, MatchesTheCpuSparseFfnForEveryFfnKind) {
  for (const char* arch : {"llama", "bamboo", "falcon"}) {
    auto m = synth(arch);
    ASSERT_NE(m, nullptr);
    check_model(*m, arch);
  }
}

TEST(HybridFfn, BundledModel) {
  const std::string path = std::string(PI_SOURCE_DIR) + "/models/kjv-relu/kjv-relu.pwri.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  auto m = model::Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error().message;
  check_model(**m, "kjv-relu");
}

TEST(HybridFfn, RefusesBadLayouts) {
  auto m = synth("llama");
  ASSERT_NE(m, nullptr);
  backend::CpuDevice host(1);
  auto sim = backend::SimDevice::create(backend::SimOptions{}, 1, cpu::default_isa());
  ASSERT_TRUE(sim.ok());
  HybridLayout l = layout(m->hparams().n_layer, m->hparams().n_ff);
  l.hot[1] = {5, 3};  // not ascending
  auto bad = HybridFfn::create(*m, host, **sim, l, 4, SparseConfig{});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("ascending"), std::string::npos) << bad.error().message;
  l.hot.pop_back();
  EXPECT_FALSE(HybridFfn::create(*m, host, **sim, l, 4, SparseConfig{}).ok());
  SparseConfig check;
  check.check_predictor = true;
  auto c = HybridFfn::create(*m, host, **sim, layout(m->hparams().n_layer, m->hparams().n_ff), 4, check);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("--check-predictor"), std::string::npos);
}

}  // namespace
}  // namespace pi::sparse
