// The C API (include/powerinfer/powerinfer.h) over the C++ public API (Engine, Session,
// Vocabulary) and the chat templates. Nothing thrown crosses it: every entry point that calls
// into C++ catches, and reports a std::exception (bad_alloc included) as a status with its
// message kept on the handle.
#include "powerinfer/powerinfer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "chat/chat_template.h"
#include "powerinfer/cpu.h"
#include "powerinfer/engine.h"
#include "powerinfer/generator.h"
#include "powerinfer/grammar.h"
#include "powerinfer/log.h"
#include "powerinfer/perplexity.h"
#include "powerinfer/profile.h"
#include "powerinfer/quantize.h"

struct pi_engine {
  std::unique_ptr<pi::Engine> engine;  // null after a failed load
  std::string error;
};

struct pi_session {
  const pi_engine* engine = nullptr;
  std::unique_ptr<pi::Session> session;  // null after a failed creation
  std::string error;
};

namespace {

// PI_KERNELS_ISA=scalar|avx2|...: the CPU kernels of a lower ISA (tests, benchmarks), read
// once, before the first model is loaded (the layouts weights are repacked into follow it).
void apply_isa_environment() {
  static const bool once = [] {
    if (const char* isa = std::getenv("PI_KERNELS_ISA"); isa != nullptr && *isa != '\0') {
      if (const std::string why = pi::set_cpu_isa(isa); !why.empty()) std::fprintf(stderr, "PI_KERNELS_ISA=%s\n", why.c_str());
    }
    return true;
  }();
  (void)once;
}

#ifndef PI_VERSION_STRING
#define PI_VERSION_STRING "0.0.0"
#endif

pi_status status_of(const pi::Error& e, pi_status fallback) {
  switch (e.code) {
    case pi::ErrorCode::BadRequest: return PI_ERR_INVALID_ARGUMENT;
    case pi::ErrorCode::ContextFull: return PI_ERR_CONTEXT_FULL;
    case pi::ErrorCode::OutOfMemory: return PI_ERR_OUT_OF_MEMORY;
    case pi::ErrorCode::Cancelled:
    case pi::ErrorCode::Internal: break;
  }
  return fallback;
}

// Runs f (returning a pi::Status) and records a failure in `slot`; exceptions become statuses.
template <typename F>
pi_status guarded(std::string& slot, pi_status fallback, F&& f) {
  try {
    const pi::Status st = f();
    if (st.ok()) return PI_OK;
    slot = st.error().message;
    return status_of(st.error(), fallback);
  } catch (const std::bad_alloc&) {
    slot = "out of memory";
    return PI_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    slot = std::string("internal error: ") + e.what();
    return PI_ERR_INTERNAL;
  }
}

pi_status invalid(std::string& slot, std::string what) {
  slot = std::move(what);
  return PI_ERR_INVALID_ARGUMENT;
}

const pi::Vocabulary* vocab(const pi_engine* e) {
  return e != nullptr && e->engine != nullptr ? e->engine->vocabulary() : nullptr;
}

bool session_ready(const pi_session* s) { return s != nullptr && s->session != nullptr; }

// Copies `text` into out[0..cap) with a NUL when there is room; returns its length.
int32_t emit(const std::string& text, char* out, int32_t cap) {
  if (text.size() > static_cast<size_t>(INT32_MAX - 1)) return -1;
  const auto n = static_cast<int32_t>(text.size());
  if (out != nullptr && cap > 0) {
    std::memcpy(out, text.data(), static_cast<size_t>(std::min(n, cap)));
    if (cap > n) out[n] = '\0';
  }
  return n;
}

pi::SamplingParams sampling_of(const pi_sampling& p) {
  pi::SamplingParams s;
  s.temperature = p.temperature;
  s.top_k = p.top_k;
  s.top_p = p.top_p;
  s.min_p = p.min_p;
  s.repeat_penalty = p.repeat_penalty;
  s.repeat_last_n = p.repeat_last_n;
  s.presence_penalty = p.presence_penalty;
  s.frequency_penalty = p.frequency_penalty;
  s.seed = p.seed;
  if (p.grammar != nullptr) s.grammar = p.grammar;
  return s;
}

// The C options as the engine's (every field; a bad KV type or MoE count names the field).
pi::Result<pi::SessionOptions> session_options_of(const pi_session_options& o) {
  pi::SessionOptions so;
  so.n_ctx = o.n_ctx;
  so.n_batch = o.n_batch;
  so.n_threads = o.n_threads;
  so.n_seq_max = o.n_seq_max;
  so.sampling = sampling_of(o.sampling);
  so.sparse.dense = o.dense;
  if (!std::isnan(o.sparse_threshold)) so.sparse.threshold = o.sparse_threshold;
  so.repack = o.repack;
  so.device = o.device != nullptr ? o.device : "cpu";
  so.device_budget = o.device_budget;
  if (o.vram_budget >= 0) so.vram_budget = static_cast<uint64_t>(o.vram_budget);
  so.n_gpu_layers = o.n_gpu_layers;
  if (o.gpu_index != nullptr) so.gpu_index = o.gpu_index;
  if (o.activation_stats != nullptr) so.activation_stats = o.activation_stats;
  if (o.n_cpu_moe < 0 || o.expert_cache < 0)
    return pi::err("pi_session_options: n_cpu_moe %d and expert_cache %d must not be negative", o.n_cpu_moe,
                   o.expert_cache);
  so.n_cpu_moe = o.n_cpu_moe;
  so.expert_cache = o.expert_cache;
  so.moe_ram = o.moe_ram;
  so.swa_full = o.swa_full;
  for (auto [what, in, type] : {std::tuple{"type_k", o.type_k, &so.kv_type_k},
                                std::tuple{"type_v", o.type_v, &so.kv_type_v}}) {
    switch (in) {
      case PI_KV_F16: *type = pi::KvCacheType::F16; break;
      case PI_KV_Q8_0: *type = pi::KvCacheType::Q8_0; break;
      case PI_KV_Q4_0: *type = pi::KvCacheType::Q4_0; break;
      default:
        return pi::err("pi_session_options.%s %d is not a pi_kv_type (F16 0, Q8_0 1, Q4_0 2)", what,
                       static_cast<int>(in));
    }
  }
  return so;
}

// A handle-less call's failure: its message into the caller's buffer (cut to fit, NUL-terminated).
pi_status to_buffer(const std::string& message, char* error, size_t error_cap, pi_status st) {
  if (error != nullptr && error_cap > 0) {
    const size_t n = std::min(message.size(), error_cap - 1);
    std::memcpy(error, message.data(), n);
    error[n] = '\0';
  }
  return st;
}

// A handle-less call: runs f (a pi::Status) as guarded() does; a failure's message goes to the
// caller's buffer, its status from the error's code (BadRequest: PI_ERR_INVALID_ARGUMENT), else
// `fallback`.
template <typename F>
pi_status guarded_to_buffer(char* error, size_t error_cap, pi_status fallback, F&& f) {
  std::string message;
  const pi_status st = guarded(message, fallback, std::forward<F>(f));
  return st == PI_OK ? PI_OK : to_buffer(message, error, error_cap, st);
}

}  // namespace

