#include "powerinfer/session_options.h"

#include <cmath>
#include <functional>
#include <limits>
#include <type_traits>

namespace pi {
namespace {

Error bad(std::string_view name, const char* what) {
  Error e = err("option '%.*s': %s", static_cast<int>(name.size()), name.data(), what);
  e.code = ErrorCode::BadRequest;
  return e;
}

const char* kind_of(const OptionValue& v) {
  switch (v.index()) {
    case 0: return "none";
    case 1: return "a bool";
    case 2: return "an integer";
    case 3: return "a number";
    default: return "text";
  }
}

Error wrong_kind(std::string_view name, const char* want, const OptionValue& v) {
  const std::string what = std::string("expected ") + want + ", got " + kind_of(v);
  return bad(name, what.c_str());
}

Result<int64_t> integer(std::string_view name, const OptionValue& v, int64_t lo, int64_t hi) {
  if (!std::holds_alternative<int64_t>(v)) return wrong_kind(name, "an integer", v);
  const int64_t x = std::get<int64_t>(v);
  if (x < lo || x > hi) {
    const std::string what = "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                             std::to_string(x);
    return bad(name, what.c_str());
  }
  return x;
}

Result<double> number(std::string_view name, const OptionValue& v) {
  if (std::holds_alternative<int64_t>(v)) return static_cast<double>(std::get<int64_t>(v));
  if (!std::holds_alternative<double>(v)) return wrong_kind(name, "a number", v);
  return std::get<double>(v);
}

Result<bool> boolean(std::string_view name, const OptionValue& v) {
  if (!std::holds_alternative<bool>(v)) return wrong_kind(name, "a bool", v);
  return std::get<bool>(v);
}

Result<std::string> text(std::string_view name, const OptionValue& v) {
  if (!std::holds_alternative<std::string>(v)) return wrong_kind(name, "text", v);
  return std::get<std::string>(v);
}

Result<KvCacheType> kv_type(std::string_view name, const OptionValue& v) {
  auto t = text(name, v);
  if (!t.ok()) return t.error();
  if (const auto type = kv_cache_type_from_name(*t)) return *type;
  const std::string what = "'" + *t + "' is not a KV cache type (f16, q8_0, q4_0)";
  return bad(name, what.c_str());
}

using Setter = std::function<Status(SessionOptions&, std::string_view, const OptionValue&)>;

struct Entry {
  OptionInfo info;
  Setter set;
};

constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxBytes = std::numeric_limits<int64_t>::max();

// A setter for the member `field` reaches: `convert` checks the value and gives the member's
// value (cast to the member's type).
template <class Field, class Convert>
Setter setter(Field field, Convert convert) {
  return [=](SessionOptions& o, std::string_view n, const OptionValue& v) -> Status {
    auto x = convert(n, v);
    if (!x.ok()) return x.error();
    auto& member = field(o);
    member = static_cast<std::remove_reference_t<decltype(member)>>(*x);
    return Status::Ok();
  };
}

template <class Field>
Setter int_setter(Field field, int64_t lo, int64_t hi) {
  return setter(field, [=](std::string_view n, const OptionValue& v) { return integer(n, v, lo, hi); });
}
template <class Field>
Setter float_setter(Field field) {
  return setter(field, number);
}
template <class Field>
Setter bool_setter(Field field) {
  return setter(field, boolean);
}
template <class Field>
Setter text_setter(Field field) {
  return setter(field, text);
}

#define PI_FIELD(expr) [](SessionOptions& o) -> auto& { return expr; }

const std::vector<Entry>& table() {
  static const std::vector<Entry> entries = {
      {{"n_ctx", "int", "KV positions; 0: the model's training context, at most 4096"},
       int_setter(PI_FIELD(o.n_ctx), 0, kMaxInt)},
      {{"n_batch", "int", "prompt tokens per forward pass"}, int_setter(PI_FIELD(o.n_batch), 1, kMaxInt)},
      {{"n_threads", "int", "0: one per hardware thread"}, int_setter(PI_FIELD(o.n_threads), 0, 4096)},
      {{"n_seq_max", "int", "sequences the session holds (1..64)"}, int_setter(PI_FIELD(o.n_seq_max), 1, 64)},
      {{"temperature", "float", "0: greedy"}, float_setter(PI_FIELD(o.sampling.temperature))},
      {{"top_k", "int", "<= 0: the whole vocabulary"},
       int_setter(PI_FIELD(o.sampling.top_k), -kMaxInt, kMaxInt)},
      {{"top_p", "float", "1: off"}, float_setter(PI_FIELD(o.sampling.top_p))},
      {{"min_p", "float", "0: off"}, float_setter(PI_FIELD(o.sampling.min_p))},
      {{"repeat_penalty", "float", "1: off"}, float_setter(PI_FIELD(o.sampling.repeat_penalty))},
      {{"repeat_last_n", "int", "penalty window; 0: off, -1: the whole history"},
       int_setter(PI_FIELD(o.sampling.repeat_last_n), -1, kMaxInt)},
      {{"presence_penalty", "float", "0: off"}, float_setter(PI_FIELD(o.sampling.presence_penalty))},
      {{"frequency_penalty", "float", "0: off"}, float_setter(PI_FIELD(o.sampling.frequency_penalty))},
      {{"seed", "int", "the sampler's seed (sequence i: seed + i)"}, int_setter(PI_FIELD(o.sampling.seed), 0, kMaxBytes)},
      {{"grammar", "text", "GBNF the generated text must follow; empty: none"},
       text_setter(PI_FIELD(o.sampling.grammar))},
      {{"dense", "bool", "PowerInfer files: compute every FFN neuron (no predictors)"},
       bool_setter(PI_FIELD(o.sparse.dense))},
      {{"sparse_threshold", "float|none", "the predictors' threshold; none: the file's"},
       [](SessionOptions& o, std::string_view n, const OptionValue& v) -> Status {
         if (std::holds_alternative<std::monostate>(v)) {
           o.sparse.threshold.reset();
           return Status::Ok();
         }
         auto x = number(n, v);
         if (!x.ok()) return x.error();
         o.sparse.threshold = static_cast<float>(*x);
         return Status::Ok();
       }},
      {{"all_logits", "bool", "keep the logits of every fed token"}, bool_setter(PI_FIELD(o.all_logits))},
      {{"cache_type_k", "text", "the cached keys' type: f16, q8_0 or q4_0"}, setter(PI_FIELD(o.kv_type_k), kv_type)},
      {{"cache_type_v", "text", "the cached values' type: f16, q8_0 or q4_0"}, setter(PI_FIELD(o.kv_type_v), kv_type)},
      {{"swa_full", "bool", "sliding-window layers keep the whole context"}, bool_setter(PI_FIELD(o.swa_full))},
      {{"repack", "bool", "the CPU keeps weights in its fastest layouts (same results)"},
       bool_setter(PI_FIELD(o.repack))},
      {{"device", "text", "cpu, ref, sim, cuda (CUDA builds)"}, text_setter(PI_FIELD(o.device))},
      {{"device_budget", "bytes", "bytes the session may allocate on the device; 0: all it has"},
       int_setter(PI_FIELD(o.device_budget), 0, kMaxBytes)},
      {{"vram_budget", "bytes|none", "hybrid: bytes for the device's part; none: its free memory"},
       [](SessionOptions& o, std::string_view n, const OptionValue& v) -> Status {
         if (std::holds_alternative<std::monostate>(v)) {
           o.vram_budget.reset();
           return Status::Ok();
         }
         auto x = integer(n, v, 0, kMaxBytes);
         if (!x.ok()) return x.error();
         o.vram_budget = static_cast<uint64_t>(*x);
         return Status::Ok();
       }},
      {{"n_gpu_layers", "int", "hybrid: whole layers on the device; -1: as many as fit"},
       int_setter(PI_FIELD(o.n_gpu_layers), -1, kMaxInt)},
      {{"n_cpu_moe", "int", "hybrid: the first N layers' experts stay on the CPU"},
       int_setter(PI_FIELD(o.n_cpu_moe), 0, kMaxInt)},
      {{"expert_cache", "int", "hybrid: device slots per layer for recently used experts"},
       int_setter(PI_FIELD(o.expert_cache), 0, kMaxInt)},
      {{"moe_ram", "bytes", "a mixture of experts larger than memory: its weights in this much RAM; 0: off"},
       int_setter(PI_FIELD(o.moe_ram), 0, kMaxBytes)},
      {{"activation_stats", "text", "hybrid: activation statistics; empty: beside the model"},
       text_setter(PI_FIELD(o.activation_stats))},
      {{"gpu_index", "text", "hybrid: the plan's index file; empty: MODEL.generated.gpuidx"},
       text_setter(PI_FIELD(o.gpu_index))},
  };
  return entries;
}

#undef PI_FIELD

}  // namespace

const std::vector<OptionInfo>& session_option_list() {
  static const std::vector<OptionInfo> list = [] {
    std::vector<OptionInfo> l;
    for (const Entry& e : table()) l.push_back(e.info);
    return l;
  }();
  return list;
}

Status set_session_option(SessionOptions& o, std::string_view name, const OptionValue& value) {
  for (const Entry& e : table())
    if (e.info.name == name) return e.set(o, name, value);
  std::string known;
  for (const Entry& e : table()) known += (known.empty() ? "" : ", ") + e.info.name;
  const std::string what = "unknown (options: " + known + ")";
  return bad(name, what.c_str());
}

}  // namespace pi
