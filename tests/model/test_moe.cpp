// Mixture-of-experts pieces that need no Python: the routing (softmax top-k, renormalized,
// ties and NaN logits), qwen3moe files loading through the layer table, one-line errors for
// malformed expert files, and that a token computes only the experts it routes to.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/host_device.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "model/model.h"
#include "model/moe_ffn.h"
#include "model/tiny_model.h"
#include "runtime/context.h"

namespace {

using pi::DType;
using pi::Shape;
using pi::model::Gating;
using pi::model::route_top_k;
using pi::testing::temp_path;
using pi::testing::TinySpec;
using pi::testing::write_tiny_model;

TEST(MoeRoute, TopKOfTheSoftmaxRenormalized) {
  // Two tokens, four experts.
  const float logits[] = {1.0f, 3.0f, 2.0f, -1.0f,   // -> 1, 2
                          0.5f, 0.5f, 0.5f, 0.25f};  // ties: lower ids first -> 0, 1
  int32_t ids[4];
  float w[4];
  route_top_k(logits, 2, 4, 2, Gating::Softmax, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  const double e1 = std::exp(3.0), e2 = std::exp(2.0);
  EXPECT_NEAR(w[0], e1 / (e1 + e2), 1e-7);
  EXPECT_NEAR(w[1], e2 / (e1 + e2), 1e-7);
  EXPECT_EQ(ids[2], 0);
  EXPECT_EQ(ids[3], 1);
  EXPECT_FLOAT_EQ(w[2], 0.5f);
  EXPECT_FLOAT_EQ(w[3], 0.5f);
}

TEST(MoeRoute, SigmoidGatingNormalizesTheChosenSigmoids) {
  // SmallThinker's gating: the same top-k by logit, weights sigmoid(l) / sum of the chosen.
  const float logits[] = {-2.0f, 0.5f, 1.5f, 0.5f, 40.0f, 39.0f};  // sigmoids of 40 and 39 round to 1
  int32_t ids[3];
  float w[3];
  route_top_k(logits, 1, 4, 3, Gating::Sigmoid, ids, w);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 1);  // tie with expert 3: the lower id first
  EXPECT_EQ(ids[2], 3);
  const auto sig = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  const double sum = sig(1.5) + 2 * sig(0.5);
  EXPECT_NEAR(w[0], sig(1.5) / sum, 1e-7);
  EXPECT_NEAR(w[1], sig(0.5) / sum, 1e-7);
  EXPECT_NEAR(w[2], sig(0.5) / sum, 1e-7);
  // Softmax chooses the same experts and weighs them differently.
  int32_t soft_ids[3];
  float soft_w[3];
  route_top_k(logits, 1, 4, 3, Gating::Softmax, soft_ids, soft_w);
  EXPECT_TRUE(std::equal(ids, ids + 3, soft_ids));
  EXPECT_GT(std::abs(soft_w[0] - w[0]), 0.1f);
  // Saturated gates still rank by logit.
  route_top_k(logits + 4, 1, 2, 1, Gating::Sigmoid, ids, w);
  EXPECT_EQ(ids[0], 0);
  EXPECT_FLOAT_EQ(w[0], 1.0f);
}

TEST(MoeRoute, AllExpertsAndNonFiniteLogits) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float logits[] = {nan, 0.0f, 1.0f, -inf};
  int32_t ids[4];
  float w[4];
  route_top_k(logits, 1, 4, 4, Gating::Softmax, ids, w);
  // NaN ranks last with weight 0; -inf has probability 0 but ranks before it.
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 1);
  EXPECT_EQ(ids[2], 3);
  EXPECT_EQ(ids[3], 0);
  EXPECT_NEAR(w[0] + w[1], 1.0f, 1e-6);
  EXPECT_EQ(w[2], 0.0f);
  EXPECT_EQ(w[3], 0.0f);
  const float all_nan[] = {nan, nan};
  route_top_k(all_nan, 1, 2, 1, Gating::Softmax, ids, w);
  EXPECT_EQ(w[0], 0.0f);  // no expert has a probability: the token's FFN output is zero
}

TinySpec moe_spec() {
  TinySpec s;
  s.arch = "qwen3moe";
  s.vocab = false;
  s.wtype = DType::Q8_0;
  return s;
}

