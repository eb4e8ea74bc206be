#include "synth_spec.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <string_view>

namespace pi::workflows::synth {

namespace {

struct Preset {
  std::string_view name;
  Arch arch;
  int64_t embd, ff, layers, heads, kv_heads, vocab, ctx;
  int64_t head_dim = 0;                                 // 0: embd / heads
  int64_t experts = 0, experts_used = 0, expert_ff = 0;  // mixture of experts
  int64_t swa = 0;                                       // the sliding window (smallthinker, gpt-oss)
};

// Shapes of the published models (docs/reference: PowerInfer compatibility facts, table 7).
// The MoE shapes are the published configs': Qwen3-30B-A3B (48 layers, 128 experts of 768,
// top 8, heads of 128), Mixtral-8x7B (32 layers, 8 experts of 14336, top 2), SmallThinker-21B-A3B
// (52 layers, 64 ReGLU experts of 768, top 6, 28 heads of 128 over 4 KV heads) and -4B-A0.6B
// (32 layers, 32 experts of 768, top 4, 12 heads over 2, no sliding window). gpt-oss-20b and
// -120b: 24 / 36 layers of 32 / 128 experts of 2880, top 4, 64 heads of 64 over 8 KV heads, a
// window of 128 on even layers, the o200k vocabulary's 201088 rows, experts in MXFP4.
constexpr std::array<Preset, 12> kPresets{{
    {"tiny", Arch::Llama, 128, 512, 2, 4, 4, 512, 256},
    {"llama2-7b", Arch::Llama, 4096, 11008, 32, 32, 32, 32000, 4096},
    {"llama2-13b", Arch::Llama, 5120, 13824, 40, 40, 40, 32000, 4096},
    {"bamboo-7b", Arch::Bamboo, 4096, 14336, 32, 32, 8, 32000, 4096},
    {"falcon-40b", Arch::Falcon, 8192, 32768, 60, 128, 8, 65024, 2048},
    {"tiny-moe", Arch::Qwen3Moe, 128, 512, 2, 4, 2, 512, 256, 0, 8, 2, 64},
    {"qwen3-30b-a3b", Arch::Qwen3Moe, 2048, 6144, 48, 32, 4, 151936, 4096, 128, 128, 8, 768},
    {"mixtral-8x7b", Arch::Llama, 4096, 14336, 32, 32, 8, 32000, 4096, 0, 8, 2, 14336},
    {"smallthinker-21b-a3b", Arch::SmallThinker, 2560, 768, 52, 28, 4, 151936, 4096, 128, 64, 6, 768, 4096},
    {"smallthinker-4b-a0.6b", Arch::SmallThinker, 1536, 768, 32, 12, 2, 151936, 4096, 128, 32, 4, 768},
    {"gpt-oss-20b", Arch::GptOss, 2880, 2880, 24, 64, 8, 201088, 131072, 64, 32, 4, 2880, 128},
    {"gpt-oss-120b", Arch::GptOss, 2880, 2880, 36, 64, 8, 201088, 131072, 64, 128, 4, 2880, 128},
}};

constexpr const char* kPresetNames =
    "tiny, llama2-7b, llama2-13b, bamboo-7b, falcon-40b, tiny-moe, qwen3-30b-a3b, mixtral-8x7b, "
    "smallthinker-21b-a3b, smallthinker-4b-a0.6b, gpt-oss-20b, gpt-oss-120b";

Status positive(const char* flag, int64_t v, int64_t max = int64_t{1} << 24) {
  if (v <= 0 || v > max) {
    return err("synth: %s %lld is out of range (1..%lld)", flag, static_cast<long long>(v),
               static_cast<long long>(max));
  }
  return Status::Ok();
}

// The best top-`fraction` share a mean-`activity` profile clipped at kMaxProbability can have.
double max_share(double fraction, double activity) {
  return std::min(1.0, fraction * kMaxProbability / activity);
}

}  // namespace

double Spec::row_norm() const { return sigma_w * std::sqrt(static_cast<double>(n_free())); }

float Spec::threshold() const {
  return margin > 0 ? static_cast<float>(-margin * sigma_e * row_norm()) : 0.0f;
}

uint32_t Spec::file_type() const {
  switch (type) {
    case DType::F32:
      return 0;
    case DType::F16:
      return 1;
    case DType::Q4_0:
      return 2;
    case DType::Q8_0:
      return arch == Arch::GptOss ? 38 : 7;  // 38: llama.cpp's MXFP4_MOE (experts MXFP4, the rest Q8_0)
    default:
      return 0;
  }
}

Result<Spec> resolve(const Options& o) {
  const Preset* p = nullptr;
  for (const Preset& q : kPresets)
    if (q.name == o.preset) p = &q;
  if (p == nullptr) {
    return err("synth: unknown preset '%s' (%s)", o.preset.c_str(), kPresetNames);
  }
  Spec s;
  s.output = o.output;
  s.activation_dir = o.activation_dir;
  s.preset = o.preset;
  s.arch = p->arch;
  if (o.arch) {
    if (*o.arch == "llama")
      s.arch = Arch::Llama;
    else if (*o.arch == "bamboo")
      s.arch = Arch::Bamboo;
    else if (*o.arch == "falcon")
      s.arch = Arch::Falcon;
    else if (*o.arch == "qwen3moe")
      s.arch = Arch::Qwen3Moe;
    else if (*o.arch == "smallthinker")
      s.arch = Arch::SmallThinker;
    else if (*o.arch == "gpt-oss")
      s.arch = Arch::GptOss;
    else
      return err("synth: unknown --arch '%s' (llama, bamboo, falcon, qwen3moe, smallthinker, gpt-oss)",
                 o.arch->c_str());
  }
  const bool st = s.arch == Arch::SmallThinker, oss = s.arch == Arch::GptOss;
  if (!st && o.transpose_down) return err("synth: --transpose-down needs --arch smallthinker");
  if (!st && !oss && o.swa) return err("synth: --swa needs --arch smallthinker or gpt-oss");
  s.down_t = o.transpose_down;
  s.n_swa = o.swa.value_or(p->arch == s.arch ? p->swa : 0);
  if (s.n_swa < 0) return err("synth: --swa %lld must be >= 0", static_cast<long long>(s.n_swa));
  s.n_expert = o.experts.value_or(p->experts);
  s.n_expert_used = o.experts_used.value_or(p->experts_used);
  if ((s.arch == Arch::Qwen3Moe || st || oss) && s.n_expert == 0)
    return err("synth: --arch %s needs --experts", arch_name(s.arch));
  if (s.n_expert > 0) {
    if (s.arch != Arch::Qwen3Moe && s.arch != Arch::Llama && !st && !oss)
      return err("synth: --experts needs --arch qwen3moe, smallthinker, gpt-oss or llama (Mixtral)");
    PI_TRY(positive("--experts", s.n_expert, 4096));
    if (s.n_expert_used == 0) s.n_expert_used = std::min<int64_t>(2, s.n_expert);
    if (s.n_expert_used < 1 || s.n_expert_used > s.n_expert)
      return err("synth: --experts-used %lld must lie in [1, --experts %lld]",
                 static_cast<long long>(s.n_expert_used), static_cast<long long>(s.n_expert));
    if (o.pwri) return err("synth: a mixture-of-experts model cannot be a PowerInfer file (--pwri)");
    if (!o.activation_dir.empty())
      return err("synth: --activation-dir: a mixture-of-experts model has no neuron statistics yet");
  } else if (o.experts_used || o.expert_ff) {
    return err("synth: --experts-used and --expert-ff need --experts (or a MoE preset)");
  }
  if (s.is_moe()) {
    // SwiGLU experts (Mixtral, Qwen3-MoE); ReGLU ones (SmallThinker).
    s.act = st ? model::Activation::ReLU : model::Activation::SiLU;
  } else if (o.act == "silu") {
    s.act = model::Activation::SiLU;
    if (s.arch != Arch::Llama) return err("synth: --act silu needs --arch llama");
    if (o.pwri) return err("synth: --act silu cannot be a PowerInfer file (--pwri: ReLU only)");
  } else if (o.act != "relu") {
    return err("synth: unknown --act '%s' (relu, silu)", o.act.c_str());
  }
  s.n_layer = o.layers.value_or(p->layers);
  s.n_embd = o.embd.value_or(p->embd);
  s.n_ff = o.ff.value_or(p->ff);
  s.n_head = o.heads.value_or(p->heads);
  s.n_head_kv = o.kv_heads.value_or(o.heads ? s.n_head : p->kv_heads);
  s.n_vocab = o.vocab.value_or(p->vocab);
  s.n_ctx = o.ctx.value_or(p->ctx);
  PI_TRY(positive("--layers", s.n_layer, 4096));
  PI_TRY(positive("--embd", s.n_embd));
  PI_TRY(positive("--ff", s.n_ff));
  PI_TRY(positive("--heads", s.n_head));
  PI_TRY(positive("--kv-heads", s.n_head_kv));
  PI_TRY(positive("--vocab", s.n_vocab, int64_t{1} << 22));
  PI_TRY(positive("--ctx", s.n_ctx, int64_t{1} << 24));
  if (s.n_swa > s.n_ctx)
    return err("synth: the sliding window %lld exceeds --ctx %lld (give a smaller --swa)",
               static_cast<long long>(s.n_swa), static_cast<long long>(s.n_ctx));
  if (s.n_embd % kBiasDims != 0 || s.n_embd < 2 * kBiasDims) {
    return err("synth: --embd %lld must be a multiple of %lld and at least %lld",
               static_cast<long long>(s.n_embd), static_cast<long long>(kBiasDims),
               static_cast<long long>(2 * kBiasDims));
  }
  const int64_t head_dim = o.head_dim.value_or(p->head_dim);
  if (head_dim != 0 && s.arch != Arch::Qwen3Moe && !st && !oss)
    return err("synth: --head-dim needs --arch qwen3moe, smallthinker or gpt-oss");
  if (head_dim == 0 && s.n_embd % s.n_head != 0) return err("synth: --embd must be a multiple of --heads");
  if (s.n_head % s.n_head_kv != 0) return err("synth: --heads must be a multiple of --kv-heads");
  s.head_dim = head_dim != 0 ? head_dim : s.n_embd / s.n_head;
  if (s.head_dim % 2 != 0) return err("synth: the head size --embd/--heads must be even");
  if (s.n_vocab < 259) return err("synth: --vocab must be at least 259 (3 specials + 256 bytes)");

  auto t = dtype_from_name(o.type);
  if (!t || (*t != DType::F32 && *t != DType::F16 && *t != DType::Q8_0 && *t != DType::Q4_0)) {
    return err("synth: unsupported --type '%s' (f32, f16, q8_0, q4_0)", o.type.c_str());
  }
  s.type = *t;
  s.pwri = o.pwri;
  const int64_t block = dtype_info(s.type).block_size;
  if (s.is_moe()) {
    s.n_ff_exp = o.expert_ff.value_or(p->expert_ff != 0 ? p->expert_ff : s.n_ff);
    PI_TRY(positive("--expert-ff", s.n_ff_exp));
    // Mixtral, SmallThinker: the experts are feed_forward_length wide (and for SmallThinker the
    // power law of the gates' firing is over an expert's neurons).
    if (s.arch == Arch::Llama || st || oss) s.n_ff = s.n_ff_exp;
    const int64_t expert_block = dtype_info(s.expert_type()).block_size;
    if (s.n_ff_exp % expert_block != 0)
      return err("synth: --expert-ff %lld must be a multiple of %lld for %s", static_cast<long long>(s.n_ff_exp),
                 static_cast<long long>(expert_block), std::string(dtype_name(s.expert_type())).c_str());
    if (s.arch == Arch::Qwen3Moe || st) s.rope_base = 1e6f, s.norm_eps = 1e-6f;
    if (oss) s.rope_base = 150000.0f;
  }
  if (s.n_ff % block != 0) {
    return err("synth: --ff %lld must be a multiple of %lld for %s", static_cast<long long>(s.n_ff),
               static_cast<long long>(block), o.type.c_str());
  }

  if (!(o.activity > 0 && o.activity < kMaxProbability)) {
    return err("synth: --activity %g must lie in (0, %g)", o.activity, kMaxProbability);
  }
  if (!(o.hot_fraction > 0 && o.hot_fraction < 1)) {
    return err("synth: --hot-fraction %g must lie in (0, 1)", o.hot_fraction);
  }
  const double top = max_share(o.hot_fraction, o.activity);
  if (!(o.hot_share >= o.hot_fraction && o.hot_share < top)) {
    return err("synth: --hot-share %g must lie in [%g, %g) for --hot-fraction %g and --activity %g",
               o.hot_share, o.hot_fraction, top, o.hot_fraction, o.activity);
  }
  s.activity = o.activity;
  s.hot_fraction = o.hot_fraction;
  s.hot_share = o.hot_share;
  if (!(o.noise >= 0 && o.noise <= 10))
    return err("synth: --noise %g must lie in [0, 10]", o.noise);
  if (!(o.margin >= 0 && o.margin <= 10))
    return err("synth: --margin %g must lie in [0, 10]", o.margin);
  s.noise = o.noise;
  s.margin = o.margin;

  // Predictor rank: about n_embd / 4 (1024 for 7B-class models, as published), at least 64.
  s.rank = o.predictor_rank.value_or(std::max<int64_t>(64, s.n_embd / 4 / 32 * 32));
  s.n_bias_rows = s.rank >= 64 ? kBiasDims : 2;
  s.n_bias_rows += (s.rank - s.n_bias_rows) % 2;
  s.n_pairs = (s.rank - s.n_bias_rows) / 2;
  if (s.rank < 4 || s.n_pairs < 1 || s.n_pairs > s.n_free() / 2) {
    return err("synth: --predictor-rank %lld must lie in [4, %lld] for --embd %lld",
               static_cast<long long>(s.rank),
               static_cast<long long>(s.n_bias_rows + 2 * (s.n_free() / 2)),
               static_cast<long long>(s.n_embd));
  }
  if (s.pwri && s.rank % block != 0) {
    return err("synth: --predictor-rank %lld must be a multiple of %lld for %s",
               static_cast<long long>(s.rank), static_cast<long long>(block), o.type.c_str());
  }
  s.seed = o.seed;

  const auto n = static_cast<double>(s.n_embd);
  s.bias_c = s.sigma_e * std::sqrt(static_cast<double>(s.n_free()) / kBiasDims);
  s.sigma_o = s.delta * s.sigma_e / (s.sigma_w * n);
  s.sigma_d = s.delta * s.sigma_e /
              (s.sigma_w * s.sigma_w * n * std::sqrt(s.activity * static_cast<double>(s.n_ff)));
  s.name = "synthetic " + std::string(arch_name(s.arch)) + " " + std::to_string(s.n_embd) + "x" +
           std::to_string(s.n_ff) + "x" + std::to_string(s.n_layer) +
           (s.is_moe() ? " " + std::to_string(s.n_expert) + " experts of " + std::to_string(s.n_ff_exp) +
                             ", top " + std::to_string(s.n_expert_used)
                       : std::string()) +
           " (preset " + s.preset + ")";
  return s;
}

namespace {

// The i-th filler piece: "▁a", "a", "▁b", "b", ..., "▁z", "z", "▁aa", ... (all distinct).
std::string filler_piece(int64_t i) {
  std::string word;
  for (int64_t k = i / 2 + 1; k > 0; k = (k - 1) / 26) {
    word.insert(word.begin(), static_cast<char>('a' + (k - 1) % 26));
  }
  return (i % 2 == 0 ? std::string("\xe2\x96\x81") : std::string()) + word;
}

Status add_vocab(gguf::Writer& w, const Spec& s) {
  using gguf::Array;
  using gguf::ValueType;
  Array tokens{ValueType::String, {}}, scores{ValueType::F32, {}}, types{ValueType::I32, {}};
  tokens.items.reserve(static_cast<size_t>(s.n_vocab));
  auto add = [&](std::string piece, float score, int32_t type) {
    tokens.items.emplace_back(std::move(piece));
    scores.items.emplace_back(score);
    types.items.emplace_back(type);
  };
  add("<unk>", 0.0f, 2);  // token types: 1 normal, 2 unknown, 3 control, 6 byte
  add("<s>", 0.0f, 3);
  add("</s>", 0.0f, 3);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    add(buf, 0.0f, 6);
  }
  for (int64_t i = 0; static_cast<int64_t>(tokens.items.size()) < s.n_vocab; ++i) {
    add(filler_piece(i), -static_cast<float>(i + 1), 1);
  }
  PI_TRY(w.add_kv("tokenizer.ggml.model", gguf::Value(std::string("llama"))));
  PI_TRY(w.add_kv("tokenizer.ggml.tokens", gguf::Value(std::move(tokens))));
  PI_TRY(w.add_kv("tokenizer.ggml.scores", gguf::Value(std::move(scores))));
  PI_TRY(w.add_kv("tokenizer.ggml.token_type", gguf::Value(std::move(types))));
  PI_TRY(w.add_kv("tokenizer.ggml.bos_token_id", gguf::Value(uint32_t{1})));
  PI_TRY(w.add_kv("tokenizer.ggml.eos_token_id", gguf::Value(uint32_t{2})));
  PI_TRY(w.add_kv("tokenizer.ggml.unknown_token_id", gguf::Value(uint32_t{0})));
  return w.add_kv("tokenizer.ggml.add_bos_token", gguf::Value(true));
}

}  // namespace

