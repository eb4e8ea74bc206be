#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

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

// A random PowerInfer model with F32 weights, made by the Python test tool.
std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::string make_pwri(const std::string& name, const std::string& shape_args) {
  std::string p = tmp(name);
  auto r = run_command(std::string(PI_PYTHON) + " " + PI_SOURCE_DIR +
                       "/tests/reference/make_tiny_model.py --arch llama --outtype f32 --pwri " + shape_args +
                       " --out " + p);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return p;
}

const std::string& tiny_pwri() {
  static const std::string path = make_pwri("tiny.pwri.gguf", "--embd 64 --ff 256 --seed 3");
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

// A PowerInfer model whose rows are multiples of 256 (8 layers, so that llama.cpp's
// use_more_bits picks layers 0, 3, 6, 7), for the K-quant mixes.
const std::string& wide_pwri() {
  static const std::string path =
      make_pwri("wide.pwri.gguf", "--layers 8 --embd 256 --ff 512 --heads 4 --kv-heads 4 --seed 4");
  return path;
}

double relative_rms_error(const pi::gguf::File& a, const pi::gguf::TensorInfo& ta, const pi::gguf::File& b,
                          const pi::gguf::TensorInfo& tb) {
  auto x = dequant(a, ta), y = dequant(b, tb);
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += x[i] * x[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// The per-tensor recipes (src/workflows/quant_mix.h) on an 8-layer model, the RMSE table,
// predictors and ffn_down_t kept, and values within each type's precision.
// Mixture of experts: the 3-D expert stacks are quantized row by row, the router keeps its
// type (as llama.cpp keeps it), down's stack follows ffn_down's recipe, and the result runs.
TEST(CliQuantize, ExpertStacksQuantizedRouterKept) {
  const std::string in = tmp("moe.f32.gguf");
  auto r = run_command(std::string(PI_PYTHON) + " " + PI_SOURCE_DIR +
                       "/tests/reference/make_tiny_model.py --arch qwen3moe --outtype f32 --embd 256 "
                       "--expert-ff 256 --layers 4 --seed 5 --out " + in);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* type : {"q4_0", "q4_k_m", "mxfp4_moe"}) {
    const std::string out = tmp(std::string("moe.") + type + ".gguf");
    r = run_command(kBin + "/powerinfer quantize " + in + " " + out + " " + type);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto f = pi::gguf::File::open(out);
    ASSERT_TRUE(f.ok()) << f.error().message;
    const auto type_of = [&](const std::string& name) { return f->find_tensor(name)->type; };
    for (int il = 0; il < 4; ++il) {
      const std::string b = "blk." + std::to_string(il) + ".";
      EXPECT_EQ(type_of(b + "ffn_gate_inp.weight"), pi::DType::F32) << type;
      const pi::DType up = type_of(b + "ffn_up_exps.weight"), down = type_of(b + "ffn_down_exps.weight");
      if (std::string(type) == "mxfp4_moe") {
        // llama.cpp's MXFP4_MOE: the experts MXFP4, every other matrix Q8_0.
        EXPECT_EQ(up, pi::DType::MXFP4);
        EXPECT_EQ(down, pi::DType::MXFP4);
        EXPECT_EQ(type_of(b + "ffn_gate_exps.weight"), pi::DType::MXFP4);
        for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_output"})
          EXPECT_EQ(type_of(b + m + ".weight"), pi::DType::Q8_0) << m;
        continue;
      }
      if (std::string(type) == "q4_0") {
        EXPECT_EQ(up, pi::DType::Q4_0);
        EXPECT_EQ(down, pi::DType::Q4_0);
      } else {
        EXPECT_EQ(up, pi::DType::Q4_K);
        // Q4_K_M gives ffn_down more bits where llama.cpp's use_more_bits says (of 4 layers:
        // i >= 7n/8 or (i - n/8) % 3 == 2, layers 2 and 3), the expert stacks as the dense one.
        EXPECT_EQ(down, il >= 2 ? pi::DType::Q6_K : pi::DType::Q4_K) << il;
      }
      // Exactly 8 experts (Mixtral's count): llama.cpp keeps attn_k and attn_v at Q8_0 under any
      // block target and gives attn_output Q5_K under Q2_K..Q4_K_M.
      EXPECT_EQ(type_of(b + "attn_k.weight"), pi::DType::Q8_0) << type;
      EXPECT_EQ(type_of(b + "attn_v.weight"), pi::DType::Q8_0) << type;
      EXPECT_EQ(type_of(b + "attn_q.weight"), std::string(type) == "q4_0" ? pi::DType::Q4_0 : pi::DType::Q4_K);
      EXPECT_EQ(type_of(b + "attn_output.weight"), std::string(type) == "q4_0" ? pi::DType::Q4_0 : pi::DType::Q5_K);
    }
    if (std::string(type) == "mxfp4_moe") {
      EXPECT_EQ(type_of("output.weight"), pi::DType::Q8_0);
      EXPECT_EQ(*f->get_int("general.file_type"), 38);  // llama.cpp's LLAMA_FTYPE_MOSTLY_MXFP4_MOE
    }
    r = run_command(kBin + "/powerinfer run -m " + out + " -p the -n 4 -t 2");
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  // llama.cpp's id for MXFP4_MOE (38) and its upper-case name give the same file.
  for (const char* alias : {"38", "MXFP4_MOE"}) {
    const std::string out = tmp(std::string("moe.alias") + alias + ".gguf");
    r = run_command(kBin + "/powerinfer quantize " + in + " " + out + " " + alias);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(file_bytes(out), file_bytes(tmp("moe.mxfp4_moe.gguf"))) << alias;
  }
  // Any other expert count: the dense recipe.
  const std::string in4 = tmp("moe4.f32.gguf"), out4 = tmp("moe4.q4_k_m.gguf");
  r = run_command(std::string(PI_PYTHON) + " " + PI_SOURCE_DIR +
                  "/tests/reference/make_tiny_model.py --arch qwen3moe --outtype f32 --embd 256 --experts 4 "
                  "--expert-ff 256 --layers 4 --seed 5 --out " + in4);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(kBin + "/powerinfer quantize " + in4 + " " + out4 + " q4_k_m");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto f4 = pi::gguf::File::open(out4);
  ASSERT_TRUE(f4.ok()) << f4.error().message;
  EXPECT_EQ(f4->find_tensor("blk.0.attn_k.weight")->type, pi::DType::Q4_K);
  EXPECT_EQ(f4->find_tensor("blk.0.attn_v.weight")->type, pi::DType::Q4_K);
  EXPECT_EQ(f4->find_tensor("blk.2.attn_v.weight")->type, pi::DType::Q6_K);  // use_more_bits(2 of 4)
  EXPECT_EQ(f4->find_tensor("blk.0.attn_output.weight")->type, pi::DType::Q4_K);
}

TEST(CliQuantize, KQuantMixesFollowTheRecipes) {
  using pi::DType;
  const std::string in = wide_pwri();
  struct Case {
    const char* mix;
    DType base, attn_v_more, attn_v_other, down_more, down_other, attn_out, pred;
    uint32_t file_type;
  };
  const Case cases[] = {
      {"q4_k_m", DType::Q4_K, DType::Q6_K, DType::Q4_K, DType::Q6_K, DType::Q4_K, DType::Q4_K, DType::Q4_K, 15},
      {"q5_k_m", DType::Q5_K, DType::Q6_K, DType::Q5_K, DType::Q6_K, DType::Q5_K, DType::Q5_K, DType::Q5_K, 17},
      {"q6_k", DType::Q6_K, DType::Q6_K, DType::Q6_K, DType::Q6_K, DType::Q6_K, DType::Q6_K, DType::Q6_K, 18},
      {"q2_k", DType::Q2_K, DType::Q3_K, DType::Q3_K, DType::Q3_K, DType::Q3_K, DType::Q3_K, DType::Q4_K, 10},
  };
  const std::set<int> more = {0, 3, 6, 7};  // use_more_bits(i, 8): i < 1, i >= 7, (i - 1) % 3 == 2
  for (const Case& c : cases) {
    SCOPED_TRACE(c.mix);
    const std::string out = tmp(std::string("wide.") + c.mix + ".gguf");
    auto r = run_command(kBin + "/powerinfer quantize " + in + " " + out + " " + c.mix);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("rel. rmse"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(std::string(pi::dtype_name(c.base)) + " "), std::string::npos) << r.output;
    auto a = pi::gguf::File::open(in);
    auto b = pi::gguf::File::open(out);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_TRUE(b->is_powerinfer());
    EXPECT_EQ(b->find("general.file_type")->to_string(100), std::to_string(c.file_type));
    int n_pred = 0, n_down_t = 0;
    for (const auto& ta : a->tensors()) {
      const auto* tb = b->find_tensor(ta.name);
      ASSERT_NE(tb, nullptr) << ta.name;
      if (ta.shape.rank == 1) continue;
      const std::string& n = ta.name;
      const int layer = n.starts_with("blk.") ? std::stoi(n.substr(4)) : -1;
      DType want = c.base;
      if (n == "output.weight") want = DType::Q6_K;
      if (n.ends_with("attn_v.weight")) want = more.count(layer) ? c.attn_v_more : c.attn_v_other;
      if (n.ends_with("ffn_down_t.weight")) want = more.count(layer) ? c.down_more : c.down_other;
      if (n.ends_with("attn_output.weight")) want = c.attn_out;
      if (n.ends_with("fc1.weight") || n.ends_with("fc2.weight")) {
        ++n_pred;
        // Predictor rows (fc2: the predictor's rank) that 256 does not divide fall back.
        want = ta.shape.cols() % 256 == 0 ? c.pred
               : c.pred == DType::Q4_K   ? DType::Q5_0
               : c.pred == DType::Q5_K   ? DType::Q5_1
                                          : DType::Q8_0;
      }
      n_down_t += n.ends_with("ffn_down_t.weight");
      EXPECT_EQ(tb->type, want) << n;
      const DType got = tb->type;
      const double bound = got == DType::Q2_K ? 0.45 : got == DType::Q3_K ? 0.25 : got == DType::Q4_K ? 0.12
                           : got == DType::Q5_K ? 0.06 : got == DType::Q6_K ? 0.03 : 0.15;
      EXPECT_LT(relative_rms_error(*a, ta, *b, *tb), bound) << n;
    }
    EXPECT_EQ(n_pred, 16);
    EXPECT_EQ(n_down_t, 8);
  }
}

// Rows that 256 does not divide fall back as llama.cpp does (64 columns: Q4_K -> Q5_0).
TEST(CliQuantize, KQuantMixFallsBackForShortRows) {
  const std::string in = tiny_pwri(), out = tmp("tiny.q4_k_m.gguf");
  auto r = run_command(kBin + "/powerinfer quantize " + in + " " + out + " Q4_K_M");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto b = pi::gguf::File::open(out);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->find_tensor("blk.0.ffn_gate.weight")->type, pi::DType::Q5_0);
  EXPECT_EQ(b->find_tensor("output.weight")->type, pi::DType::Q8_0);  // Q6_K -> Q8_0
  EXPECT_EQ(b->find_tensor("blk.0.ffn_down_t.weight")->type, pi::DType::Q5_0);
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
  EXPECT_NE(r.output.find("bad override"), std::string::npos) << r.output;
}

}  // namespace
