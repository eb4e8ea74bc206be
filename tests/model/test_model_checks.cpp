// The loader's checks beyond shapes (model_checks.h), on malformed tiny models: a block
// count that disagrees with the tensors, tensors no architecture reads (a warning), a
// vocabulary that disagrees with the embedding rows, a bad norm epsilon, and NaN/Inf in
// small tensors (always) or in any weight (check_all_tensors, --check-tensors).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "model/model.h"
#include "model/tiny_model.h"

namespace {

using pi::Shape;
using pi::model::Model;
using pi::testing::temp_path;
using pi::testing::TinySpec;
using pi::testing::write_tiny_model;

std::string load_error(const TinySpec& spec, const std::string& name, bool check_all = false) {
  const std::string path = temp_path(name);
  pi::Status s = write_tiny_model(spec, path);
  if (!s.ok()) return "(not written) " + s.error().message;
  auto m = Model::load(path, pi::LoadMode::Map, check_all);
  return m.ok() ? std::string("(loaded)") : m.error().message;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(ModelChecks, BlockCountMustMatchTheBlocksInTheFile) {
  TinySpec fewer;
  fewer.block_count = 1;  // two blocks of tensors
  std::string e = load_error(fewer, "blocks_fewer.gguf");
  EXPECT_TRUE(has(e, "llama.block_count is 1 but the file has tensors for 2 blocks (e.g. 'blk.1."))
      << e;
  TinySpec more;
  more.block_count = 3;
  e = load_error(more, "blocks_more.gguf");
  EXPECT_TRUE(has(e, "llama.block_count is 3 but the file has tensors for only 2 blocks")) << e;
  TinySpec ok;
  EXPECT_EQ(load_error(ok, "blocks_ok.gguf"), "(loaded)");
}

TEST(ModelChecks, UnusedTensorsAreNamedInAWarning) {
  TinySpec s;
  s.extra = {{"blk.0.attn_q.bias", Shape{64}}, {"rope_freqs.weight", Shape{8}}};
  ::testing::internal::CaptureStderr();
  const std::string e = load_error(s, "unused.gguf");
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(e, "(loaded)");
  EXPECT_TRUE(has(log, "2 tensors the architecture does not use (ignored): "
                       "blk.0.attn_q.bias, rope_freqs.weight"))
      << log;

  // Predictors are read by the sparse layer, not the architecture: no warning.
  TinySpec clean;
  clean.pwri = true;
  clean.extra = {{"blk.0.fc1.weight", Shape{32, 64}}};
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(load_error(clean, "unused_none.gguf"), "(loaded)");
  const std::string quiet = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(has(quiet, "does not use")) << quiet;
}

TEST(ModelChecks, VocabularyMustMatchTheEmbeddingRows) {
  TinySpec s;
  s.n_vocab_tokens = 299;
  const std::string e = load_error(s, "vocab_short.gguf");
  EXPECT_TRUE(has(e, "the vocabulary (tokenizer.ggml.tokens) has 299 tokens but "
                     "token_embd.weight has 300 rows"))
      << e;
}

TEST(ModelChecks, NormEpsilonMustBeFiniteAndPositive) {
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity(), 0.0f, -1e-5f};
  for (const char* arch : {"llama", "falcon", "opt", "qwen2"}) {
    for (float eps : bad) {
      TinySpec s;
      s.arch = arch;
      s.norm_eps = eps;
      const std::string e = load_error(s, std::string("eps_") + arch + ".gguf");
      EXPECT_TRUE(has(e, "the norm epsilon must be finite and positive")) << arch << " " << e;
      EXPECT_TRUE(has(e, std::string(arch) + ".attention.layer_norm")) << e;
    }
  }
}

TEST(ModelChecks, NonFiniteNormsAndSmallTensorsAreRefusedAtLoad) {
  TinySpec s;
  s.poison = {{"blk.1.ffn_norm.weight", std::numeric_limits<float>::quiet_NaN()}};
  std::string e = load_error(s, "nan_norm.gguf");
  EXPECT_TRUE(has(e, "tensor 'blk.1.ffn_norm.weight' has a non-finite value (nan) at row 0, "
                     "column 63"))
      << e;
  s.poison = {{"output_norm.weight", -std::numeric_limits<float>::infinity()}};
  e = load_error(s, "inf_norm.gguf");
  EXPECT_TRUE(has(e, "tensor 'output_norm.weight' has a non-finite value (-inf)")) << e;
  s.poison = {{"blk.0.attn_q.weight", std::numeric_limits<float>::infinity()}};  // [64, 64]
  e = load_error(s, "inf_q.gguf");
  EXPECT_TRUE(has(e, "tensor 'blk.0.attn_q.weight' has a non-finite value (inf) at row 63"))
      << e;
}

// opt and qwen2 get the same checks: block count, unused tensors (qwen2 has no bias on the
// output projection, opt no RoPE frequencies), non-finite biases.
TEST(ModelChecks, OptAndQwen2AreCheckedLikeTheOthers) {
  TinySpec q;
  q.arch = "qwen2";
  q.block_count = 3;
  std::string e = load_error(q, "qwen2_blocks.gguf");
  EXPECT_TRUE(has(e, "qwen2.block_count is 3 but the file has tensors for only 2 blocks")) << e;

  q.block_count = -1;
  q.extra = {{"blk.0.attn_output.bias", Shape{64}}};
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(load_error(q, "qwen2_unused.gguf"), "(loaded)");
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(has(log, "1 tensor the architecture does not use (ignored): blk.0.attn_output.bias"))
      << log;

  TinySpec o;
  o.arch = "opt";
  o.pwri = true;
  o.extra = {{"rope_freqs.weight", Shape{8}}};
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(load_error(o, "opt_unused.pwri.gguf"), "(loaded)");
  log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(has(log, "1 tensor the architecture does not use (ignored): rope_freqs.weight"))
      << log;

  o.extra = {};
  o.poison = {{"blk.1.ffn_up.bias", std::numeric_limits<float>::quiet_NaN()}};
  e = load_error(o, "opt_nan_bias.pwri.gguf");
  EXPECT_TRUE(has(e, "tensor 'blk.1.ffn_up.bias' has a non-finite value (nan)")) << e;
}

TEST(ModelChecks, LargeWeightsAreScannedOnlyWhenAsked) {
  TinySpec s;
  s.vocab = false;
  s.n_vocab = 1100;  // token_embd [1100, 64]: above the always-checked size
  s.poison = {{"token_embd.weight", std::numeric_limits<float>::quiet_NaN()}};
  EXPECT_EQ(load_error(s, "nan_embd.gguf"), "(loaded)");
  const std::string e = load_error(s, "nan_embd.gguf", /*check_all=*/true);
  EXPECT_TRUE(has(e, "tensor 'token_embd.weight' has a non-finite value (nan) at row 1099"))
      << e;
}

}  // namespace
