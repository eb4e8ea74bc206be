// Whole models on the cuda device against the reference and the CPU device (label gpu; skips
// without a GPU): every layer, the KV cache and all scratch in device memory, the same token
// sequence fed to each (a prompt of two batches, single steps, a batch of three sequences).
// The GPU sums in other orders and runs prompt batches through cuBLAS in f32 where the CPU
// quantizes activations to 8 bits, so neither matches the reference exactly: each row of the
// GPU's logits must be no further from the reference's than 3x the CPU's distance (plus 1e-4
// of the row's scale), and pick the CPU's top token where that one is clear. Dense forward
// passes, then the hybrid executor's split (hot neurons on the GPU, cold ones on the CPU, at
// several budgets) against the reference's sparse pass with every neuron predicted (so that
// no predictor logit near the threshold picks a different set on either side).
// test_cuda_model_emu runs the same on the CPU emulation of CUDA (src/kernels/cuda/emu.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_device.h"
#include "model/model.h"
#include "model/tiny_model.h"
#include "runtime/context.h"
#include "runtime/hybrid_plan.h"

namespace pi {
namespace {

using Logits = std::vector<std::vector<float>>;

class CudaModel : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (backend::cuda_device_count(&why) == 0)
      GTEST_SKIP() << "no CUDA device (" << why << "): gpu test skipped";
  }
};

runtime::ContextOptions options(const std::string& device) {
  runtime::ContextOptions o;
  o.n_ctx = 64;
  o.n_batch = 16;
  o.n_threads = 2;
  o.dense = true;
  o.n_seq_max = 3;
  o.device.name = device;
  return o;
}

// A prompt of 23 tokens (two batches of 16 and 7: the GPU's many-token and row kernels), 5
// single steps of fixed tokens, then a batch of three sequences forked from the prompt.
Logits run(const model::Model& m, const runtime::ContextOptions& o) {
  auto c = runtime::Context::create(m, o);
  EXPECT_TRUE(c.ok()) << c.error().message;
  if (!c.ok()) return {};
  const auto n_vocab = static_cast<int32_t>(m.hparams().n_vocab);
  Logits out;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 23; ++i) prompt.push_back((i * 37 + 5) % n_vocab);
  EXPECT_TRUE((*c)->decode(prompt).ok());
  for (int step = 0; step < 5; ++step) {
    auto l = (*c)->logits();
    out.emplace_back(l.begin(), l.end());
    EXPECT_TRUE((*c)->decode(std::vector<int32_t>{(step * 11 + 3) % n_vocab}).ok());
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
  if (auto* cuda = dynamic_cast<backend::CudaDevice*>(&(*c)->device()); cuda != nullptr) {
    EXPECT_TRUE(cuda->status().ok()) << cuda->status().error().message;
    EXPECT_LE(cuda->memory().peak, cuda->memory().budget);
  }
  return out;
}

double max_abs(const std::vector<float>& v) {
  double m = 1.0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0.0;
  for (size_t j = 0; j < a.size(); ++j)
    d = std::max(d, std::fabs(static_cast<double>(a[j]) - b[j]));
  return d;
}

// The GPU's rows no further from the reference's than 3x the CPU's (plus 1e-4 of the row's
// scale), and the CPU's top token where its lead over the second exceeds both distances.
void expect_as_accurate(const Logits& gpu, const Logits& cpu, const Logits& ref,
                        const std::string& what) {
  ASSERT_EQ(gpu.size(), ref.size()) << what;
  ASSERT_EQ(cpu.size(), ref.size()) << what;
  for (size_t k = 0; k < ref.size(); ++k) {
    ASSERT_EQ(gpu[k].size(), ref[k].size()) << what;
    const double scale = max_abs(ref[k]);
    const double d_gpu = max_diff(gpu[k], ref[k]), d_cpu = max_diff(cpu[k], ref[k]);
    EXPECT_LE(d_gpu, 3 * d_cpu + 1e-4 * scale)
        << what << ": row " << k << " (cpu is " << d_cpu << " from the reference)";
    std::vector<float> sorted = cpu[k];
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    if (sorted[0] - sorted[1] > 2 * (d_gpu + d_cpu)) {
      const auto top = [](const std::vector<float>& v) {
        return std::max_element(v.begin(), v.end()) - v.begin();
      };
      EXPECT_EQ(top(gpu[k]), top(cpu[k])) << what << ": row " << k;
    }
  }
}

void check(const model::Model& m, const std::string& what) {
  const Logits ref = run(m, options("ref"));
  expect_as_accurate(run(m, options("cuda")), run(m, options("cpu")), ref, what);
}