Status add_metadata(gguf::Writer& w, const Spec& s, double alpha) {
  using gguf::Value;
  const std::string a = arch_name(s.arch);
  auto u32 = [](int64_t v) { return Value(static_cast<uint32_t>(v)); };
  auto f32 = [](double v) { return Value(static_cast<float>(v)); };
  PI_TRY(w.add_kv("general.architecture", Value(a)));
  PI_TRY(w.add_kv("general.name", Value(s.name)));
  PI_TRY(w.add_kv("general.file_type", Value(s.file_type())));
  PI_TRY(w.add_kv(a + ".context_length", u32(s.n_ctx)));
  PI_TRY(w.add_kv(a + ".embedding_length", u32(s.n_embd)));
  PI_TRY(w.add_kv(a + ".block_count", u32(s.n_layer)));
  PI_TRY(w.add_kv(a + ".feed_forward_length", u32(s.n_ff)));
  PI_TRY(w.add_kv(a + ".attention.head_count", u32(s.n_head)));
  PI_TRY(w.add_kv(a + ".attention.head_count_kv", u32(s.n_head_kv)));
  const char* eps_key = s.arch == Arch::Falcon ? ".attention.layer_norm_epsilon"
                                               : ".attention.layer_norm_rms_epsilon";
  PI_TRY(w.add_kv(a + eps_key, f32(s.norm_eps)));
  PI_TRY(w.add_kv(a + ".rope.freq_base", f32(s.rope_base)));
  PI_TRY(w.add_kv(a + ".rope.dimension_count", u32(s.head_dim)));
  if (s.arch == Arch::Qwen3Moe || s.arch == Arch::SmallThinker || s.arch == Arch::GptOss) {
    PI_TRY(w.add_kv(a + ".attention.key_length", u32(s.head_dim)));
    PI_TRY(w.add_kv(a + ".attention.value_length", u32(s.head_dim)));
    PI_TRY(w.add_kv(a + ".expert_feed_forward_length", u32(s.n_ff_exp)));
  }
  if (s.is_moe()) {
    PI_TRY(w.add_kv(a + ".expert_count", u32(s.n_expert)));
    PI_TRY(w.add_kv(a + ".expert_used_count", u32(s.n_expert_used)));
  }
  if (s.arch == Arch::SmallThinker) {
    PI_TRY(w.add_kv(a + ".expert_gating_func", u32(2)));  // sigmoid, as the released models
    if (s.n_swa > 0) PI_TRY(w.add_kv(a + ".attention.sliding_window", u32(s.n_swa)));
  }
  if (s.arch == Arch::GptOss) {
    // The released models' window and YaRN (factor 32 over an original context of 4096).
    if (s.n_swa > 0) PI_TRY(w.add_kv(a + ".attention.sliding_window", u32(s.n_swa)));
    PI_TRY(w.add_kv(a + ".rope.scaling.type", Value(std::string("yarn"))));
    PI_TRY(w.add_kv(a + ".rope.scaling.factor", f32(32.0)));
    PI_TRY(w.add_kv(a + ".rope.scaling.original_context_length", u32(4096)));
  }
  PI_TRY(w.add_kv(a + ".feed_forward_activation",
                  Value(std::string(s.act == model::Activation::SiLU ? "silu" : "relu"))));
  if (s.pwri) PI_TRY(w.add_kv("powerinfer.sparse_threshold", Value(s.threshold())));
  PI_TRY(add_vocab(w, s));

  PI_TRY(w.add_kv("synth.version", Value(uint32_t{1})));
  PI_TRY(w.add_kv("synth.preset", Value(s.preset)));
  PI_TRY(w.add_kv("synth.seed", Value(s.seed)));
  PI_TRY(w.add_kv("synth.activity", f32(s.activity)));
  PI_TRY(w.add_kv("synth.hot_fraction", f32(s.hot_fraction)));
  PI_TRY(w.add_kv("synth.hot_share", f32(s.hot_share)));
  PI_TRY(w.add_kv("synth.power_law_exponent", f32(alpha)));
  PI_TRY(w.add_kv("synth.max_probability", f32(kMaxProbability)));
  PI_TRY(w.add_kv("synth.predictor_rank", u32(s.rank)));
  PI_TRY(w.add_kv("synth.predictor_bias_rows", u32(s.n_bias_rows)));
  PI_TRY(w.add_kv("synth.predictor_threshold", Value(s.threshold())));
  PI_TRY(w.add_kv("synth.noise_ratio", f32(s.noise)));
  PI_TRY(w.add_kv("synth.predictor_margin", f32(s.margin)));
  PI_TRY(w.add_kv("synth.bias_dims", u32(kBiasDims)));
  PI_TRY(w.add_kv("synth.bias_value", f32(s.bias_c)));
  PI_TRY(w.add_kv("synth.embedding_std", f32(s.sigma_e)));
  PI_TRY(w.add_kv("synth.weight_std", f32(s.sigma_w)));
  PI_TRY(w.add_kv("synth.block_output_scale", f32(s.delta)));
  if (s.arch == Arch::Bamboo) PI_TRY(w.add_kv("synth.up_probability", f32(kBambooUpProbability)));
  return Status::Ok();
}

}  // namespace pi::workflows::synth
