// llama.cpp's habits: its one-dash flags (-ngl, -fa, -ctk/-ctv) are accepted or refused by
// name (-hf), --mlock, --log-disable, -e on by default, --check-tensors, numeric quantize
// type ids, perplexity's --kl-divergence-base, -f on a directory, and Ctrl-C in
// batched-bench and perplexity printing what was finished.
#include <gtest/gtest.h>

#include <cstdio>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "cli/run_command.h"
#include "model/tiny_model.h"

namespace {

using pi::testing::run_command;

const std::string kBin = PI_BIN_DIR;
const std::string kPi = kBin + "/powerinfer ";

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const std::string& model() {
  static const std::string path = [] {
    const std::string p = pi::testing::temp_path("flags.gguf");
    pi::Status s = pi::testing::write_tiny_model({}, p);
    EXPECT_TRUE(s.ok()) << s.error().message;
    return p;
  }();
  return path;
}

std::string run_base() { return kPi + "run -m " + model() + " -p 'the and' -n 6 --temp 0 --ignore-eos"; }

// stdout alone.
std::string text_of(const std::string& cmd) {
  auto r = run_command("(" + cmd + " 2>/dev/null)");
  EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  return r.output;
}

// stderr alone.
pi::testing::CommandResult stderr_of(const std::string& cmd) {
  return run_command("(" + cmd + " >/dev/null)");
}

TEST(LlamaFlags, NglIsStoredAndWarnedWithoutAGpu) {
  auto r = run_command(run_base() + " -ngl 99");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "no GPU device selected (--device sim|cuda): -ngl ignored")) << r.output;
  EXPECT_EQ(text_of(run_base() + " -ngl 99"), text_of(run_base()));
  auto zero = run_command(run_base() + " --n-gpu-layers 0");
  ASSERT_EQ(zero.exit_code, 0) << zero.output;
  EXPECT_FALSE(has(zero.output, "-ngl ignored")) << zero.output;
  auto bad = run_command(run_base() + " -ngl -5");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_TRUE(has(bad.output, "-ngl must be >= -1")) << bad.output;
  for (const char* sub : {"batched -np 2", "batched-bench -npp 4 -ntg 2 -npl 1"}) {
    auto b = run_command(kPi + sub + " -m " + model() + " -p 'the' -ngl 10 -n 2");
    if (std::string(sub).rfind("batched-bench", 0) == 0)
      b = run_command(kPi + sub + " -m " + model() + " -ngl 10");
    EXPECT_EQ(b.exit_code, 0) << sub << "\n" << b.output;
    EXPECT_TRUE(has(b.output, "-ngl ignored")) << b.output;
  }
}

