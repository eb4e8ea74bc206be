#include "model/tiny_model.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <vector>

#include "gguf/writer.h"
#include "tensor/quant.h"

namespace pi::testing {
namespace {

struct TensorSpec {
  std::string name;
  Shape shape;
  bool matrix;   // 2-D weight (wtype) vs 1-D f32
  float center;  // norms start near 1, biases and weights near 0
};

// Layer norms with bias: falcon and opt.
bool layer_norm(const TinySpec& s) { return s.arch == "falcon" || s.arch == "opt"; }

std::vector<TensorSpec> tensor_list(const TinySpec& s) {
  const int64_t hd = s.n_embd / s.n_head, n_kv = s.n_head_kv * hd;
  const bool falcon = s.arch == "falcon", opt = s.arch == "opt";
  const bool gpt_oss = s.arch == "gpt-oss";
  const bool qkv_bias = opt || s.arch == "qwen2" || gpt_oss;
  std::vector<TensorSpec> t;
  t.push_back({"token_embd.weight", {s.n_vocab, s.n_embd}, true, 0.0f});
  // opt's learned positions: row p + 2 holds position p.
  if (opt) t.push_back({"position_embd.weight", {s.n_ctx_train + 2, s.n_embd}, true, 0.0f});
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    t.push_back({b + "attn_norm.weight", {s.n_embd}, false, 1.0f});
    if (opt) t.push_back({b + "attn_norm.bias", {s.n_embd}, false, 0.0f});
    if (falcon) {
      t.push_back({b + "attn_norm.bias", {s.n_embd}, false, 0.0f});
      if (s.falcon_two_norms) {
        t.push_back({b + "attn_norm_2.weight", {s.n_embd}, false, 1.0f});
        t.push_back({b + "attn_norm_2.bias", {s.n_embd}, false, 0.0f});
      }
      t.push_back({b + "attn_qkv.weight", {s.n_embd + 2 * n_kv, s.n_embd}, true, 0.0f});
    } else {
      t.push_back({b + "attn_q.weight", {s.n_embd, s.n_embd}, true, 0.0f});
      if (qkv_bias) t.push_back({b + "attn_q.bias", {s.n_embd}, false, 0.0f});
      t.push_back({b + "attn_k.weight", {n_kv, s.n_embd}, true, 0.0f});
      if (qkv_bias) t.push_back({b + "attn_k.bias", {n_kv}, false, 0.0f});
      t.push_back({b + "attn_v.weight", {n_kv, s.n_embd}, true, 0.0f});
      if (qkv_bias) t.push_back({b + "attn_v.bias", {n_kv}, false, 0.0f});
      if (s.arch == "qwen3" || s.arch == "qwen3moe") {
        t.push_back({b + "attn_q_norm.weight", {hd}, false, 1.0f});
        t.push_back({b + "attn_k_norm.weight", {hd}, false, 1.0f});
      }
    }
    t.push_back({b + "attn_output.weight", {s.n_embd, s.n_embd}, true, 0.0f});
    if (opt || gpt_oss) t.push_back({b + "attn_output.bias", {s.n_embd}, false, 0.0f});
    if (gpt_oss) t.push_back({b + "attn_sinks.weight", {s.n_head}, false, 0.0f});
    if (!falcon) t.push_back({b + (gpt_oss ? "post_attention_norm.weight" : "ffn_norm.weight"), {s.n_embd}, false, 1.0f});
    if (opt) t.push_back({b + "ffn_norm.bias", {s.n_embd}, false, 0.0f});
    if (gpt_oss) {
      t.push_back({b + "ffn_gate_inp.weight", {s.n_expert, s.n_embd}, true, 0.0f});
      t.push_back({b + "ffn_gate_inp.bias", {s.n_expert}, false, 0.0f});
      for (const char* e : {"ffn_gate_exps", "ffn_up_exps"}) {
        t.push_back({b + e + ".weight", {s.n_expert, s.n_ff_exp, s.n_embd}, true, 0.0f});
        t.push_back({b + e + ".bias", {s.n_expert, s.n_ff_exp}, false, 0.0f});
      }
      t.push_back({b + "ffn_down_exps.weight", {s.n_expert, s.n_embd, s.n_ff_exp}, true, 0.0f});
      t.push_back({b + "ffn_down_exps.bias", {s.n_expert, s.n_embd}, false, 0.0f});
      continue;
    }
    if (s.arch == "qwen3moe" || s.arch == "smallthinker") {
      t.push_back({b + "ffn_gate_inp.weight", {s.n_expert, s.n_embd}, true, 0.0f});
      t.push_back({b + "ffn_gate_exps.weight", {s.n_expert, s.n_ff_exp, s.n_embd}, true, 0.0f});
      t.push_back({b + "ffn_up_exps.weight", {s.n_expert, s.n_ff_exp, s.n_embd}, true, 0.0f});
      if (s.down_exps_t) {
        t.push_back({b + "ffn_down_exps_t.weight", {s.n_expert, s.n_ff_exp, s.n_embd}, true, 0.0f});
      } else {
        t.push_back({b + "ffn_down_exps.weight", {s.n_expert, s.n_embd, s.n_ff_exp}, true, 0.0f});
      }
      continue;
    }
    if (!falcon && !opt) t.push_back({b + "ffn_gate.weight", {s.n_ff, s.n_embd}, true, 0.0f});
    t.push_back({b + "ffn_up.weight", {s.n_ff, s.n_embd}, true, 0.0f});
    if (opt) t.push_back({b + "ffn_up.bias", {s.n_ff}, false, 0.0f});
    if (s.pwri) {
      t.push_back({b + "ffn_down_t.weight", {s.n_ff, s.n_embd}, true, 0.0f});
    } else {
      t.push_back({b + "ffn_down.weight", {s.n_embd, s.n_ff}, true, 0.0f});
    }
    // The original names the bias of ffn_down_t "ffn_down_t.bias".
    if (opt) {
      t.push_back({b + (s.pwri ? "ffn_down_t.bias" : "ffn_down.bias"), {s.n_embd}, false, 0.0f});
    }
    if (s.predictor_rank > 0) {
      t.push_back({b + "fc1.weight", {s.predictor_rank, s.n_embd}, true, 0.0f});
      t.push_back({b + "fc2.weight", {s.n_ff, s.predictor_rank}, true, 0.0f});
    }
  }
  t.push_back({"output_norm.weight", {s.n_embd}, false, 1.0f});
  if (layer_norm(s)) t.push_back({"output_norm.bias", {s.n_embd}, false, 0.0f});
  if (!s.tied_output) t.push_back({"output.weight", {s.n_vocab, s.n_embd}, true, 0.0f});
  return t;
}

void add_vocab(gguf::Writer& w, const TinySpec& s) {
  using gguf::Array;
  using gguf::Value;
  using gguf::ValueType;
  Array tokens{ValueType::String, {}}, scores{ValueType::F32, {}}, types{ValueType::I32, {}};
  auto push = [&](std::string piece, float score, int32_t type) {
    tokens.items.emplace_back(std::move(piece));
    scores.items.emplace_back(score);
    types.items.emplace_back(type);
  };
  push("<unk>", 0.0f, 2);
  push("<s>", 0.0f, 3);
  push("</s>", 0.0f, 3);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    push(buf, 0.0f, 6);
  }
  const std::string sp = "\xe2\x96\x81";  // U+2581, SentencePiece's space
  const std::string words[] = {sp,        sp + "the", sp + "a", "e",  "t",  "o",  "n",
                               sp + "in", sp + "and", "th",     "he", "in", "er", "an"};
  int64_t i = 0;
  const int64_t n_tokens = s.n_vocab_tokens >= 0 ? s.n_vocab_tokens : s.n_vocab;
  while (static_cast<int64_t>(tokens.items.size()) < n_tokens) {
    std::string piece = i < 14 ? words[i] : sp + "w" + std::to_string(i);
    push(piece, -static_cast<float>(i), 1);
    ++i;
  }
  (void)w.add_kv("tokenizer.ggml.model", Value(std::string("llama")));
  (void)w.add_kv("tokenizer.ggml.tokens", Value(tokens));
  (void)w.add_kv("tokenizer.ggml.scores", Value(scores));
  (void)w.add_kv("tokenizer.ggml.token_type", Value(types));
  (void)w.add_kv("tokenizer.ggml.bos_token_id", Value(uint32_t{1}));
  (void)w.add_kv("tokenizer.ggml.eos_token_id", Value(uint32_t{2}));
  (void)w.add_kv("tokenizer.ggml.unknown_token_id", Value(uint32_t{0}));
}

