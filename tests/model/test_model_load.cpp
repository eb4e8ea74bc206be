// Loading: hyperparameters and weights of every architecture and layout, the FFN activation
// rules, and one-line errors for missing files, non-GGUF files, unsupported architectures and
// missing or mis-shaped tensors (biases and opt's position table included).
#include <gtest/gtest.h>

#include <fstream>

#include "model/model.h"
#include "model/tiny_model.h"

namespace {

using pi::DType;
using pi::Shape;
using pi::model::Activation;
using pi::model::FfnKind;
using pi::model::Model;
using pi::testing::temp_path;
using pi::testing::TinySpec;
using pi::testing::write_tiny_model;

pi::Result<std::unique_ptr<Model>> load(const TinySpec& spec, const std::string& name) {
  const std::string path = temp_path(name);
  pi::Status s = write_tiny_model(spec, path);
  if (!s.ok()) return s.error();
  return Model::load(path);
}

std::string load_error(const TinySpec& spec, const std::string& name) {
  auto m = load(spec, name);
  return m.ok() ? std::string("(loaded)") : m.error().message;
}

TEST(ModelLoad, LlamaGqaHparamsAndWeights) {
  TinySpec s;
  s.n_head = 8;
  s.n_head_kv = 2;
  auto m = load(s, "llama_gqa.gguf");
  ASSERT_TRUE(m.ok()) << m.error().message;
  const auto& hp = (*m)->hparams();
  EXPECT_EQ(hp.arch, pi::model::Arch::Llama);
  EXPECT_EQ(hp.n_vocab, 300);
  EXPECT_EQ(hp.n_embd, 64);
  EXPECT_EQ(hp.n_layer, 2);
  EXPECT_EQ(hp.n_ff, 96);
  EXPECT_EQ(hp.n_head, 8);
  EXPECT_EQ(hp.n_head_kv, 2);
  EXPECT_EQ(hp.head_dim, 8);
  EXPECT_EQ(hp.n_rot, 8);
  EXPECT_EQ(hp.n_embd_kv(), 16);
  EXPECT_EQ(hp.n_ctx_train, 256);
  EXPECT_EQ(hp.act, Activation::SiLU);  // plain llama without a declaration
  EXPECT_EQ(hp.ffn, FfnKind::Gated);
  EXPECT_FALSE(hp.parallel_residual);
  const auto& w = (*m)->weights();
  ASSERT_EQ(w.layers.size(), 2u);
  EXPECT_EQ(w.layers[1].attn.k.rows, 16);
  EXPECT_TRUE(w.layers[1].ffn.down.present());
  EXPECT_FALSE(w.layers[1].ffn.down_t.present());
  EXPECT_NE(w.output.data, w.tok_embd.data);
}

TEST(ModelLoad, ActivationRules) {
  TinySpec relu;
  relu.activation = "relu";
  auto m = load(relu, "llama_relu.gguf");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ((*m)->hparams().act, Activation::ReLU);

  TinySpec pwri;
  pwri.pwri = true;
  m = load(pwri, "llama.pwri.gguf");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_TRUE((*m)->hparams().powerinfer);
  EXPECT_EQ((*m)->hparams().act, Activation::ReLU);  // PWRI files always run ReLU
  EXPECT_TRUE((*m)->weights().layers[0].ffn.down_t.present());
  EXPECT_EQ((*m)->weights().layers[0].ffn.down_t.rows, 96);

  TinySpec bamboo;
  bamboo.arch = "bamboo";
  m = load(bamboo, "bamboo.gguf");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ((*m)->hparams().act, Activation::ReLU);
  EXPECT_EQ((*m)->hparams().ffn, FfnKind::GatedBoth);

  TinySpec bad;
  bad.activation = "tanh";
  EXPECT_NE(load_error(bad, "bad_act.gguf").find("'llama.feed_forward_activation' = 'tanh'"),
            std::string::npos);

  TinySpec contradiction;
  contradiction.pwri = true;
  contradiction.activation = "silu";
  EXPECT_NE(load_error(contradiction, "pwri_silu.gguf").find("ReLU models"), std::string::npos);
}

TEST(ModelLoad, FalconLayouts) {
  TinySpec f7;
  f7.arch = "falcon";
  f7.n_head_kv = 1;  // multi-query, one norm per layer
  auto m = load(f7, "falcon7.gguf");
  ASSERT_TRUE(m.ok()) << m.error().message;
  const auto& hp = (*m)->hparams();
  EXPECT_EQ(hp.arch, pi::model::Arch::Falcon);
  EXPECT_EQ(hp.act, Activation::GELU);
  EXPECT_EQ(hp.ffn, FfnKind::Plain);
  EXPECT_EQ(hp.rope, pi::model::RopeKind::NeoX);
  EXPECT_TRUE(hp.parallel_residual);
  EXPECT_EQ((*m)->weights().layers[0].attn.qkv.rows, 64 + 2 * 16);
  EXPECT_FALSE((*m)->weights().layers[0].ffn.norm.present());

  TinySpec f40 = f7;
  f40.n_head_kv = 2;
  f40.falcon_two_norms = true;
  f40.activation = "relu";
  m = load(f40, "falcon40.gguf");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_TRUE((*m)->weights().layers[1].ffn.norm.present());
  EXPECT_TRUE((*m)->weights().layers[1].ffn.norm_b.present());
  EXPECT_EQ((*m)->hparams().act, Activation::ReLU);
}

TEST(ModelLoad, OptLearnedPositionsAndBiases) {
  TinySpec s;
  s.arch = "opt";
  s.n_head_kv = 4;  // multi-head attention, as in every OPT model
  auto m = load(s, "opt.gguf");
  ASSERT_TRUE(m.ok()) << m.error().message;
  const auto& hp = (*m)->hparams();
  EXPECT_EQ(hp.arch, pi::model::Arch::Opt);
  EXPECT_EQ(hp.norm, pi::model::NormKind::Layer);
  EXPECT_EQ(hp.act, Activation::ReLU);  // OPT is a ReLU model without a declaration
  EXPECT_EQ(hp.ffn, FfnKind::Plain);
  EXPECT_FALSE(hp.parallel_residual);
  EXPECT_FALSE(hp.has_rope);
  EXPECT_TRUE(hp.has_pos_embd);
  EXPECT_EQ(hp.pos_offset, 2);
  EXPECT_EQ(hp.n_pos, 256);  // 258 rows less the offset
  EXPECT_EQ(hp.n_ctx_train, 256);
  const auto& w = (*m)->weights();
  EXPECT_EQ(w.pos_embd.rows, 258);
  const auto& L = w.layers[1];
  for (const pi::Vector* v : {&L.attn.norm_b, &L.attn.q_b, &L.attn.k_b, &L.attn.v_b,
                              &L.attn.out_b, &L.ffn.norm_b, &L.ffn.up_b, &L.ffn.down_b})
    EXPECT_TRUE(v->present());
  EXPECT_EQ(L.ffn.up_b.n, 96);
  EXPECT_FALSE(L.ffn.gate.present());
  EXPECT_TRUE(w.out_norm_b.present());

  // The original's PowerInfer files: ffn_down_t with its bias named ffn_down_t.bias.
  s.pwri = true;
  m = load(s, "opt.pwri.gguf");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_TRUE((*m)->weights().layers[0].ffn.down_t.present());
  EXPECT_TRUE((*m)->weights().layers[0].ffn.down_b.present());

  // The original writes context_length = the table's rows (2050): clamped to the positions.
  s.n_ctx_train = 64;
  s.reshape = {{"position_embd.weight", Shape{40, 64}}};
  m = load(s, "opt_short_table.pwri.gguf");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ((*m)->hparams().n_pos, 38);
  EXPECT_EQ((*m)->hparams().n_ctx_train, 38);
}

TEST(ModelLoad, Qwen2BiasedQkvNeoxRope) {
  TinySpec s;
  s.arch = "qwen2";
  s.tied_output = true;
  auto m = load(s, "qwen2.gguf");
  ASSERT_TRUE(m.ok()) << m.error().message;
  const auto& hp = (*m)->hparams();
  EXPECT_EQ(hp.arch, pi::model::Arch::Qwen2);
  EXPECT_EQ(hp.norm, pi::model::NormKind::RMS);
  EXPECT_EQ(hp.rope, pi::model::RopeKind::NeoX);
  EXPECT_TRUE(hp.has_rope);
  EXPECT_FALSE(hp.has_pos_embd);
  EXPECT_EQ(hp.act, Activation::SiLU);
  EXPECT_EQ(hp.ffn, FfnKind::Gated);
  const auto& a = (*m)->weights().layers[0].attn;
  EXPECT_EQ(a.q_b.n, 64);
  EXPECT_EQ(a.k_b.n, 32);
  EXPECT_EQ(a.v_b.n, 32);
  EXPECT_FALSE(a.out_b.present());
  EXPECT_EQ((*m)->weights().output.data, (*m)->weights().tok_embd.data);
}

TEST(ModelLoad, Qwen3PerHeadQkNormsNeoxRope) {
  TinySpec s;
  s.arch = "qwen3";
  s.tied_output = true;
  auto m = load(s, "qwen3.gguf");
  ASSERT_TRUE(m.ok()) << m.error().message;
  const auto& hp = (*m)->hparams();
  EXPECT_EQ(hp.arch, pi::model::Arch::Qwen3);
  EXPECT_EQ(hp.rope, pi::model::RopeKind::NeoX);
  EXPECT_EQ(hp.act, Activation::SiLU);
  const auto& a = (*m)->weights().layers[1].attn;
  EXPECT_EQ(a.q_norm.n, hp.head_dim);
  EXPECT_EQ(a.k_norm.n, hp.head_dim);
  EXPECT_FALSE(a.q_b.present());
  s.drop = {"blk.1.attn_k_norm.weight"};
  const std::string e = load_error(s, "qwen3_no_k_norm.gguf");
  EXPECT_NE(e.find("missing tensor 'blk.1.attn_k_norm.weight' (expected shape [16])"), std::string::npos) << e;
}

TEST(ModelLoad, TiedOutputHeadAndQuantizedWeights) {
  TinySpec s;
  s.tied_output = true;
  s.wtype = DType::Q4_0;
  auto m = load(s, "tied_q4.gguf");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ((*m)->weights().output.data, (*m)->weights().tok_embd.data);
  EXPECT_EQ((*m)->weights().layers[0].attn.q.type, DType::Q4_0);
}

TEST(ModelLoadErrors, MissingFile) {
  auto m = Model::load("/nonexistent/model.gguf");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("/nonexistent/model.gguf: cannot open"), std::string::npos)
      << m.error().message;
}

