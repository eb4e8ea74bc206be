// Whole models on the simulated GPU: every layer, the KV cache and all scratch in its memory
// (the hybrid executor with a budget that holds everything; the token embedding stays on the
// CPU). The same CPU kernels run there, so logits must be bit-identical to the CPU device's
// for every architecture and format, dense and sparse, one sequence and batched; the race
// checker sees no hazard.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/host_device.h"
#include "backend/sim/sim_device.h"
#include "cli/run_command.h"
#include "kernels/cpu/kernels.h"
#include "model/model.h"
#include "model/tiny_model.h"
#include "runtime/context.h"
#include "sparse/activation_stats.h"
#include "sparse/placement_model.h"

namespace pi {
namespace {

using Logits = std::vector<std::vector<float>>;

runtime::ContextOptions options(const std::string& device, bool dense, uint64_t budget = 0) {
  runtime::ContextOptions o;
  o.n_ctx = 64;
  o.n_batch = 8;
  o.n_threads = 2;
  o.dense = dense;
  o.n_seq_max = 3;
  o.device.name = device;
  o.device.budget = budget;
  // The sim computes over the file's layouts, so the CPU it is compared with bit for bit does
  // too (the R16 layouts sum in another order; it is compared with the file's in CpuDenseLayout, test_sim_model.cpp).
  o.device.dense_repack = false;
  o.gpu_index_path = testing::temp_path("sim_model.gpuidx");
  o.reset_gpu_index = true;
  return o;
}

// A prompt of 11 tokens (two batches of 8), then 5 greedy steps; then a batch of three
// sequences forked from the prompt. Returns every logits row produced.
Logits run(const model::Model& m, const runtime::ContextOptions& o) {
  auto c = runtime::Context::create(m, o);
  EXPECT_TRUE(c.ok()) << c.error().message;
  if (!c.ok()) return {};
  Logits out;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 11; ++i)
    prompt.push_back((i * 37 + 5) % static_cast<int32_t>(m.hparams().n_vocab));
  EXPECT_TRUE((*c)->decode(prompt).ok());
  for (int step = 0; step < 5; ++step) {
    auto l = (*c)->logits();
    out.emplace_back(l.begin(), l.end());
    const int32_t next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    EXPECT_TRUE((*c)->decode(std::vector<int32_t>{next}).ok());
  }
  const int32_t p = (*c)->seq_pos_max(0) + 1;
  EXPECT_TRUE((*c)->seq_cp(0, 1, 0, runtime::kPosEnd).ok());
  EXPECT_TRUE((*c)->seq_cp(0, 2, 0, runtime::kPosEnd).ok());
  std::vector<BatchToken> batch = {
      {1, 0, p, true}, {2, 1, p, true}, {3, 2, p, false}, {4, 2, p + 1, true}};
  EXPECT_TRUE((*c)->decode_batch(batch).ok());
  for (size_t i : {0, 1, 3}) {
    auto l = (*c)->batch_logits(i);
    out.emplace_back(l.begin(), l.end());
  }
  if (o.device.name == "sim") {
    auto* sim = dynamic_cast<backend::SimDevice*>(&(*c)->device());
    EXPECT_NE(sim, nullptr);
    if (sim != nullptr) {
      EXPECT_TRUE(sim->hazards().empty()) << sim->hazards().front();
      // Everything fits the default capacity: every weight but the embeddings (which stay on
      // the CPU: only the fed tokens' rows are read) went to the device, unless its FFN
      // neurons must stay on the CPU (a biased FFN: opt) or its experts (--cpu-moe).
      const runtime::HybridSetup* h = (*c)->hybrid();
      EXPECT_NE(h, nullptr);
      const model::HParams& hp = m.hparams();
      if (h != nullptr && h->plan.n_dense_layers == hp.n_layer && h->plan.head_on_device && o.n_cpu_moe == 0 &&
          (!h->split || h->plan.n_device_neurons() == hp.n_layer * hp.n_ff) &&
          (!h->experts || h->n_device_experts() == hp.n_layer * hp.n_expert))
        EXPECT_GE(sim->counters().bytes_in, model::weight_bytes(m.weights()) -
                                                m.weights().tok_embd.nbytes() -
                                                m.weights().pos_embd.nbytes());
      EXPECT_LE(sim->memory().peak, sim->memory().budget);
    }
  }
  return out;
}

void expect_identical(const Logits& got, const Logits& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(got[k].size(), want[k].size()) << what;
    EXPECT_EQ(std::memcmp(got[k].data(), want[k].data(), want[k].size() * sizeof(float)), 0)
        << what << ": row " << k << " differs between sim and cpu";
  }
}

