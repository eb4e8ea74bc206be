// Tests for `powerinfer batched` and `powerinfer batched-bench` on the bundled model:
// every sequence of `batched -np 3` prints exactly what `run --seed S+i` prints (greedy,
// sampled with penalties, sparse and --dense), the error messages and exit codes for bad
// flags, and the batched-bench table's columns and rows (md and json, shared prompts).
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "cli/run_command.h"

namespace {

using pi::testing::run_command;

const std::string kBin = std::string(PI_BIN_DIR) + "/powerinfer ";
const std::string kModel = std::string(PI_SOURCE_DIR) + "/models/kjv-relu/kjv-relu.pwri.gguf";

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// stdout of a command that must succeed.
std::string out(const std::string& cmd) {
  auto r = run_command("(" + cmd + " 2>/dev/null)");
  EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  return r.output;
}

class CliBatched : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kModel)) GTEST_SKIP() << kModel << " not present";
  }
};

// `batched` prints "sequence i:\n\n" + what `run` prints + "\n" for each sequence.
void expect_batched_equals_run(const std::string& flags, int seed) {
  const int np = 3;
  std::string want;
  for (int i = 0; i < np; ++i) {
    want += "sequence " + std::to_string(i) + ":\n\n" +
            out(kBin + "run -m " + kModel + " " + flags + " --seed " + std::to_string(seed + i)) +
            "\n";
  }
  const std::string got = out(kBin + "batched -m " + kModel + " " + flags + " -np " +
                              std::to_string(np) + " --seed " + std::to_string(seed));
  EXPECT_EQ(got, want) << flags;
}

TEST_F(CliBatched, GreedySequencesEqualRun) {
  expect_batched_equals_run("-p 'And God said' -n 24 --temp 0 -t 2", 1);
}

TEST_F(CliBatched, SampledSequencesEqualRunWithSeedPlusI) {
  expect_batched_equals_run("-p 'In the beginning' -n 24 -t 2 --repeat-penalty 1.3 --ignore-eos", 11);
  expect_batched_equals_run("-p 'And the LORD' -n 24 -t 1 --dense --no-display-prompt", 40);
}

TEST_F(CliBatched, SequencesDifferAndTimingsAreReported) {
  auto r = run_command(kBin + "batched -m " + kModel +
                       " -p 'And God said' -np 4 -n 16 --seed 3 --ignore-eos -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(contains(r.output, "sequence " + std::to_string(i) + ":"));
  EXPECT_FALSE(contains(r.output, "sequence 4:"));
  EXPECT_TRUE(contains(r.output, "prompt eval time")) << r.output;
  // 4 sequences x 15 evaluated tokens (the 16th is sampled, not evaluated) in 15 steps.
  EXPECT_TRUE(contains(r.output, "/    60 tokens in 15 steps of up to 4 sequences")) << r.output;
  EXPECT_TRUE(contains(r.output, "generated 64 tokens in 4 sequences")) << r.output;
  EXPECT_TRUE(contains(r.output, "sequence i samples with seed 3 + i")) << r.output;
}

TEST_F(CliBatched, BadFlagsGiveOneLineErrors) {
  const struct {
    std::string flags;
    std::string message;
  } cases[] = {
      {"-np 0", "-np must be 1..64 (got 0)"},
      {"-np 65", "-np must be 1..64 (got 65)"},
      {"-n -1", "-n must be >= 0"},
      {"-t 0", "-t 0: the thread count must be in [1, 256]"},
      {"-c 10 -np 4 -n 8", "context too small: the prompt (4 tokens) and 4 sequences x 8 tokens "
                           "need 36 cells; pass -c >= 36"},
      {"--top-p 2", "--top-p must be in (0, 1]"},
      {"-f /nonexistent/prompt.txt", "-p and -f are mutually exclusive"},
      {"--sparse-threshold abc", "--sparse-threshold: 'abc' is not a number"},
  };
  for (const auto& c : cases) {
    auto r = run_command(kBin + "batched -m " + kModel + " -p 'And God said' " + c.flags);
    EXPECT_EQ(r.exit_code, 1) << c.flags << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "error: " + c.message)) << c.flags << "\n" << r.output;
  }
  auto r = run_command(kBin + "batched -m /nonexistent.gguf -p x");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "/nonexistent.gguf")) << r.output;
  r = run_command(kBin + "batched -m " + kModel + " -p x -np 2 -n 0");  // nothing to generate
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// Splits a markdown table row into trimmed cells.
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> c;
  std::stringstream ss(line);
  std::string part;
  std::getline(ss, part, '|');  // before the first bar
  while (std::getline(ss, part, '|')) {
    const size_t b = part.find_first_not_of(' '), e = part.find_last_not_of(' ');
    c.push_back(b == std::string::npos ? "" : part.substr(b, e - b + 1));
  }
  return c;
}

