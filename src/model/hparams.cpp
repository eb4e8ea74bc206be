#include "model/hparams.h"

#include <cmath>
#include <string>
#include <variant>

namespace pi::model {

backend::AttnParams HParams::attn_params() const {
  return {n_head, n_head_kv, head_dim, 1.0f / std::sqrt(static_cast<float>(head_dim))};
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::SiLU:
      return "silu";
    case Activation::ReLU:
      return "relu";
    case Activation::GELU:
      return "gelu";
  }
  return "?";
}

namespace {

std::string key(const HParams& hp, const char* suffix) { return hp.arch_name + "." + suffix; }

// A required positive integer key.
Result<int64_t> positive(const gguf::File& f, const std::string& k) {
  auto v = f.get_int(k);
  if (!v.ok()) return v.error();
  if (*v <= 0 || *v > (int64_t{1} << 31)) {
    return err("%s: metadata key '%s' = %lld is out of range", f.path().c_str(), k.c_str(),
               static_cast<long long>(*v));
  }
  return *v;
}

// An optional positive integer key with a default.
Result<int64_t> positive_or(const gguf::File& f, const std::string& k, int64_t def) {
  if (f.find(k) == nullptr) return def;
  return positive(f, k);
}

Result<float> float_or(const gguf::File& f, const std::string& k, float def) {
  if (f.find(k) == nullptr) return def;
  auto v = f.get_number(k);
  if (!v.ok()) return v.error();
  if (!std::isfinite(*v)) {
    return err("%s: metadata key '%s' is not finite", f.path().c_str(), k.c_str());
  }
  return static_cast<float>(*v);
}

// YaRN's settings (read_common_hparams: rope.scaling.type "yarn").
Status read_yarn(const gguf::File& f, HParams& hp, const char* path) {
  RopeYarn& y = hp.rope_yarn;
  const std::string orig = key(hp, "rope.scaling.original_context_length");
  auto n = positive_or(f, orig, hp.n_ctx_train);
  if (!n.ok()) return n.error();
  if (*n <= 0)
    return err("%s: rope.scaling.type is yarn but neither '%s' nor the context length is set", path, orig.c_str());
  y.n_ctx_orig = *n;
  struct {
    const char* suffix;
    float* out;
    float def;
  } keys[] = {{"rope.scaling.yarn_ext_factor", &y.ext_factor, 1.0f},
              {"rope.scaling.yarn_attn_factor", &y.attn_factor, 1.0f},
              {"rope.scaling.yarn_beta_fast", &y.beta_fast, 32.0f},
              {"rope.scaling.yarn_beta_slow", &y.beta_slow, 1.0f}};
  for (const auto& k : keys) {
    auto v = float_or(f, key(hp, k.suffix), k.def);
    if (!v.ok()) return v.error();
    *k.out = *v;
  }
  // llama.cpp writes a negative ext_factor for "the default" (1 under YaRN).
  if (y.ext_factor < 0.0f) y.ext_factor = 1.0f;
  // The ramp's ends: rounded (ggml) unless rope.scaling.yarn_truncate says false; gpt-oss was
  // trained with them unrounded (its config's truncate: false; llama.cpp rounds them anyway,
  // vLLM and SGLang no longer do), so there the default is false.
  const std::string truncate = key(hp, "rope.scaling.yarn_truncate");
  y.truncate = hp.arch_name != "gpt-oss";
  if (const gguf::Value* v = f.find(truncate); v != nullptr) {
    const bool* b = std::get_if<bool>(&v->data);
    if (b == nullptr) return err("%s: metadata key '%s' must be a bool", path, truncate.c_str());
    y.truncate = *b;
  }
  if (!(y.beta_fast > 0.0f && y.beta_slow > 0.0f))
    return err("%s: metadata keys '%s' and '%s' must be positive", path, key(hp, "rope.scaling.yarn_beta_fast").c_str(),
               key(hp, "rope.scaling.yarn_beta_slow").c_str());
  return Status::Ok();
}

}  // namespace