// Rows within float rounding of each other (`tolerance` of the row's largest logit) with the
// same greedy token: two orders of sums over the same weights.
void expect_close(const Logits& got, const Logits& want, const std::string& what, double tolerance = 1e-4) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < want.size(); ++k) {
    double worst = 0, scale = 0;
    for (size_t j = 0; j < want[k].size(); ++j) {
      worst = std::max(worst, std::fabs(static_cast<double>(got[k][j]) - want[k][j]));
      scale = std::max(scale, std::fabs(static_cast<double>(want[k][j])));
    }
    EXPECT_LE(worst, tolerance * scale) << what << ": row " << k;
    EXPECT_EQ(std::max_element(got[k].begin(), got[k].end()) - got[k].begin(),
              std::max_element(want[k].begin(), want[k].end()) - want[k].begin())
        << what << ": row " << k;
  }
}

std::unique_ptr<model::Model> load(const std::string& path) {
  auto m = model::Model::load(path);
  EXPECT_TRUE(m.ok()) << m.error().message;
  return m.ok() ? std::move(*m) : nullptr;
}

// The CPU's dense layouts for Q4_0 and Q8_0 (the R16 ones with AVX-512 or AVX2): results within float rounding of the
// file layout's and the same greedy tokens; the same bits for 1 and 2 threads and for a prompt
// fed token by token or in batches (one order of sums for every token count).
// `got` (run with `o`) again with 1 thread and with batches of 1: the same bits.
void expect_any_split(const model::Model& m, const runtime::ContextOptions& o, const Logits& got) {
  runtime::ContextOptions one = o;
  one.n_threads = 1;
  expect_identical(run(m, one), got, "1 vs 2 threads");
  runtime::ContextOptions single = o;
  single.n_batch = 1;
  expect_identical(run(m, single), got, "batch 1 vs 8");
}

// Writes and loads `spec`, runs it in the file's layout (no copies) and with the CPU's R16
// layouts (`dense_repack`): the logits within `tol` (relative), the R16 run's the same bits for
// any thread count and batch split. Returns the model, whose layout cache then holds the copies.
std::unique_ptr<model::Model> r16_matches_file_layout(const testing::TinySpec& spec, const std::string& name,
                                                      double tol) {
  const std::string path = testing::temp_path(name + ".gguf");
  EXPECT_TRUE(testing::write_tiny_model(spec, path).ok());
  auto m = load(path);
  if (m == nullptr) return nullptr;
  runtime::ContextOptions file = options("cpu", false);
  const Logits want = run(*m, file);
  EXPECT_EQ(m->layouts().bytes(), 0u);
  runtime::ContextOptions r16 = file;
  r16.device.dense_repack = true;
  const Logits got = run(*m, r16);
  expect_close(got, want, "R16 vs the file's layout", tol);
  expect_any_split(*m, r16, got);
  return m;
}

TEST(CpuDenseLayout, R16AgreesWithTheFileLayoutForAnyThreadCountAndBatch) {
  if (cpu::dot_layout(cpu::default_isa(), DType::Q4_0, 64) == DType::Q4_0)
    GTEST_SKIP() << "the " << cpu::isa_name(cpu::default_isa()) << " kernels read Q4_0 as the file lays it out";
  for (DType wt : {DType::Q4_0, DType::Q8_0, DType::Q4_K}) {
    SCOPED_TRACE(dtype_name(wt));
    if (cpu::dot_layout(cpu::default_isa(), wt, 64) == wt) continue;  // no leaf for it on this ISA
    testing::TinySpec spec = testing::tiny_variant("llama", wt, false, 2, false, 5);
    spec.n_vocab = 304;  // whole groups of 16 rows: the head too
    if (wt == DType::Q4_K) spec.n_embd = spec.n_ff = 256;  // whole super-blocks
    // Q4_K: both layouts quantize each activation to int8 with one scale per 256 elements, so a
    // last-bit difference (another order of sums: 1e-6 of attn_output's result in the second
    // prompt batch, traced with AVX2) can move a quant of the FFN's input by one step (1/254 of
    // its super-block's largest value), which this tiny random model carries to the logits at
    // up to ~2% of the largest one. Whether a step moves depends on the ISA's last bits (none
    // did with AVX-512 here), so Q4_K gets that bound everywhere.
    auto m = r16_matches_file_layout(spec, "cpu_dense_layout_" + std::string(dtype_name(wt)),
                                     wt == DType::Q4_K ? 3e-2 : 1e-4);
    ASSERT_NE(m, nullptr);
    // q, k, v, out, gate, up, down of every layer and the head, copied once.
    uint64_t dense_bytes = m->weights().output.nbytes();
    for (const auto& L : m->weights().layers)
      for (const Matrix* w : {&L.attn.q, &L.attn.k, &L.attn.v, &L.attn.out, &L.ffn.gate, &L.ffn.up, &L.ffn.down})
        dense_bytes += w->nbytes();
    EXPECT_EQ(m->layouts().bytes(), dense_bytes);
  }
}

