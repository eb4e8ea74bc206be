#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/run_command.h"

namespace {

using pi::testing::run_command;

const std::string kBin = PI_BIN_DIR;

std::string tmp(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("pi_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

TEST(CliInspect, PrintsGgufAndPowerInferFiles) {
  const std::string g = tmp("ex.gguf"), p = tmp("ex_pwri.gguf");
  ASSERT_EQ(run_command(kBin + "/make_example_gguf " + g).exit_code, 0);
  ASSERT_EQ(run_command(kBin + "/make_example_gguf " + p + " --pwri").exit_code, 0);

  auto r = run_command(kBin + "/powerinfer inspect " + g);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ordinary GGUF: runs dense"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("blk.0.ffn_gate.weight"), std::string::npos);
  EXPECT_NE(r.output.find("[128, 64]"), std::string::npos);
  EXPECT_NE(r.output.find("tokenizer.ggml.tokens"), std::string::npos);
  EXPECT_NE(r.output.find("totals by type"), std::string::npos);

  r = run_command(kBin + "/powerinfer inspect " + p);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PWRI"), std::string::npos);
  EXPECT_NE(r.output.find("runs sparse"), std::string::npos);
  EXPECT_NE(r.output.find("powerinfer.sparse_threshold"), std::string::npos);

  const std::string moe = tmp("ex_moe.gguf");
  ASSERT_EQ(run_command(kBin + "/powerinfer synth --no-progress --preset tiny-moe --type f32 -o " + moe).exit_code, 0);
  r = run_command(kBin + "/powerinfer inspect " + moe);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ordinary GGUF: a mixture of 8 experts, 2 per token"), std::string::npos) << r.output;

  r = run_command(kBin + "/powerinfer inspect --json " + p);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"magic\": \"PWRI\""), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"sparse\": true"), std::string::npos);
  EXPECT_NE(r.output.find("\"shape\": ["), std::string::npos);
}

TEST(CliInspect, MalformedFilesFailWithClearMessage) {
  const std::string bad = tmp("bad.gguf");
  { std::ofstream(bad) << "NOPE this is not a model"; }
  auto r = run_command(kBin + "/powerinfer inspect " + bad);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(bad + ": offset 0: bad magic"), std::string::npos) << r.output;

  const std::string good = tmp("cut_src.gguf"), cut = tmp("cut.gguf");
  ASSERT_EQ(run_command(kBin + "/make_example_gguf " + good).exit_code, 0);
  auto size = std::filesystem::file_size(good);
  std::filesystem::copy_file(good, cut, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(cut, size - 10);
  r = run_command(kBin + "/powerinfer inspect " + cut);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("runs past end of file"), std::string::npos) << r.output;

  r = run_command(kBin + "/powerinfer inspect /nonexistent.gguf");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("/nonexistent.gguf: cannot open"), std::string::npos) << r.output;
}

TEST(CliInspect, UsageErrors) {
  auto r = run_command(kBin + "/powerinfer");
  EXPECT_NE(r.exit_code, 0);
  r = run_command(kBin + "/powerinfer inspect");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("file is required"), std::string::npos) << r.output;
  r = run_command(kBin + "/powerinfer --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("inspect"), std::string::npos);
}

}  // namespace
