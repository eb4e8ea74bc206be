// Tests for `powerinfer embed` on a tiny random model written in-process (tests/model/
// tiny_model.h, with a small SentencePiece vocabulary): the shape of each output format,
// normalisation, inputs embedded together equal to each alone, -f's lines, and one-line
// errors with exit code 1 for bad flag values.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/run_command.h"
#include "model/tiny_model.h"

namespace {

using pi::testing::run_command;

const std::string kEmbed = std::string(PI_BIN_DIR) + "/powerinfer embed ";
constexpr size_t kEmbd = 64;  // TinySpec's n_embd

std::string model() {
  const std::string path = pi::testing::temp_path("embed_llama.gguf");
  if (!std::filesystem::exists(path)) {
    pi::Status s = pi::testing::write_tiny_model({}, path);
    EXPECT_TRUE(s.ok()) << s.error().message;
  }
  return path;
}

// stdout of a command that must succeed.
std::string out(const std::string& flags) {
  auto r = run_command("(" + kEmbed + "-m " + model() + " -t 2 " + flags + " 2>/dev/null)");
  EXPECT_EQ(r.exit_code, 0) << flags << "\n" << r.output;
  return r.output;
}

// The vectors of the default text format: "embedding I: v v v ...", one line each.
std::vector<std::vector<double>> vectors(const std::string& text) {
  std::vector<std::vector<double>> v;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const std::string head = "embedding " + std::to_string(v.size()) + ":";
    EXPECT_EQ(line.rfind(head, 0), 0u) << line;
    std::istringstream vals(line.substr(head.size()));
    std::vector<double> row;
    double x;
    while (vals >> x) row.push_back(x);
    v.push_back(std::move(row));
  }
  return v;
}

double norm(const std::vector<double>& v) {
  double sq = 0;
  for (double x : v) sq += x * x;
  return std::sqrt(sq);
}

size_t count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

TEST(CliEmbed, TextFormatOneUnitVectorPerInput) {
  const auto v = vectors(out("-p 'the and' -p 'in the a' -p the"));
  ASSERT_EQ(v.size(), 3u);
  for (const auto& row : v) {
    EXPECT_EQ(row.size(), kEmbd);
    EXPECT_NEAR(norm(row), 1.0, 1e-4);  // printed with 6 decimals
  }
  EXPECT_NE(v[0], v[1]);
}

TEST(CliEmbed, InputsTogetherEqualEachAlone) {
  for (const char* pooling : {"mean", "last", "cls"}) {
    const std::string p = std::string(" --pooling ") + pooling;
    const auto both = vectors(out("-p 'the and in' -p 'a the' -c 64 -b 3" + p));
    const auto a = vectors(out("-p 'the and in' -c 64 -b 3" + p));
    const auto b = vectors(out("-p 'a the' -c 64 -b 3" + p));
    ASSERT_EQ(both.size(), 2u);
    ASSERT_EQ(a.size(), 1u);
    ASSERT_EQ(b.size(), 1u);
    EXPECT_EQ(both[0], a[0]) << pooling;
    EXPECT_EQ(both[1], b[0]) << pooling;
  }
  // A context that holds one input at a time: the inputs go through it one after another.
  const auto tight = vectors(out("-p 'the and in the a' -p 'the and in the a' -c 16"));
  ASSERT_EQ(tight.size(), 2u);
  EXPECT_EQ(tight[0], tight[1]);
}

TEST(CliEmbed, PoolingsAndNormalisationDiffer) {
  const auto mean = vectors(out("-p 'the and in the a'"));
  const auto last = vectors(out("-p 'the and in the a' --pooling last"));
  const auto cls = vectors(out("-p 'the and in the a' --pooling cls"));
  const auto raw = vectors(out("-p 'the and in the a' --embd-normalize -1"));
  ASSERT_EQ(raw.size(), 1u);
  EXPECT_NE(mean[0], last[0]);
  EXPECT_NE(mean[0], cls[0]);
  EXPECT_GT(std::fabs(norm(raw[0]) - 1.0), 1e-2);
  // The raw vector is the normalised one scaled.
  const double n = norm(raw[0]);
  for (size_t j = 0; j < kEmbd; ++j) EXPECT_NEAR(raw[0][j] / n, mean[0][j], 2e-6 / n + 1e-6);
}

TEST(CliEmbed, FileLinesAreInputs) {
  const std::string f = pi::testing::temp_path("embed_inputs.txt");
  std::ofstream(f) << "the and\n\nin the a\r\nthe\n";
  const auto v = vectors(out("-f " + f));
  ASSERT_EQ(v.size(), 3u);  // the empty line is skipped
  EXPECT_EQ(v[1], vectors(out("-p 'in the a'"))[0]);
}

