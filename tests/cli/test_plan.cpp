// `powerinfer profile` and `powerinfer plan` on small synthetic files: the profile's counts,
// plans within the budget, the GPU index reused only for the same request, whole layers for
// GGUF files, and clear errors for bad budgets, missing or foreign statistics and indexes.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <random>
#include <string>

#include "cli/run_command.h"
#include "gguf/reader.h"
#include "sparse/activation_stats.h"
#include "sparse/gpu_index.h"
#include "sparse/placement_model.h"

namespace {

using pi::testing::run_command;

const std::string kBin = PI_BIN_DIR;

class PlanCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = (std::filesystem::temp_directory_path() / ("pi_plan_" + std::to_string(::getpid()))).string();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    for (const std::string& args :
         {"-o " + dir_ + "/m.gguf --pwri --layers 12 --activation-dir " + dir_ + "/act",
          "-o " + dir_ + "/q8.gguf --pwri --layers 12 --type q8_0",
          "-o " + dir_ + "/dense.gguf --layers 12"}) {
      auto r = run_command(kBin + "/powerinfer synth --no-progress " + args);
      ASSERT_EQ(r.exit_code, 0) << args << "\n" << r.output;
    }
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }

  static pi::testing::CommandResult plan(const std::string& args) {
    return run_command(kBin + "/powerinfer plan " + args);
  }
  static std::string model() { return dir_ + "/m.gguf"; }
  static std::string stats() { return dir_ + "/act/activation_stats.gguf"; }

  static inline std::string dir_;
};

TEST_F(PlanCli, PlansWithinTheBudgetAndReusesTheIndexOnlyForTheSameRequest) {
  std::filesystem::remove(pi::sparse::gpu_index_path(model()));
  auto r = plan("-m " + model() + " --vram-budget 0.004 --stats " + stats());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("no index yet"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("total: device"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(pi::sparse::gpu_index_path(model())));
  r = plan("-m " + model() + " --vram-budget 0.004 --stats " + stats());
  EXPECT_NE(r.output.find("plan: loaded from"), std::string::npos) << r.output;
  r = plan("-m " + model() + " --vram-budget 0.004 --stats " + stats() + " -c 128");
  EXPECT_NE(r.output.find("n_ctx"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("plan: loaded from"), std::string::npos) << r.output;
  r = plan("-m " + model() + " --vram-budget 0.004 --stats " + stats() + " -c 128 --reset-gpu-index");
  EXPECT_NE(r.output.find("--reset-gpu-index"), std::string::npos) << r.output;
  // A quantized KV cache takes fewer device bytes: the index of an f16 one is not reused.
  r = plan("-m " + model() + " --vram-budget 0.004 --stats " + stats() + " -c 128 -ctk q8_0 -ctv q4_0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("KV cache of f16/f16"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(KV q8_0/q4_0)"), std::string::npos) << r.output;
  r = plan("-m " + model() + " --vram-budget 0.004 --stats " + stats() + " -c 128 -ctk q8_0 -ctv q4_0");
  EXPECT_NE(r.output.find("plan: loaded from"), std::string::npos) << r.output;
  r = plan("-m " + model() + " --vram-budget 0.004 --stats " + stats() + " -ctk q5_1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("-ctk q5_1: unknown KV cache type"), std::string::npos) << r.output;

  r = plan("-m " + model() + " --vram-budget 0.004 --stats " + stats() + " --json --sweep 9 --no-write-index");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_LE(j["device_bytes"].get<uint64_t>(), j["budget_bytes"].get<uint64_t>());
  EXPECT_EQ(j["layers"].size(), 12u);
  EXPECT_GT(j["hot_neurons"].get<int64_t>(), 0);
  EXPECT_GT(j["mass_covered"].get<double>(), 0.0);
  ASSERT_EQ(j["sweep"].size(), 9u);
  // CPU bytes never grow with the budget. The mass covered may dip: an attention block saves
  // more per byte than any neuron, so a larger budget can trade hot neurons for a layer.
  double cpu = 1e300;
  for (const auto& pt : j["sweep"]) {
    EXPECT_LE(pt["device_bytes"].get<uint64_t>(), pt["budget_bytes"].get<uint64_t>());
    EXPECT_LE(pt["cpu_bytes_per_token"].get<double>(), cpu);
    cpu = pt["cpu_bytes_per_token"].get<double>();
  }
  EXPECT_DOUBLE_EQ(j["sweep"].back()["mass_covered"].get<double>(), 1.0);  // everything fits
  EXPECT_DOUBLE_EQ(cpu, 0.0);

  r = plan("-m " + model() + " --vram-budget 0.004 --stats " + stats() + " --json --disable-gpu-index");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output.substr(r.output.find('{')))["hot_neurons"].get<int64_t>(), 0);
}