extern "C" {

const char* pi_version(void) { return PI_VERSION_STRING; }

const char* pi_status_name(int status) {
  switch (status) {
    case PI_OK: return "ok";
    case PI_ERR_INVALID_ARGUMENT: return "invalid_argument";
    case PI_ERR_LOAD: return "load";
    case PI_ERR_CONTEXT_FULL: return "context_full";
    case PI_ERR_OUT_OF_MEMORY: return "out_of_memory";
    case PI_ERR_INTERNAL: return "internal";
  }
  return "unknown";
}

pi_load_options pi_load_options_default(void) {
  const pi::LoadOptions d;
  return pi_load_options{PI_LOAD_AUTO, d.mlock, d.check_tensors, d.repack};
}

pi_status pi_engine_load(const char* path, const pi_load_options* opts, pi_engine** out) {
  if (out == nullptr) return PI_ERR_INVALID_ARGUMENT;
  *out = new (std::nothrow) pi_engine();
  if (*out == nullptr) return PI_ERR_OUT_OF_MEMORY;
  pi_engine& e = **out;
  if (path == nullptr) return invalid(e.error, "pi_engine_load: the path is NULL");
  apply_isa_environment();
  const pi_load_options o = opts != nullptr ? *opts : pi_load_options_default();
  if (o.mode != PI_LOAD_AUTO && o.mode != PI_LOAD_MAP && o.mode != PI_LOAD_READ)
    return invalid(e.error, "pi_engine_load: unknown load mode " + std::to_string(o.mode));
  return guarded(e.error, PI_ERR_LOAD, [&]() -> pi::Status {
    pi::LoadOptions lo;
    lo.load = o.mode == PI_LOAD_MAP ? pi::ModelLoad::Map
              : o.mode == PI_LOAD_READ ? pi::ModelLoad::Read
                                       : pi::ModelLoad::Auto;
    lo.mlock = o.mlock;
    lo.check_tensors = o.check_tensors;
    lo.repack = o.repack;
    auto loaded = pi::Engine::load(path, lo);
    if (!loaded.ok()) return loaded.error();
    e.engine = std::move(*loaded);
    return pi::Status::Ok();
  });
}

const char* pi_engine_error(const pi_engine* engine) {
  return engine != nullptr ? engine->error.c_str() : "pi_engine_error: the engine is NULL";
}

void pi_engine_free(pi_engine* engine) { delete engine; }

pi_status pi_engine_info(const pi_engine* engine, pi_model_info* info) {
  if (engine == nullptr || engine->engine == nullptr || info == nullptr) return PI_ERR_INVALID_ARGUMENT;
  const pi::ModelInfo& i = engine->engine->info();
  *info = pi_model_info{};
  info->architecture = i.architecture.c_str();
  info->name = i.name.c_str();
  info->powerinfer = i.powerinfer;
  info->mapped = i.mmap;
  info->n_vocab = i.n_vocab;
  info->n_ctx_train = i.n_ctx_train;
  info->n_embd = i.n_embd;
  info->n_layer = i.n_layer;
  info->n_ff = i.n_ff;
  info->n_head = i.n_head;
  info->n_head_kv = i.n_head_kv;
  info->file_bytes = i.file_bytes;
  info->weight_bytes_per_token = i.weight_bytes_per_token;
  return PI_OK;
}

int32_t pi_n_vocab(const pi_engine* engine) {
  const pi::Vocabulary* v = vocab(engine);
  return v != nullptr ? v->n_vocab() : 0;
}

int32_t pi_token_bos(const pi_engine* engine) {
  const pi::Vocabulary* v = vocab(engine);
  return v != nullptr ? v->bos() : -1;
}

int32_t pi_token_eos(const pi_engine* engine) {
  const pi::Vocabulary* v = vocab(engine);
  return v != nullptr ? v->eos() : -1;
}

bool pi_token_is_eog(const pi_engine* engine, int32_t token) {
  const pi::Vocabulary* v = vocab(engine);
  return v != nullptr && v->is_eog(token);
}

bool pi_add_bos(const pi_engine* engine) {
  const pi::Vocabulary* v = vocab(engine);
  return v != nullptr && v->add_bos();
}

int32_t pi_tokenize(const pi_engine* engine, const char* text, int32_t len, bool add_bos,
                    bool parse_special, int32_t* tokens, int32_t cap) {
  const pi::Vocabulary* v = vocab(engine);
  if (v == nullptr || text == nullptr || (tokens == nullptr && cap > 0)) return -1;
  try {
    const std::string_view t(text, len < 0 ? std::strlen(text) : static_cast<size_t>(len));
    const std::vector<int32_t> ids = v->encode(t, add_bos, parse_special);
    if (ids.size() > static_cast<size_t>(INT32_MAX)) return -1;
    const auto n = static_cast<int32_t>(ids.size());
    if (n <= cap) std::copy(ids.begin(), ids.end(), tokens);
    return n;
  } catch (const std::exception&) {
    return -1;
  }
}

int32_t pi_detokenize(const pi_engine* engine, const int32_t* tokens, int32_t n,
                      bool skip_special, char* text, int32_t cap) {
  const pi::Vocabulary* v = vocab(engine);
  if (v == nullptr || n < 0 || (tokens == nullptr && n > 0) || (text == nullptr && cap > 0)) return -1;
  try {
    return emit(v->decode({tokens, static_cast<size_t>(n)}, skip_special), text, cap);
  } catch (const std::exception&) {
    return -1;
  }
}

int32_t pi_token_piece(const pi_engine* engine, int32_t token, char* text, int32_t cap) {
  const pi::Vocabulary* v = vocab(engine);
  if (v == nullptr || (text == nullptr && cap > 0)) return -1;
  try {
    return emit(v->piece(token), text, cap);
  } catch (const std::exception&) {
    return -1;
  }
}

int32_t pi_chat_apply_template(pi_engine* engine, const char* tmpl, const pi_chat_message* messages,
                               size_t n_messages, bool add_assistant, char* text, int32_t cap) {
  if (engine == nullptr) return -1;
  if (engine->engine == nullptr || (messages == nullptr && n_messages > 0) || (text == nullptr && cap > 0)) {
    engine->error = "pi_chat_apply_template: a NULL argument or an engine that failed to load";
    return -1;
  }
  std::string rendered;
  const pi_status st = guarded(engine->error, PI_ERR_INVALID_ARGUMENT, [&]() -> pi::Status {
    std::vector<pi::chat::Message> msgs;
    for (size_t i = 0; i < n_messages; ++i) {
      if (messages[i].role == nullptr || messages[i].content == nullptr)
        return pi::err("pi_chat_apply_template: message %zu has a NULL role or content", i);
      msgs.push_back({messages[i].role, messages[i].content});
    }
    auto t = pi::chat::resolve_template(tmpl != nullptr ? tmpl : "", engine->engine->info().chat_template);
    if (!t.ok()) return t.error();
    auto r = pi::chat::render(*t, msgs, add_assistant);
    if (!r.ok()) return r.error();
    rendered = std::move(*r);
    return pi::Status::Ok();
  });
  return st == PI_OK ? emit(rendered, text, cap) : -1;
}

int32_t pi_json_schema_to_grammar(pi_engine* engine, const char* schema, char* text, int32_t cap) {
  if (engine == nullptr) return -1;
  if (schema == nullptr || (text == nullptr && cap > 0)) {
    engine->error = "pi_json_schema_to_grammar: a NULL argument";
    return -1;
  }
  std::string gbnf;
  const pi_status st = guarded(engine->error, PI_ERR_INVALID_ARGUMENT, [&]() -> pi::Status {
    auto g = pi::json_schema_to_grammar(schema);
    if (!g.ok()) return g.error();
    gbnf = std::move(*g);
    return pi::Status::Ok();
  });
  return st == PI_OK ? emit(gbnf, text, cap) : -1;
}

namespace {
// A pi_log_set callback with its user pointer. Each call makes a new one and keeps the old
// ones to the end of the process: a thread logging while another replaces the callback may
// still hold it.
struct LogTarget {
  pi_log_callback fn;
  void* user;
};
std::mutex g_log_targets_mutex;
std::vector<std::unique_ptr<LogTarget>> g_log_targets;
static_assert(static_cast<int>(pi::LogLevel::Debug) == PI_LOG_DEBUG && static_cast<int>(pi::LogLevel::Info) == PI_LOG_INFO &&
              static_cast<int>(pi::LogLevel::Warn) == PI_LOG_WARN && static_cast<int>(pi::LogLevel::Error) == PI_LOG_ERROR &&
              static_cast<int>(pi::LogLevel::Silent) == PI_LOG_NONE);

void to_callback(pi::LogLevel level, const char* message, void* target) {
  const auto* t = static_cast<const LogTarget*>(target);
  t->fn(static_cast<int32_t>(level), message, t->user);
}
}  // namespace

void pi_log_set(pi_log_callback callback, void* user) {
  if (callback == nullptr) {
    pi::set_log_sink(nullptr, nullptr);
    return;
  }
  std::lock_guard<std::mutex> lock(g_log_targets_mutex);
  g_log_targets.push_back(std::make_unique<LogTarget>(LogTarget{callback, user}));
  pi::set_log_sink(to_callback, g_log_targets.back().get());
}

void pi_log_set_level(int32_t level) {
  pi::set_log_level(static_cast<pi::LogLevel>(std::clamp<int32_t>(level, PI_LOG_DEBUG, PI_LOG_NONE)));
}

pi_sampling pi_sampling_default(void) {
  const pi::SamplingParams d;
  return pi_sampling{d.temperature,    d.top_k,         d.top_p,
                     d.min_p,          d.repeat_penalty, d.repeat_last_n,
                     d.presence_penalty, d.frequency_penalty, d.seed, nullptr};
}

pi_session_options pi_session_options_default(void) {
  const pi::SessionOptions d;
  pi_session_options o{};
  o.n_ctx = d.n_ctx;
  o.n_batch = d.n_batch;
  o.n_threads = d.n_threads;
  o.n_seq_max = d.n_seq_max;
  o.sampling = pi_sampling_default();
  o.dense = false;
  o.sparse_threshold = NAN;
  o.repack = d.repack;
  o.device = "cpu";
  o.device_budget = 0;
  o.vram_budget = -1;
  o.n_gpu_layers = d.n_gpu_layers;
  o.gpu_index = nullptr;
  o.activation_stats = nullptr;
  o.type_k = PI_KV_F16;
  o.type_v = PI_KV_F16;
  o.n_cpu_moe = d.n_cpu_moe;
  o.expert_cache = d.expert_cache;
  o.moe_ram = d.moe_ram;
  o.swa_full = d.swa_full;
  return o;
}

pi_status pi_session_create(const pi_engine* engine, const pi_session_options* opts, pi_session** out) {
  if (out == nullptr) return PI_ERR_INVALID_ARGUMENT;
  *out = new (std::nothrow) pi_session();
  if (*out == nullptr) return PI_ERR_OUT_OF_MEMORY;
  pi_session& s = **out;
  s.engine = engine;
  if (engine == nullptr || engine->engine == nullptr)
    return invalid(s.error, "pi_session_create: the engine is NULL or failed to load");
  const pi_session_options o = opts != nullptr ? *opts : pi_session_options_default();
  // A session that cannot be made is the caller's options (sizes, device, budget) unless the
  // engine says otherwise (out of memory).
  return guarded(s.error, PI_ERR_INVALID_ARGUMENT, [&]() -> pi::Status {
    auto so = session_options_of(o);
    if (!so.ok()) return so.error();
    auto created = pi::Session::create(*engine->engine, *so);
    if (!created.ok()) return created.error();
    s.session = std::move(*created);
    return pi::Status::Ok();
  });
}

const char* pi_session_error(const pi_session* session) {
  return session != nullptr ? session->error.c_str() : "pi_session_error: the session is NULL";
}

void pi_session_free(pi_session* session) { delete session; }

pi_status pi_session_prompt(pi_session* session, const int32_t* tokens, size_t n) {
  if (session == nullptr) return PI_ERR_INVALID_ARGUMENT;
  if (!session_ready(session)) return invalid(session->error, "the session failed to be created");
  if (tokens == nullptr && n > 0) return invalid(session->error, "pi_session_prompt: tokens is NULL");
  // The engine codes a full context and memory; its other refusals are the caller's tokens.
  return guarded(session->error, PI_ERR_INVALID_ARGUMENT,
                 [&] { return session->session->prompt({tokens, n}); });
}

int32_t pi_session_sample(pi_session* session) {
  if (!session_ready(session)) return -1;
  try {
    return session->session->sample();
  } catch (const std::exception& e) {
    session->error = std::string("internal error: ") + e.what();
    return -1;
  }
}

pi_status pi_session_advance(pi_session* session, int32_t token) {
  if (session == nullptr) return PI_ERR_INVALID_ARGUMENT;
  if (!session_ready(session)) return invalid(session->error, "the session failed to be created");
  return guarded(session->error, PI_ERR_INVALID_ARGUMENT, [&] { return session->session->advance(token); });
}

pi_generate_params pi_generate_params_default(void) {
  return pi_generate_params{-1, nullptr, 0, false, nullptr, 0};
}

pi_status pi_session_generate(pi_session* session, const pi_generate_params* params,
                              pi_text_callback on_text, void* user, pi_gen_end* end) {
  if (session == nullptr) return PI_ERR_INVALID_ARGUMENT;
  if (!session_ready(session)) return invalid(session->error, "the session failed to be created");
  if (vocab(session->engine) == nullptr)
    return invalid(session->error, "pi_session_generate: the model has no vocabulary");
  const pi_generate_params p = params != nullptr ? *params : pi_generate_params_default();
  if ((p.stop == nullptr && p.n_stop > 0) || (p.context == nullptr && p.n_context > 0))
    return invalid(session->error, "pi_session_generate: stop or context is NULL with a count");
  for (size_t i = 0; i < p.n_stop; ++i)
    if (p.stop[i] == nullptr) return invalid(session->error, "pi_session_generate: a stop string is NULL");
  pi_gen_end why = PI_GEN_LENGTH;
  const pi_status st = guarded(session->error, PI_ERR_INTERNAL, [&]() -> pi::Status {
    pi::Generator g(*vocab(session->engine));
    (void)g.context({p.context, p.n_context});
    pi::GenerateParams gp;
    gp.max_tokens = p.max_tokens;
    gp.stop.assign(p.stop, p.stop + p.n_stop);
    gp.ignore_eos = p.ignore_eos;
    g.begin(std::move(gp));
    auto show = [&](const std::string& text) {
      return text.empty() || on_text == nullptr || on_text(text.data(), text.size(), user);
    };
    while (true) {
      auto e = g.sample(*session->session);
      if (!e.ok()) return e.error();
      const std::string text = g.take();
      PI_TRY(g.feed(*session->session));
      if (!show(text)) {
        why = PI_GEN_CALLER;
        (void)g.finish();
        return pi::Status::Ok();
      }
      if (*e == pi::GenEnd::None) continue;
      why = *e == pi::GenEnd::EndToken      ? PI_GEN_END_TOKEN
            : *e == pi::GenEnd::StopString  ? PI_GEN_STOP_STRING
            : *e == pi::GenEnd::GrammarDone ? PI_GEN_GRAMMAR_DONE
            : *e == pi::GenEnd::ContextFull ? PI_GEN_CONTEXT_FULL
                                            : PI_GEN_LENGTH;
      (void)show(g.finish());
      return pi::Status::Ok();
    }
  });
  if (end != nullptr) *end = why;
  return st;
}

const float* pi_session_logits(const pi_session* session) {
  if (!session_ready(session)) return nullptr;
  const std::span<const float> l = session->session->logits();
  return l.empty() ? nullptr : l.data();
}

pi_status pi_session_decode(pi_session* session, const pi_batch_token* batch, size_t n) {
  if (session == nullptr) return PI_ERR_INVALID_ARGUMENT;
  if (!session_ready(session)) return invalid(session->error, "the session failed to be created");
  if (batch == nullptr && n > 0) return invalid(session->error, "pi_session_decode: batch is NULL");
  return guarded(session->error, PI_ERR_INVALID_ARGUMENT, [&] {
    std::vector<pi::BatchToken> b(n);
    for (size_t i = 0; i < n; ++i) b[i] = {batch[i].token, batch[i].seq, batch[i].pos, batch[i].logits};
    return session->session->decode(b);
  });
}

const float* pi_session_batch_logits(const pi_session* session, size_t i) {
  if (!session_ready(session)) return nullptr;
  const std::span<const float> l = session->session->batch_logits(i);
  return l.empty() ? nullptr : l.data();
}

bool pi_session_grammar_done(const pi_session* session, int32_t seq) {
  return session_ready(session) && session->session->grammar_done(seq);
}

int32_t pi_session_sample_seq(pi_session* session, int32_t seq, const float* logits) {
  if (!session_ready(session) || logits == nullptr) return -1;
  const int32_t n_vocab = pi_n_vocab(session->engine);
  if (n_vocab <= 0) return -1;
  try {
    return session->session->sample(seq, {logits, static_cast<size_t>(n_vocab)});
  } catch (const std::exception& e) {
    session->error = std::string("internal error: ") + e.what();
    return -1;
  }
}

pi_status pi_session_set_sampling(pi_session* session, int32_t seq, const pi_sampling* p) {
  if (session == nullptr) return PI_ERR_INVALID_ARGUMENT;
  if (!session_ready(session) || p == nullptr)
    return invalid(session->error, "pi_session_set_sampling: a NULL argument or a failed session");
  return guarded(session->error, PI_ERR_INVALID_ARGUMENT,
                 [&] { return session->session->set_sampling(seq, sampling_of(*p)); });
}

pi_status pi_session_fork(pi_session* session, int32_t src, int32_t dst) {
  if (session == nullptr) return PI_ERR_INVALID_ARGUMENT;
  if (!session_ready(session)) return invalid(session->error, "the session failed to be created");
  return guarded(session->error, PI_ERR_INVALID_ARGUMENT, [&] { return session->session->fork(src, dst); });
}

pi_status pi_session_seq_rm(pi_session* session, int32_t seq, int32_t p0, int32_t p1) {
  if (session == nullptr) return PI_ERR_INVALID_ARGUMENT;
  if (!session_ready(session)) return invalid(session->error, "the session failed to be created");
  return guarded(session->error, PI_ERR_INVALID_ARGUMENT,
                 [&] { return session->session->seq_rm(seq, p0, p1); });
}

pi_status pi_session_seq_cp(pi_session* session, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
  if (session == nullptr) return PI_ERR_INVALID_ARGUMENT;
  if (!session_ready(session)) return invalid(session->error, "the session failed to be created");
  return guarded(session->error, PI_ERR_INVALID_ARGUMENT,
                 [&] { return session->session->seq_cp(src, dst, p0, p1); });
}

int32_t pi_session_seq_pos_max(const pi_session* session, int32_t seq) {
  return session_ready(session) ? session->session->seq_pos_max(seq) : -1;
}

void pi_session_reset(pi_session* session) {
  if (session_ready(session)) session->session->reset();
}

int32_t pi_session_embed(pi_session* session, const int32_t* tokens, size_t n, int32_t pooling,
                         bool normalize, float* out, int32_t cap) {
  if (!session_ready(session)) return -1;
  if ((tokens == nullptr && n > 0) || (out == nullptr && cap > 0)) {
    session->error = "pi_session_embed: a NULL argument";
    return -1;
  }
  pi::EmbedParams p;
  switch (pooling) {
    case PI_POOLING_MEAN: p.pooling = pi::Pooling::Mean; break;
    case PI_POOLING_LAST: p.pooling = pi::Pooling::Last; break;
    case PI_POOLING_CLS: p.pooling = pi::Pooling::Cls; break;
    case PI_POOLING_NONE: p.pooling = pi::Pooling::None; break;
    default:
      session->error = "pi_session_embed: pooling " + std::to_string(pooling) +
                       " is not a pi_pooling (MEAN 0, LAST 1, CLS 2, NONE 3)";
      return -1;
  }
  p.normalize = normalize;
  std::vector<float> v;
  const pi_status st = guarded(session->error, PI_ERR_INVALID_ARGUMENT,
                               [&] { return session->session->embed({tokens, n}, p, v); });
  if (st != PI_OK) return -1;
  if (v.size() > static_cast<size_t>(INT32_MAX)) {
    session->error = "pi_session_embed: " + std::to_string(v.size()) +
                     " floats do not fit the int32_t count";
    return -1;
  }
  const auto n_out = static_cast<int32_t>(v.size());
  if (cap >= n_out) std::memcpy(out, v.data(), v.size() * sizeof(float));
  return n_out;
}

pi_status pi_session_state_save(pi_session* session, int32_t seq, const char* path,
                                const int32_t* tokens, size_t n, uint64_t* bytes_written) {
  if (session == nullptr) return PI_ERR_INVALID_ARGUMENT;
  if (!session_ready(session)) return invalid(session->error, "the session failed to be created");
  if (path == nullptr || (tokens == nullptr && n > 0))
    return invalid(session->error, "pi_session_state_save: a NULL argument");
  return guarded(session->error, PI_ERR_INVALID_ARGUMENT, [&]() -> pi::Status {
    auto r = session->session->save_state(seq, path, {tokens, n});
    if (!r.ok()) return r.error();
    if (bytes_written != nullptr) *bytes_written = *r;
    return pi::Status::Ok();
  });
}

pi_status pi_session_state_load(pi_session* session, int32_t seq, const char* path, int32_t* tokens,
                                size_t cap, size_t* n_tokens) {
  if (session == nullptr) return PI_ERR_INVALID_ARGUMENT;
  if (!session_ready(session)) return invalid(session->error, "the session failed to be created");
  if (path == nullptr || (tokens == nullptr && cap > 0))
    return invalid(session->error, "pi_session_state_load: a NULL argument");
  return guarded(session->error, PI_ERR_LOAD, [&]() -> pi::Status {
    auto r = session->session->load_state(seq, path);
    if (!r.ok()) return r.error();
    const size_t n = r->tokens.size();
    if (n > 0 && cap > 0) std::memcpy(tokens, r->tokens.data(), std::min(n, cap) * sizeof(int32_t));
    if (n_tokens != nullptr) *n_tokens = n;
    return pi::Status::Ok();
  });
}

int64_t pi_session_n_ctx(const pi_session* session) {
  return session_ready(session) ? session->session->n_ctx() : 0;
}

int64_t pi_session_n_past(const pi_session* session) {
  return session_ready(session) ? session->session->n_past() : 0;
}

pi_status pi_session_timings(const pi_session* session, pi_timings* out) {
  if (!session_ready(session) || out == nullptr) return PI_ERR_INVALID_ARGUMENT;
  const pi::Timings& t = session->session->timings();
  *out = pi_timings{t.prompt_ms, t.n_prompt, t.eval_ms, t.n_eval, t.sample_ms, t.n_sample};
  return PI_OK;
}

pi_status pi_session_placement(const pi_session* session, pi_placement* out) {
  if (!session_ready(session) || out == nullptr) return PI_ERR_INVALID_ARGUMENT;
  try {
    const pi::PlacementInfo p = session->session->placement();
    *out = pi_placement{p.hybrid, p.budget, p.device_bytes, p.n_layer, p.layers_on_device,
                        p.hot_neurons, p.n_neurons};
    return PI_OK;
  } catch (const std::exception&) {
    return PI_ERR_INTERNAL;
  }
}

pi_perplexity_params pi_perplexity_params_default(void) { return pi_perplexity_params{0, 0, nullptr, nullptr}; }

pi_status pi_engine_perplexity(pi_engine* engine, const pi_session_options* opts, const char* text,
                               int64_t len, const pi_perplexity_params* params, pi_perplexity_report* out) {
  if (engine == nullptr) return PI_ERR_INVALID_ARGUMENT;
  if (engine->engine == nullptr) return invalid(engine->error, "pi_engine_perplexity: the engine failed to load");
  if (text == nullptr || out == nullptr) return invalid(engine->error, "pi_engine_perplexity: text or out is NULL");
  const pi_session_options o = opts != nullptr ? *opts : pi_session_options_default();
  const pi_perplexity_params p = params != nullptr ? *params : pi_perplexity_params_default();
  // A run that fails is the caller's text, sizes or base unless the engine says otherwise.
  return guarded(engine->error, PI_ERR_INVALID_ARGUMENT, [&]() -> pi::Status {
    auto so = session_options_of(o);
    if (!so.ok()) return so.error();
    pi::PerplexityParams pp;
    pp.n_ctx = p.n_ctx;
    pp.n_chunks = p.n_chunks;
    if (p.kl_save != nullptr) pp.kl_save = p.kl_save;
    if (p.kl_base != nullptr) pp.kl_base = p.kl_base;
    const std::string_view t = len < 0 ? std::string_view(text) : std::string_view(text, static_cast<size_t>(len));
    auto r = pi::perplexity(*engine->engine, *so, t, pp);
    if (!r.ok()) return r.error();
    pi_perplexity_report rep{};
    rep.n_tokens = r->n_tokens;
    rep.n_chunks = r->n_done;
    rep.n_scored = r->n_scored;
    rep.ppl = r->ppl;
    rep.ppl_err = r->ppl_err;
    rep.has_kl = r->kl.has_value();
    if (r->kl) {
      rep.base_ppl = r->kl->base_ppl;
      rep.base_ppl_err = r->kl->base_ppl_err;
      rep.kl_mean = r->kl->mean;
      rep.kl_mean_err = r->kl->mean_err;
      rep.kl_median = r->kl->median;
      rep.kl_p99 = r->kl->p99;
      rep.kl_max = r->kl->max;
      rep.same_top1 = r->kl->top1;
    }
    *out = rep;
    return pi::Status::Ok();
  });
}

pi_profile_params pi_profile_params_default(void) {
  const pi::ProfileParams d;
  return pi_profile_params{static_cast<int32_t>(d.n_ctx), static_cast<int32_t>(d.n_batch), d.n_threads,
                           d.max_tokens, d.progress};
}

pi_status pi_model_profile(const char* model, const char* text, int64_t len, const char* output,
                           const pi_profile_params* params, pi_profile_report* report, char* error,
                           size_t error_cap) {
  if (model == nullptr || text == nullptr || output == nullptr)
    return to_buffer("pi_model_profile: model, text or output is NULL", error, error_cap, PI_ERR_INVALID_ARGUMENT);
  apply_isa_environment();
  const pi_profile_params p = params != nullptr ? *params : pi_profile_params_default();
  pi::ProfileParams q;
  q.model = model;
  q.output = output;
  q.n_ctx = p.n_ctx;
  q.n_batch = p.n_batch;
  q.n_threads = p.n_threads;
  q.max_tokens = p.max_tokens;
  q.progress = p.progress;
  return guarded_to_buffer(error, error_cap, PI_ERR_LOAD, [&]() -> pi::Status {
    const std::string_view t = len < 0 ? std::string_view(text) : std::string_view(text, static_cast<size_t>(len));
    auto r = pi::profile_model(q, t);
    if (!r.ok()) return r.error();
    if (report != nullptr)
      *report = pi_profile_report{r->n_tokens, r->experts, static_cast<int64_t>(r->layers.size())};
    return pi::Status::Ok();
  });
}

pi_quantize_params pi_quantize_params_default(void) {
  const pi::QuantizeParams d;
  return pi_quantize_params{nullptr, d.allow_requantize, nullptr, 0, d.threads, d.progress};
}

pi_status pi_model_quantize(const char* input, const char* output, const pi_quantize_params* params,
                            pi_quantize_report* report, char* error, size_t error_cap) {
  if (input == nullptr || output == nullptr)
    return to_buffer("pi_model_quantize: input or output is NULL", error, error_cap, PI_ERR_INVALID_ARGUMENT);
  const pi_quantize_params p = params != nullptr ? *params : pi_quantize_params_default();
  if (p.overrides == nullptr && p.n_overrides > 0)
    return to_buffer("pi_model_quantize: overrides is NULL with a count", error, error_cap, PI_ERR_INVALID_ARGUMENT);
  return guarded_to_buffer(error, error_cap, PI_ERR_LOAD, [&]() -> pi::Status {
    pi::QuantizeParams q;
    q.input = input;
    q.output = output;
    if (p.type != nullptr) q.type = p.type;
    q.allow_requantize = p.allow_requantize;
    q.threads = p.n_threads;
    q.progress = p.progress;
    for (size_t i = 0; i < p.n_overrides; ++i) {
      auto ov = pi::parse_quantize_override(p.overrides[i] != nullptr ? p.overrides[i] : "");
      if (!ov.ok()) return ov.error();
      q.overrides.push_back(std::move(*ov));
    }
    auto r = pi::quantize_model(q);
    if (!r.ok()) return r.error();
    if (report != nullptr)
      *report = pi_quantize_report{r->bytes_in, r->bytes_out, r->file_in, r->file_out, r->n_quantized, r->n_copied};
    return pi::Status::Ok();
  });
}

}  // extern "C"