// Mixture of experts: the router and each expert (whole 16-row groups) take the R16 layout too,
// and agree with the file's for any thread count and batch split. Routing is discontinuous: a
// token whose top experts nearly tie may route differently under another order of sums, so
// the seed is one whose routes are well apart (seed 5 had a near-tie at its fifth step).
TEST(CpuDenseLayout, ExpertStacksInR16) {
  for (DType wt : {DType::Q4_0, DType::Q8_0}) {
    SCOPED_TRACE(dtype_name(wt));
    if (cpu::dot_layout(cpu::default_isa(), wt, 64) == wt) continue;  // no leaf for it on this ISA
    testing::TinySpec spec = testing::tiny_variant("qwen3moe", wt, false, 2, false, 6);
    spec.n_vocab = 304;
    spec.n_expert = 8;
    auto m = r16_matches_file_layout(spec, "cpu_moe_layout_" + std::string(dtype_name(wt)), 1e-4);
    ASSERT_NE(m, nullptr);
    uint64_t experts = 0;
    for (const auto& L : m->weights().layers)
      experts += L.ffn.gate_exps.nbytes() + L.ffn.up_exps.nbytes() + L.ffn.down_exps.nbytes();
    EXPECT_GE(m->layouts().bytes(), experts);  // the stacks were copied (with q, k, v, out, head)
  }
}

// A model read into memory holds those matrices as Q4_0_R16 in place (no copy for the CPU),
// a context that wants the file's layout gets a copy back, and both give the bits of a mapped
// model holding the file's layout.
TEST(CpuDenseLayout, ReadModelHoldsR16InPlace) {
  const model::DenseLayouts layouts{backend::cpu_dense_layout};
  if (layouts.layout(DType::Q4_0) == DType::Q4_0) GTEST_SKIP() << "the kernels here read Q4_0 as the file lays it out";
  for (DType wt : {DType::Q4_0, DType::Q8_0, DType::Q4_K}) {
  if (layouts.layout(wt) == wt) continue;  // no leaf for it on this ISA
  for (bool pwri : {false, true}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(wt) << (pwri ? " PowerInfer file" : " GGUF"));
    testing::TinySpec spec = testing::tiny_variant("llama", wt, pwri, 2, false, 7);
    spec.n_vocab = 304;
    if (wt == DType::Q4_K) spec.n_embd = spec.n_ff = 256;  // whole super-blocks
    const std::string path = testing::temp_path(std::string("dense_inplace_") + std::string(dtype_name(wt)) +
                                                 (pwri ? ".pwri.gguf" : ".gguf"));
    ASSERT_TRUE(testing::write_tiny_model(spec, path).ok());
    const DType transposed = backend::cpu_transposed_layout(DType::Q4_0);  // the PowerInfer down_t
    auto mapped = model::Model::load(path, LoadMode::Map, false, transposed, layouts);
    auto held = model::Model::load(path, LoadMode::Read, false, transposed, layouts);
    ASSERT_TRUE(mapped.ok() && held.ok());
    EXPECT_EQ((*mapped)->repacked_in_place_bytes(), 0u);
    const model::LayerWeights& L = (*held)->weights().layers[0];
    const DType held_type = layouts.layout(wt);
    EXPECT_EQ(L.attn.q.type, held_type);
    EXPECT_EQ(L.ffn.up.type, pwri ? wt : held_type);  // a sparse FFN reads rows
    uint64_t want_bytes = (*held)->weights().output.nbytes();
    for (const auto& l : (*held)->weights().layers) {
      for (const Matrix* w : {&l.attn.q, &l.attn.k, &l.attn.v, &l.attn.out}) want_bytes += w->nbytes();
      if (!pwri)
        for (const Matrix* w : {&l.ffn.gate, &l.ffn.up, &l.ffn.down}) want_bytes += w->nbytes();
    }
    uint64_t split_bytes = 0;
    for (const auto& l : (*held)->weights().layers)
      if (l.ffn.down_t.present() && wt == DType::Q4_0 && transposed != DType::Q4_0) split_bytes += l.ffn.down_t.nbytes();
    EXPECT_EQ((*held)->repacked_in_place_bytes(), want_bytes + split_bytes);
    runtime::ContextOptions r16 = options("cpu", false);
    r16.device.dense_repack = true;
    const Logits from_mapped = run(**mapped, r16);
    const Logits in_place = run(**held, r16);
    // Nothing copied for the CPU (a PowerInfer file whose FFN a context runs dense, as this
    // tiny one without predictors, gets an R16 copy of that FFN).
    if (!pwri) EXPECT_EQ((*held)->layouts().bytes(), 0u);
    const uint64_t copied = (*held)->layouts().bytes();
    expect_identical(in_place, from_mapped, "held in place vs copied");
    const Logits file = run(**mapped, options("cpu", false));
    const Logits back = run(**held, options("cpu", false));
    EXPECT_EQ((*held)->layouts().bytes(), copied + want_bytes);  // copies back in the file's layout
    expect_identical(back, file, "copied back vs the file's");
    // The sim's lane gets the file's layout back; the host lane computes over the model's.
    // Q4_K: as in R16AgreesWithTheFileLayoutForAnyThreadCountAndBatch, a last-bit difference
    // (the host lane's R16 order of sums) can move one step of the FFN's per-256 activation
    // quantization, which the logits carry at up to about 1% (seen on one row of eight).
    expect_close(run(**held, options("sim", false)), file, "sim over the held model", wt == DType::Q4_K ? 3e-2 : 1e-4);
    // -ngl: the device can run the layers it is given (it holds them in the file's layout).
    runtime::ContextOptions ngl = options("sim", false);
    ngl.n_gpu_layers = 1;
    expect_close(run(**held, ngl), file, "sim -ngl 1 over the held model", wt == DType::Q4_K ? 3e-2 : 1e-4);
  }
  }
}

