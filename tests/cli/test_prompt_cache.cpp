// `powerinfer run --prompt-cache FILE` on the bundled models: a run that restores its prompt
// (whole, a prefix of a longer prompt, a longer cache than the prompt, a cache that diverges
// inside the prompt) prints byte for byte what a run without the cache prints (seeded
// sampling with a repeat penalty, so the sampler's window counts too) and says how many
// tokens it restored; --prompt-cache-ro never writes; --prompt-cache-all saves the generated
// tokens too; a cache of the other bundled model is refused with exit 1, as llama.cpp does.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "cli/run_command.h"
#include "model/tiny_model.h"

namespace {

using pi::testing::run_command;

const std::string kBin = PI_BIN_DIR;
const std::string kSource = PI_SOURCE_DIR;
const std::string kRelu = kSource + "/models/kjv-relu/kjv-relu.pwri.gguf";
const std::string kSilu = kSource + "/models/kjv-silu/kjv-silu.gguf";

const std::string kPrompt =
    "In the beginning God created the heaven and the earth. And the earth was without form, "
    "and void; and darkness was upon the face of the deep.";

std::string run_line(const std::string& model, const std::string& prompt,
                     const std::string& extra) {
  return kBin + "/powerinfer run -m " + model + " -p '" + prompt +
         "' -n 24 -s 11 --temp 0.8 --repeat-penalty 1.2 -t 2 -b 16 -c 256 " + extra;
}

struct Outcome {
  int code = -1;
  std::string out, err;
};

Outcome run(const std::string& cmd) {
  const std::string err_path = pi::testing::temp_path("prompt_cache_stderr.txt");
  auto r = run_command("(" + cmd + " 2>" + err_path + ")");
  std::ifstream f(err_path);
  Outcome o;
  o.code = r.exit_code;
  o.out = r.output;
  o.err.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return o;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string fresh_cache(const std::string& name) {
  const std::string path = pi::testing::temp_path(name);
  std::filesystem::remove(path);
  return path;
}

TEST(CliPromptCache, WarmRunPrintsWhatTheColdRunPrints) {
  const std::string cache = fresh_cache("pc_same.bin");
  const Outcome cold = run(run_line(kRelu, kPrompt, ""));
  ASSERT_EQ(cold.code, 0) << cold.err;
  const Outcome first = run(run_line(kRelu, kPrompt, "--prompt-cache " + cache));
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_TRUE(contains(first.err, "does not exist yet")) << first.err;
  EXPECT_TRUE(contains(first.err, "saved")) << first.err;
  ASSERT_TRUE(std::filesystem::exists(cache));
  EXPECT_EQ(first.out, cold.out);
  const auto written = std::filesystem::last_write_time(cache);

  const Outcome second = run(run_line(kRelu, kPrompt, "--prompt-cache " + cache));
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_TRUE(contains(second.err, "restored")) << second.err;
  EXPECT_TRUE(contains(second.err, "evaluating 0")) << second.err;
  EXPECT_EQ(second.out, cold.out);
  // The file held the whole prompt: not written again (llama.cpp's rule).
  EXPECT_EQ(std::filesystem::last_write_time(cache), written);
}

TEST(CliPromptCache, PrefixesLongerAndDivergingPromptsMatchColdRuns) {
  const std::string cache = fresh_cache("pc_prefix.bin");
  ASSERT_EQ(run(run_line(kRelu, kPrompt, "--prompt-cache " + cache)).code, 0);
  const std::string longer = kPrompt + " And the Spirit of God moved upon the face";
  const std::string shorter = "In the beginning God created the heaven";
  const std::string diverging = "In the beginning God created the light, and the firmament";
  for (const std::string& p : {longer, shorter, diverging}) {
    const Outcome cold = run(run_line(kRelu, p, ""));
    ASSERT_EQ(cold.code, 0) << cold.err;
    // Read only, so that every prompt starts from the first cache.
    const Outcome warm = run(run_line(kRelu, p, "--prompt-cache " + cache + " --prompt-cache-ro"));
    ASSERT_EQ(warm.code, 0) << warm.err;
    EXPECT_TRUE(contains(warm.err, "restored")) << warm.err;
    EXPECT_FALSE(contains(warm.err, "saved")) << warm.err;
    EXPECT_EQ(warm.out, cold.out) << p;
  }
  // Writable: the longer prompt replaces the file, and a rerun restores all of it.
  ASSERT_EQ(run(run_line(kRelu, longer, "--prompt-cache " + cache)).code, 0);
  const Outcome again = run(run_line(kRelu, longer, "--prompt-cache " + cache));
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_TRUE(contains(again.err, "evaluating 0")) << again.err;
}

TEST(CliPromptCache, ReadOnlyNeverWritesAndAllSavesGeneratedTokens) {
  const std::string ro = fresh_cache("pc_ro.bin");
  const Outcome r = run(run_line(kRelu, kPrompt, "--prompt-cache " + ro + " --prompt-cache-ro"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(std::filesystem::exists(ro));

  const std::string all = fresh_cache("pc_all.bin");
  const Outcome cold = run(run_line(kRelu, kPrompt, ""));
  const Outcome first = run(run_line(kRelu, kPrompt, "--prompt-cache " + all + " --prompt-cache-all"));
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_EQ(first.out, cold.out);
  const Outcome second = run(run_line(kRelu, kPrompt, "--prompt-cache " + all + " --prompt-cache-all"));
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_EQ(second.out, cold.out);
  // The cache held the prompt and 24 generated tokens; the prompt is a prefix of them.
  EXPECT_TRUE(contains(second.err, "restored")) << second.err;
  EXPECT_TRUE(contains(second.err, "evaluating 1")) << second.err;

  const Outcome bad = run(run_line(kRelu, kPrompt, "--prompt-cache-all"));
  EXPECT_EQ(bad.code, 1);
  EXPECT_TRUE(contains(bad.err, "need --prompt-cache FILE")) << bad.err;
}

TEST(CliPromptCache, CacheOfTheOtherModelIsAnError) {
  const std::string cache = fresh_cache("pc_silu.bin");
  ASSERT_EQ(run(run_line(kSilu, kPrompt, "--prompt-cache " + cache)).code, 0);
  const auto size = std::filesystem::file_size(cache);
  const Outcome r = run(run_line(kRelu, kPrompt, "--prompt-cache " + cache));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, cache)) << r.err;
  EXPECT_TRUE(contains(r.err, "another model")) << r.err;
  EXPECT_EQ(std::filesystem::file_size(cache), size);  // left as it was

  // A truncated file is an error too, naming the file.
  std::filesystem::resize_file(cache, size / 2);
  const Outcome t = run(run_line(kSilu, kPrompt, "--prompt-cache " + cache));
  EXPECT_EQ(t.code, 1);
  EXPECT_TRUE(contains(t.err, "truncated")) << t.err;
}

}  // namespace
