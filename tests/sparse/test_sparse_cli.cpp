// `powerinfer run` on a synthetic PowerInfer file (`powerinfer synth --preset tiny --pwri`):
// sparse by default, --dense, the threshold flag and LLAMA_SPARSE_PRED_THRESHOLD (the flag
// wins), --sparsity-report and --check-predictor output, and identical text for any thread
// count and batch split.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>

#include "cli/run_command.h"

namespace {

using pi::testing::run_command;

const std::string kBin = std::string(PI_BIN_DIR) + "/powerinfer";

std::string tmp(const std::string& name) {
  auto dir =
      std::filesystem::temp_directory_path() / ("pi_sparse_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

const std::string& model() {
  static const std::string path = [] {
    const std::string p = tmp("tiny.pwri.gguf");
    auto r = run_command(kBin + " synth --preset tiny --pwri --no-progress -o " + p);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return p;
  }();
  return path;
}

std::string run(const std::string& args, const std::string& env = "") {
  auto r = run_command(env + " " + kBin + " run -m " + model() +
                       " -p 'a b c' --temp 0 -n 24 --ignore-eos " + args);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  return r.output;
}

// Generated text only (stdout), sampled at temperature 1 with a fixed seed: a varied sequence
// that any change of a logit bit could change.
std::string text(const std::string& args) {
  auto r =
      run_command("(" + kBin + " run -m " + model() +
                  " -p 'a b c' --temp 1 --top-k 0 --top-p 1 --min-p 0 -s 5 -n 40 --ignore-eos " +
                  args + " 2>/dev/null)");
  EXPECT_EQ(r.exit_code, 0) << args;
  return r.output;
}

// The "all" row of the sparsity report: predicted and computed fractions.
std::pair<double, double> all_row(const std::string& out) {
  std::smatch m;
  const std::regex re(R"(\n\s+all\s+([0-9.]+)\s+([0-9.]+))");
  EXPECT_TRUE(std::regex_search(out, m, re)) << out;
  if (m.empty()) return {-1, -1};
  return {std::stod(m[1]), std::stod(m[2])};
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(SparseCli, PowerInferFilesRunSparseUnlessDense) {
  EXPECT_TRUE(has(run(""), "PowerInfer file run sparse"));
  EXPECT_TRUE(has(run("--dense"), "PowerInfer file run dense"));
  const std::string r = run("--dense --sparsity-report");
  EXPECT_TRUE(has(r, "runs the dense FFN")) << r;
}

TEST(SparseCli, SparsityReportHasEveryLayer) {
  const std::string out = run("--sparsity-report");
  EXPECT_TRUE(has(out, "sparsity report: threshold")) << out;
  EXPECT_TRUE(has(out, "(powerinfer.sparse_threshold)")) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\n\s+0\s+0\.[0-9]{4})"))) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\n\s+1\s+0\.[0-9]{4})"))) << out;
  const auto [pred, comp] = all_row(out);
  EXPECT_GT(pred, 0.05);  // synth: ~10% of neurons fire, the predictor marks ~11%
  EXPECT_LT(pred, 0.2);
  EXPECT_LE(comp, pred);
  EXPECT_TRUE(has(out, "weight bytes per token")) << out;
}

TEST(SparseCli, ThresholdFlagAndEnvironmentVariable) {
  auto pred = [](const std::string& out) { return all_row(out).first; };
  EXPECT_EQ(pred(run("--sparsity-report --sparse-threshold=-inf")), 1.0);
  EXPECT_EQ(pred(run("--sparsity-report --sparse-threshold -inf")), 1.0);
  EXPECT_EQ(pred(run("--sparsity-report --sparse-threshold inf")), 0.0);
  const std::string env = run("--sparsity-report", "LLAMA_SPARSE_PRED_THRESHOLD=-inf");
  EXPECT_EQ(pred(env), 1.0);
  EXPECT_TRUE(has(env, "(LLAMA_SPARSE_PRED_THRESHOLD)")) << env;
  // The flag wins over the environment variable.
  const std::string both =
      run("--sparsity-report --sparse-threshold 1e9", "LLAMA_SPARSE_PRED_THRESHOLD=-inf");
  EXPECT_EQ(pred(both), 0.0);
  EXPECT_TRUE(has(both, "(flag)")) << both;

  auto bad =
      run_command("LLAMA_SPARSE_PRED_THRESHOLD=abc " + kBin + " run -m " + model() + " -p a -n 1");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_TRUE(has(bad.output, "LLAMA_SPARSE_PRED_THRESHOLD='abc' is not a number")) << bad.output;
  bad = run_command(kBin + " run -m " + model() + " -p a -n 1 --sparse-threshold x");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_TRUE(has(bad.output, "--sparse-threshold")) << bad.output;
}

TEST(SparseCli, EveryNeuronPredictedEqualsDense) {
  EXPECT_EQ(text("--sparse-threshold=-inf"), text("--dense"));
}

TEST(SparseCli, IdenticalTextForAnyThreadCountAndBatchSplit) {
  const std::string ref = text("-t 1 -b 7");
  EXPECT_EQ(text("-t 2 -b 7"), ref);
  EXPECT_EQ(text("-t 3 -b 7"), ref);
  EXPECT_EQ(text("-t 2 -b 1"), ref);
  EXPECT_EQ(text("-t 2 -b 512"), ref);
}

TEST(SparseCli, CheckPredictorReportsRecallAndLogitDeviation) {
  const std::string out = run("--check-predictor");
  EXPECT_TRUE(has(out, "recall")) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      out, m, std::regex(R"(\n\s+all\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+))")))
      << out;
  EXPECT_GE(std::stod(m[3]), 0.9) << "recall";
  EXPECT_GE(std::stod(m[4]), 0.6) << "precision";
  ASSERT_TRUE(std::regex_search(
      out, m,
      std::regex(
          R"(\((\d+) positions\): max \|diff\| ([0-9.e+-]+) .*argmax agrees at (\d+)/(\d+))")))
      << out;
  EXPECT_EQ(m[1], "25");  // the prompt's last token, then 24 generated ones
  EXPECT_LT(std::stod(m[2]), 1.0);
  EXPECT_EQ(m[3], m[4]);  // synth's predictor is good enough that argmax never changes here
  // The check does not change the generated text.
  EXPECT_EQ(text("--check-predictor"), text(""));
}

}  // namespace
