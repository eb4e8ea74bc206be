#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "cli/run_command.h"
#include "gguf/reader.h"
#include "tensor/quant.h"

namespace {

using pi::testing::run_command;

const std::string kBin = PI_BIN_DIR;

std::string tmp(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("pi_quant_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

// A tiny random PowerInfer model with F32 weights, made by the Python test tool.
const std::string& tiny_pwri() {
  static const std::string path = [] {
    std::string p = tmp("tiny.pwri.gguf");
    auto r = run_command(std::string(PI_PYTHON) + " " + PI_SOURCE_DIR +
                         "/tests/reference/make_tiny_model.py --arch llama --outtype f32 --pwri "
                         "--embd 64 --ff 256 --seed 3 --out " + p);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return p;
  }();
  return path;
}

std::vector<float> dequant(const pi::gguf::File& f, const pi::gguf::TensorInfo& t) {
  std::vector<float> out(static_cast<size_t>(t.shape.numel()));
  const auto v = f.view(t);
  EXPECT_TRUE(pi::dequantize_row(t.type, v.data, out.data(), t.shape.numel()).ok());
  return out;
}

TEST(CliQuantize, KeepsMagicMetadataAndSmallTensors) {
  const std::string in = tiny_pwri();
  for (const char* type : {"q8_0", "q4_0", "f16"}) {
    const std::string out = tmp(std::string("tiny.") + type + ".gguf");
    auto r = run_command(kBin + "/powerinfer quantize " + in + " " + out + " " + type);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("MiB ->"), std::string::npos) << r.output;
    auto a = pi::gguf::File::open(in);
    auto b = pi::gguf::File::open(out);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_TRUE(b->is_powerinfer());
    for (const auto& kv : a->metadata()) {
      if (kv.key == "general.file_type") continue;
      const pi::gguf::Value* v = b->find(kv.key);
      ASSERT_NE(v, nullptr) << kv.key;
      EXPECT_EQ(v->to_string(1000000), kv.value.to_string(1000000)) << kv.key;
    }
    const pi::DType target = *pi::dtype_from_name(type);
    ASSERT_EQ(a->tensors().size(), b->tensors().size());
    for (const auto& ta : a->tensors()) {
      const auto* tb = b->find_tensor(ta.name);
      ASSERT_NE(tb, nullptr);
      EXPECT_EQ(tb->shape, ta.shape);
      if (ta.shape.rank == 1) {
        EXPECT_EQ(tb->type, pi::DType::F32) << ta.name;
        continue;
      }
      if (ta.name == "output.weight" && target == pi::DType::Q4_0) {
        EXPECT_TRUE(tb->type == pi::DType::Q6_K || tb->type == pi::DType::Q8_0) << ta.name;
      } else {
        EXPECT_EQ(tb->type, target) << ta.name;
      }
      // Values survive within the format's precision: relative RMS error per tensor.
      auto x = dequant(*a, ta), y = dequant(*b, *tb);
      double num = 0, den = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        num += (x[i] - y[i]) * (x[i] - y[i]);
        den += x[i] * x[i];
      }
      const double rel = std::sqrt(num / std::max(den, 1e-30));
      const double bound = target == pi::DType::Q4_0 ? 0.15 : target == pi::DType::Q8_0 ? 0.01 : 1e-3;
      EXPECT_LT(rel, bound) << ta.name << " " << type;
    }
  }
}

TEST(CliQuantize, OverridesAndRequantize) {
  const std::string in = tiny_pwri(), q8 = tmp("ov.q8.gguf"), q4 = tmp("ov.q4.gguf");
  auto r = run_command(kBin + "/powerinfer quantize " + in + " " + q8 +
                       " q8_0 --override 'blk.*.ffn_down_t.weight=f16'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto f = pi::gguf::File::open(q8);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->find_tensor("blk.0.ffn_down_t.weight")->type, pi::DType::F16);
  EXPECT_EQ(f->find_tensor("blk.0.ffn_gate.weight")->type, pi::DType::Q8_0);

  r = run_command(kBin + "/powerinfer quantize " + q8 + " " + q4 + " q4_0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--allow-requantize"), std::string::npos) << r.output;
  r = run_command(kBin + "/powerinfer quantize " + q8 + " " + q4 + " q4_0 --allow-requantize");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(CliQuantize, RefusesBadInput) {
  const std::string in = tiny_pwri();
  auto r = run_command(kBin + "/powerinfer quantize " + in + " " + tmp("x.gguf") + " q9_9");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("unknown or unsupported type 'q9_9'"), std::string::npos) << r.output;

  r = run_command(kBin + "/powerinfer quantize " + in + " " + in + " q8_0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("is the input file"), std::string::npos) << r.output;

  const std::string text = tmp("notamodel.txt");
  { std::ofstream(text) << "hello world, definitely not a model"; }
  r = run_command(kBin + "/powerinfer quantize " + text + " " + tmp("y.gguf") + " q8_0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("bad magic"), std::string::npos) << r.output;

  r = run_command(kBin + "/powerinfer quantize " + in + " " + tmp("z.gguf") + " q8_0 --override nonsense");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("bad --override"), std::string::npos) << r.output;
}

}  // namespace