TEST(SimModel, TinyModelsOfEveryArchAndFormatMatchTheCpuBitForBit) {
  const struct {
    const char* name;
    testing::TinySpec spec;
  } cases[] = {
      {"llama_f32", testing::tiny_variant("llama", DType::F32, false, 2, false, 3)},
      {"llama_f16", testing::tiny_variant("llama", DType::F16, false, 4, false, 3)},
      {"llama_q4_0_pwri", testing::tiny_variant("llama", DType::Q4_0, true, 2, false, 3)},
      {"bamboo_q8_0_pwri", testing::tiny_variant("bamboo", DType::Q8_0, true, 4, false, 3)},
      {"falcon7_q8_0", testing::tiny_variant("falcon", DType::Q8_0, false, 1, false, 3)},
      {"falcon40_q4_1", testing::tiny_variant("falcon", DType::Q4_1, false, 2, true, 3)},
      {"opt_q8_0", testing::tiny_variant("opt", DType::Q8_0, false, 4, false, 3)},
      {"qwen2_f32", testing::tiny_variant("qwen2", DType::F32, false, 2, false, 3)},
      {"qwen3_q8_0", testing::tiny_variant("qwen3", DType::Q8_0, false, 2, false, 3)},
  };
  for (const auto& c : cases) {
    const std::string path = testing::temp_path(std::string("sim_") + c.name + ".gguf");
    ASSERT_TRUE(testing::write_tiny_model(c.spec, path).ok());
    auto m = load(path);
    ASSERT_NE(m, nullptr);
    expect_identical(run(*m, options("sim", false)), run(*m, options("cpu", false)), c.name);
  }
}

testing::TinySpec smallthinker(DType t, bool down_t, int64_t swa) {
  testing::TinySpec s = testing::tiny_variant("smallthinker", t, false, 2, false, 9);
  s.down_exps_t = down_t;
  s.n_swa = swa;
  return s;
}

testing::TinySpec gpt_oss() {
  testing::TinySpec s = testing::tiny_variant("gpt-oss", DType::Q8_0, false, 2, false, 11);
  s.expert_wtype = DType::MXFP4;
  s.n_swa = 3;
  return s;
}

// Tiny mixtures of experts: SwiGLU experts (qwen3moe), ReGLU experts with a transposed down and
// sliding windows, and with a plain down (smallthinker, router before attention), gpt-oss
// (biases, sinks, MXFP4 experts, windows on even layers); the first n.
struct MoeCase {
  const char* name;
  testing::TinySpec spec;
};
std::vector<MoeCase> moe_cases(size_t n) {
  std::vector<MoeCase> all = {
      {"qwen3moe_q8_0", testing::tiny_variant("qwen3moe", DType::Q8_0, false, 2, false, 5)},
      {"smallthinker_f32_down_t_swa", smallthinker(DType::F32, true, 4)},
      {"smallthinker_q4_0_down", smallthinker(DType::Q4_0, false, 0)},
      {"gpt_oss_q8_0_mxfp4", gpt_oss()},
  };
  all.resize(std::min(n, all.size()));
  return all;
}

// The device bytes of a plan that places everything (the sim's default capacity holds it).
uint64_t everything_placed(const model::Model& m) {
  auto ctx = runtime::Context::create(m, options("sim", false));
  EXPECT_TRUE(ctx.ok()) << ctx.error().message;
  return ctx.ok() ? (*ctx)->hybrid()->ledger.allocated() : 0;
}

