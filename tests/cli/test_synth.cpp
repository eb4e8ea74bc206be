// Tests for `powerinfer synth` on tiny shapes: the files are valid (magic, tensors, shapes,
// types, metadata), deterministic for any thread count, and their activations behave as
// requested: measured on token embeddings fed through layer 0's FFN input norm and key
// matrix (attention ignored), the mean activity, the share of the hottest neurons and the
// predictor's recall at the file's threshold match the flags.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cli/run_command.h"
#include "gguf/reader.h"
#include "tensor/quant.h"
#include "model/model.h"
#include "model/moe_ffn.h"
#include "runtime/context.h"

namespace {

using pi::testing::run_command;
namespace gguf = pi::gguf;

const std::string kBin = PI_BIN_DIR;

std::string tmp(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("pi_synth_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

void synth(const std::string& args) {
  auto r = run_command(kBin + "/powerinfer synth --no-progress " + args);
  ASSERT_EQ(r.exit_code, 0) << args << "\n" << r.output;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A whole tensor dequantized to f32, row-major [rows, cols].
std::vector<float> load(const gguf::File& f, const std::string& name, int64_t* rows = nullptr,
                        int64_t* cols = nullptr) {
  auto v = f.tensor(name);
  EXPECT_TRUE(v.ok()) << name;
  if (!v.ok()) return {};
  const int64_t r = v->shape().rows(), c = v->shape().cols();
  const size_t rb = pi::row_bytes(v->type(), c);
  std::vector<float> out(static_cast<size_t>(r * c));
  for (int64_t i = 0; i < r; ++i) {
    EXPECT_TRUE(pi::dequantize_row(v->type(), v->data + static_cast<size_t>(i) * rb,
                                   out.data() + static_cast<size_t>(i * c), c)
                    .ok());
  }
  if (rows) *rows = r;
  if (cols) *cols = c;
  return out;
}

float dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return static_cast<float>(s);
}

struct Stats {
  double activity = 0;       // mean fraction of neurons firing per token
  double top_share = 0;      // share of activations on the most frequent 20% of neurons
  double recall = -1;        // fraction of firing neurons the predictor marks (PWRI only)
  double predicted = 0;      // mean fraction of neurons the predictor marks
  std::vector<double> freq;  // measured per-neuron frequency
};

// Feeds `n_tokens` distinct random token embeddings through layer 0's FFN input: the FFN
// norm and the key matrix (ffn_gate; also ffn_up for bamboo; ffn_up with a layer norm for
// falcon), and through the predictor.
Stats measure(const gguf::File& f, int n_tokens) {
  const std::string arch = *f.get_string("general.architecture");
  const bool falcon = arch == "falcon", bamboo = arch == "bamboo";
  int64_t n_vocab = 0, n = 0, m = 0, r = 0;
  auto emb = load(f, "token_embd.weight", &n_vocab, &n);
  const std::string norm =
      falcon ? (f.find_tensor("blk.0.attn_norm_2.weight") ? "blk.0.attn_norm_2" : "blk.0.attn_norm")
             : "blk.0.ffn_norm";
  auto nw = load(f, norm + ".weight");
  auto nb = falcon ? load(f, norm + ".bias") : std::vector<float>(static_cast<size_t>(n), 0.0f);
  auto key = load(f, falcon ? "blk.0.ffn_up.weight" : "blk.0.ffn_gate.weight", &m);
  auto up = bamboo ? load(f, "blk.0.ffn_up.weight") : std::vector<float>();
  std::vector<float> fc1, fc2;
  if (f.is_powerinfer()) {
    fc1 = load(f, "blk.0.fc1.weight", &r);
    fc2 = load(f, "blk.0.fc2.weight");
  }
  const float threshold = static_cast<float>(f.get_number_or("powerinfer.sparse_threshold", 0));

  std::vector<int> ids(static_cast<size_t>(n_vocab));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(12345));
  ids.resize(static_cast<size_t>(std::min<int64_t>(n_tokens, n_vocab)));

  Stats st;
  st.freq.assign(static_cast<size_t>(m), 0.0);
  int64_t fired = 0, caught = 0, marked = 0;
  std::vector<float> x(static_cast<size_t>(n)), hid(static_cast<size_t>(r));
  for (int id : ids) {
    const float* h = emb.data() + static_cast<size_t>(id) * static_cast<size_t>(n);
    double mean = 0, sq = 0;
    for (int64_t j = 0; j < n; ++j) mean += h[j];
    mean = falcon ? mean / static_cast<double>(n) : 0.0;
    for (int64_t j = 0; j < n; ++j) sq += (h[j] - mean) * (h[j] - mean);
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(n) + 1e-5);
    for (int64_t j = 0; j < n; ++j) {
      x[static_cast<size_t>(j)] =
          static_cast<float>((h[j] - mean) * inv) * nw[static_cast<size_t>(j)] +
          nb[static_cast<size_t>(j)];
    }
    for (int64_t k = 0; k < r; ++k)
      hid[static_cast<size_t>(k)] = std::max(0.0f, dot(&fc1[static_cast<size_t>(k * n)], h, n));
    for (int64_t i = 0; i < m; ++i) {
      const bool pred = r > 0 && dot(&fc2[static_cast<size_t>(i * r)], hid.data(), r) >= threshold;
      marked += pred;
      bool on = dot(&key[static_cast<size_t>(i * n)], x.data(), n) > 0;
      if (bamboo) on = on && dot(&up[static_cast<size_t>(i * n)], x.data(), n) > 0;
      if (!on) continue;
      st.freq[static_cast<size_t>(i)] += 1;
      ++fired;
      caught += pred;
    }
  }
  const double tokens = static_cast<double>(ids.size());
  for (double& q : st.freq) q /= tokens;
  st.activity = static_cast<double>(fired) / (tokens * static_cast<double>(m));
  std::vector<double> sorted = st.freq;
  std::sort(sorted.rbegin(), sorted.rend());
  const size_t top = static_cast<size_t>(std::llround(0.2 * static_cast<double>(m)));
  double all = std::accumulate(sorted.begin(), sorted.end(), 0.0);
  st.top_share =
      std::accumulate(sorted.begin(), sorted.begin() + static_cast<long>(top), 0.0) / all;
  if (r > 0) st.recall = static_cast<double>(caught) / static_cast<double>(fired);
  st.predicted = static_cast<double>(marked) / (tokens * static_cast<double>(m));
  std::printf("%s: activity %.4f, top-20%% share %.4f, recall %.4f, predicted %.4f\n", arch.c_str(),
              st.activity, st.top_share, st.recall, st.predicted);
  return st;
}

// A 1-D float32 .npy file.
std::vector<float> read_npy(const std::string& path) {
  std::string b = read_bytes(path);
  EXPECT_GE(b.size(), 10u);
  if (b.size() < 10) return {};
  EXPECT_EQ(b.substr(0, 6), "\x93NUMPY");
  size_t hlen = static_cast<unsigned char>(b[8]) |
                (static_cast<size_t>(static_cast<unsigned char>(b[9])) << 8);
  std::string header = b.substr(10, hlen);
  EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos) << header;
  EXPECT_EQ((10 + hlen) % 64, 0u);
  std::vector<float> v((b.size() - 10 - hlen) / 4);
  std::memcpy(v.data(), b.data() + 10 + hlen, v.size() * 4);
  EXPECT_NE(header.find("'shape': (" + std::to_string(v.size()) + ",)"), std::string::npos)
      << header;
  return v;
}

