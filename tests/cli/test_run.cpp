// Tests for `powerinfer run` on tiny random models written in-process (tests/model/
// tiny_model.h, with a small SentencePiece vocabulary): generation on every architecture,
// determinism across thread counts and batch sizes, seeded sampling, prompt options,
// interactive mode, Ctrl-C, and the error messages and exit codes for bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli/run_command.h"
#include "core/mapped_file.h"
#include "model/tiny_model.h"

namespace {

using pi::testing::run_command;
using pi::testing::TinySpec;

const std::string kBin = PI_BIN_DIR;
const std::string kRun = kBin + "/powerinfer run ";

std::string model(const std::string& name, TinySpec spec = {}) {
  const std::string path = pi::testing::temp_path(name);
  if (!std::filesystem::exists(path)) {
    pi::Status s = pi::testing::write_tiny_model(spec, path);
    EXPECT_TRUE(s.ok()) << s.error().message;
  }
  return path;
}

TinySpec arch(const char* a, bool pwri, pi::DType t = pi::DType::F32, int64_t kv = 2) {
  TinySpec s;
  s.arch = a;
  s.pwri = pwri;
  s.wtype = t;
  s.n_head_kv = kv;
  s.falcon_two_norms = kv > 1;
  return s;
}

// The text between the prompt echo and the timings: stdout only.
std::string generated(const std::string& cmd) {
  auto r = run_command("(" + cmd + " 2>/dev/null)");
  EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  return r.output;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(CliRun, GeneratesOnEveryArchitectureAndPrintsTimings) {
  const struct {
    const char* name;
    TinySpec spec;
  } cases[] = {
      {"llama.gguf", arch("llama", false)},
      {"llama_q4.pwri.gguf", arch("llama", true, pi::DType::Q4_0)},
      {"bamboo_f16.gguf", arch("bamboo", false, pi::DType::F16)},
      {"bamboo.pwri.gguf", arch("bamboo", true, pi::DType::Q8_0)},
      {"falcon7.gguf", arch("falcon", false, pi::DType::Q8_0, 1)},
      {"falcon40.pwri.gguf", arch("falcon", true, pi::DType::F32, 2)},
      {"opt_f16.gguf", arch("opt", false, pi::DType::F16, 4)},
      {"opt_q4.pwri.gguf", arch("opt", true, pi::DType::Q4_0, 4)},
      {"qwen2_q8.gguf", arch("qwen2", false, pi::DType::Q8_0, 2)},
  };
  for (const auto& c : cases) {
    auto r = run_command(kRun + "-m " + model(c.name, c.spec) +
                         " -p 'in the' -n 12 --ignore-eos --seed 5 -t 2");
    ASSERT_EQ(r.exit_code, 0) << c.name << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "in the")) << r.output;
    EXPECT_TRUE(contains(r.output, "load time")) << r.output;
    EXPECT_TRUE(contains(r.output, "prompt eval time")) << r.output;
    EXPECT_TRUE(contains(r.output, "/    12 runs")) << r.output;  // 12 generated tokens
    EXPECT_TRUE(contains(r.output, "tokens per second")) << r.output;
  }
}

TEST(CliRun, GreedyOutputIndependentOfThreadsAndBatchSize) {
  const std::string m = model("det.gguf", arch("llama", false, pi::DType::Q4_0));
  const std::string base = kRun + "-m " + m + " -p 'the and in the a' -n 40 --temp 0 --ignore-eos";
  const std::string ref = generated(base + " -t 1 -b 512");
  EXPECT_GT(ref.size(), std::string("the and in the a").size());
  EXPECT_EQ(generated(base + " -t 2 -b 512"), ref);
  EXPECT_EQ(generated(base + " -t 2 -b 1"), ref);
  EXPECT_EQ(generated(base + " -t 1 -b 7"), ref);
}