// Mixtures of experts on the sim: routing reads the router's logits back from the device (and
// sparse ReGLU experts their gate values), the experts run there; the same bits as the CPU,
// sparse and dense, for any thread count and batch split.
TEST(SimModel, MixturesOfExpertsMatchTheCpuBitForBit) {
  for (const MoeCase& c : moe_cases(4)) {
    const std::string path = testing::temp_path(std::string("sim_") + c.name + ".gguf");
    ASSERT_TRUE(testing::write_tiny_model(c.spec, path).ok());
    auto m = load(path);
    ASSERT_NE(m, nullptr);
    for (bool dense : {false, true}) {
      const std::string what = std::string(c.name) + (dense ? " dense" : " sparse");
      const Logits sim = run(*m, options("sim", dense));
      expect_identical(sim, run(*m, options("cpu", dense)), what);
      expect_any_split(*m, options("sim", dense), sim);
    }
    // -ngl 1: the first layer (attention, router, experts) on the sim, the second on the CPU.
    runtime::ContextOptions half = options("sim", false);
    half.n_gpu_layers = 1;
    const Logits cpu = run(*m, options("cpu", false));
    expect_identical(run(*m, half), cpu, std::string(c.name) + " -ngl 1");
    // --cpu-moe and --n-cpu-moe 1: every layer on the sim but the experts of all / the first.
    for (int n_cpu_moe : {INT32_MAX, 1}) {
      runtime::ContextOptions o = options("sim", false);
      o.n_gpu_layers = INT32_MAX;
      o.n_cpu_moe = n_cpu_moe;
      const std::string what = std::string(c.name) + " --n-cpu-moe " + std::to_string(n_cpu_moe);
      expect_identical(run(*m, o), cpu, what);
      expect_any_split(*m, o, cpu);
      // The experts that stay on the CPU never reach the device; the device holds what its
      // ledger counted.
      auto ctx = runtime::Context::create(*m, o);
      ASSERT_TRUE(ctx.ok()) << ctx.error().message;
      const auto* sim = dynamic_cast<backend::SimDevice*>(&(*ctx)->device());
      ASSERT_NE(sim, nullptr);
      uint64_t kept = 0, all = 0;
      for (int64_t il = 0; il < m->hparams().n_layer; ++il) {
        const model::FfnWeights& f = m->weights().layers[static_cast<size_t>(il)].ffn;
        const uint64_t ffn = f.gate_inp.nbytes() + f.gate_exps.nbytes() + f.up_exps.nbytes() +
                             f.down_exps.nbytes() + f.down_exps_t.nbytes() + f.gate_inp_b.nbytes() +
                             f.gate_exps_b.nbytes() + f.up_exps_b.nbytes() + f.down_exps_b.nbytes();
        all += ffn;
        if (il < n_cpu_moe) kept += ffn;
      }
      const uint64_t weights = model::weight_bytes(m->weights()) - m->weights().tok_embd.nbytes();
      EXPECT_LE(sim->counters().bytes_in, weights - kept) << what;
      EXPECT_GE(sim->counters().bytes_in, weights - all) << what;
      EXPECT_EQ(sim->memory().used, (*ctx)->hybrid()->ledger.allocated()) << what;
    }
  }
}

// The experts of a mixture placed one by one under --vram-budget: at budgets from all of it
// down to none, each layer's experts split between the sim and the CPU as the plan says (a
// CPU layer may have device experts, a device layer CPU ones), and the output is the CPU's
// bit for bit (each token sums its experts in id order on either side) for any thread count
// and batch split; the device holds exactly what its ledger counted, within the budget.
TEST(SimModel, ExpertsSplitBetweenTheSimAndTheCpuMatchTheCpuBitForBit) {
  for (const MoeCase& c : moe_cases(4)) {
    const std::string path = testing::temp_path(std::string("sim_split_") + c.name + ".gguf");
    ASSERT_TRUE(testing::write_tiny_model(c.spec, path).ok());
    auto m = load(path);
    ASSERT_NE(m, nullptr);
    const model::HParams& hp = m->hparams();
    const Logits cpu = run(*m, options("cpu", false));
    uint64_t full = 0;
    {
      auto ctx = runtime::Context::create(*m, options("sim", false));
      ASSERT_TRUE(ctx.ok()) << ctx.error().message;
      ASSERT_NE((*ctx)->hybrid(), nullptr);
      EXPECT_TRUE((*ctx)->hybrid()->experts);
      EXPECT_EQ((*ctx)->hybrid()->n_device_experts(), hp.n_layer * hp.n_expert);
      full = (*ctx)->hybrid()->ledger.allocated();
    }
    bool cpu_layer_with_device_experts = false, device_layer_with_cpu_experts = false;
    constexpr int kSteps = 24;
    for (int i = 0; i <= kSteps; ++i) {
      runtime::ContextOptions o = options("sim", false);
      o.vram_budget = full * static_cast<uint64_t>(i) / kSteps;
      const std::string what = std::string(c.name) + " budget " + std::to_string(*o.vram_budget);
      {
        auto ctx = runtime::Context::create(*m, o);
        ASSERT_TRUE(ctx.ok()) << what << ": " << ctx.error().message;
        const runtime::HybridSetup* h = (*ctx)->hybrid();
        ASSERT_NE(h, nullptr) << what;
        const auto* sim = dynamic_cast<backend::SimDevice*>(&(*ctx)->device());
        ASSERT_NE(sim, nullptr);
        EXPECT_EQ(sim->memory().used, h->ledger.allocated()) << what;
        EXPECT_LE(h->ledger.allocated(), *o.vram_budget) << what;
        for (int64_t il = 0; il < hp.n_layer; ++il) {
          const auto n_dev = static_cast<int64_t>(h->layout.hot[static_cast<size_t>(il)].size());
          const bool attn = h->layout.attn_on_device[static_cast<size_t>(il)];
          cpu_layer_with_device_experts = cpu_layer_with_device_experts || (!attn && n_dev > 0);
          device_layer_with_cpu_experts = device_layer_with_cpu_experts || (attn && n_dev < hp.n_expert);
        }
      }
      const Logits got = run(*m, o);
      expect_identical(got, cpu, what);
      if (i % 6 == 3) expect_any_split(*m, o, got);
    }
    EXPECT_TRUE(cpu_layer_with_device_experts) << c.name;
    EXPECT_TRUE(device_layer_with_cpu_experts) << c.name;
  }
}