TEST(CliEmbed, JsonAndArrayFormats) {
  const std::string j = out("-p the -p 'and in' --embd-output-format json");
  EXPECT_EQ(j.rfind("{", 0), 0u) << j;
  EXPECT_EQ(count(j, "\"object\":\"embedding\""), 2u) << j;
  EXPECT_NE(j.find("\"object\":\"list\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"index\":1"), std::string::npos) << j;
  EXPECT_NE(j.find("\"usage\":{\"prompt_tokens\":"), std::string::npos) << j;
  EXPECT_EQ(count(j, "\n"), 1u);  // one line
  const std::string a = out("-p the -p 'and in' --embd-output-format array");
  EXPECT_EQ(a.rfind("[[", 0), 0u) << a;
  EXPECT_EQ(count(a, "],["), 1u) << a;
  EXPECT_EQ(count(a, ","), 2 * (kEmbd - 1) + 1) << a;
}

// --pooling none: one vector per token, input by input; the first and last of an input are
// its cls and last vectors.
TEST(CliEmbed, PoolingNoneGivesEveryTokensVector) {
  const std::string text = out("-p 'the and in' -p 'a the' --pooling none");
  std::istringstream lines(text);
  std::string line;
  std::vector<std::pair<std::string, std::vector<double>>> rows;
  while (std::getline(lines, line)) {
    const size_t colon = line.find(':');
    ASSERT_NE(colon, std::string::npos) << line;
    std::istringstream vals(line.substr(colon + 1));
    std::vector<double> row;
    double x;
    while (vals >> x) row.push_back(x);
    EXPECT_EQ(row.size(), kEmbd) << line;
    EXPECT_NEAR(norm(row), 1.0, 1e-4) << line;
    rows.emplace_back(line.substr(0, colon), std::move(row));
  }
  ASSERT_GE(rows.size(), 4u) << text;
  EXPECT_EQ(rows.front().first, "embedding 0 token 0");
  size_t n0 = 0;
  while (n0 < rows.size() && rows[n0].first.rfind("embedding 0 ", 0) == 0) ++n0;
  ASSERT_GT(n0, 1u) << text;
  ASSERT_LT(n0, rows.size()) << text;
  EXPECT_EQ(rows[n0].first, "embedding 1 token 0");
  EXPECT_EQ(rows.back().first, "embedding 1 token " + std::to_string(rows.size() - n0 - 1));
  const auto cls = vectors(out("-p 'the and in' --pooling cls"));
  const auto last = vectors(out("-p 'a the' --pooling last"));
  EXPECT_EQ(rows.front().second, cls[0]);
  EXPECT_EQ(rows.back().second, last[0]);
  // array: per input, the array of its tokens' vectors; json: the same in "embedding".
  const std::string a = out("-p 'the and in' -p 'a the' --pooling none --embd-output-format array");
  EXPECT_EQ(a.rfind("[[[", 0), 0u) << a;
  EXPECT_EQ(count(a, "]],[["), 1u) << a;
  EXPECT_EQ(count(a, "],["), rows.size() - 1) << a;
  const std::string j = out("-p 'the and in' -p 'a the' --pooling none --embd-output-format json");
  EXPECT_EQ(count(j, "\"object\":\"embedding\""), 2u) << j;
  EXPECT_EQ(count(j, "\"embedding\":[["), 2u) << j;
}

TEST(CliEmbed, BadValuesAreOneLineErrors) {
  const struct {
    std::string flags, message;
  } cases[] = {
      {"-p the --pooling max", "--pooling must be mean, last, cls or none (got 'max')"},
      {"-p the --pooling rank", "--pooling must be mean, last, cls or none"},
      {"-p the --embd-normalize 1", "--embd-normalize must be -1 (none) or 2 (Euclidean)"},
      {"-p the --embd-normalize 0", "--embd-normalize must be -1"},
      {"-p the --embd-output-format xml", "--embd-output-format must be text, array or json"},
      {"", "no input: pass -p TEXT"},
      {"-p the -f /dev/null", "-p and -f are mutually exclusive"},
      {"-p 'the and in the a the and' -c 4", "tokens; the context holds 4 (n_ctx, -c)"},
      {"-p the -b 0", "-b must be >= 1"},
      {"-f /nonexistent/inputs.txt", "/nonexistent/inputs.txt"},
  };
  for (const auto& c : cases) {
    auto r = run_command(kEmbed + "-m " + model() + " " + c.flags);
    EXPECT_EQ(r.exit_code, 1) << c.flags << "\n" << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.flags << "\n" << r.output;
    EXPECT_EQ(count(r.output, "\n"), 1u) << c.flags << "\n" << r.output;
  }
}

TEST(CliEmbed, HelpNamesTheOptions) {
  auto r = run_command(kEmbed + "--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--pooling", "--embd-normalize", "--embd-output-format", "-f,--file"})
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag << "\n" << r.output;
}

}  // namespace