// --mmap maps the weights, --no-mmap reads them into memory, and by default a file this small
// is read whenever transparent huge pages are on: the same numbers every way, so the same
// text; the load line says when the model was read and how much landed in huge pages. The
// two flags together are refused.
TEST(CliRun, MappedReadAndDefaultGiveTheSameOutput) {
  const std::string m = model("nommap.pwri.gguf", arch("llama", true, pi::DType::Q4_0));
  const std::string base = kRun + "-m " + m + " -p 'the and in' -n 24 --ignore-eos --seed 3 -t 2";
  const std::string read = generated(base + " --no-mmap");
  EXPECT_EQ(generated(base + " --mmap"), read);
  EXPECT_EQ(generated(base), read);
  auto r = run_command(base + " --no-mmap 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "model read into memory: ")) << r.output;
  auto mapped = run_command(base + " --mmap 2>&1");
  ASSERT_EQ(mapped.exit_code, 0) << mapped.output;
  EXPECT_FALSE(contains(mapped.output, "read into memory")) << mapped.output;
  auto by_default = run_command(base + " 2>&1");
  ASSERT_EQ(by_default.exit_code, 0) << by_default.output;
  EXPECT_EQ(contains(by_default.output, "model read into memory: "), pi::transparent_huge_pages_on())
      << by_default.output;
  auto both = run_command(base + " --mmap --no-mmap 2>&1");
  EXPECT_NE(both.exit_code, 0) << both.output;
  EXPECT_TRUE(contains(both.output, "--no-mmap")) << both.output;
}

TEST(CliRun, SeededSamplingIsReproducible) {
  const std::string m = model("seed.gguf", arch("bamboo", false));
  const std::string base = kRun + "-m " + m +
                           " -p 'the' -n 30 --ignore-eos --temp 1.2 --top-k 0 "
                           "--top-p 0.98 --min-p 0.01 --repeat-penalty 1.1 --presence-penalty 0.2 "
                           "--frequency-penalty 0.1";
  const std::string a = generated(base + " --seed 11 -t 1");
  EXPECT_EQ(generated(base + " --seed 11 -t 2"), a);
  EXPECT_NE(generated(base + " --seed 12 -t 1"), a);
}

TEST(CliRun, PromptFileEscapesAndNoDisplayPrompt) {
  const std::string m = model("prompt.gguf", arch("llama", false));
  const std::string file = pi::testing::temp_path("prompt.txt");
  { std::ofstream(file) << "the and"; }
  const std::string from_file =
      generated(kRun + "-m " + m + " -f " + file + " -n 8 --temp 0 --ignore-eos");
  EXPECT_EQ(from_file.rfind("the and", 0), 0u) << from_file;
  EXPECT_EQ(generated(kRun + "-m " + m + " -p 'the and' -n 8 --temp 0 --ignore-eos"), from_file);

  const std::string only = generated(kRun + "-m " + m + " -f " + file +
                                     " -n 8 --temp 0 --ignore-eos --no-display-prompt");
  EXPECT_EQ("the and" + only, from_file);

  // -e turns \n into a newline (a byte token) before tokenizing; without it the backslash stays.
  const std::string esc = generated(kRun + "-m " + m + " -p 'a\\nb' -e -n 0");
  EXPECT_EQ(esc.rfind("a\nb", 0), 0u) << esc;
  const std::string hex = generated(kRun + "-m " + m + " -p 'a\\x41b\\q' -e -n 0");
  EXPECT_EQ(hex.rfind("aAb\\q", 0), 0u) << hex;
  const std::string raw = generated(kRun + "-m " + m + " -p 'a\\nb' --no-escape -n 0");
  EXPECT_EQ(raw.rfind("a\\nb", 0), 0u) << raw;
}

TEST(CliRun, InteractiveKeepsTheContextAcrossTurns) {
  const std::string m = model("chat.gguf", arch("llama", false));
  auto r = run_command("printf 'the and\\nin the\\n' | " + kRun + "-m " + m +
                       " -i -n 4 --temp 0 --ignore-eos");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  size_t prompts = 0;
  for (size_t p = r.output.find("\n> "); p != std::string::npos; p = r.output.find("\n> ", p + 1))
    ++prompts;
  EXPECT_EQ(prompts, 3u) << r.output;  // two turns answered, then end of input
  EXPECT_TRUE(contains(r.output, "/     8 runs")) << r.output;

  // The second turn no longer fits because the first one is still in the context.
  r = run_command("printf 'the and in the a\\nthe and in the a\\n' | " + kRun + "-m " + m +
                  " -i -c 20 -n 4 --temp 0 --ignore-eos");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "context overflow: this turn is")) << r.output;
}