Status read_moe_hparams(const gguf::File& f, HParams& hp) {
  const char* path = f.path().c_str();
  const std::string count = key(hp, "expert_count"), used = key(hp, "expert_used_count");
  if (f.find(count) == nullptr) {
    if (f.find(used) != nullptr)
      return err("%s: metadata key '%s' is present without '%s'", path, used.c_str(), count.c_str());
    return Status::Ok();
  }
  auto n = positive(f, count);
  if (!n.ok()) return n.error();
  auto k = positive(f, used);
  if (!k.ok()) return k.error();
  if (*k > *n) {
    return err("%s: metadata key '%s' = %lld exceeds '%s' = %lld (a token cannot use more experts "
               "than there are)",
               path, used.c_str(), static_cast<long long>(*k), count.c_str(), static_cast<long long>(*n));
  }
  if (*k > kMaxExpertsUsed) {
    return err("%s: metadata key '%s' = %lld: at most %lld experts per token are supported", path, used.c_str(),
               static_cast<long long>(*k), static_cast<long long>(kMaxExpertsUsed));
  }
  auto width = positive_or(f, key(hp, "expert_feed_forward_length"), hp.n_ff);
  if (!width.ok()) return width.error();
  const std::string gating = key(hp, "expert_gating_func");
  if (f.find(gating) != nullptr) {
    auto g = f.get_int(gating);
    if (!g.ok()) return g.error();
    // 3: llama.cpp's softmax over the chosen logits, which is what our softmax computes.
    constexpr int64_t kSoftmaxWeight = 3;
    if (*g != static_cast<int64_t>(Gating::Softmax) && *g != static_cast<int64_t>(Gating::Sigmoid) &&
        *g != kSoftmaxWeight) {
      return err("%s: metadata key '%s' = %lld: unknown gating function (1 softmax, 2 sigmoid and 3 "
                 "softmax of the chosen are supported)",
                 path, gating.c_str(), static_cast<long long>(*g));
    }
    hp.gating = *g == kSoftmaxWeight ? Gating::Softmax : static_cast<Gating>(*g);
  }
  hp.n_expert = *n;
  hp.n_expert_used = *k;
  hp.n_ff_exp = *width;
  return Status::Ok();
}

Status read_swa_hparams(const gguf::File& f, HParams& hp) {
  const std::string window = key(hp, "attention.sliding_window");
  if (f.find(window) == nullptr) return Status::Ok();
  auto w = positive(f, window);
  if (!w.ok()) return w.error();
  if (hp.n_ctx_train > 0 && *w > hp.n_ctx_train) {
    return err("%s: metadata key '%s' = %lld exceeds the context length %lld ('%s')", f.path().c_str(),
               window.c_str(), static_cast<long long>(*w), static_cast<long long>(hp.n_ctx_train),
               key(hp, "context_length").c_str());
  }
  auto pattern = positive_or(f, key(hp, "attention.sliding_window_pattern"), 4);
  if (!pattern.ok()) return pattern.error();
  hp.n_swa = *w;
  hp.swa_pattern = *pattern;
  return Status::Ok();
}