TEST(ModelLoadErrors, NotAGguf) {
  const std::string path = temp_path("not_gguf.bin");
  { std::ofstream(path) << "this is plain text, not a model file at all"; }
  auto m = Model::load(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("bad magic"), std::string::npos) << m.error().message;
}

TEST(ModelLoadErrors, UnsupportedArchitecture) {
  TinySpec s;
  s.arch = "gpt2";
  const std::string e = load_error(s, "gpt2.gguf");
  EXPECT_NE(e.find("unsupported architecture 'gpt2' "
                   "(supported: llama, bamboo, falcon, opt, qwen2, qwen3, qwen3moe, smallthinker, gpt-oss)"),
            std::string::npos)
      << e;
}

TEST(ModelLoadErrors, MissingTensorNamesTensorAndShape) {
  TinySpec s;
  s.drop = {"blk.1.ffn_up.weight"};
  std::string e = load_error(s, "missing_up.gguf");
  EXPECT_NE(e.find("missing tensor 'blk.1.ffn_up.weight' (expected shape [96, 64])"),
            std::string::npos)
      << e;

  TinySpec f;
  f.arch = "falcon";
  f.drop = {"blk.0.attn_qkv.weight"};
  e = load_error(f, "missing_qkv.gguf");
  EXPECT_NE(e.find("missing tensor 'blk.0.attn_qkv.weight' (expected shape [128, 64])"),
            std::string::npos)
      << e;

  TinySpec p;
  p.pwri = true;
  p.drop = {"blk.0.ffn_down_t.weight"};
  e = load_error(p, "missing_down_t.gguf");
  EXPECT_NE(e.find("missing tensor 'blk.0.ffn_down_t.weight' (expected shape [96, 64])"),
            std::string::npos)
      << e;

  TinySpec n;
  n.drop = {"output_norm.weight"};
  e = load_error(n, "missing_norm.gguf");
  EXPECT_NE(e.find("missing tensor 'output_norm.weight' (expected shape [64])"), std::string::npos)
      << e;
}