pi::Result<std::unique_ptr<pi::model::Model>> load(const TinySpec& s, const std::string& name) {
  const std::string path = temp_path(name);
  pi::Status st = write_tiny_model(s, path);
  if (!st.ok()) return st.error();
  return pi::model::Model::load(path);
}

std::string load_error(const TinySpec& s, const std::string& name) {
  auto m = load(s, name);
  return m.ok() ? std::string("(loaded)") : m.error().message;
}

TEST(MoeLoad, Qwen3MoeHparamsAndExpertViews) {
  auto m = load(moe_spec(), "moe_load.gguf");
  ASSERT_TRUE(m.ok()) << m.error().message;
  const auto& hp = (*m)->hparams();
  EXPECT_EQ(hp.arch, pi::model::Arch::Qwen3Moe);
  EXPECT_TRUE(hp.is_moe());
  EXPECT_EQ(hp.n_expert, 4);
  EXPECT_EQ(hp.n_expert_used, 2);
  EXPECT_EQ(hp.n_ff_exp, 32);
  const auto& f = (*m)->weights().layers[1].ffn;
  EXPECT_FALSE(f.up.present());
  EXPECT_EQ(f.gate_inp.rows, 4);
  EXPECT_EQ(f.gate_exps.rows, 4 * 32);
  EXPECT_EQ(f.down_exps.rows, 4 * 64);
  const pi::Matrix e2 = pi::model::expert_rows(f.down_exps, 2, hp.n_expert);
  EXPECT_EQ(e2.rows, 64);
  EXPECT_EQ(e2.cols, 32);
  EXPECT_EQ(e2.data, f.down_exps.data + 2 * 64 * f.down_exps.row_stride());
  // A token reads the router and k of the n experts (plus attention and the head).
  const uint64_t experts = f.gate_exps.nbytes() + f.up_exps.nbytes() + f.down_exps.nbytes();
  uint64_t dense = 0;
  for (const auto& L : (*m)->weights().layers) {
    dense += L.attn.q.nbytes() + L.attn.k.nbytes() + L.attn.v.nbytes() + L.attn.out.nbytes() +
             L.ffn.gate_inp.nbytes();
  }
  EXPECT_EQ((*m)->weight_bytes_per_token(), dense + 2 * experts * 2 / 4 + (*m)->weights().output.nbytes());
}

// `merged` rewritten as Mixtral's first GGUF files store experts: each "<stem>_exps.weight"
// [n, rows, cols] as n tensors "<stem>.E.weight" [rows, cols]; `drop` is left out.
void split_experts(const std::string& merged, const std::string& out, const std::string& drop = "") {
  auto f = pi::gguf::File::open(merged);
  ASSERT_TRUE(f.ok()) << f.error().message;
  pi::gguf::Writer w;
  for (const pi::gguf::KeyValue& kv : f->metadata())
    if (kv.key != "general.alignment") ASSERT_TRUE(w.add_kv(kv.key, kv.value).ok());
  struct Piece {
    std::string name;
    const std::byte* data;
    size_t bytes;
  };
  std::vector<Piece> pieces;
  const std::string suffix = "_exps.weight";
  for (const pi::gguf::TensorInfo& t : f->tensors()) {
    const std::byte* data = f->view(t).data;
    const bool stack = t.name.size() > suffix.size() && t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0;
    if (!stack) {
      ASSERT_TRUE(w.add_tensor(t.name, t.type, t.shape).ok());
      pieces.push_back({t.name, data, static_cast<size_t>(t.nbytes)});
      continue;
    }
    const int64_t n = t.shape[0];
    const size_t one = static_cast<size_t>(t.nbytes) / static_cast<size_t>(n);
    for (int64_t e = 0; e < n; ++e) {
      const std::string name = t.name.substr(0, t.name.size() - suffix.size()) + "." + std::to_string(e) + ".weight";
      if (name == drop) continue;
      ASSERT_TRUE(w.add_tensor(name, t.type, Shape{t.shape[1], t.shape[2]}).ok());
      pieces.push_back({name, data + static_cast<size_t>(e) * one, one});
    }
  }
  ASSERT_TRUE(w.begin(out).ok());
  for (const Piece& p : pieces) ASSERT_TRUE(w.write_tensor(p.name, {p.data, p.bytes}).ok());
  ASSERT_TRUE(w.finish().ok());
}

