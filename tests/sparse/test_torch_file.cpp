// The original's activation_N.pt files read without torch (sparse/torch_file.h), from files
// PyTorch wrote (tests/sparse/torch/README.md): every storage type, a view's offset and
// stride, what is not one 1-D tensor, damaged files (an error, never a crash); a directory of
// them as statistics; and a model folder as the original's users download it (the model with
// activation/ beside it) planned with them when no --stats is given.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/tiny_model.h"
#include "runtime/context.h"
#include "runtime/hybrid_plan.h"
#include "sparse/activation_stats.h"
#include "sparse/torch_file.h"

namespace pi::sparse {
namespace {

const std::string kDir = std::string(PI_SOURCE_DIR) + "/tests/sparse/torch/";

std::vector<float> counts(int layer) {
  std::vector<float> v;
  for (int i = 0; i < 96; ++i) v.push_back(static_cast<float>(layer == 0 ? (i * 37) % 50 : (i * 11) % 29));
  return v;
}

TEST(TorchFile, ReadsWhatTorchSaved) {
  for (int layer : {0, 1}) {
    auto v = read_torch_1d(kDir + "activation_" + std::to_string(layer) + ".pt");
    ASSERT_TRUE(v.ok()) << v.error().message;
    EXPECT_EQ(*v, counts(layer)) << layer;
  }
  const struct {
    const char* file;
    std::vector<float> want;
  } cases[] = {{"f16_view.pt", {1, 2, 3, 4}}, {"bf16.pt", {1.5f, -2.25f}}, {"f64.pt", {0.125f, 1e6f}}, {"i32.pt", {7, -3}}};
  for (const auto& c : cases) {
    auto v = read_torch_1d(kDir + c.file);
    ASSERT_TRUE(v.ok()) << c.file << ": " << v.error().message;
    EXPECT_EQ(*v, c.want) << c.file;
  }
}

TEST(TorchFile, WhatIsNotOneVectorIsAnErrorNamingTheFile) {
  const struct {
    const char* file;
    const char* says;
  } cases[] = {{"state_dict.pt", "holds no tensor"}, {"matrix.pt", "2 dimensions"}, {"README.md", "not a torch file"},
               {"missing.pt", "cannot open"}};
  for (const auto& c : cases) {
    auto v = read_torch_1d(kDir + c.file);
    ASSERT_FALSE(v.ok()) << c.file;
    EXPECT_NE(v.error().message.find(c.file), std::string::npos) << v.error().message;
    EXPECT_NE(v.error().message.find(c.says), std::string::npos) << v.error().message;
  }
}

// Every truncation and byte flip of a real file: an error or values, never a crash, a hang or
// a read out of bounds (the sanitizer build runs this too).
TEST(TorchFile, DamagedFilesAreErrorsNotCrashes) {
  std::ifstream in(kDir + "activation_1.pt", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string good = ss.str();
  const std::string path = testing::temp_path("damaged.pt");
  int errors = 0;
  for (size_t cut = 0; cut < good.size(); cut += 37) {
    std::ofstream(path, std::ios::binary) << good.substr(0, cut);
    errors += read_torch_1d(path).ok() ? 0 : 1;
  }
  EXPECT_GT(errors, 0);
  for (size_t at = 0; at < good.size(); at += 7) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x5a);
    std::ofstream(path, std::ios::binary) << bad;
    (void)read_torch_1d(path);
  }
}

TEST(TorchFile, TheOriginalsModelFolderIsPlannedWithItsActivationFiles) {
  // model folder: m.pwri.gguf and activation/activation_{0,1}.pt, as the original has them.
  const std::filesystem::path dir = testing::temp_path("original_folder");
  std::filesystem::create_directories(dir / "activation");
  for (int layer : {0, 1}) {
    const std::string name = "activation_" + std::to_string(layer) + ".pt";
    std::filesystem::copy_file(kDir + name, dir / "activation" / name, std::filesystem::copy_options::overwrite_existing);
  }
  auto s = read_activation_stats((dir / "activation").string());
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->source, "pt");
  EXPECT_EQ(s->counts[0], counts(0));
  EXPECT_EQ(s->counts[1], counts(1));
  EXPECT_EQ(s->n_tokens, 0u);  // counts over tokens the original does not record

  const std::string model = (dir / "m.pwri.gguf").string();
  testing::TinySpec spec = testing::tiny_variant("llama", DType::F32, true, 2, false, 3);
  spec.predictor_rank = 8;
  ASSERT_TRUE(testing::write_tiny_model(spec, model).ok());
  EXPECT_EQ(runtime::find_stats(model, ""), (dir / "activation").string());
  EXPECT_EQ(runtime::find_stats(model, "given.gguf"), "given.gguf");
  auto m = model::Model::load(model);
  ASSERT_TRUE(m.ok()) << m.error().message;
  runtime::ContextOptions o;
  o.n_ctx = 32;
  o.n_batch = 4;
  o.device.name = "sim";
  o.gpu_index_path = testing::temp_path("original_folder.gpuidx");
  o.reset_gpu_index = true;
  // Room for the dense blocks and some of the neurons: the hot ones are the most counted.
  uint64_t all = 0;
  {
    auto ctx = runtime::Context::create(**m, o);
    ASSERT_TRUE(ctx.ok()) << ctx.error().message;
    all = (*ctx)->hybrid()->ledger.allocated();
  }
  o.vram_budget = all - 48 * 2 * 96 * 4;  // about half the neurons' f32 rows out
  auto ctx = runtime::Context::create(**m, o);
  ASSERT_TRUE(ctx.ok()) << ctx.error().message;
  const runtime::HybridSetup& h = *(*ctx)->hybrid();
  EXPECT_EQ(h.stats_path, (dir / "activation").string());
  for (int layer : {0, 1}) {
    const std::vector<int32_t>& hot = h.layout.hot[static_cast<size_t>(layer)];
    if (hot.empty() || hot.size() == 96) continue;
    const std::vector<float> c = counts(layer);
    float lowest_hot = 1e9f, highest_cold = -1;
    for (int i = 0; i < 96; ++i) {
      const bool is_hot = std::find(hot.begin(), hot.end(), i) != hot.end();
      if (is_hot) lowest_hot = std::min(lowest_hot, c[static_cast<size_t>(i)]);
      else highest_cold = std::max(highest_cold, c[static_cast<size_t>(i)]);
    }
    EXPECT_GE(lowest_hot, highest_cold) << "layer " << layer;
  }
  EXPECT_GT(h.plan.n_device_neurons(), 0);
  EXPECT_LT(h.plan.n_device_neurons(), 2 * 96);
}

}  // namespace
}  // namespace pi::sparse