// A cache of recently used experts beside the static set (--expert-cache N): after each step
// the experts the CPU ran replace the least recent in the device's slots (on the copy queue,
// waited for before the device reads them: the sim's race checker sees no hazard); the output
// stays the CPU's bit for bit for any budget, thread count and batch split, and the budget
// pays for the slots first.
TEST(SimModel, AnExpertCacheUploadsWhatTheCpuRanAndKeepsTheCpuBits) {
  for (const MoeCase& c : moe_cases(2)) {
    const std::string path = testing::temp_path(std::string("sim_cache_") + c.name + ".gguf");
    ASSERT_TRUE(testing::write_tiny_model(c.spec, path).ok());
    auto m = load(path);
    ASSERT_NE(m, nullptr);
    const model::HParams& hp = m->hparams();
    const Logits cpu = run(*m, options("cpu", false));
    const uint64_t full = everything_placed(*m);
    ASSERT_GT(full, 0u);
    const uint64_t one = sparse::expert_bytes(m->weights().layers[0], hp.n_expert);
    int64_t uploads = 0, cached_layers = 0;
    for (int tenths : {5, 7, 9}) {
      runtime::ContextOptions o = options("sim", false);
      o.vram_budget = full / 10 * static_cast<uint64_t>(tenths);
      o.expert_cache = 1;
      const std::string what = std::string(c.name) + " --expert-cache 1, budget " + std::to_string(tenths) + "/10";
      const Logits got = run(*m, o);
      expect_identical(got, cpu, what);
      if (tenths == 7) expect_any_split(*m, o, got);
      auto ctx = runtime::Context::create(*m, o);
      ASSERT_TRUE(ctx.ok()) << what << ": " << ctx.error().message;
      const runtime::HybridSetup& h = *(*ctx)->hybrid();
      for (const std::vector<int32_t>& ids : h.cache_experts) cached_layers += ids.empty() ? 0 : 1;
      std::vector<int32_t> text;
      for (int i = 0; i < 24; ++i) text.push_back((i * 41 + 3) % static_cast<int32_t>(hp.n_vocab));
      for (int32_t t : text) ASSERT_TRUE((*ctx)->decode(std::vector<int32_t>{t}).ok());
      for (const model::MoeSplitCounters& k : (*ctx)->hybrid_moe()->counters()) {
        uploads += k.uploads;
        EXPECT_EQ(k.upload_bytes, static_cast<uint64_t>(k.uploads) * one) << what;
      }
    }
    EXPECT_GT(cached_layers, 0) << c.name;
    EXPECT_GT(uploads, 0) << c.name;
  }
  // A budget that cannot hold the slots, and a file that has no experts, are refused.
  const std::string path = testing::temp_path("sim_cache_qwen3moe_q8_0.gguf");
  auto m = load(path);
  ASSERT_NE(m, nullptr);
  runtime::ContextOptions o = options("sim", false);
  o.vram_budget = 1024;
  o.expert_cache = 2;
  auto ctx = runtime::Context::create(*m, o);
  ASSERT_FALSE(ctx.ok());
  EXPECT_NE(ctx.error().message.find("--expert-cache 2"), std::string::npos) << ctx.error().message;
  o = options("sim", false);
  o.expert_cache = 1;
  o.n_gpu_layers = 1;
  ctx = runtime::Context::create(*m, o);
  ASSERT_FALSE(ctx.ok());
  EXPECT_NE(ctx.error().message.find("-ngl"), std::string::npos) << ctx.error().message;
}