std::vector<float> logits_of(const pi::model::Model& m) {
  pi::runtime::ContextOptions o;
  o.n_ctx = 32;
  o.n_batch = 4;
  o.n_threads = 2;
  auto c = pi::runtime::Context::create(m, o);
  EXPECT_TRUE(c.ok()) << c.error().message;
  if (!c.ok()) return {};
  EXPECT_TRUE((*c)->decode(std::vector<int32_t>{1, 5, 9, 2, 7, 3}).ok());
  auto l = (*c)->logits();
  return {l.begin(), l.end()};
}

// Mixtral's first GGUF files hold one tensor per expert (blk.N.ffn_gate.E.weight, ...), which
// llama.cpp still loads: they load into the same stacks (a copy, in the file's type) with the
// same logits bit for bit, mapped, read into memory and converted to the CPU's R16 layouts in
// place; a missing expert is an error naming it.
TEST(MoeLoad, OneTensorPerExpertFilesLoadAsStacks) {
  const std::string merged = temp_path("moe_merged.gguf"), split = temp_path("moe_per_expert.gguf");
  ASSERT_TRUE(write_tiny_model(moe_spec(), merged).ok());
  split_experts(merged, split);
  auto a = pi::model::Model::load(merged);
  ASSERT_TRUE(a.ok()) << a.error().message;
  const std::vector<float> want = logits_of(**a);
  ASSERT_FALSE(want.empty());
  for (pi::LoadMode mode : {pi::LoadMode::Map, pi::LoadMode::Read}) {
    auto b = pi::model::Model::load(split, mode);
    ASSERT_TRUE(b.ok()) << b.error().message;
    EXPECT_EQ((*b)->weights().layers[1].ffn.gate_exps.stack, 4);
    EXPECT_EQ(logits_of(**b), want);
  }
  // Read in and converted in place to the CPU's dense layouts: as the merged file is.
  const pi::model::DenseLayouts r16{pi::backend::cpu_dense_layout};
  auto c = pi::model::Model::load(merged, pi::LoadMode::Read, false, DType::Q4_0, r16);
  auto d = pi::model::Model::load(split, pi::LoadMode::Read, false, DType::Q4_0, r16);
  ASSERT_TRUE(c.ok() && d.ok());
  EXPECT_EQ((*d)->weights().layers[0].ffn.up_exps.type, pi::backend::cpu_dense_layout(DType::Q8_0));
  EXPECT_EQ((*c)->weights().layers[0].ffn.up_exps.type, pi::backend::cpu_dense_layout(DType::Q8_0));
  EXPECT_EQ(logits_of(**d), logits_of(**c));
  const std::string broken = temp_path("moe_per_expert_missing.gguf");
  split_experts(merged, broken, "blk.1.ffn_up.3.weight");
  auto e = pi::model::Model::load(broken);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("missing tensor 'blk.1.ffn_up.3.weight'"), std::string::npos) << e.error().message;
}

TEST(MoeLoad, MalformedExpertFilesFailInOneLine) {
  TinySpec s = moe_spec();
  s.reshape["blk.1.ffn_up_exps.weight"] = Shape{5, 32, 64};
  std::string e = load_error(s, "moe_bad_shape.gguf");
  EXPECT_NE(e.find("tensor 'blk.1.ffn_up_exps.weight' has shape [5, 32, 64], expected [4, 32, 64]"),
            std::string::npos) << e;
  s = moe_spec();
  s.n_expert_used = 5;
  e = load_error(s, "moe_topk.gguf");
  EXPECT_NE(e.find("metadata key 'qwen3moe.expert_used_count' = 5 exceeds 'qwen3moe.expert_count' = 4"),
            std::string::npos) << e;
  s = moe_spec();
  s.drop = {"blk.0.ffn_gate_inp.weight"};
  e = load_error(s, "moe_no_router.gguf");
  EXPECT_NE(e.find("missing tensor 'blk.0.ffn_gate_inp.weight' (expected shape [4, 64])"), std::string::npos) << e;
  s = moe_spec();
  s.int_keys["qwen3moe.expert_gating_func"] = 4;
  e = load_error(s, "moe_gating4.gguf");
  EXPECT_NE(e.find("'qwen3moe.expert_gating_func' = 4: unknown gating function (1 softmax, 2 sigmoid and 3 "
                   "softmax of the chosen are supported)"),
            std::string::npos)
      << e;
  // 3, llama.cpp's softmax over the chosen logits, is our softmax.
  s.int_keys["qwen3moe.expert_gating_func"] = 3;
  auto m = load(s, "moe_gating3.gguf");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ((*m)->hparams().gating, Gating::Softmax);
}