// The stored type of `t`: expert stacks in spec.expert_wtype when set, other matrices in
// spec.wtype, vectors f32.
DType type_of(const TinySpec& s, const TensorSpec& t) {
  if (!t.matrix) return DType::F32;
  if (s.expert_wtype && t.name.find("_exps.weight") != std::string::npos) return *s.expert_wtype;
  return s.wtype;
}

}  // namespace

Status write_tiny_model(const TinySpec& s, const std::string& path) {
  using gguf::Value;
  gguf::Writer w(s.pwri ? gguf::Magic::PWRI : gguf::Magic::GGUF);
  const std::string a = s.arch;
  PI_TRY(w.add_kv("general.architecture", Value(a)));
  PI_TRY(w.add_kv("general.name", Value(std::string("tiny-") + a)));
  PI_TRY(w.add_kv(a + ".context_length", Value(static_cast<uint32_t>(s.n_ctx_train))));
  PI_TRY(w.add_kv(a + ".embedding_length", Value(static_cast<uint32_t>(s.n_embd))));
  PI_TRY(w.add_kv(a + ".block_count",
                  Value(static_cast<uint32_t>(s.block_count >= 0 ? s.block_count : s.n_layer))));
  PI_TRY(w.add_kv(a + ".feed_forward_length", Value(static_cast<uint32_t>(s.n_ff))));
  PI_TRY(w.add_kv(a + ".attention.head_count", Value(static_cast<uint32_t>(s.n_head))));
  PI_TRY(w.add_kv(a + ".attention.head_count_kv", Value(static_cast<uint32_t>(s.n_head_kv))));
  if (layer_norm(s)) {
    PI_TRY(w.add_kv(a + ".attention.layer_norm_epsilon", Value(s.norm_eps)));
  } else {
    PI_TRY(w.add_kv(a + ".attention.layer_norm_rms_epsilon", Value(s.norm_eps)));
    PI_TRY(w.add_kv(a + ".rope.freq_base", Value(10000.0f)));
  }
  if (!s.activation.empty()) PI_TRY(w.add_kv(a + ".feed_forward_activation", Value(s.activation)));
  if (s.pwri) PI_TRY(w.add_kv("powerinfer.sparse_threshold", Value(0.0f)));
  if (a == "qwen3moe" || a == "smallthinker" || a == "gpt-oss") {
    PI_TRY(w.add_kv(a + ".expert_count", Value(static_cast<uint32_t>(s.n_expert))));
    PI_TRY(w.add_kv(a + ".expert_used_count", Value(static_cast<uint32_t>(s.n_expert_used))));
    PI_TRY(w.add_kv(a + ".expert_feed_forward_length", Value(static_cast<uint32_t>(s.n_ff_exp))));
  }
  if (a == "gpt-oss" && s.n_swa > 0)
    PI_TRY(w.add_kv(a + ".attention.sliding_window", Value(static_cast<uint32_t>(s.n_swa))));
  if (a == "smallthinker") {
    PI_TRY(w.add_kv(a + ".expert_gating_func", Value(uint32_t{2})));
    if (s.n_swa > 0) PI_TRY(w.add_kv(a + ".attention.sliding_window", Value(static_cast<uint32_t>(s.n_swa))));
  }
  for (const auto& [key, v] : s.int_keys) {
    PI_TRY(v >= 0 ? w.add_kv(key, Value(static_cast<uint32_t>(v))) : w.add_kv(key, Value(static_cast<int32_t>(v))));
  }
  for (const auto& [key, v] : s.float_keys) PI_TRY(w.add_kv(key, Value(v)));
  for (const auto& [key, v] : s.string_keys) PI_TRY(w.add_kv(key, Value(v)));
  for (const auto& [key, v] : s.bool_keys) PI_TRY(w.add_kv(key, Value(v)));
  if (s.vocab) add_vocab(w, s);

  std::vector<TensorSpec> list = tensor_list(s);
  std::vector<TensorSpec> kept;
  for (TensorSpec t : list) {
    if (s.drop.count(t.name)) continue;
    if (auto it = s.reshape.find(t.name); it != s.reshape.end()) t.shape = it->second;
    PI_TRY(w.add_tensor(t.name, type_of(s, t), t.shape));
    kept.push_back(t);
  }
  for (const auto& [name, shape] : s.extra) {
    PI_TRY(w.add_tensor(name, DType::F32, shape));
    kept.push_back({name, shape, false, 0.0f});
  }
  PI_TRY(w.begin(path));
  std::mt19937_64 rng(s.seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (const TensorSpec& t : kept) {
    std::vector<float> v(static_cast<size_t>(t.shape.numel()));
    // Matrices scaled so that each row's dot product with a unit-RMS input stays O(1).
    const float scale = t.matrix ? 1.5f / std::sqrt(static_cast<float>(t.shape.cols())) : 0.1f;
    for (float& x : v) x = t.center + scale * uni(rng);
    if (auto it = s.poison.find(t.name); it != s.poison.end()) v.back() = it->second;
    if (auto it = s.huge_rows.find(t.name); it != s.huge_rows.end()) {
      for (int64_t r : it->second) std::fill_n(v.begin() + r * t.shape.cols(), t.shape.cols(), 1e30f);
    }
    const DType type = type_of(s, t);
    std::vector<std::byte> bytes(static_cast<size_t>(t.shape.rows()) *
                                 row_bytes(type, t.shape.cols()));
    const size_t rb = row_bytes(type, t.shape.cols());
    for (int64_t r = 0; r < t.shape.rows(); ++r) {
      PI_TRY(
          quantize_row(type, v.data() + r * t.shape.cols(), bytes.data() + r * rb, t.shape.cols()));
    }
    PI_TRY(w.write_tensor(t.name, bytes));
  }
  return w.finish();
}

std::string temp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("pi_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

}  // namespace pi::testing