// llama.cpp's --cpu-moe/-cmoe and --n-cpu-moe/-ncmoe: on the sim, every layer there but the
// experts, the same text as the CPU; without a GPU a warning; a negative count refused.
TEST(LlamaFlags, CpuMoeKeepsTheExpertsOnTheCpu) {
  pi::testing::TinySpec spec = pi::testing::tiny_variant("qwen3moe", pi::DType::Q8_0, false, 2, false, 5);
  spec.vocab = true;
  const std::string path = pi::testing::temp_path("flags_moe.gguf");
  ASSERT_TRUE(pi::testing::write_tiny_model(spec, path).ok());
  const std::string base = kPi + "run -m " + path + " -p 'the and' -n 6 --temp 0 --ignore-eos";
  const std::string cpu = text_of(base);
  for (const char* flags : {" -cmoe", " --cpu-moe", " -ncmoe 1", " --n-cpu-moe 2"}) {
    auto r = run_command(base + " --device sim -ngl 99" + flags);
    ASSERT_EQ(r.exit_code, 0) << flags << "\n" << r.output;
    EXPECT_EQ(text_of(base + " --device sim -ngl 99" + flags), cpu) << flags;
  }
  // All experts on the CPU: no FFN weights line in the device's ledger; one layer's: there is.
  EXPECT_FALSE(has(stderr_of(base + " --device sim -ngl 99 -cmoe").output, "FFN weights"));
  EXPECT_TRUE(has(stderr_of(base + " --device sim -ngl 99 -ncmoe 1").output, "FFN weights"));
  auto warn = run_command(base + " --cpu-moe");
  EXPECT_EQ(warn.exit_code, 0) << warn.output;
  EXPECT_TRUE(has(warn.output, "every expert runs on cpu already")) << warn.output;
  // bench on a hybrid MoE run: the sparse ReGLU experts of the bundled model are counted over
  // both lanes' steps (it refused to start: "did not start sparse").
  auto bench = run_command(kPi + "bench -m " + std::string(PI_SOURCE_DIR) +
                           "/models/kjv-moe/kjv-moe.gguf -p 8 -n 4 -r 1 -t 1 --device sim -ngl 99 --cpu-moe");
  EXPECT_EQ(bench.exit_code, 0) << bench.output;
  auto bad = run_command(base + " --n-cpu-moe -1");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_TRUE(has(bad.output, "--n-cpu-moe must be >= 0")) << bad.output;
  // --vram-budget places experts one by one, --expert-cache keeps some slots for recent ones:
  // the same text; with -ngl (whole layers) or a negative count, refused.
  for (const char* flags : {" --vram-budget 0.0002", " --vram-budget 0.0005 --expert-cache 1"}) {
    auto r = run_command(base + " --device sim" + flags);
    ASSERT_EQ(r.exit_code, 0) << flags << "\n" << r.output;
    EXPECT_EQ(text_of(base + " --device sim" + flags), cpu) << flags;
  }
  bad = run_command(base + " --device sim --vram-budget 0.0002 --expert-cache 1");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_TRUE(has(bad.output, "--expert-cache 1: the budget (0.2 MiB) does not hold")) << bad.output;
  bad = run_command(base + " --device sim -ngl 99 --expert-cache 1");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_TRUE(has(bad.output, "--expert-cache: -ngl places whole layers")) << bad.output;
  bad = run_command(base + " --expert-cache -2");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_TRUE(has(bad.output, "--expert-cache must be 0..65536")) << bad.output;
}

// --moe-ram GiB: the experts read from the file into a cache of what the weights besides them
// leave: the bundled MoE model gives the same text with a cache that holds a fraction of its
// experts (greedy and sampled), says how the cache did, and bench reports the disk's
// direct-read rate beside the memory probe and a row of expert reads; bad limits exit 1 in one
// line before anything runs.
TEST(LlamaFlags, MoeRamReadsExpertsOnDemandWithTheSameText) {
  const std::string moe = std::string(PI_SOURCE_DIR) + "/models/kjv-moe/kjv-moe.gguf";
  for (const char* sampling : {" --temp 0", " --temp 1 --seed 3"}) {
    const std::string base = kPi + "run -m " + moe + " -p 'In the beginning' -n 24 --ignore-eos" + sampling;
    const std::string whole = text_of(base);
    // 6 layers x 8 experts of ~0.3 MiB; 0.01 GiB holds 21 of the 48 beside ~3.5 MiB of the rest.
    EXPECT_EQ(text_of(base + " --moe-ram 0.01"), whole) << sampling;
    EXPECT_EQ(text_of(base + " --moe-ram 0.01 --no-mmap -t 1"), whole) << sampling;
  }
  auto r = stderr_of(kPi + "run -m " + moe + " -p 'In the beginning' -n 8 --temp 0 --moe-ram 0.01 --no-mmap");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "--no-mmap ignored")) << r.output;
  EXPECT_TRUE(has(r.output, "experts read on demand (21 cached")) << r.output;
  EXPECT_TRUE(has(r.output, "expert cache (--moe-ram)")) << r.output;
  auto bench = run_command("(" + kPi + "bench -m " + moe +
                           " -p 0 -n 4 -r 1 -t 1 --warmup-gen 0 --probe-mib 8 --probe-passes 1 --moe-ram 0.01 2>/dev/null)");
  ASSERT_EQ(bench.exit_code, 0) << bench.output;
  EXPECT_TRUE(has(bench.output, "Disk: kjv-moe.gguf read")) << bench.output;
  EXPECT_TRUE(has(bench.output, "4 at a time")) << bench.output;
  EXPECT_TRUE(has(bench.output, "| MiB read/token |")) << bench.output;
  // Errors: not a number, less than the weights besides the experts, fewer experts than a step
  // needs, a model without experts.
  const std::string run = kPi + "run -m " + moe + " -p 'In the beginning' -n 4 --moe-ram ";
  const std::pair<std::string, std::string> bad[] = {
      {run + "lots", "--moe-ram: 'lots' is not a positive number of GiB"},
      {run + "0.001", "the weights besides the experts take"},
      {run + "0.0045", "fewer than the 12 it needs"},
      {kPi + "run -m " + model() + " -p 'the' -n 2 --moe-ram 1", "this model has none"},
  };
  for (const auto& [cmd, message] : bad) {
    auto e = run_command(cmd);
    EXPECT_EQ(e.exit_code, 1) << cmd << "\n" << e.output;
    EXPECT_TRUE(has(e.output, message)) << cmd << "\n" << e.output;
  }
}