TEST(CliSynth, PowerInferFileIsValid) {
  const std::string p = tmp("tiny_pwri.gguf");
  synth("-o " + p + " --pwri --type q4_0 --seed 7");
  auto f = gguf::File::open(p);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_TRUE(f->is_powerinfer());
  EXPECT_EQ(read_bytes(p).substr(0, 4), "PWRI");
  EXPECT_EQ(*f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_string("general.name")->rfind("synthetic", 0), 0u);
  EXPECT_EQ(*f->get_int("llama.embedding_length"), 128);
  EXPECT_EQ(*f->get_int("llama.feed_forward_length"), 512);
  EXPECT_EQ(*f->get_int("llama.block_count"), 2);
  EXPECT_EQ(*f->get_int("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(*f->get_int("general.file_type"), 2);
  EXPECT_EQ(*f->get_string("llama.feed_forward_activation"), "relu");
  EXPECT_EQ(*f->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(*f->get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(*f->get_int("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_LT(*f->get_number("powerinfer.sparse_threshold"), 0.0);
  const auto* tokens = f->find("tokenizer.ggml.tokens")->as_array();
  const auto* types = f->find("tokenizer.ggml.token_type")->as_array();
  ASSERT_EQ(tokens->items.size(), 512u);
  EXPECT_EQ(*tokens->items[1].as_string(), "<s>");
  EXPECT_EQ(*tokens->items[3].as_string(), "<0x00>");
  EXPECT_EQ(*tokens->items[258].as_string(), "<0xFF>");
  EXPECT_EQ(types->items[3].as_int(), 6);
  EXPECT_EQ(f->find("tokenizer.ggml.scores")->as_array()->items.size(), 512u);

  struct Want {
    std::string name;
    pi::Shape shape;
    pi::DType type;
  };
  const std::vector<Want> want = {
      {"token_embd.weight", {512, 128}, pi::DType::Q4_0},
      {"output_norm.weight", {128}, pi::DType::F32},
      {"output.weight", {512, 128}, pi::DType::Q4_0},
      {"blk.1.attn_norm.weight", {128}, pi::DType::F32},
      {"blk.1.attn_q.weight", {128, 128}, pi::DType::Q4_0},
      {"blk.1.attn_k.weight", {128, 128}, pi::DType::Q4_0},
      {"blk.1.attn_v.weight", {128, 128}, pi::DType::Q4_0},
      {"blk.1.attn_output.weight", {128, 128}, pi::DType::Q4_0},
      {"blk.1.ffn_norm.weight", {128}, pi::DType::F32},
      {"blk.1.ffn_gate.weight", {512, 128}, pi::DType::Q4_0},
      {"blk.1.ffn_up.weight", {512, 128}, pi::DType::Q4_0},
      {"blk.1.ffn_down_t.weight", {512, 128}, pi::DType::Q4_0},
      {"blk.1.fc1.weight", {64, 128}, pi::DType::Q4_0},
      {"blk.1.fc2.weight", {512, 64}, pi::DType::Q4_0},
  };
  for (const Want& w : want) {
    const auto* t = f->find_tensor(w.name);
    ASSERT_NE(t, nullptr) << w.name;
    EXPECT_EQ(t->shape, w.shape) << w.name << " " << t->shape.str();
    EXPECT_EQ(t->type, w.type) << w.name;
  }
  EXPECT_EQ(f->tensors().size(), 3u + 2u * 11u);
  EXPECT_EQ(f->find_tensor("blk.0.ffn_down.weight"), nullptr);
}

TEST(CliSynth, DenseFileSharesWeightsWithPowerInferFile) {
  const std::string d = tmp("dense.gguf"), p = tmp("sparse.gguf");
  synth("-o " + d + " --type f32 --seed 3 --layers 1");
  synth("-o " + p + " --type f32 --seed 3 --layers 1 --pwri");
  auto fd = gguf::File::open(d);
  auto fp = gguf::File::open(p);
  ASSERT_TRUE(fd.ok() && fp.ok());
  EXPECT_FALSE(fd->is_powerinfer());
  EXPECT_EQ(read_bytes(d).substr(0, 4), "GGUF");
  EXPECT_EQ(fd->find_tensor("blk.0.fc1.weight"), nullptr);
  EXPECT_EQ(fd->find("powerinfer.sparse_threshold"), nullptr);
  ASSERT_NE(fd->find_tensor("blk.0.ffn_down.weight"), nullptr);
  EXPECT_EQ(fd->find_tensor("blk.0.ffn_down.weight")->shape, (pi::Shape{128, 512}));
  EXPECT_EQ(load(*fd, "blk.0.ffn_gate.weight"), load(*fp, "blk.0.ffn_gate.weight"));
  auto down = load(*fd, "blk.0.ffn_down.weight");
  auto down_t = load(*fp, "blk.0.ffn_down_t.weight");
  bool transposed = true;
  for (int e = 0; e < 128; ++e)
    for (int i = 0; i < 512; ++i)
      transposed = transposed && down[e * 512 + i] == down_t[i * 128 + e];
  EXPECT_TRUE(transposed);
  // The constant block of the residual stream is never written to.
  for (int e = 0; e < 32; ++e) EXPECT_EQ(down_t[7 * 128 + e], 0.0f);
}

TEST(CliSynth, SameSeedSameBytesForAnyThreadCount) {
  const std::string a = tmp("t1.gguf"), b = tmp("t2.gguf"), c = tmp("t3.gguf"), d = tmp("s2.gguf");
  const std::string args = " --pwri --type q4_0 --seed 11 --ff 1024";
  synth("-o " + a + args + " -t 1");
  synth("-o " + b + args + " -t 2");
  synth("-o " + c + args + " -t 3");
  synth("-o " + d + " --pwri --type q4_0 --seed 12 --ff 1024 -t 2");
  const std::string ba = read_bytes(a);
  ASSERT_GT(ba.size(), 100000u);
  EXPECT_TRUE(ba == read_bytes(b));
  EXPECT_TRUE(ba == read_bytes(c));
  EXPECT_FALSE(ba == read_bytes(d));
}

TEST(CliSynth, ActivationsFollowTheRequestedPowerLaw) {
  const std::string p = tmp("stats.gguf"), dir = tmp("act");
  synth("-o " + p + " --pwri --type q4_0 --seed 5 --ff 1024 --vocab 1024 --activation-dir " + dir);
  auto f = gguf::File::open(p);
  ASSERT_TRUE(f.ok()) << f.error().message;
  Stats st = measure(*f, 512);
  EXPECT_NEAR(st.activity, 0.10, 0.015);
  EXPECT_NEAR(st.top_share, 0.80, 0.05);
  EXPECT_GE(st.recall, 0.9);

  // The statistics files: one per layer, n_ff expected frequencies with the requested mean,
  // which the measured frequencies follow.
  auto p0 = read_npy(dir + "/activation_0.npy");
  ASSERT_EQ(p0.size(), 1024u);
  EXPECT_TRUE(std::filesystem::exists(dir + "/activation_1.npy"));
  EXPECT_NEAR(std::accumulate(p0.begin(), p0.end(), 0.0) / 1024.0, 0.10, 1e-3);
  double err = 0;
  for (size_t i = 0; i < p0.size(); ++i) err += std::abs(p0[i] - st.freq[i]);
  EXPECT_LT(err / 1024.0, 0.02);
}

TEST(CliSynth, OtherSettingsAndArchitectures) {
  const std::string p = tmp("sparse5.gguf");
  synth("-o " + p +
        " --pwri --type q8_0 --seed 9 --ff 1024 --vocab 1024 --activity 0.05 "
        "--hot-fraction 0.2 --hot-share 0.7");
  auto f = gguf::File::open(p);
  ASSERT_TRUE(f.ok());
  Stats st = measure(*f, 512);
  EXPECT_NEAR(st.activity, 0.05, 0.01);
  EXPECT_NEAR(st.top_share, 0.70, 0.05);
  EXPECT_GE(st.recall, 0.9);

  for (const char* arch : {"bamboo", "falcon"}) {
    const std::string a = tmp(std::string(arch) + ".gguf");
    const std::string type = std::string(arch) == "bamboo" ? "f16" : "q4_0";
    synth("-o " + a + " --arch " + arch + " --pwri --type " + type +
          " --seed 2 --ff 1024 --vocab 1024 --heads 4 --kv-heads 2");
    auto fa = gguf::File::open(a);
    ASSERT_TRUE(fa.ok()) << fa.error().message;
    EXPECT_EQ(*fa->get_string("general.architecture"), arch);
    EXPECT_EQ(*fa->get_string(std::string(arch) + ".feed_forward_activation"), "relu");
    EXPECT_EQ(*fa->get_int(std::string(arch) + ".attention.head_count_kv"), 2);
    if (std::string(arch) == "falcon") {
      EXPECT_NE(fa->find("falcon.attention.layer_norm_epsilon"), nullptr);
      EXPECT_EQ(fa->find_tensor("blk.0.ffn_gate.weight"), nullptr);
      EXPECT_EQ(fa->find_tensor("blk.0.attn_qkv.weight")->shape, (pi::Shape{256, 128}));
      EXPECT_NE(fa->find_tensor("blk.0.attn_norm_2.bias"), nullptr);
    } else {
      EXPECT_EQ(fa->find_tensor("blk.0.attn_k.weight")->shape, (pi::Shape{64, 128}));
    }
    Stats sa = measure(*fa, 512);
    EXPECT_NEAR(sa.activity, 0.10, 0.015) << arch;
    EXPECT_NEAR(sa.top_share, 0.80, 0.05) << arch;
    EXPECT_GE(sa.recall, 0.9) << arch;
  }
}

// Mixture-of-experts shapes: the qwen3moe and Mixtral (llama with experts) layouts the loader
// reads, the router in f32, and a file that runs.
TEST(CliSynth, MixtureOfExpertsLayouts) {
  const std::string q = tmp("moe.gguf");
  synth("-o " + q + " --preset tiny-moe --type q4_0 --head-dim 64 --experts 16 --experts-used 4 --expert-ff 96");
  auto f = gguf::File::open(q);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(*f->get_string("general.architecture"), "qwen3moe");
  EXPECT_EQ(*f->get_int("qwen3moe.expert_count"), 16);
  EXPECT_EQ(*f->get_int("qwen3moe.expert_used_count"), 4);
  EXPECT_EQ(*f->get_int("qwen3moe.expert_feed_forward_length"), 96);
  EXPECT_EQ(*f->get_int("qwen3moe.attention.key_length"), 64);
  EXPECT_EQ(f->find_tensor("blk.1.attn_q.weight")->shape, (pi::Shape{4 * 64, 128}));
  EXPECT_EQ(f->find_tensor("blk.1.attn_k_norm.weight")->shape, (pi::Shape{64}));
  EXPECT_EQ(f->find_tensor("blk.1.ffn_gate_inp.weight")->type, pi::DType::F32);
  EXPECT_EQ(f->find_tensor("blk.1.ffn_up_exps.weight")->shape, (pi::Shape{16, 96, 128}));
  EXPECT_EQ(f->find_tensor("blk.1.ffn_down_exps.weight")->shape, (pi::Shape{16, 128, 96}));
  EXPECT_EQ(f->find_tensor("blk.1.ffn_up.weight"), nullptr);
  auto r = run_command(kBin + "/powerinfer run -m " + q + " -p \"a b\" -n 4 -t 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;

  const std::string m = tmp("mixtral.gguf");
  synth("-o " + m + " --preset mixtral-8x7b --layers 1 --embd 128 --heads 4 --kv-heads 2 --vocab 512 "
        "--expert-ff 64 --type q8_0");
  auto fm = gguf::File::open(m);
  ASSERT_TRUE(fm.ok()) << fm.error().message;
  EXPECT_EQ(*fm->get_string("general.architecture"), "llama");
  EXPECT_EQ(*fm->get_int("llama.expert_count"), 8);
  EXPECT_EQ(*fm->get_int("llama.feed_forward_length"), 64);
  EXPECT_EQ(fm->find("llama.expert_feed_forward_length"), nullptr);
  r = run_command(kBin + "/powerinfer run -m " + m + " -p a -n 4 -t 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;

  r = run_command(kBin + "/powerinfer synth -o " + tmp("x.gguf") + " --preset tiny-moe --experts-used 9");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--experts-used 9 must lie in [1, --experts 8]"), std::string::npos) << r.output;
  r = run_command(kBin + "/powerinfer synth -o " + tmp("x.gguf") + " --preset tiny-moe --pwri");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("cannot be a PowerInfer file"), std::string::npos) << r.output;
}

TEST(CliSynth, SmallThinkerExpertsAreSparseAsAsked) {
  // ReGLU experts whose gates fire on --activity of the tokens routed to them: the engine's
  // sparse expert path computes about that share of the experts' rows.
  const std::string p = tmp("st.gguf");
  synth("-o " + p + " --preset smallthinker-21b-a3b --layers 4 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 "
        "--vocab 512 --experts 16 --experts-used 4 --expert-ff 128 --swa 8 --activity 0.1 --transpose-down "
        "--type q8_0");
  auto f = gguf::File::open(p);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(*f->get_string("general.architecture"), "smallthinker");
  EXPECT_EQ(*f->get_int("smallthinker.expert_gating_func"), 2);
  EXPECT_EQ(*f->get_int("smallthinker.attention.sliding_window"), 8);
  EXPECT_EQ(*f->get_int("smallthinker.feed_forward_length"), 128);
  EXPECT_EQ(f->find_tensor("blk.1.attn_q_norm.weight"), nullptr);
  EXPECT_EQ(f->find_tensor("blk.1.ffn_down_exps_t.weight")->shape, (pi::Shape{16, 128, 256}));
  EXPECT_EQ(f->find_tensor("blk.1.ffn_down_exps.weight"), nullptr);
  auto m = pi::model::Model::load(p);
  ASSERT_TRUE(m.ok()) << m.error().message;
  pi::runtime::ContextOptions o;
  o.n_ctx = 64;
  o.n_batch = 8;
  auto ctx = pi::runtime::Context::create(**m, o);
  ASSERT_TRUE(ctx.ok()) << ctx.error().message;
  std::vector<int32_t> tokens(40);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(3 + (i * 37) % 500);
  ASSERT_TRUE((*ctx)->decode(tokens).ok());
  const pi::model::MoeFfn* moe = (*ctx)->moe_ffn();
  ASSERT_NE(moe, nullptr);
  ASSERT_GT(moe->rows_possible(), 0u);
  const double computed = static_cast<double>(moe->rows_computed()) / static_cast<double>(moe->rows_possible());
  std::printf("  expert rows computed: %.3f (activity 0.1)\n", computed);
  EXPECT_GT(computed, 0.05);
  EXPECT_LT(computed, 0.2);
  auto r = run_command(kBin + "/powerinfer run -m " + p + " -p \"a b\" -n 4 -t 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = run_command(kBin + "/powerinfer synth -o " + tmp("x.gguf") + " --preset tiny-moe --transpose-down");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--transpose-down needs --arch smallthinker"), std::string::npos) << r.output;
}

TEST(CliSynth, GptOssPresetWritesWhatTheReleasedFilesHold) {
  // gpt-oss-20b's layout on small shapes: MXFP4 experts (the rest Q8_0, llama.cpp's MXFP4_MOE
  // file type), biases and sinks, the window and YaRN keys; it loads and runs.
  const std::string p = tmp("oss.gguf");
  synth("-o " + p + " --preset gpt-oss-20b --layers 2 --embd 256 --heads 8 --kv-heads 2 --vocab 512 --experts 8 "
        "--expert-ff 128 --ctx 4096 --type q8_0");
  auto f = gguf::File::open(p);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(*f->get_string("general.architecture"), "gpt-oss");
  EXPECT_EQ(*f->get_int("general.file_type"), 38);
  EXPECT_EQ(*f->get_int("gpt-oss.attention.sliding_window"), 128);
  EXPECT_EQ(*f->get_int("gpt-oss.attention.key_length"), 64);
  EXPECT_EQ(*f->get_int("gpt-oss.expert_used_count"), 4);
  EXPECT_EQ(*f->get_string("gpt-oss.rope.scaling.type"), "yarn");
  EXPECT_EQ(f->find_tensor("blk.1.ffn_up_exps.weight")->type, pi::DType::MXFP4);
  EXPECT_EQ(f->find_tensor("blk.1.attn_q.weight")->type, pi::DType::Q8_0);
  EXPECT_EQ(f->find_tensor("blk.1.attn_q.weight")->shape, (pi::Shape{512, 256}));
  EXPECT_EQ(f->find_tensor("blk.1.attn_sinks.weight")->shape, (pi::Shape{8}));
  EXPECT_EQ(f->find_tensor("blk.1.ffn_down_exps.bias")->shape, (pi::Shape{8, 256}));
  EXPECT_NE(f->find_tensor("blk.1.post_attention_norm.weight"), nullptr);
  auto r = run_command(kBin + "/powerinfer run -m " + p + " -p \"a b\" -n 4 -t 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // The sliding-window layer (0) keeps 1 x 127 + 512 cells whatever the context; the global
  // one (1) the context: n_embd_kv 128 f16 K and V, 512 bytes a cell. --swa-full: both all.
  const auto kv_mib = [&](const std::string& flags) {
    auto k = run_command(kBin + "/powerinfer run -m " + p + " -p \"a b\" -n 1 -t 1 " + flags);
    EXPECT_EQ(k.exit_code, 0) << k.output;
    const size_t at = k.output.find("host   KV cache");  // the memory breakdown's line
    return at == std::string::npos ? -1.0 : std::atof(k.output.c_str() + k.output.find_first_of("0123456789", at));
  };
  EXPECT_NEAR(kv_mib("-c 1024"), (639 + 1024) * 512.0 / 1048576, 0.06);
  EXPECT_NEAR(kv_mib("-c 4096"), (639 + 4096) * 512.0 / 1048576, 0.06);
  EXPECT_NEAR(kv_mib("-c 4096 --swa-full"), 2 * 4096 * 512.0 / 1048576, 0.06);
  r = run_command(kBin + "/powerinfer synth -o " + tmp("x.gguf") + " --preset gpt-oss-20b --ctx 64");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("the sliding window 128 exceeds --ctx 64"), std::string::npos) << r.output;
}

TEST(CliSynth, BadFlagsFailWithClearMessage) {
  auto r = run_command(kBin + "/powerinfer synth -o " + tmp("x.gguf") + " --type q5_1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("unsupported --type 'q5_1'"), std::string::npos) << r.output;
  r = run_command(kBin + "/powerinfer synth -o " + tmp("x.gguf") + " --embd 100");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--embd 100"), std::string::npos) << r.output;
  r = run_command(kBin + "/powerinfer synth -o " + tmp("x.gguf") + " --hot-share 0.1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--hot-share"), std::string::npos) << r.output;
  r = run_command(kBin + "/powerinfer synth -o " + tmp("x.gguf") + " --preset llama3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("unknown preset 'llama3'"), std::string::npos) << r.output;
  r = run_command(kBin + "/powerinfer synth");
  EXPECT_NE(r.exit_code, 0);
}

}  // namespace