TEST_F(PlanCli, ForeignAndDamagedIndexesAreSolvedAgain) {
  const std::string idx = dir_ + "/other.gpuidx";
  auto r = plan("-m " + model() + " --vram-budget 0.004 --stats " + stats() + " --gpu-index " + idx);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The same index offered for the q8_0 file (another fingerprint).
  r = plan("-m " + dir_ + "/q8.gguf --vram-budget 0.004 --stats " + dir_ + "/act --gpu-index " + idx +
           " --no-write-index");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("solved for another model"), std::string::npos) << r.output;
  std::filesystem::resize_file(idx, std::filesystem::file_size(idx) / 2);
  r = plan("-m " + model() + " --vram-budget 0.004 --stats " + stats() + " --gpu-index " + idx);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(idx + ": offset"), std::string::npos) << r.output;
  EXPECT_TRUE(pi::sparse::read_gpu_index(idx).ok());
}

TEST_F(PlanCli, BadRequestsFailClearly) {
  for (auto [budget, text] : {std::pair{"-1", "negative"}, {"nan", "NaN"}, {"1e9", "1 PiB"}}) {
    auto r = plan("-m " + model() + " --stats " + stats() + " --vram-budget " + budget);
    EXPECT_NE(r.exit_code, 0) << budget;
    EXPECT_NE(r.output.find(text), std::string::npos) << r.output;
  }
  auto r = plan("-m " + model() + " --vram-budget 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("powerinfer profile"), std::string::npos) << r.output;
  // Statistics of the f16 file for the q8_0 file: another fingerprint.
  r = plan("-m " + dir_ + "/q8.gguf --vram-budget 1 --stats " + stats());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("another model"), std::string::npos) << r.output;
  r = plan("-m " + model() + " --vram-budget 1 --stats " + dir_ + "/missing.gguf");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("missing.gguf"), std::string::npos) << r.output;
}