// llama.cpp's -ot/--override-tensor REGEX=TARGET: the first pattern that finds a tensor
// decides; CPU keeps a layer's FFN there (any model: a dense FFN too), another target is the
// device; the same text as the CPU; patterns on attention, bad regexes refused by name.
TEST(LlamaFlags, OverrideTensorKeepsFfnOnTheCpu) {
  pi::testing::TinySpec spec = pi::testing::tiny_variant("qwen3moe", pi::DType::Q8_0, false, 2, false, 5);
  spec.vocab = true;
  const std::string path = pi::testing::temp_path("flags_ot_moe.gguf");
  ASSERT_TRUE(pi::testing::write_tiny_model(spec, path).ok());
  for (const std::string& m : {path, model()}) {
    const std::string base = kPi + "run -m " + m + " -p 'the and' -n 6 --temp 0 --ignore-eos";
    const std::string cpu = text_of(base);
    for (const char* flags : {" -ot exps=CPU", " -ot 'ffn_(gate|up|down)=CPU'", " --override-tensor 'blk\\.0\\.ffn=CPU'",
                              " -ot 'blk\\.0\\.=CUDA0,ffn=CPU'"}) {
      auto r = run_command(base + " --device sim -ngl 99" + flags);
      if (m != path && std::string(flags) == " -ot exps=CPU") {  // a dense model has no experts: refused
        EXPECT_EQ(r.exit_code, 1) << flags << "\n" << r.output;
        EXPECT_TRUE(has(r.output, "-ot 'exps=CPU': the pattern finds no tensor of " + m + " (names look like blk.0.ffn_"))
            << r.output;
        continue;
      }
      ASSERT_EQ(r.exit_code, 0) << m << flags << "\n" << r.output;
      EXPECT_FALSE(has(r.output, "finds no tensor")) << flags << "\n" << r.output;
      EXPECT_EQ(text_of(base + " --device sim -ngl 99" + flags), cpu) << m << flags;
    }
    // Layer 0's FFN on the device, the others' on the CPU (first match wins), or all on the CPU.
    EXPECT_TRUE(has(stderr_of(base + " --device sim -ngl 99 -ot 'blk\\.0\\.=CUDA0' -ot ffn=CPU").output, "FFN weights"));
    EXPECT_FALSE(has(stderr_of(base + " --device sim -ngl 99 -ot ffn=CPU").output, "FFN weights"));
    // A pattern that finds only what an earlier one took: a warning, the same text.
    auto shadowed = run_command(base + " --device sim -ngl 99 -ot ffn=CPU -ot 'ffn_up=CUDA0'");
    ASSERT_EQ(shadowed.exit_code, 0) << shadowed.output;
    EXPECT_TRUE(has(shadowed.output, "-ot 'ffn_up=CUDA0' finds blk.0.ffn_up")) << shadowed.output;
  }
  const std::string base = kPi + "run -m " + path + " -p 'the' -n 2 --device sim -ngl 99";
  for (auto [flags, message] : {std::pair{" -ot attn_q=CPU", "-ot 'attn_q=CPU' finds blk.0.attn_q.weight"},
                                {" -ot '[x=CPU'", "'[x' is not a regular expression"},
                                {" -ot exps", "expected PATTERN=TARGET"},
                                {" -ot 'blk\\.0\\.ffn_gate\\.weight=CPU'", "the pattern finds no tensor of"}}) {
    auto r = run_command(base + flags);
    EXPECT_EQ(r.exit_code, 1) << flags << "\n" << r.output;
    EXPECT_TRUE(has(r.output, message)) << flags << "\n" << r.output;
  }
  auto warn = run_command(kPi + "run -m " + path + " -p 'the' -n 2 -ot exps=CPU");
  EXPECT_EQ(warn.exit_code, 0) << warn.output;
  EXPECT_TRUE(has(warn.output, "-ot ignored")) << warn.output;
}

