// The bundled SiLU twin (models/kjv-silu/kjv-silu.act.gguf, calibrated with the greedy per-site
// allocation at model-wide sparsity 0.4 on the validation split): held-out perplexity
// (models/kjv-relu/heldout.txt, never calibrated on) at the file's target within the issue's
// bound, +3% over dense, and the share of projection bytes left unread within a few points of
// the target. Measured: dense 25.799, sparse 26.474 (+2.62%) at 40.2% model-wide (the same
// level at every site gave +3.40%: docs/BENCHMARKS.md, "The SiLU twin"). Label slow (two
// perplexity runs over 49k tokens); skips when the model is absent.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>

#include "cli/run_command.h"

namespace {

const std::string kBin = std::string(PI_BIN_DIR) + "/powerinfer";
const std::string kModel = std::string(PI_SOURCE_DIR) + "/models/kjv-silu/kjv-silu.act.gguf";
const std::string kText = std::string(PI_SOURCE_DIR) + "/models/kjv-relu/heldout.txt";

double ppl(const std::string& out) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(out, m, std::regex(R"(Final estimate: PPL = ([0-9.]+))"))) << out;
  return m.empty() ? 0.0 : std::stod(m[1]);
}

TEST(SiluBundled, PerplexityAtTargetSparsityWithinBound) {
  if (!std::filesystem::exists(kModel)) GTEST_SKIP() << kModel << " is absent";
  const std::string base = kBin + " perplexity -t 2 -c 256 -m " + kModel + " -f " + kText;
  auto dense = pi::testing::run_command(base + " --dense");
  ASSERT_EQ(dense.exit_code, 0) << dense.output;
  auto sparse = pi::testing::run_command(base);
  ASSERT_EQ(sparse.exit_code, 0) << sparse.output;
  const double d = ppl(dense.output), s = ppl(sparse.output);
  EXPECT_LE(s, d * 1.03) << "dense " << d << ", sparse " << s;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      sparse.output, m,
      std::regex(R"(Model-wide sparsity ([0-9.]+)% .*from the file's allocation)")))
      << sparse.output;
  EXPECT_NEAR(std::stod(m[1]), 40.0, 3.0);
  ASSERT_TRUE(std::regex_search(sparse.output, m,
                                std::regex("Activation sparsity 0.40, share zeroed:(.*)")))
      << sparse.output;
  const std::string line = m[1];
  int n = 0;
  const std::regex site(R"(([a-z_]+) ([0-9.]+)%)");
  for (auto it = std::sregex_iterator(line.begin(), line.end(), site);
       it != std::sregex_iterator(); ++it, ++n) {
    EXPECT_GT(std::stod((*it)[2]), 10.0) << (*it)[1];  // every site is thresholded
  }
  EXPECT_EQ(n, 4) << line;
}

}  // namespace
