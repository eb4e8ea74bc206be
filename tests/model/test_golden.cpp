// Golden check of the bundled models: the PyTorch model that was trained saved its logits for
// a few fixed prompts (tools/train/golden.py -> models/kjv-relu/golden.json + golden_K.f32;
// golden.py --moe -> models/kjv-moe/...); our engine on the converted files must reproduce
// them, so CI needs no PyTorch.
//
// Tolerance: the bundled files store the big matrices as Q8_0, and our kernels multiply
// Q8_0 weights with 8-bit-quantized activations, so logits differ from the F32 PyTorch model
// by about 1% of the logit range. Per position we require
//   max |ours - golden| <= 3% of max |golden| (measured: kjv-relu 1.0-1.3%, kjv-moe 0.7-0.9%),
// and the arg-max to agree wherever the golden top-2 margin exceeds twice that error.
// kjv-moe (smallthinker) routes each token to its top-2 of 8 experts, a discontinuous choice:
// where the 2nd and 3rd router logits nearly tie, Q8_0 noise can pick the other expert, which
// moves this model's logits by up to 35% (median 9%, measured), so for it the check also says
// that the engine routes every token exactly as PyTorch does. Near-ties are common at this
// size, so golden.py --moe picks prompts whose routing is well separated: the same experts in
// a Q8_0 simulation of the engine, and top-2 margins >= 3x the router-logit change Q8_0 causes
// (golden.json "routing_selection"; each prompt's experts per layer and position are there).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>

#include "powerinfer/engine.h"
#include "tokenizer/tokenizer.h"

namespace {

constexpr double kTolerance = 0.03;

std::string model_dir(const std::string& name) {
  return std::string(PI_SOURCE_DIR) + "/models/" + name;
}

struct GoldenPrompt {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // [n_tokens, n_vocab]
  std::vector<int32_t> greedy;
  int64_t n_vocab = 0;
};

std::vector<GoldenPrompt> load_golden(const std::string& dir) {
  std::vector<GoldenPrompt> out;
  std::ifstream in(dir + "/golden.json");
  if (!in) return out;
  nlohmann::json j = nlohmann::json::parse(in);
  for (const auto& p : j.at("prompts")) {
    GoldenPrompt g;
    g.text = p.at("text").get<std::string>();
    g.tokens = p.at("tokens").get<std::vector<int32_t>>();
    g.n_vocab = p.at("n_vocab").get<int64_t>();
    if (p.contains("greedy")) g.greedy = p.at("greedy").get<std::vector<int32_t>>();
    std::ifstream f(dir + "/" + p.at("logits_file").get<std::string>(), std::ios::binary);
    g.logits.resize(g.tokens.size() * static_cast<size_t>(g.n_vocab));
    f.read(reinterpret_cast<char*>(g.logits.data()),
           static_cast<std::streamsize>(g.logits.size() * sizeof(float)));
    EXPECT_TRUE(f.good()) << "short golden logits file for '" << g.text << "'";
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<std::string> bundled_files(const std::string& dir,
                                       std::initializer_list<const char*> names) {
  std::vector<std::string> files;
  for (const char* name : names) {
    if (std::filesystem::exists(dir + "/" + name)) files.push_back(dir + "/" + name);
  }
  return files;
}

void check_golden(const std::string& dir, std::initializer_list<const char*> names) {
  auto golden = load_golden(dir);
  auto files = bundled_files(dir, names);
  if (golden.empty() || files.empty()) GTEST_SKIP() << "bundled model not present: " << dir;
  for (const std::string& path : files) {
    auto engine = pi::Engine::load(path);
    ASSERT_TRUE(engine.ok()) << engine.error().message;
    for (const GoldenPrompt& g : golden) {
      // The tokenizer must reproduce sentencepiece's ids for the prompt.
      auto ids = (*engine)->vocabulary()->encode(g.text, true, false);
      EXPECT_EQ(ids, g.tokens) << path << ": '" << g.text << "'";

      pi::SessionOptions o;
      o.n_ctx = 256;
      o.n_threads = 2;
      o.sparse.dense = true;  // golden logits are the dense model's
      auto s = pi::Session::create(**engine, o);
      ASSERT_TRUE(s.ok()) << s.error().message;
      double worst = 0;
      int top1_checked = 0, top1_agree = 0;
      for (size_t i = 0; i < g.tokens.size(); ++i) {
        ASSERT_TRUE((*s)->advance(g.tokens[i]).ok());
        auto ours = (*s)->logits();
        ASSERT_EQ(static_cast<int64_t>(ours.size()), g.n_vocab);
        const float* ref = g.logits.data() + i * static_cast<size_t>(g.n_vocab);
        double max_ref = 0, max_diff = 0;
        int64_t best_ref = 0, best_ours = 0;
        for (int64_t v = 0; v < g.n_vocab; ++v) {
          max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[v])));
          max_diff = std::max(max_diff, std::fabs(static_cast<double>(ours[v]) - ref[v]));
          if (ref[v] > ref[best_ref]) best_ref = v;
          if (ours[v] > ours[best_ours]) best_ours = v;
        }
        double second = -1e30;
        for (int64_t v = 0; v < g.n_vocab; ++v)
          if (v != best_ref) second = std::max(second, static_cast<double>(ref[v]));
        const double rel = max_diff / max_ref;
        worst = std::max(worst, rel);
        EXPECT_LE(rel, kTolerance) << path << " position " << i;
        if (ref[best_ref] - second > 2 * max_diff) {
          ++top1_checked;
          top1_agree += best_ref == best_ours;
        }
      }
      EXPECT_EQ(top1_agree, top1_checked) << path;
      std::printf("%s '%s': worst relative logit error %.4f, top-1 %d/%d\n",
                  std::filesystem::path(path).filename().c_str(), g.text.c_str(), worst,
                  top1_agree, top1_checked);
    }
  }
}

TEST(BundledGolden, LogitsMatchPyTorch) {
  check_golden(model_dir("kjv-relu"), {"kjv-relu.gguf", "kjv-relu.pwri.gguf"});
}

// The mixture of experts kjv-moe (smallthinker, top-2 of 8 ReGLU experts, sigmoid routing).
TEST(BundledGolden, MoeLogitsMatchPyTorch) { check_golden(model_dir("kjv-moe"), {"kjv-moe.gguf"}); }

}  // namespace