TEST(LlamaFlags, FlashAttentionIsANoOpWithANote) {
  const std::string ref = text_of(run_base());
  // -fa must not read a file named 'a', and must not swallow the next flag.
  auto r = run_command(kPi + "run -fa -m " + model() + " -p 'the and' -n 6 --temp 0 --ignore-eos");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "note: -fa has no effect")) << r.output;
  EXPECT_EQ(text_of(run_base() + " -fa"), ref);
  EXPECT_EQ(text_of(run_base() + " -fa on"), ref);
  EXPECT_EQ(text_of(run_base() + " --flash-attn off"), ref);
  auto bad = run_command(run_base() + " --flash-attn=sometimes");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_TRUE(has(bad.output, "-fa sometimes: expected on, off or auto")) << bad.output;
}

// A model whose head_dim (128 / 4 = 32) suits the block KV types.
const std::string& model_hd32() {
  static const std::string path = [] {
    const std::string p = pi::testing::temp_path("flags_hd32.gguf");
    pi::testing::TinySpec spec;
    spec.n_embd = 128;
    pi::Status s = pi::testing::write_tiny_model(spec, p);
    EXPECT_TRUE(s.ok()) << s.error().message;
    return p;
  }();
  return path;
}

TEST(LlamaFlags, CacheTypesF16Q8Q4AreAcceptedOthersRefused) {
  EXPECT_EQ(text_of(run_base() + " -ctk f16 -ctv F16"), text_of(run_base()));
  const std::string hd32 = kPi + "run -m " + model_hd32() + " -p 'the and' -n 6 --temp 0 --ignore-eos";
  for (const char* f : {"-ctk q8_0 -ctv q8_0", "-ctk q4_0 -ctv q4_0", "--cache-type-k q8_0",
                        "-ctv Q4_0"}) {
    auto r = run_command(hd32 + " " + f);
    EXPECT_EQ(r.exit_code, 0) << f << "\n" << r.output;
  }
  // A q8_0 cache holds 34 bytes per 32 values, f16 64: the run's memory breakdown shows it.
  const auto kv_mib = [](const std::string& out) {
    const size_t at = out.rfind("KV cache");  // the breakdown's line, after the log's
    return at == std::string::npos ? -1.0 : std::stod(out.substr(at + 8));
  };
  const std::string f16_out = run_command(hd32 + " -c 256").output;
  const std::string q8_out = run_command(hd32 + " -c 256 -ctk q8_0 -ctv q8_0").output;
  const double f16 = kv_mib(f16_out), q8 = kv_mib(q8_out);
  // ...and its log names the types, as llama.cpp's does.
  EXPECT_TRUE(has(f16_out, "KV cache: keys f16, values f16")) << f16_out;
  EXPECT_TRUE(has(q8_out, "KV cache: keys q8_0, values q8_0")) << q8_out;
  EXPECT_TRUE(has(run_command(hd32 + " -c 256 -ctv q4_0").output, "keys f16, values q4_0"));
  EXPECT_GT(f16, 0.0);
  EXPECT_NEAR(q8, f16 * 34.0 / 64.0, 0.06) << f16 << " " << q8;
  for (auto [f, msg] : {std::pair{"--cache-type-k f32", "-ctk f32: unknown KV cache type (supported: f16, q8_0, q4_0)"},
                        std::pair{"-ctv q5_1", "-ctv q5_1: unknown KV cache type"}}) {
    auto r = run_command(run_base() + " " + f);
    EXPECT_EQ(r.exit_code, 1) << f << "\n" << r.output;
    EXPECT_TRUE(has(r.output, msg)) << r.output;
  }
  // The tiny model's head_dim is 16: the error names the flag and head_dim, on one line.
  auto r = run_command(run_base() + " -ctk q8_0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "-ctk/--cache-type-k q8_0 needs a head_dim that is a multiple of 32; "
                            "this model's head_dim is 16"))
      << r.output;
}