struct MoeTrace {
  std::vector<float> logits;
  std::vector<std::vector<int32_t>> routes;  // per layer
  uint64_t rows_computed = 0, rows_possible = 0;
};

MoeTrace run(const pi::model::Model& m, const std::vector<int32_t>& tokens, bool dense = false) {
  pi::runtime::ContextOptions o;
  o.n_ctx = 32;
  o.n_batch = 8;
  o.all_logits = true;
  o.dense = dense;
  auto ctx = pi::runtime::Context::create(m, o);
  EXPECT_TRUE(ctx.ok()) << ctx.error().message;
  pi::model::MoeFfn* moe = (*ctx)->moe_ffn();
  EXPECT_NE(moe, nullptr);
  moe->trace_routes(true);
  MoeTrace r;
  EXPECT_TRUE((*ctx)->decode(tokens, &r.logits).ok());
  r.routes = moe->routes();
  r.rows_computed = moe->rows_computed();
  r.rows_possible = moe->rows_possible();
  return r;
}

TEST(MoeRun, ATokenComputesOnlyItsExperts) {
  // After a first run, a second file has every expert no token routed to overwritten with 1e30
  // (any product reading one overflows). Its logits must be the first run's: those experts were
  // never read.
  TinySpec s = moe_spec();
  s.wtype = DType::F32;
  s.n_expert = 8;
  const std::vector<int32_t> tokens = {5, 17, 99, 3};
  auto m = load(s, "moe_only_chosen.gguf");
  ASSERT_TRUE(m.ok()) << m.error().message;
  const MoeTrace first = run(**m, tokens);
  ASSERT_EQ(first.routes.size(), 2u);
  int blasted = 0;
  for (size_t il = 0; il < first.routes.size(); ++il) {
    std::vector<bool> used(8);
    for (int32_t e : first.routes[il]) used[static_cast<size_t>(e)] = true;
    const std::string b = "blk." + std::to_string(il) + ".";
    for (int64_t e = 0; e < 8; ++e) {
      if (used[static_cast<size_t>(e)]) continue;
      ++blasted;
      for (int64_t r = 0; r < s.n_ff_exp; ++r) {
        s.huge_rows[b + "ffn_gate_exps.weight"].push_back(e * s.n_ff_exp + r);
        s.huge_rows[b + "ffn_up_exps.weight"].push_back(e * s.n_ff_exp + r);
      }
      for (int64_t r = 0; r < s.n_embd; ++r) s.huge_rows[b + "ffn_down_exps.weight"].push_back(e * s.n_embd + r);
    }
  }
  ASSERT_GT(blasted, 0) << "4 tokens x top-2 used every expert of both layers: pick other tokens";
  auto blasted_model = load(s, "moe_only_chosen_blasted.gguf");
  ASSERT_TRUE(blasted_model.ok()) << blasted_model.error().message;
  const MoeTrace second = run(**blasted_model, tokens);
  EXPECT_EQ(second.routes, first.routes);
  ASSERT_EQ(second.logits.size(), first.logits.size());
  for (size_t i = 0; i < first.logits.size(); ++i) ASSERT_EQ(second.logits[i], first.logits[i]) << i;
  // And the overwrite bites where an expert is read: route every token to all 8.
  s.n_expert_used = 8;
  auto all = load(s, "moe_all_blasted.gguf");
  ASSERT_TRUE(all.ok()) << all.error().message;
  const MoeTrace third = run(**all, tokens);
  bool finite = true;
  for (float x : third.logits) finite = finite && std::isfinite(x);
  EXPECT_FALSE(finite);
}