// With routing statistics the planner puts the most chosen experts of each layer on the
// device, and the CPU's share of the (token, expert) pairs falls by exactly the routed mass
// the statistics give the placed experts when the text run is the one profiled; the plan is
// kept in the GPU index and loaded from it next time.
TEST(SimModel, RoutingStatisticsPutTheMostChosenExpertsOnTheDevice) {
  const std::string path = testing::temp_path("sim_routing_stats.gguf");
  ASSERT_TRUE(testing::write_tiny_model(testing::tiny_variant("qwen3moe", DType::Q8_0, false, 2, false, 5), path).ok());
  auto m = load(path);
  ASSERT_NE(m, nullptr);
  const model::HParams& hp = m->hparams();
  std::vector<int32_t> text;
  for (int i = 0; i < 48; ++i) text.push_back((i * 29 + 7) % static_cast<int32_t>(hp.n_vocab));

  // Profile the text on the CPU as `powerinfer profile` does.
  sparse::ActivationStats stats;
  stats.n_expert = hp.n_expert;
  stats.n_expert_used = hp.n_expert_used;
  stats.expert_counts.assign(static_cast<size_t>(hp.n_layer), std::vector<float>(static_cast<size_t>(hp.n_expert)));
  stats.expert_reuse.assign(static_cast<size_t>(hp.n_layer), 0.0f);
  {
    auto ctx = runtime::Context::create(*m, options("cpu", false));
    ASSERT_TRUE(ctx.ok()) << ctx.error().message;
    model::MoeFfn* moe = (*ctx)->moe_ffn();
    ASSERT_NE(moe, nullptr);
    moe->trace_routes(true);
    ASSERT_TRUE((*ctx)->decode(text).ok());
    for (int64_t il = 0; il < hp.n_layer; ++il)
      ASSERT_TRUE(sparse::count_routes(stats, il, moe->routes()[static_cast<size_t>(il)]).ok());
  }
  stats.n_tokens = text.size();
  stats.counts.resize(static_cast<size_t>(hp.n_layer));
  stats.model_fingerprint = sparse::model_fingerprint(m->file());
  const std::string stats_path = testing::temp_path("sim_routing_stats.activations.gguf");
  ASSERT_TRUE(sparse::write_activation_stats(stats_path, stats).ok());

  runtime::ContextOptions o = options("sim", false);
  o.stats_path = stats_path;
  uint64_t full = 0;
  {
    auto ctx = runtime::Context::create(*m, o);
    ASSERT_TRUE(ctx.ok()) << ctx.error().message;
    full = (*ctx)->hybrid()->ledger.allocated();
  }
  const uint64_t one = sparse::expert_bytes(m->weights().layers[0], hp.n_expert);
  o.vram_budget = full - one * static_cast<uint64_t>(hp.n_layer * hp.n_expert / 2);
  std::vector<std::vector<int32_t>> placed;
  for (bool from_index : {false, true}) {
    o.reset_gpu_index = !from_index;
    auto ctx = runtime::Context::create(*m, o);
    ASSERT_TRUE(ctx.ok()) << ctx.error().message;
    const runtime::HybridSetup& h = *(*ctx)->hybrid();
    EXPECT_EQ(h.origin.rfind("loaded", 0) == 0, from_index) << h.origin;
    if (from_index) {
      EXPECT_EQ(h.layout.hot, placed);
      // The same request with an expert cache holds bytes back: the index does not fit it.
      runtime::ContextOptions cached = o;
      cached.expert_cache = 1;
      auto c2 = runtime::Context::create(*m, cached);
      ASSERT_TRUE(c2.ok()) << c2.error().message;
      EXPECT_NE((*c2)->hybrid()->origin.find("reserved beside the plan"), std::string::npos)
          << (*c2)->hybrid()->origin;
      continue;
    }
    placed = h.layout.hot;
    ASSERT_GT(h.n_device_experts(), 0);
    ASSERT_LT(h.n_device_experts(), hp.n_layer * hp.n_expert);
    double device_mass = 0;
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      const std::vector<double> share = stats.expert_shares(il);
      const std::vector<int32_t>& dev = h.layout.hot[static_cast<size_t>(il)];
      double lowest_placed = 2, highest_left = -1;
      for (int64_t e = 0; e < hp.n_expert; ++e) {
        const bool on = std::find(dev.begin(), dev.end(), e) != dev.end();
        (on ? lowest_placed : highest_left) = on ? std::min(lowest_placed, share[static_cast<size_t>(e)])
                                                 : std::max(highest_left, share[static_cast<size_t>(e)]);
        if (on) device_mass += share[static_cast<size_t>(e)];
      }
      if (!dev.empty()) EXPECT_GE(lowest_placed, highest_left) << "layer " << il;
    }
    // The same text on the hybrid context: the CPU computes the pairs of the experts left.
    ASSERT_TRUE((*ctx)->decode(text).ok());
    const model::HybridMoeFfn* split = (*ctx)->hybrid_moe();
    ASSERT_NE(split, nullptr);
    int64_t host_pairs = 0, device_pairs = 0;
    for (const model::MoeSplitCounters& c : split->counters()) {
      host_pairs += c.host_places;
      device_pairs += c.device_places;
    }
    const double per_token = static_cast<double>(text.size());
    EXPECT_NEAR(device_pairs / per_token, device_mass, 1e-6);
    EXPECT_NEAR(host_pairs / per_token, static_cast<double>(hp.n_layer * hp.n_expert_used) - device_mass, 1e-6);
    // ... which is what the plan predicted it would read there.
    double cold = 0;
    for (const runtime::HybridSetup::LayerBytes& b : h.layer_bytes) cold += b.cold;
    EXPECT_NEAR(cold, (static_cast<double>(hp.n_layer * hp.n_expert_used) - device_mass) * static_cast<double>(one),
                1e-6 * cold);
  }
}