// -ctk/-ctv reach the session of every command that loads a model; a bad type is one line.
TEST(LlamaFlags, CacheTypesOnEveryCommand) {
  const std::string text = pi::testing::temp_path("flags_kvq.txt");
  {
    std::FILE* f = std::fopen(text.c_str(), "w");
    ASSERT_NE(f, nullptr);
    for (int i = 0; i < 40; ++i) std::fputs("the and of to in that he shall unto for his ", f);
    std::fclose(f);
  }
  const std::string m = " -m " + model_hd32() + " ";
  for (const std::string& sub :
       {"batched" + m + "-p 'the' -n 4 -np 2", "perplexity" + m + "-f " + text + " -c 32",
        "bench" + m + "-p 8 -n 4 -r 1", "batched-bench" + m + "-npp 8 -ntg 4 -npl 1,2 -c 64",
        "embed" + m + "-p 'the and'", "run" + m + "-p 'the' -n 4 --device sim",
        "serve" + m + "--port 0"}) {
    if (sub.rfind("serve", 0) != 0) {  // a good type: serve would run until stopped
      auto ok = run_command(kPi + sub + " -ctk q8_0 -ctv q4_0");
      EXPECT_EQ(ok.exit_code, 0) << sub << "\n" << ok.output;
    }
    auto bad = run_command(kPi + sub + " -ctv q3_k");
    EXPECT_EQ(bad.exit_code, 1) << sub << "\n" << bad.output;
    size_t lines = 0;
    for (size_t at = bad.output.find("-ctv q3_k: unknown KV cache type"); at != std::string::npos;
         at = bad.output.find("-ctv q3_k: unknown KV cache type", at + 1))
      ++lines;
    EXPECT_EQ(lines, 1u) << sub << "\n" << bad.output;
  }
}

TEST(LlamaFlags, MlockAndLogDisable) {
  auto r = run_command(run_base() + " --mlock");
  ASSERT_EQ(r.exit_code, 0) << r.output;  // a failed lock is only a warning
  EXPECT_EQ(text_of(run_base() + " --mlock"), text_of(run_base()));

  auto quiet = stderr_of(run_base() + " --log-disable");
  EXPECT_EQ(quiet.exit_code, 0);
  EXPECT_EQ(quiet.output, "");  // nothing on stderr
  auto loud = stderr_of(run_base());
  EXPECT_TRUE(has(loud.output, "load time")) << loud.output;
  // Errors still show.
  auto e = run_command(run_base() + " --log-disable -c -5");
  EXPECT_EQ(e.exit_code, 1);
  EXPECT_TRUE(has(e.output, "-c must be >= 0")) << e.output;
}