TEST(MoeRun, ReGluExpertsComputeOnlyPositiveGatesAndEqualDense) {
  // smallthinker's experts, down stored either way: the rows of zero gates are skipped, and
  // the logits are the dense evaluation's up to the order of the sums.
  for (bool down_t : {false, true}) {
    TinySpec s = moe_spec();
    s.arch = "smallthinker";
    s.wtype = DType::F32;
    s.n_expert = 8;
    s.n_expert_used = 3;
    s.n_swa = 2;
    s.down_exps_t = down_t;
    auto m = load(s, down_t ? "st_sparse_dt.gguf" : "st_sparse.gguf");
    ASSERT_TRUE(m.ok()) << m.error().message;
    const std::vector<int32_t> tokens = {5, 17, 99, 3, 250, 8, 8, 140, 33, 1};
    const MoeTrace sparse = run(**m, tokens);
    const MoeTrace dense = run(**m, tokens, /*dense=*/true);
    EXPECT_EQ(sparse.routes, dense.routes);
    ASSERT_EQ(sparse.logits.size(), dense.logits.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < dense.logits.size(); ++i) {
      num += std::pow(sparse.logits[i] - dense.logits[i], 2.0);
      den += std::pow(dense.logits[i], 2.0);
    }
    EXPECT_LT(std::sqrt(num / den), 1e-5) << "down_t " << down_t;
    // 2 layers x 10 tokens x 3 experts x 32 neurons could have been computed; random gates
    // are positive about half the time.
    EXPECT_EQ(sparse.rows_possible, 2u * 10 * 3 * 32);
    EXPECT_GT(sparse.rows_computed, sparse.rows_possible / 4);
    EXPECT_LT(sparse.rows_computed, sparse.rows_possible * 3 / 4);
    EXPECT_EQ(dense.rows_possible, 0u);
  }
}

TEST(MoeRun, SmallThinkerFileErrors) {
  TinySpec s = moe_spec();
  s.arch = "smallthinker";
  s.drop = {};
  std::string e;
  {
    TinySpec bad = s;
    bad.int_keys["smallthinker.attention.sliding_window"] = 0;
    e = load_error(bad, "st_window0.gguf");
    EXPECT_NE(e.find("smallthinker.attention.sliding_window"), std::string::npos) << e;
  }
  {
    TinySpec bad = s;
    bad.down_exps_t = true;
    bad.extra["blk.1.ffn_down_exps.weight"] = pi::Shape{4, 64, 32};
    auto m = load(bad, "st_both_downs.gguf");  // the transposed layout wins, as ffn_down_t does
    EXPECT_TRUE(m.ok()) << m.error().message;
  }
  {
    TinySpec bad = s;
    bad.n_expert_used = 65;
    bad.n_expert = 70;
    e = load_error(bad, "st_topk65.gguf");
    EXPECT_NE(e.find("'smallthinker.expert_used_count' = 65: at most 64 experts per token are supported"),
              std::string::npos)
        << e;
  }
}

TinySpec gpt_oss_spec() {
  TinySpec s;
  s.arch = "gpt-oss";
  s.vocab = false;
  s.wtype = DType::F32;
  s.expert_wtype = DType::MXFP4;
  s.n_expert = 4;
  s.n_expert_used = 2;
  s.n_swa = 3;
  s.n_layer = 3;
  return s;
}