TEST(ModelLoadErrors, MissingOrMisShapedBiasesAndPositions) {
  TinySpec q;
  q.arch = "qwen2";
  q.drop = {"blk.1.attn_k.bias"};
  std::string e = load_error(q, "qwen2_no_k_bias.gguf");
  EXPECT_NE(e.find("missing tensor 'blk.1.attn_k.bias' (expected shape [32])"), std::string::npos)
      << e;

  TinySpec o;
  o.arch = "opt";
  o.pwri = true;
  o.drop = {"blk.0.ffn_down_t.bias"};
  e = load_error(o, "opt_no_down_bias.pwri.gguf");
  EXPECT_NE(e.find("missing tensor 'blk.0.ffn_down_t.bias' (expected shape [64])"),
            std::string::npos)
      << e;

  o.drop = {"position_embd.weight"};
  e = load_error(o, "opt_no_positions.pwri.gguf");
  EXPECT_NE(e.find("missing tensor 'position_embd.weight' (expected shape [n_positions + 2, 64])"),
            std::string::npos)
      << e;

  o.drop = {};
  o.reshape = {{"position_embd.weight", Shape{258, 32}}};
  e = load_error(o, "opt_bad_positions.pwri.gguf");
  EXPECT_NE(e.find("tensor 'position_embd.weight' has shape [258, 32], expected "
                   "[n_positions + 2, 64]"),
            std::string::npos)
      << e;

  o.reshape = {{"blk.1.ffn_up.bias", Shape{64}}};
  e = load_error(o, "opt_bad_up_bias.pwri.gguf");
  EXPECT_NE(e.find("tensor 'blk.1.ffn_up.bias' has shape [64], expected [96]"), std::string::npos)
      << e;
}