std::unique_ptr<model::Model> load(const std::string& path) {
  auto m = model::Model::load(path);
  EXPECT_TRUE(m.ok()) << m.error().message;
  return m.ok() ? std::move(*m) : nullptr;
}

testing::TinySpec gpt_oss_spec() {
  testing::TinySpec s = testing::tiny_variant("gpt-oss", DType::Q8_0, false, 2, false, 11);
  s.expert_wtype = DType::MXFP4;
  s.n_swa = 3;
  return s;
}

TEST_F(CudaModel, TinyModelsOfEveryArchAndFormatAreAsAccurateAsTheCpu) {
  const struct {
    const char* name;
    testing::TinySpec spec;
  } cases[] = {
      {"llama_f32", testing::tiny_variant("llama", DType::F32, false, 2, false, 3)},
      {"llama_q4_0_pwri", testing::tiny_variant("llama", DType::Q4_0, true, 2, false, 3)},
      {"llama_f16", testing::tiny_variant("llama", DType::F16, false, 4, false, 3)},
      {"bamboo_q8_0_pwri", testing::tiny_variant("bamboo", DType::Q8_0, true, 4, false, 3)},
      {"falcon7_q8_0", testing::tiny_variant("falcon", DType::Q8_0, false, 1, false, 3)},
      {"falcon40_q4_1", testing::tiny_variant("falcon", DType::Q4_1, false, 2, true, 3)},
      {"opt_f16", testing::tiny_variant("opt", DType::F16, false, 4, false, 3)},
      {"qwen2_q8_0", testing::tiny_variant("qwen2", DType::Q8_0, false, 2, false, 3)},
      {"qwen3_f16", testing::tiny_variant("qwen3", DType::F16, false, 2, false, 3)},
      {"llama_mxfp4", testing::tiny_variant("llama", DType::MXFP4, false, 2, false, 3)},
      // Mixtures of experts: routing on the host from the logits the device computed.
      {"qwen3moe_f16", testing::tiny_variant("qwen3moe", DType::F16, false, 2, false, 5)},
      {"qwen3moe_mxfp4", testing::tiny_variant("qwen3moe", DType::MXFP4, false, 2, false, 5)},
      {"smallthinker_q8_0", testing::tiny_variant("smallthinker", DType::Q8_0, false, 2, false, 9)},
      // gpt-oss: biases, sinks in the attention combine, windows on even layers, the clamped
      // gated unit, MXFP4 experts.
      {"gpt_oss_q8_0_mxfp4", gpt_oss_spec()},
  };
  for (const auto& c : cases) {
    const std::string path = testing::temp_path(std::string("cuda_") + c.name + ".gguf");
    ASSERT_TRUE(testing::write_tiny_model(c.spec, path).ok());
    auto m = load(path);
    ASSERT_NE(m, nullptr);
    check(*m, c.name);
  }
}

// SmallThinker's ReGLU experts run sparse (down stored transposed): each expert's gate values
// come back to the host, which lists the rows the device computes.
TEST_F(CudaModel, SparseReGluExpertsAreAsAccurateAsTheCpu) {
  testing::TinySpec spec = testing::tiny_variant("smallthinker", DType::F32, false, 2, false, 9);
  spec.down_exps_t = true;
  spec.n_swa = 8;
  const std::string path = testing::temp_path("cuda_smallthinker_down_t.gguf");
  ASSERT_TRUE(testing::write_tiny_model(spec, path).ok());
  auto m = load(path);
  ASSERT_NE(m, nullptr);
  runtime::ContextOptions sparse = options("cuda");
  sparse.dense = false;
  runtime::ContextOptions sparse_cpu = options("cpu");
  sparse_cpu.dense = false;
  expect_as_accurate(run(*m, sparse), run(*m, sparse_cpu), run(*m, options("ref")), "smallthinker sparse");
}

TEST_F(CudaModel, BundledModelIsAsAccurateAsTheCpu) {
  const std::string path = std::string(PI_SOURCE_DIR) + "/models/kjv-relu/kjv-relu.pwri.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  auto m = load(path);
  ASSERT_NE(m, nullptr);
  check(*m, "kjv-relu");
}