// gpt-oss through the layer table: biases on q/k/v/o, the router and every expert, a sink per
// head, post_attention_norm as the FFN's norm, even layers windowed, RoPE everywhere, the
// clamped SwiGLU, MXFP4 expert stacks.
TEST(MoeLoad, GptOssHparamsAndViews) {
  auto m = load(gpt_oss_spec(), "gpt_oss_load.gguf");
  ASSERT_TRUE(m.ok()) << m.error().message;
  const auto& hp = (*m)->hparams();
  EXPECT_EQ(hp.arch, pi::model::Arch::GptOss);
  EXPECT_EQ(hp.ffn, pi::model::FfnKind::SwigluOai);
  EXPECT_EQ(hp.rope, pi::model::RopeKind::NeoX);
  EXPECT_EQ(hp.n_swa, 3);
  for (int64_t il = 0; il < 3; ++il) {
    EXPECT_EQ(hp.layer_swa(il), il % 2 == 0) << il;
    EXPECT_TRUE(hp.layer_rope(il)) << il;
  }
  const auto& L = (*m)->weights().layers[2];
  EXPECT_EQ(L.attn.sinks.n, 4);
  EXPECT_EQ(L.attn.q_b.n, 64);
  EXPECT_EQ(L.attn.out_b.n, 64);
  EXPECT_TRUE(L.ffn.norm.present());
  EXPECT_EQ(L.ffn.gate_inp_b.n, 4);
  EXPECT_EQ(L.ffn.gate_exps_b.n, 4 * 32);
  EXPECT_EQ(L.ffn.up_exps_b.n, 4 * 32);
  EXPECT_EQ(L.ffn.down_exps_b.n, 4 * 64);
  EXPECT_EQ(L.ffn.up_exps.type, DType::MXFP4);
  const pi::Vector b2 = pi::model::expert_bias(L.ffn.down_exps_b, 2, hp.n_expert);
  EXPECT_EQ(b2.n, 64);
  EXPECT_EQ(b2.data, L.ffn.down_exps_b.data + 2 * 64);
}

// Identical logits for 1 and 2 threads and any batch split (MXFP4 experts, sinks, windows).
TEST(MoeRun, GptOssThreadAndBatchInvariant) {
  auto m = load(gpt_oss_spec(), "gpt_oss_inv.gguf");
  ASSERT_TRUE(m.ok()) << m.error().message;
  const std::vector<int32_t> tokens = {5, 17, 99, 3, 250, 8, 8, 140, 33, 1, 60, 61};
  std::vector<float> want;
  for (int threads : {1, 2}) {
    for (int64_t batch : {1, 5, 12}) {
      pi::runtime::ContextOptions o;
      o.n_ctx = 32;
      o.n_batch = batch;
      o.n_threads = threads;
      o.all_logits = true;
      auto ctx = pi::runtime::Context::create(**m, o);
      ASSERT_TRUE(ctx.ok()) << ctx.error().message;
      std::vector<float> got;
      ASSERT_TRUE((*ctx)->decode(tokens, &got).ok());
      for (float x : got) ASSERT_TRUE(std::isfinite(x));
      if (want.empty()) {
        want = got;
      } else {
        EXPECT_EQ(got, want) << threads << " threads, batches of " << batch;
      }
    }
  }
}

TEST(MoeRun, GptOssFileErrors) {
  std::string e;
  {
    TinySpec bad = gpt_oss_spec();
    bad.reshape["blk.1.attn_sinks.weight"] = Shape{5};
    e = load_error(bad, "gpt_oss_sinks.gguf");
    EXPECT_NE(e.find("tensor 'blk.1.attn_sinks.weight' has shape [5], expected [4]"), std::string::npos) << e;
  }
  {
    TinySpec bad = gpt_oss_spec();
    bad.n_swa = 300;  // the file's context is 256
    e = load_error(bad, "gpt_oss_window.gguf");
    EXPECT_NE(e.find("metadata key 'gpt-oss.attention.sliding_window' = 300 exceeds the context length 256 "
                     "('gpt-oss.context_length')"),
              std::string::npos)
        << e;
  }
  {
    TinySpec bad = gpt_oss_spec();
    bad.drop = {"blk.2.ffn_down_exps.bias"};
    e = load_error(bad, "gpt_oss_no_bias.gguf");
    EXPECT_NE(e.find("missing tensor 'blk.2.ffn_down_exps.bias' (expected shape [4, 64])"), std::string::npos) << e;
  }
  {
    TinySpec bad = gpt_oss_spec();
    bad.reshape["blk.0.ffn_gate_exps.bias"] = Shape{4 * 32};
    e = load_error(bad, "gpt_oss_flat_bias.gguf");
    EXPECT_NE(e.find("tensor 'blk.0.ffn_gate_exps.bias' has shape [128], expected [4, 32]"), std::string::npos) << e;
  }
  {
    TinySpec bad = gpt_oss_spec();
    bad.drop = {"blk.0.post_attention_norm.weight"};
    e = load_error(bad, "gpt_oss_no_norm.gguf");
    EXPECT_NE(e.find("missing tensor 'blk.0.post_attention_norm.weight'"), std::string::npos) << e;
  }
}

}  // namespace