Status read_common_hparams(const gguf::File& f, HParams& hp) {
  const char* path = f.path().c_str();
  auto n_embd = positive(f, key(hp, "embedding_length"));
  if (!n_embd.ok()) return n_embd.error();
  auto n_layer = positive(f, key(hp, "block_count"));
  if (!n_layer.ok()) return n_layer.error();
  auto n_head = positive(f, key(hp, "attention.head_count"));
  if (!n_head.ok()) return n_head.error();
  auto n_head_kv = positive_or(f, key(hp, "attention.head_count_kv"), *n_head);
  if (!n_head_kv.ok()) return n_head_kv.error();
  auto n_ff = positive_or(f, key(hp, "feed_forward_length"), 4 * *n_embd);
  if (!n_ff.ok()) return n_ff.error();
  hp.n_embd = *n_embd;
  hp.n_layer = *n_layer;
  hp.n_head = *n_head;
  hp.n_head_kv = *n_head_kv;
  hp.n_ff = *n_ff;
  hp.n_ctx_train = f.get_int_or(key(hp, "context_length"), 0);

  if (f.find(key(hp, "attention.key_length")) == nullptr && hp.n_embd % hp.n_head != 0) {
    return err("%s: embedding_length %lld is not a multiple of attention.head_count %lld", path,
               static_cast<long long>(hp.n_embd), static_cast<long long>(hp.n_head));
  }
  auto head_dim = positive_or(f, key(hp, "attention.key_length"), hp.n_embd / hp.n_head);
  if (!head_dim.ok()) return head_dim.error();
  hp.head_dim = *head_dim;
  auto v_len = positive_or(f, key(hp, "attention.value_length"), hp.head_dim);
  if (!v_len.ok()) return v_len.error();
  if (*v_len != hp.head_dim) {
    return err("%s: attention.value_length %lld differs from key_length %lld (unsupported)", path,
               static_cast<long long>(*v_len), static_cast<long long>(hp.head_dim));
  }
  if (hp.n_head % hp.n_head_kv != 0) {
    return err("%s: attention.head_count %lld is not a multiple of attention.head_count_kv %lld",
               path, static_cast<long long>(hp.n_head), static_cast<long long>(hp.n_head_kv));
  }
  auto n_rot = positive_or(f, key(hp, "rope.dimension_count"), hp.head_dim);
  if (!n_rot.ok()) return n_rot.error();
  if (*n_rot > hp.head_dim || *n_rot % 2 != 0) {
    return err("%s: rope.dimension_count %lld must be even and at most the head size %lld", path,
               static_cast<long long>(*n_rot), static_cast<long long>(hp.head_dim));
  }
  hp.n_rot = *n_rot;

  auto base = float_or(f, key(hp, "rope.freq_base"), 10000.0f);
  if (!base.ok()) return base.error();
  if (*base <= 0.0f) return err("%s: rope.freq_base must be positive", path);
  hp.rope_base = *base;

  // Linear position scaling: positions are multiplied by 1/factor. Older files write
  // rope.scale_linear instead of rope.scaling.*. YaRN scales by the same factor and blends
  // (kernels/rope_yarn.h), with llama.cpp's keys and defaults: the original context from
  // rope.scaling.original_context_length (else the training context), ext_factor 1,
  // attn_factor 1, beta_fast 32, beta_slow 1.
  float factor = 1.0f;
  const std::string type_key = key(hp, "rope.scaling.type");
  if (f.find(type_key) != nullptr) {
    auto type = f.get_string(type_key);
    if (!type.ok()) return type.error();
    if (*type == "linear" || *type == "yarn") {
      auto fac = float_or(f, key(hp, "rope.scaling.factor"), 1.0f);
      if (!fac.ok()) return fac.error();
      factor = *fac;
    } else if (*type != "none") {
      return err("%s: rope.scaling.type '%s' is not supported (supported: none, linear, yarn)", path,
                 type->c_str());
    }
    if (*type == "yarn") PI_TRY(read_yarn(f, hp, path));
  } else {
    auto fac = float_or(f, key(hp, "rope.scale_linear"), 1.0f);
    if (!fac.ok()) return fac.error();
    factor = *fac;
  }
  if (factor <= 0.0f) return err("%s: rope scaling factor must be positive", path);
  hp.rope_freq_scale = 1.0f / factor;
  return Status::Ok();
}

Result<Activation> read_activation(const gguf::File& f, const HParams& hp, Activation fallback) {
  const std::string k = key(hp, "feed_forward_activation");
  if (f.find(k) == nullptr) return hp.powerinfer ? Activation::ReLU : fallback;
  auto s = f.get_string(k);
  if (!s.ok()) return s.error();
  Activation a;
  if (*s == "relu") {
    a = Activation::ReLU;
  } else if (*s == "silu" || *s == "swish") {
    a = Activation::SiLU;
  } else if (*s == "gelu") {
    a = Activation::GELU;
  } else {
    return err("%s: metadata key '%s' = '%s' is not one of relu, silu, gelu", f.path().c_str(),
               k.c_str(), s->c_str());
  }
  if (hp.powerinfer && a != Activation::ReLU) {
    return err("%s: PowerInfer file declares %s = '%s', but PowerInfer models are ReLU models",
               f.path().c_str(), k.c_str(), s->c_str());
  }
  return a;
}

}  // namespace pi::model