TEST(LlamaFlags, EscapesAreProcessedByDefault) {
  const std::string m = "-m " + model() + " -n 0 ";
  EXPECT_EQ(text_of(kPi + "run " + m + "-p 'a\\nb'").rfind("a\nb", 0), 0u);
  EXPECT_EQ(text_of(kPi + "run " + m + "-p 'a\\nb' --no-escape").rfind("a\\nb", 0), 0u);
  EXPECT_EQ(text_of(kPi + "run " + m + "-p 'a\\nb' -e").rfind("a\nb", 0), 0u);
}

TEST(LlamaFlags, UnknownLlamaCppFlagsAreRefusedByName) {
  const struct {
    const char* args;
    const char* message;
  } cases[] = {
      {"run -hf TheBloke/x", "-hf: llama.cpp's flag to download a model from Hugging Face is not "
                             "supported"},
      {"run -m x -sm row", "-sm: llama.cpp's flag to split the model across GPUs"},
      {"perplexity -hfr a/b", "-hfr: llama.cpp's flag"},
      {"run -m x -nocnv", "-nocnv: unknown option"},
      {"-hf a/b", "-hf: llama.cpp's flag"},
  };
  for (const auto& c : cases) {
    auto r = run_command(kPi + c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args << "\n" << r.output;
    EXPECT_TRUE(has(r.output, c.message)) << c.args << "\n" << r.output;
  }
  // A prompt that looks like a flag is still a prompt.
  EXPECT_EQ(text_of(kPi + "run -m " + model() + " -n 0 -p -hf").rfind("-hf", 0), 0u);
}

TEST(LlamaFlags, CheckTensorsScansEveryWeight) {
  pi::testing::TinySpec s;
  s.n_vocab = 1100;  // token_embd [1100, 64]: not among the always-checked small tensors
  s.poison = {{"token_embd.weight", std::numeric_limits<float>::quiet_NaN()}};
  const std::string path = pi::testing::temp_path("nan_embd_cli.gguf");
  ASSERT_TRUE(pi::testing::write_tiny_model(s, path).ok());
  const std::string cmd = kPi + "run -m " + path + " -p 'the' -n 2";
  EXPECT_EQ(run_command(cmd).exit_code, 0);
  auto r = run_command(cmd + " --check-tensors");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "tensor 'token_embd.weight' has a non-finite value (nan)")) << r.output;
  EXPECT_EQ(run_command(kPi + "run -m " + model() + " -p 'the' -n 2 --check-tensors").exit_code, 0);
}

TEST(LlamaFlags, DirectoryAsTextFileIsAnError) {
  const std::string dir = std::filesystem::temp_directory_path().string();
  auto r = run_command(kPi + "run -m " + model() + " -f " + dir);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "-f names a directory")) << r.output;
  auto p = run_command(kPi + "perplexity -m " + model() + " -f " + dir);
  EXPECT_EQ(p.exit_code, 1) << p.output;
  EXPECT_TRUE(has(p.output, "-f names a directory")) << p.output;
}

TEST(LlamaFlags, QuantizeTakesLlamaCppTypeIds) {
  const std::string out = pi::testing::temp_path("q7.gguf");
  auto r = run_command(kPi + "quantize " + model() + " " + out + " 7");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto i = run_command(kPi + "inspect " + out);
  EXPECT_TRUE(has(i.output, "q8_0") || has(i.output, "Q8_0")) << i.output;
  auto upper = run_command(kPi + "quantize " + model() + " " + out + " Q4_0");
  EXPECT_EQ(upper.exit_code, 0) << upper.output;
  auto iq = run_command(kPi + "quantize " + model() + " " + out + " 19");
  EXPECT_EQ(iq.exit_code, 1);
  EXPECT_TRUE(has(iq.output, "type id 19 is llama.cpp's iq2_xxs")) << iq.output;
  auto none = run_command(kPi + "quantize " + model() + " " + out + " 99");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_TRUE(has(none.output, "99 is not one of llama.cpp's file-type ids")) << none.output;
}