TEST(CliRun, CtrlCStopsCleanlyWithTimings) {
  TinySpec big = arch("llama", false);
  big.n_ctx_train = 1 << 20;
  const std::string m = model("long.gguf", big);
  auto r = run_command("(" + kRun + "-m " + m +
                       " -p 'the' -n -1 --ignore-eos -c 300000 -t 1 "
                       ">/dev/null & pid=$!; sleep 1; kill -INT $pid; wait $pid; echo rc=$?)");
  EXPECT_TRUE(contains(r.output, "rc=130")) << r.output;
  EXPECT_TRUE(contains(r.output, "eval time")) << r.output;

  // Interactive, waiting for input: Ctrl-C ends the session normally.
  r = run_command("(sleep 2 | " + kRun + "-m " + m +
                  " -i -c 64 -t 1 >/dev/null & pid=$!; "
                  "sleep 1; kill -INT $pid; wait $pid; echo rc=$?)");
  EXPECT_TRUE(contains(r.output, "rc=0")) << r.output;
  EXPECT_TRUE(contains(r.output, "total time")) << r.output;
}

TEST(CliRunErrors, BadFiles) {
  auto r = run_command(kRun + "-m /nonexistent/model.gguf -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "error: /nonexistent/model.gguf: cannot open")) << r.output;

  const std::string text = pi::testing::temp_path("text.gguf");
  { std::ofstream(text) << "definitely not a GGUF file, just some text"; }
  r = run_command(kRun + "-m " + text + " -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "bad magic")) << r.output;

  TinySpec gpt2;
  gpt2.arch = "gpt2";
  r = run_command(kRun + "-m " + model("gpt2.gguf", gpt2) + " -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "unsupported architecture 'gpt2'")) << r.output;

  TinySpec missing;
  missing.drop = {"blk.1.attn_v.weight"};
  r = run_command(kRun + "-m " + model("missing.gguf", missing) + " -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "missing tensor 'blk.1.attn_v.weight' (expected shape [32, 64])"))
      << r.output;

  TinySpec shaped;
  shaped.reshape = {{"blk.0.ffn_gate.weight", pi::Shape{64, 64}}};
  r = run_command(kRun + "-m " + model("shaped.gguf", shaped) + " -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(
      contains(r.output, "tensor 'blk.0.ffn_gate.weight' has shape [64, 64], expected [96, 64]"))
      << r.output;

  TinySpec novocab;
  novocab.vocab = false;
  r = run_command(kRun + "-m " + model("novocab.gguf", novocab) + " -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "has no vocabulary")) << r.output;
}

TEST(CliRunErrors, ContextOverflow) {
  const std::string m = model("overflow.gguf");
  auto r = run_command(kRun + "-m " + m + " -c 8 -p 'the and in the a the and in the a the'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "context overflow: the prompt is")) << r.output;
  EXPECT_TRUE(contains(r.output, "holds 8 (raise -c)")) << r.output;
}

TEST(CliRunErrors, InvalidFlagValues) {
  const std::string m = model("flags.gguf");
  const struct {
    const char* flags;
    const char* message;
  } cases[] = {
      {"-n -2", "-n must be -1 (no limit) or >= 0 (got -2)"},
      {"-t 0", "-t 0: the thread count must be in [1, 256]"},
      {"-c -1", "-c must be >= 0"},
      {"-b 0", "-b must be >= 1 (got 0)"},
      {"--temp -0.5", "--temp must be >= 0"},
      {"--top-p 0", "--top-p must be in (0, 1]"},
      {"--top-p 1.5", "--top-p must be in (0, 1]"},
      {"--min-p 2", "--min-p must be in [0, 1]"},
      {"--repeat-penalty 0", "--repeat-penalty must be > 0"},
      {"--repeat-last-n -3", "--repeat-last-n must be >= -1"},
  };
  for (const auto& c : cases) {
    auto r = run_command(kRun + "-m " + m + " -p hi " + c.flags);
    EXPECT_EQ(r.exit_code, 1) << c.flags << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, c.message)) << c.flags << "\n" << r.output;
  }
  auto r = run_command(kRun + "-m " + m + " -f /nonexistent/prompt.txt");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "/nonexistent/prompt.txt: cannot read prompt file")) << r.output;
  r = run_command(kRun + "-m " + m + " -p hi -f " + m);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "-p and -f are mutually exclusive")) << r.output;
  r = run_command(kRun + "-m " + m + " -p hi -n abc");
  EXPECT_NE(r.exit_code, 0) << r.output;
}

TEST(CliRunErrors, NoModelNamesTheFlag) {
  // Run from a directory without the bundled model.
  auto r = run_command("cd " + std::filesystem::temp_directory_path().string() + " && " + kRun +
                       "-p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "no model given: pass -m FILE")) << r.output;
}

}  // namespace