TEST(ModelLoadErrors, MisShapedTensorNamesBothShapes) {
  TinySpec s;
  s.reshape = {{"blk.0.attn_k.weight", Shape{64, 64}}};  // GQA: 2 kv heads x 16 = 32 rows
  std::string e = load_error(s, "bad_k.gguf");
  EXPECT_NE(e.find("tensor 'blk.0.attn_k.weight' has shape [64, 64], expected [32, 64]"),
            std::string::npos)
      << e;

  s.reshape = {{"token_embd.weight", Shape{300, 32}}};
  e = load_error(s, "bad_embd.gguf");
  EXPECT_NE(e.find("tensor 'token_embd.weight' has shape [300, 32], expected [n_vocab, 64]"),
            std::string::npos)
      << e;

  s.reshape = {{"output.weight", Shape{299, 64}}};
  e = load_error(s, "bad_out.gguf");
  EXPECT_NE(e.find("tensor 'output.weight' has shape [299, 64], expected [300, 64]"),
            std::string::npos)
      << e;
}

// YaRN's keys (llama.cpp's names and defaults) reach the rope parameters; its errors name them.
TEST(ModelLoad, YarnRopeScaling) {
  TinySpec s;
  s.string_keys["llama.rope.scaling.type"] = "yarn";
  s.float_keys["llama.rope.scaling.factor"] = 4.0f;
  s.float_keys["llama.rope.scaling.yarn_beta_fast"] = 16.0f;
  auto m = load(s, "yarn.gguf");
  ASSERT_TRUE(m.ok()) << m.error().message;
  const pi::backend::RopeParams p = (*m)->hparams().rope_params();
  EXPECT_EQ(p.freq_scale, 0.25f);
  EXPECT_EQ(p.yarn.ext_factor, 1.0f);
  EXPECT_EQ(p.yarn.attn_factor, 1.0f);
  EXPECT_EQ(p.yarn.beta_fast, 16.0f);
  EXPECT_EQ(p.yarn.beta_slow, 1.0f);
  EXPECT_EQ(p.yarn.n_ctx_orig, 256);  // no original_context_length: the training context
  EXPECT_TRUE(p.yarn.truncate);       // the ramp's ends rounded, as ggml does

  // rope.scaling.yarn_truncate false: unrounded (gpt-oss's default, its config's truncate).
  s.bool_keys["llama.rope.scaling.yarn_truncate"] = false;
  m = load(s, "yarn_truncate.gguf");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_FALSE((*m)->hparams().rope_params().yarn.truncate);
  s.bool_keys.clear();
  {
    TinySpec oss;
    oss.arch = "gpt-oss";
    oss.vocab = false;
    oss.string_keys["gpt-oss.rope.scaling.type"] = "yarn";
    oss.float_keys["gpt-oss.rope.scaling.factor"] = 32.0f;
    auto g = load(oss, "yarn_gpt_oss.gguf");
    ASSERT_TRUE(g.ok()) << g.error().message;
    EXPECT_FALSE((*g)->hparams().rope_params().yarn.truncate);
    oss.float_keys["gpt-oss.rope.scaling.yarn_truncate"] = 0.0f;
    const std::string bad = load_error(oss, "yarn_gpt_oss_bad.gguf");
    EXPECT_NE(bad.find("metadata key 'gpt-oss.rope.scaling.yarn_truncate' must be a bool"), std::string::npos) << bad;
  }

  s.int_keys["llama.rope.scaling.original_context_length"] = 64;
  m = load(s, "yarn_orig.gguf");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ((*m)->hparams().rope_params().yarn.n_ctx_orig, 64);

  s.float_keys["llama.rope.scaling.yarn_beta_slow"] = 0.0f;
  std::string e = load_error(s, "yarn_beta.gguf");
  EXPECT_NE(e.find("'llama.rope.scaling.yarn_beta_slow'"), std::string::npos) << e;

  TinySpec other;
  other.string_keys["llama.rope.scaling.type"] = "longrope";
  e = load_error(other, "longrope.gguf");
  EXPECT_NE(e.find("'longrope' is not supported (supported: none, linear, yarn)"), std::string::npos) << e;
}

TEST(ModelLoadErrors, InconsistentHparams) {
  TinySpec s;
  s.n_head = 5;  // 64 is not a multiple of 5
  s.n_head_kv = 5;
  const std::string e = load_error(s, "bad_heads.gguf");
  EXPECT_NE(e.find("not a multiple of attention.head_count"), std::string::npos) << e;
}

}  // namespace
