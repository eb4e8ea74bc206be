// Predictor threshold precedence (flag > LLAMA_SPARSE_PRED_THRESHOLD > the file's
// powerinfer.sparse_threshold > 0) and its error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "gguf/writer.h"
#include "model/tiny_model.h"
#include "sparse/predictor.h"

namespace {

using namespace pi;

gguf::File file_with(bool key, float value, const std::string& name) {
  gguf::Writer w(gguf::Magic::PWRI);
  EXPECT_TRUE(w.add_kv("general.architecture", gguf::Value(std::string("llama"))).ok());
  if (key) EXPECT_TRUE(w.add_kv("powerinfer.sparse_threshold", gguf::Value(value)).ok());
  const std::string path = pi::testing::temp_path(name);
  EXPECT_TRUE(w.begin(path).ok());
  EXPECT_TRUE(w.finish().ok());
  auto f = gguf::File::open(path);
  EXPECT_TRUE(f.ok()) << f.error().message;
  return std::move(*f);
}

TEST(Threshold, Precedence) {
  const gguf::File f = file_with(true, 0.25f, "thr_key.gguf");
  auto t = sparse::resolve_threshold(f, std::nullopt, nullptr);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->value, 0.25f);
  EXPECT_EQ(t->source, sparse::ThresholdSource::File);

  t = sparse::resolve_threshold(f, std::nullopt, "");  // empty variable: ignored
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->source, sparse::ThresholdSource::File);

  t = sparse::resolve_threshold(f, std::nullopt, "-1.5");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->value, -1.5f);
  EXPECT_EQ(t->source, sparse::ThresholdSource::Env);

  t = sparse::resolve_threshold(f, std::nullopt, "-inf");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->value, -std::numeric_limits<float>::infinity());

  t = sparse::resolve_threshold(f, 3.0f, "-inf");  // the flag wins over the variable
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->value, 3.0f);
  EXPECT_EQ(t->source, sparse::ThresholdSource::Flag);

  const gguf::File nokey = file_with(false, 0.0f, "thr_nokey.gguf");
  t = sparse::resolve_threshold(nokey, std::nullopt, nullptr);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->value, 0.0f);
  EXPECT_EQ(t->source, sparse::ThresholdSource::Default);
}

TEST(Threshold, BadValuesAreErrorsNamingTheSource) {
  const gguf::File f = file_with(true, 0.25f, "thr_bad.gguf");
  auto t = sparse::resolve_threshold(f, std::nullopt, "abc");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("LLAMA_SPARSE_PRED_THRESHOLD"), std::string::npos);
  EXPECT_FALSE(sparse::resolve_threshold(f, std::nullopt, "1.5x").ok());
  EXPECT_FALSE(sparse::resolve_threshold(f, std::nullopt, "nan").ok());
  EXPECT_FALSE(sparse::resolve_threshold(f, std::nanf(""), nullptr).ok());
  const gguf::File bad = file_with(true, std::nanf(""), "thr_nan.gguf");
  EXPECT_FALSE(sparse::resolve_threshold(bad, std::nullopt, nullptr).ok());
}

}  // namespace
