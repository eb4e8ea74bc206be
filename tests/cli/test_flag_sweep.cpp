// Absurd values for every numeric flag of every subcommand: negative, zero, huge, not a
// number, NaN and infinities for the real-valued ones. Whatever the value, the program must
// end by itself (no signal, no abort, no hang) and a refusal must say why on stderr.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "cli/run_command.h"
#include "model/tiny_model.h"

namespace {

using pi::testing::run_command;

const std::string kBin = PI_BIN_DIR;

enum class Kind { Int, Real };

struct Flag {
  const char* name;
  Kind kind;
};

struct Subcommand {
  std::string name;
  std::string base;  // a valid, quick command line to which the flag is appended
  std::vector<Flag> flags;
  // Flags of `base` with their values, left out when that flag is the one swept.
  std::vector<std::pair<std::string, std::string>> defaults = {};

  std::string command(const std::string& swept) const {
    std::string c = base;
    for (const auto& [flag, value] : defaults)
      if (flag != swept) c += " " + flag + " " + value;
    return c;
  }
};

const std::vector<std::string>& values(Kind k) {
  static const std::vector<std::string> ints = {"-1", "0", "-99999999999", "2147483647",
                                                "99999999999", "abc", "1.5", "''"};
  static const std::vector<std::string> reals = {"-1",  "0",   "-1e30", "1e30", "99999999999",
                                                 "abc", "nan", "inf",   "-inf", "''"};
  return k == Kind::Int ? ints : reals;
}

const std::string& tiny_model() {
  static const std::string path = [] {
    const std::string p = pi::testing::temp_path("sweep.pwri.gguf");
    pi::testing::TinySpec spec;
    spec.pwri = true;
    pi::Status s = pi::testing::write_tiny_model(spec, p);
    EXPECT_TRUE(s.ok()) << s.error().message;
    return p;
  }();
  return path;
}

const std::string& silu_model() {
  static const std::string path = [] {
    const std::string p = pi::testing::temp_path("sweep.silu.gguf");
    pi::testing::TinySpec spec;
    spec.activation = "silu";
    pi::Status s = pi::testing::write_tiny_model(spec, p);
    EXPECT_TRUE(s.ok()) << s.error().message;
    return p;
  }();
  return path;
}

const std::string& text_file() {
  static const std::string path = [] {
    const std::string p = pi::testing::temp_path("sweep.txt");
    std::ofstream out(p);
    for (int i = 0; i < 40; ++i) out << "the and in the a the and in the a ";
    return p;
  }();
  return path;
}

// Runs `cmd` with a time limit; checks the ending and returns the exit code.
int check_ends_cleanly(const std::string& cmd) {
  // The limit is far above any legitimate run of these tiny cases; 124 is timeout's code.
  auto r = run_command("(timeout -s KILL 60 " + cmd + " 2>&1 >/dev/null)");
  EXPECT_LT(r.exit_code, 124) << cmd << "\n" << r.output;
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << cmd << "\n" << r.output;
  EXPECT_EQ(r.output.find("Aborted"), std::string::npos) << cmd << "\n" << r.output;
  if (r.exit_code != 0) {
    EXPECT_FALSE(r.output.empty()) << cmd << ": exit " << r.exit_code
                                   << " without a message on stderr";
  }
  return r.exit_code;
}

std::vector<Subcommand> subcommands() {
  const std::string m = tiny_model();
  const std::string out = pi::testing::temp_path("sweep_out.gguf");
  const Flag gen[] = {{"-n", Kind::Int},
                      {"-t", Kind::Int},
                      {"-b", Kind::Int},
                      {"-c", Kind::Int},
                      {"-s", Kind::Int},
                      {"--temp", Kind::Real},
                      {"--top-k", Kind::Int},
                      {"--top-p", Kind::Real},
                      {"--min-p", Kind::Real},
                      {"--repeat-penalty", Kind::Real},
                      {"--repeat-last-n", Kind::Int},
                      {"--presence-penalty", Kind::Real},
                      {"--frequency-penalty", Kind::Real},
                      {"--sparse-threshold", Kind::Real},
                      {"-ngl", Kind::Int}};
  std::vector<Flag> gen_flags(std::begin(gen), std::end(gen));
  std::vector<Flag> batched_flags = gen_flags;
  batched_flags.push_back({"-np", Kind::Int});
  return {
      {"run", "run -m " + m + " -p 'the and' --no-warmup", gen_flags, {{"-n", "4"}}},
      {"batched", "batched -m " + m + " -p 'the and' --no-warmup", batched_flags,
       {{"-n", "4"}, {"-np", "2"}}},
      {"run-sim",
       "run --device sim -m " + m + " -p 'the and' --no-warmup",
       {{"--vram-budget", Kind::Real}, {"-ngl", Kind::Int}, {"-b", Kind::Int}, {"-c", Kind::Int}},
       {{"-n", "4"}}},
      {"batched-bench",
       "batched-bench -m " + m + " --no-warmup",
       {{"-t", Kind::Int},
        {"-c", Kind::Int},
        {"-b", Kind::Int},
        {"-npp", Kind::Int},
        {"-ntg", Kind::Int},
        {"-npl", Kind::Int},
        {"-ngl", Kind::Int}},
       {{"-npp", "4"}, {"-ntg", "2"}, {"-npl", "1,2"}}},
      {"bench",
       "bench --mode dense -m " + m,
       {{"-p", Kind::Int},
        {"-n", Kind::Int},
        {"-t", Kind::Int},
        {"-r", Kind::Int},
        {"-b", Kind::Int},
        {"--probe-mib", Kind::Int},
        {"--probe-passes", Kind::Int},
        {"--warmup-gen", Kind::Int},
        {"-ngl", Kind::Int},
        {"--vram-budget", Kind::Real}},
       {{"-p", "4"},
        {"-n", "2"},
        {"-r", "1"},
        {"-t", "1"},
        {"--probe-mib", "1"},
        {"--probe-passes", "1"},
        {"--warmup-gen", "1"}}},
      {"perplexity",
       "perplexity -m " + m + " -f " + text_file(),
       {{"-c", Kind::Int},
        {"-b", Kind::Int},
        {"-t", Kind::Int},
        {"--chunks", Kind::Int},
        {"-ngl", Kind::Int}},
       {{"-c", "16"}, {"--chunks", "2"}}},
      {"synth",
       "synth --preset tiny --no-progress -o " + out,
       {{"--layers", Kind::Int},
        {"--embd", Kind::Int},
        {"--ff", Kind::Int},
        {"--heads", Kind::Int},
        {"--kv-heads", Kind::Int},
        {"--vocab", Kind::Int},
        {"--ctx", Kind::Int},
        {"--activity", Kind::Real},
        {"--hot-fraction", Kind::Real},
        {"--hot-share", Kind::Real},
        {"--predictor-rank", Kind::Int},
        {"--noise", Kind::Real},
        {"--margin", Kind::Real},
        {"--seed", Kind::Int},
        {"-t", Kind::Int}}},
      {"calibrate",
       "calibrate --no-progress -m " + silu_model() + " -f " + text_file() + " -o " + out,
       {{"--sparsity", Kind::Real},
        {"-c", Kind::Int},
        {"-b", Kind::Int},
        {"-t", Kind::Int},
        {"--max-tokens", Kind::Int},
        {"--alloc-tokens", Kind::Int},
        {"--alloc-step", Kind::Real},
        {"--alloc-max", Kind::Real}},
       {{"-c", "32"}, {"--alloc-tokens", "32"}, {"--alloc-step", "0.3"}}},
      {"embed",
       "embed -m " + m + " -p 'the and' -p 'in'",
       {{"-t", Kind::Int},
        {"-c", Kind::Int},
        {"-b", Kind::Int},
        {"--embd-normalize", Kind::Int},
        {"-ngl", Kind::Int}}},
      {"quantize", "quantize " + m + " " + out + " q8_0", {{"-t", Kind::Int}}},
      {"inspect", "inspect " + m, {{"--max-items", Kind::Int}}},
  };
}

class FlagSweep : public ::testing::TestWithParam<std::string> {};

TEST_P(FlagSweep, AbsurdValuesEndCleanly) {
  for (const Subcommand& s : subcommands()) {
    if (s.name != GetParam()) continue;
    ASSERT_EQ(check_ends_cleanly(kBin + "/powerinfer " + s.command("")), 0) << s.command("");
    for (const Flag& f : s.flags) {
      for (const std::string& v : values(f.kind)) {
        check_ends_cleanly(kBin + "/powerinfer " + s.command(f.name) + " " + f.name + " " + v);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EverySubcommand, FlagSweep,
                         ::testing::Values("run", "run-sim", "batched", "batched-bench", "bench",
                                           "perplexity", "synth", "calibrate", "embed",
                                           "quantize", "inspect"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// The two crashes that started this sweep, with the messages they now give.
TEST(FlagSweep, HugeContextAndThreadCountAreRefusedByName) {
  const std::string run = kBin + "/powerinfer run -m " + tiny_model() + " -p 'the' -n 2 ";
  auto c = run_command(run + "-c 99999999999");
  EXPECT_EQ(c.exit_code, 1) << c.output;
  EXPECT_NE(c.output.find("context size 99999999999"), std::string::npos) << c.output;
  auto t = run_command(run + "-t 5000");
  EXPECT_EQ(t.exit_code, 1) << t.output;
  EXPECT_NE(t.output.find("-t 5000"), std::string::npos) << t.output;
  auto w = run_command(run + "-t $(($(nproc) + 1))");
  EXPECT_EQ(w.exit_code, 0) << w.output;
  EXPECT_NE(w.output.find("more threads than"), std::string::npos) << w.output;
}

}  // namespace