// Experts placed one by one on the GPU (--vram-budget): budgets from a quarter to all of what
// the planner would place; some must split a layer's experts between the GPU and the CPU.
// SwiGLU experts, and ReGLU experts run sparse on both sides (down stored transposed).
TEST_F(CudaModel, ExpertSplitsAreAsAccurateAsTheCpu) {
  testing::TinySpec reglu = testing::tiny_variant("smallthinker", DType::F32, false, 2, false, 9);
  reglu.down_exps_t = true;
  const struct {
    const char* name;
    testing::TinySpec spec;
    bool dense;
  } cases[] = {
      {"qwen3moe_f16", testing::tiny_variant("qwen3moe", DType::F16, false, 2, false, 5), true},
      {"smallthinker_down_t", reglu, false},
  };
  for (const auto& c : cases) {
    const std::string path = testing::temp_path(std::string("cuda_split_") + c.name + ".gguf");
    ASSERT_TRUE(testing::write_tiny_model(c.spec, path).ok());
    auto m = load(path);
    ASSERT_NE(m, nullptr);
    const auto opts = [&](const std::string& device, std::optional<uint64_t> budget) {
      runtime::ContextOptions o = options(device);
      o.dense = c.dense;
      o.vram_budget = budget;
      o.gpu_index_path = testing::temp_path("cuda_split.gpuidx");
      o.reset_gpu_index = true;
      return o;
    };
    const Logits ref = run(*m, opts("ref", std::nullopt));
    const Logits cpu = run(*m, opts("cpu", std::nullopt));
    uint64_t fixed = 0, placed = 0;
    {
      auto ctx = runtime::Context::create(*m, opts("cuda", uint64_t{1} << 32));
      ASSERT_TRUE(ctx.ok()) << ctx.error().message;
      const uint64_t own = (uint64_t{1} << 32) - (*ctx)->device().memory().budget;
      fixed = (*ctx)->hybrid()->ledger.margin() + own;
      placed = (*ctx)->hybrid()->plan.device_bytes;
    }
    int split = 0;
    for (int quarters : {1, 2, 3, 4}) {
      const uint64_t budget = fixed + placed / 4 * static_cast<uint64_t>(quarters) + (quarters / 4) * 64;
      {
        auto ctx = runtime::Context::create(*m, opts("cuda", budget));
        ASSERT_TRUE(ctx.ok()) << ctx.error().message;
        const int64_t n = (*ctx)->hybrid()->n_device_experts();
        split += n > 0 && n < m->hparams().n_layer * m->hparams().n_expert ? 1 : 0;
      }
      expect_as_accurate(run(*m, opts("cuda", budget)), cpu, ref,
                         std::string(c.name) + " budget " + std::to_string(quarters) + "/4");
    }
    EXPECT_GE(split, 1) << c.name;
  }
}

// The hybrid split on the GPU: budgets that hold, beyond the device's own memory and the
// margin, 50%, 80%, 90% and all of what the planner would place (the attention of every
// layer first, then hot neurons), sparse with every neuron predicted; at least three of them
// must put hot neurons on the device.
TEST_F(CudaModel, HybridSplitsAreAsAccurateAsTheCpu) {
  const std::string path = std::string(PI_SOURCE_DIR) + "/models/kjv-relu/kjv-relu.pwri.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  auto m = load(path);
  ASSERT_NE(m, nullptr);
  const auto sparse = [](const std::string& device, std::optional<uint64_t> budget) {
    runtime::ContextOptions o = options(device);
    o.dense = false;
    o.sparse_threshold = -INFINITY;
    o.vram_budget = budget;
    o.gpu_index_path = testing::temp_path("cuda_hybrid.gpuidx");
    o.reset_gpu_index = true;
    return o;
  };
  const Logits ref = run(*m, sparse("ref", std::nullopt));
  const Logits cpu = run(*m, sparse("cpu", std::nullopt));
  uint64_t fixed = 0, placed = 0;
  {
    auto c = runtime::Context::create(*m, sparse("cuda", uint64_t{1} << 32));
    ASSERT_TRUE(c.ok()) << c.error().message;
    // The budget covers the device's own working memory too (scratch arena, cuBLAS).
    const uint64_t own = (uint64_t{1} << 32) - (*c)->device().memory().budget;
    fixed = (*c)->hybrid()->ledger.margin() + own;
    placed = (*c)->hybrid()->plan.device_bytes;
  }
  int with_hot = 0;
  for (int tenths : {5, 8, 9, 10}) {
    const uint64_t budget = fixed + placed / 10 * static_cast<uint64_t>(tenths) + (tenths / 10);
    {
      auto c = runtime::Context::create(*m, sparse("cuda", budget));
      ASSERT_TRUE(c.ok()) << c.error().message;
      with_hot += (*c)->hybrid()->plan.n_device_neurons() > 0 ? 1 : 0;
    }
    expect_as_accurate(run(*m, sparse("cuda", budget)), cpu, ref,
                       "budget " + std::to_string(tenths) + "/10");
  }
  EXPECT_GE(with_hot, 3);
}

}  // namespace
}  // namespace pi