std::string long_text(const std::string& name, int words) {
  const std::string p = pi::testing::temp_path(name);
  std::ofstream out(p);
  const char* w[] = {"the", "and", "in", "a", "the", "an", "he"};
  for (int i = 0; i < words; ++i) out << w[(i * 7 + i / 3) % 7] << ' ';
  return p;
}

TEST(LlamaFlags, KlDivergenceBaseIsAnAlias) {
  const std::string text = long_text("kl.txt", 400);
  const std::string base = pi::testing::temp_path("kl.bin");
  const std::string pp = kPi + "perplexity -m " + model() + " -f " + text + " -c 32 ";
  auto save = run_command(pp + "--kl-divergence-base " + base);
  ASSERT_EQ(save.exit_code, 0) << save.output;
  EXPECT_TRUE(has(save.output, "saved the base log-probabilities")) << save.output;
  auto cmp = run_command(pp + "--kl-divergence-base " + base + " --kl-divergence");
  ASSERT_EQ(cmp.exit_code, 0) << cmp.output;
  EXPECT_TRUE(has(cmp.output, "KL divergence against")) << cmp.output;
  auto lone = run_command(pp + "--kl-divergence");
  EXPECT_EQ(lone.exit_code, 1);
  EXPECT_TRUE(has(lone.output, "--kl-divergence needs --kl-divergence-base")) << lone.output;
}

// Starts `cmd` in the background, waits until its stderr shows `ready`, sends SIGINT and
// returns the exit code and both outputs.
pi::testing::CommandResult interrupt_when(const std::string& cmd, const std::string& ready,
                                          const std::string& name) {
  const std::string err = pi::testing::temp_path(name + ".err");
  const std::string out = pi::testing::temp_path(name + ".out");
  const std::string script = "(" + cmd + " >" + out + " 2>" + err + " & pid=$!; n=0; " +
                             "until grep -q '" + ready + "' " + err +
                             " || [ $n -ge 600 ]; do sleep 0.05; n=$((n+1)); done; " +
                             "kill -INT $pid; wait $pid; echo \"rc=$?\"; cat " + out + " " + err +
                             ")";
  return run_command(script);
}

TEST(LlamaFlags, InterruptedBatchedBenchPrintsTheFinishedCells) {
  std::string npl = "1";
  for (int i = 0; i < 300; ++i) npl += ",2";
  auto r = interrupt_when(kPi + "batched-bench -m " + model() + " -npp 32 -ntg 128 -npl " + npl,
                          "PL 1:", "bb_int");
  EXPECT_TRUE(has(r.output, "rc=130")) << r.output;
  EXPECT_TRUE(has(r.output, "[interrupted: ")) << r.output;
  EXPECT_TRUE(has(r.output, "|    32 |    128 |    1 |")) << r.output;  // the first row
}

TEST(LlamaFlags, InterruptedPerplexityPrintsTheEstimateSoFar) {
  const std::string text = long_text("ppl_int.txt", 200000);
  auto r = interrupt_when(kPi + "perplexity -m " + model() + " -f " + text + " -c 64",
                          "s per chunk", "ppl_int");
  EXPECT_TRUE(has(r.output, "rc=130")) << r.output;
  EXPECT_TRUE(has(r.output, "[interrupted after ")) << r.output;
  EXPECT_TRUE(has(r.output, "Final estimate: PPL = ")) << r.output;
}

}  // namespace
