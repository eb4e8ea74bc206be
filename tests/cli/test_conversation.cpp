// `powerinfer run -cnv`: conversation mode with a chat template and context shift.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli/run_command.h"

namespace {

using pi::testing::run_command;

const std::string kBin = std::string(PI_BIN_DIR) + "/powerinfer ";
const std::string kModel = std::string(PI_SOURCE_DIR) + "/models/kjv-relu/kjv-relu.pwri.gguf";

class CliConversation : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kModel)) GTEST_SKIP() << kModel << " not present";
  }
};

// The user types from the first turn; every turn gets an answer; a small context shifts
// instead of stopping.
TEST_F(CliConversation, AnswersEveryTurnAndShiftsTheContext) {
  auto r = run_command("printf 'In the beginning\\nAnd God said\\nThen\\n' | " + kBin + "run -m " +
                       kModel + " -cnv --chat-template chatml -sys 'KJV.' -n 40 -c 160 --keep 8 -s 1 "
                       "-t 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("conversation mode: chat template chatml"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[context shift: 8 tokens kept"), std::string::npos) << r.output;
  size_t prompts = 0;
  for (size_t at = r.output.find("\n> "); at != std::string::npos; at = r.output.find("\n> ", at + 1))
    ++prompts;
  EXPECT_EQ(prompts, 4u) << r.output;  // three turns, then the prompt that reads end of input
}

// Same seed, same conversation, same text.
TEST_F(CliConversation, IsReproducibleWithASeed) {
  const std::string cmd = "(printf 'And God said\\n' | " + kBin + "run -m " + kModel +
                          " -cnv --chat-template zephyr -n 16 -s 3 -t 1 2>/dev/null)";
  auto a = run_command(cmd), b = run_command(cmd);
  ASSERT_EQ(a.exit_code, 0);
  EXPECT_EQ(a.output, b.output);
  EXPECT_GT(a.output.size(), 10u);
}

TEST_F(CliConversation, MissingOrUnknownTemplateIsAOneLineError) {
  auto none = run_command("printf 'hi\\n' | " + kBin + "run -m " + kModel + " -cnv -n 4");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.output.find("the model has no chat template"), std::string::npos) << none.output;
  auto bad = run_command("printf 'hi\\n' | " + kBin + "run -m " + kModel +
                         " -cnv --chat-template llama9 -n 4");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("unknown chat template 'llama9'"), std::string::npos) << bad.output;
}

}  // namespace