TEST_F(PlanCli, GgufFilesMoveWholeLayers) {
  int64_t prev = -1;
  for (const char* gib : {"0", "0.003", "0.006", "1"}) {
    auto r = plan("-m " + dir_ + "/dense.gguf --vram-budget " + std::string(gib) + " --json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    EXPECT_EQ(j["hot_neurons"].get<int64_t>(), 0);
    EXPECT_GE(j["n_dense_layers"].get<int64_t>(), prev);
    prev = j["n_dense_layers"].get<int64_t>();
  }
  EXPECT_EQ(prev, 12);
}

// The profile counts true activations: synth's files fire ~10% of neurons per token.
TEST_F(PlanCli, ProfileCountsActivations) {
  std::mt19937 rng(1);
  const char* words[] = {"the", "model", "reads", "every", "neuron", "on", "a", "token", "and", "counts"};
  std::ofstream(dir_ + "/text.txt") << [&] {
    std::string s;
    for (int i = 0; i < 600; ++i) s += std::string(words[rng() % 10]) + " ";
    return s;
  }();
  const std::string out = dir_ + "/prof.gguf";
  auto r = run_command(kBin + "/powerinfer profile -m " + model() + " -f " + dir_ + "/text.txt -o " + out +
                       " -c 64 -t 2 --max-tokens 300 --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto s = pi::sparse::read_activation_stats(out);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->n_tokens, 300u);
  ASSERT_EQ(s->n_layer(), 12);
  auto f = pi::gguf::File::open(model());
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(s->model_fingerprint, pi::sparse::model_fingerprint(*f));
  for (int64_t l = 0; l < 12; ++l) {
    double mean = 0;
    for (double v : s->frequencies(l)) mean += v;
    mean /= static_cast<double>(s->counts[l].size());
    EXPECT_GT(mean, 0.05) << l;
    EXPECT_LT(mean, 0.15) << l;
  }
  r = plan("-m " + model() + " --vram-budget 0.004 --stats " + out + " --no-write-index");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// A mixture of experts: calibrate refuses it in one line; plan places whole layers, with the
// experts --cpu-moe, --n-cpu-moe and -ot keep on the CPU; profile measures routing (a SwiGLU
// mixture: expert counts and reuse, no neuron counts).
TEST_F(PlanCli, MixtureOfExpertsPlanProfileAndCalibrate) {
  const std::string moe = dir_ + "/moe.gguf", text = dir_ + "/moe.txt";
  auto r = run_command(std::string(PI_PYTHON) + " " + PI_SOURCE_DIR +
                       "/tests/reference/make_tiny_model.py --arch qwen3moe --outtype q8_0 --seed 2 --out " + moe);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ofstream(text) << "the beginning of the tokens, and then the end of them; and the beginning again\n";
  r = run_command(kBin + "/powerinfer calibrate -m " + moe + " -f " + text + " -o " + dir_ + "/moe.cal.gguf");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("mixture-of-experts models are not supported"), std::string::npos) << r.output;
  // plan places whole layers; the experts kept on the CPU leave the device's share and stay
  // in the CPU's bytes per token (a token reads k of the n experts).
  const auto plan_json = [&](const std::string& flags) {
    auto p = run_command("(" + kBin + "/powerinfer plan --json --no-write-index --vram-budget 1 -m " + moe + flags +
                         " 2>/dev/null)");
    EXPECT_EQ(p.exit_code, 0) << flags << "\n" << p.output;
    return nlohmann::json::parse(p.output, nullptr, false);
  };
  const nlohmann::json all = plan_json(""), kept = plan_json(" --cpu-moe"), one = plan_json(" --n-cpu-moe 1"),
                       ot = plan_json(" --override-tensor exps=CPU");
  ASSERT_FALSE(all.is_discarded() || kept.is_discarded() || one.is_discarded() || ot.is_discarded());
  EXPECT_EQ(all["cpu_bytes_per_token"].get<double>(), 0.0);  // everything fits on the device
  EXPECT_GT(kept["cpu_bytes_per_token"].get<double>(), one["cpu_bytes_per_token"].get<double>());
  EXPECT_GT(one["cpu_bytes_per_token"].get<double>(), 0.0);
  EXPECT_LT(kept["device_bytes"].get<double>(), one["device_bytes"].get<double>());
  EXPECT_LT(one["device_bytes"].get<double>(), all["device_bytes"].get<double>());
  EXPECT_EQ(ot["device_bytes"], kept["device_bytes"]);
  EXPECT_EQ(ot["cpu_bytes_per_token"], kept["cpu_bytes_per_token"]);
  // All on the CPU: the experts count k / n of their bytes per token.
  EXPECT_LT(kept["cpu_bytes_per_token"].get<double>(), kept["cpu_bytes_all_cpu"].get<double>());
  r = run_command(kBin + "/powerinfer profile --no-progress -c 8 -m " + moe + " -f " + text + " -o " + dir_ + "/moe.stats");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("least chosen"), std::string::npos) << r.output;
  auto s = pi::sparse::read_activation_stats(dir_ + "/moe.stats");
  ASSERT_TRUE(s.ok()) << s.error().message;
  ASSERT_TRUE(s->has_experts());
  const auto n = static_cast<uint64_t>(s->n_tokens), k = static_cast<uint64_t>(s->n_expert_used);
  EXPECT_EQ(s->expert_pairs, (n - (n + 7) / 8) * k);  // chunks of 8: each chunk's first token has no predecessor
  for (int64_t l = 0; l < s->n_layer(); ++l) {
    EXPECT_TRUE(s->counts[static_cast<size_t>(l)].empty()) << "SwiGLU experts have no neuron counts";
    double sum = 0;
    for (float c : s->expert_counts[static_cast<size_t>(l)]) sum += c;
    EXPECT_EQ(sum, static_cast<double>(n * k)) << l;
    EXPECT_LE(s->expert_reuse[static_cast<size_t>(l)], static_cast<float>(s->expert_pairs));
  }
}

// The bundled trained MoE: the profile's routing agrees with what training measured on its own
// validation text (routing_stats.json, PyTorch): each layer's most chosen expert, its share
// within 5 points, reuse within 3 points; each expert neuron fires on at most the tokens routed
// to its expert, and the fired share matches 1 - the measured sparsity within 3 points.
TEST_F(PlanCli, ProfileOfTheBundledMoeAgreesWithTraining) {
  const std::string dir = std::string(PI_SOURCE_DIR) + "/models/kjv-moe";
  const std::string out = dir_ + "/kjv-moe.stats";
  auto r = run_command(kBin + "/powerinfer profile --no-progress -c 256 --max-tokens 12000 --expert-cache -m " +
                       dir + "/kjv-moe.gguf -f " + PI_SOURCE_DIR + "/models/kjv-relu/heldout.txt -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // --expert-cache scores device expert sets on this routing and on synthetic traces: on a
  // sticky trace (tokens keep their predecessor's experts) the LRU cache beats the static set.
  for (const char* row : {"this text", "uniform", "skewed (zipf 1.2)", "sticky (keep 0.6)", "skewed + sticky"})
    EXPECT_NE(r.output.find(row), std::string::npos) << row << "\n" << r.output;
  {
    std::istringstream lines(r.output.substr(r.output.find("sticky (keep 0.6)")));
    std::string name, slots;
    double top = 0, reuse = 0, hit_static = 0, hit_lru = 0;
    lines >> name >> name >> name >> top >> name >> reuse >> name >> slots >> hit_static >> name >> hit_lru;
    EXPECT_GT(hit_lru, hit_static + 20) << r.output;
  }
  auto s = pi::sparse::read_activation_stats(out);
  ASSERT_TRUE(s.ok()) << s.error().message;
  std::ifstream in(dir + "/routing_stats.json");
  const nlohmann::json want = nlohmann::json::parse(in);
  ASSERT_EQ(s->n_layer(), static_cast<int64_t>(want["layers"].size()));
  for (int64_t l = 0; l < s->n_layer(); ++l) {
    const nlohmann::json& L = want["layers"][static_cast<size_t>(l)];
    const std::vector<double> share = s->expert_shares(l);
    const std::vector<double> ref = L["share"].get<std::vector<double>>();
    const auto top = std::max_element(share.begin(), share.end()) - share.begin();
    EXPECT_EQ(top, std::max_element(ref.begin(), ref.end()) - ref.begin()) << "layer " << l;
    EXPECT_NEAR(share[static_cast<size_t>(top)], ref[static_cast<size_t>(top)], 0.05) << "layer " << l;
    EXPECT_NEAR(s->reuse_rate(l), L["reuse"].get<double>(), 0.03) << "layer " << l;
    const auto& c = s->counts[static_cast<size_t>(l)];
    ASSERT_EQ(static_cast<int64_t>(c.size()), s->n_expert * want["expert_ffn"].get<int64_t>());
    const size_t n_ff = c.size() / static_cast<size_t>(s->n_expert);
    double fired = 0, routed = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      EXPECT_LE(c[i], s->expert_counts[static_cast<size_t>(l)][i / n_ff]);
      fired += c[i];
    }
    for (float e : s->expert_counts[static_cast<size_t>(l)]) routed += e * static_cast<double>(n_ff);
    EXPECT_NEAR(fired / routed, 1.0 - L["sparsity"].get<double>(), 0.03) << "layer " << l;
  }
  // The plan puts the most chosen experts on the device: with room for about two in five,
  // those it places carry more of the routed tokens than their number's share, and each
  // layer's are its most chosen.
  r = run_command(kBin + "/powerinfer plan --json --no-write-index --vram-budget 0.012 -m " + dir +
                  "/kjv-moe.gguf --stats " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(j["unit"], "expert");
  const auto placed = j["hot_neurons"].get<int64_t>();
  const int64_t all = s->n_layer() * s->n_expert;
  ASSERT_GT(placed, 0);
  ASSERT_LT(placed, all);
  EXPECT_GT(j["mass_covered"].get<double>(), 1.1 * static_cast<double>(placed) / static_cast<double>(all));
}

}  // namespace