TEST(SimModel, SparseAndDensePowerInferFilesMatchTheCpuBitForBit) {
  for (const char* type : {"q4_0", "f32"}) {
    const std::string path = testing::temp_path(std::string("sim_synth_") + type + ".pwri.gguf");
    if (!std::filesystem::exists(path)) {
      auto r = testing::run_command(std::string(PI_BIN_DIR) +
                                    "/powerinfer synth --preset tiny --pwri --no-progress --type " +
                                    type + " -o " + path);
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
    auto m = load(path);
    ASSERT_NE(m, nullptr);
    for (bool dense : {false, true}) {
      auto cpu = run(*m, options("cpu", dense));
      auto sim = run(*m, options("sim", dense));
      expect_identical(sim, cpu, std::string(type) + (dense ? " dense" : " sparse"));
    }
  }
}

// opt's biases and learned positions, sparse (random predictors) and dense.
TEST(SimModel, OptPowerInferFileMatchesTheCpuBitForBit) {
  testing::TinySpec s = testing::tiny_variant("opt", DType::Q4_0, true, 4, false, 3);
  s.predictor_rank = 32;
  const std::string path = testing::temp_path("sim_opt.pwri.gguf");
  ASSERT_TRUE(testing::write_tiny_model(s, path).ok());
  auto m = load(path);
  ASSERT_NE(m, nullptr);
  for (bool dense : {false, true}) {
    expect_identical(run(*m, options("sim", dense)), run(*m, options("cpu", dense)),
                     std::string("opt q4_0") + (dense ? " dense" : " sparse"));
  }
}

TEST(SimModel, BundledModelRunsSparseOnTheSim) {
  const std::string path = std::string(PI_SOURCE_DIR) + "/models/kjv-relu/kjv-relu.pwri.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  auto m = load(path);
  ASSERT_NE(m, nullptr);
  expect_identical(run(*m, options("sim", false)), run(*m, options("cpu", false)), "kjv-relu");
}

// The sim is a GPU-like device: what does not fit runs on the CPU (the hybrid executor,
// tests/runtime/test_hybrid.cpp), within a capacity that is never passed; whole layers forced
// onto it with -ngl that do not fit are refused at creation with the bytes and the budget.
TEST(SimModel, AModelLargerThanTheDeviceRunsHybridWithinItsCapacity) {
  const std::string path = testing::temp_path("sim_budget.gguf");
  ASSERT_TRUE(testing::write_tiny_model(
                  testing::tiny_variant("llama", DType::F32, false, 2, false, 3), path)
                  .ok());
  auto m = load(path);
  ASSERT_NE(m, nullptr);
  const Logits cpu = run(*m, options("cpu", false));
  for (uint64_t cap : {uint64_t{64} << 10, uint64_t{256} << 10, uint64_t{8} << 20}) {
    expect_identical(run(*m, options("sim", false, cap)), cpu, std::to_string(cap) + " bytes");
  }
  runtime::ContextOptions o = options("sim", false, 64 << 10);
  o.n_gpu_layers = 2;
  auto c = runtime::Context::create(*m, o);
  ASSERT_FALSE(c.ok());
  const std::string& msg = c.error().message;
  EXPECT_NE(msg.find("-ngl 2 does not fit"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0.1 MiB"), std::string::npos) << msg;
}

}  // namespace
}  // namespace pi