TEST_F(CliBatched, BatchedBenchPrintsTheGrid) {
  const std::string table =
      out(kBin + "batched-bench -m " + kModel + " -npp 8,16 -ntg 4 -npl 1,3 -t 2");
  std::vector<std::string> lines;
  std::stringstream ss(table);
  for (std::string l; std::getline(ss, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 2u + 4u) << table;
  EXPECT_EQ(cells(lines[0]), (std::vector<std::string>{"PP", "TG", "B", "N_KV", "T_PP s",
                                                       "S_PP t/s", "T_TG s", "S_TG t/s", "T s",
                                                       "S t/s"}));
  const std::vector<std::vector<std::string>> keys = {
      {"8", "4", "1", "12"}, {"8", "4", "3", "36"}, {"16", "4", "1", "20"}, {"16", "4", "3", "60"}};
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto c = cells(lines[2 + i]);
    ASSERT_EQ(c.size(), 10u) << lines[2 + i];
    EXPECT_EQ(std::vector<std::string>(c.begin(), c.begin() + 4), keys[i]) << lines[2 + i];
    for (size_t k = 4; k < 10; ++k) EXPECT_GT(std::stod(c[k]), 0.0) << lines[2 + i];
  }
}

TEST_F(CliBatched, BatchedBenchSharedPromptJson) {
  const std::string json = out(kBin + "batched-bench -m " + kModel +
                               " -npp 8 -ntg 2 -npl 1,2,4 --pps -o json -t 1");
  EXPECT_TRUE(contains(json, "\"pp\": 8, \"tg\": 2, \"pl\": 4, \"n_kv\": 16")) << json;
  EXPECT_TRUE(contains(json, "\"pl\": 1, \"n_kv\": 10")) << json;
  size_t n = 0;
  for (size_t p = json.find("\"speed_tg\""); p != std::string::npos; p = json.find("\"speed_tg\"", p + 1)) ++n;
  EXPECT_EQ(n, 3u) << json;
}

TEST_F(CliBatched, BatchedBenchErrorsAndSkippedCells) {
  const struct {
    std::string flags;
    std::string message;
  } cases[] = {
      {"-npl 0", "-npl values must be >= 1 (got 0)"},
      {"-npl 65", "-npl values must be <= 64"},
      {"-npp 0", "-npp values must be >= 1"},
      {"-o xml", "-o must be md or json"},
      {"-c 4 -npp 8 -ntg 1 -npl 1", "no cell of the grid fits the context of 4 cells"},
  };
  for (const auto& c : cases) {
    auto r = run_command(kBin + "batched-bench -m " + kModel + " " + c.flags);
    EXPECT_EQ(r.exit_code, 1) << c.flags << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "error: " + c.message)) << c.flags << "\n" << r.output;
  }
  auto r = run_command(kBin + "batched-bench -m " + kModel + " -c 20 -npp 8 -ntg 2 -npl 1,4");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "PP 8 TG 2 PL 4 skipped: needs 40 KV cells")) << r.output;
}

}  // namespace
