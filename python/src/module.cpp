// powerinfer._powerinfer: the Python extension (nanobind) over the engine's C++ public API.
// Thin on purpose: the Python package (python/powerinfer/__init__.py) builds generation,
// streaming and chat on these calls. Every engine error becomes powerinfer.Error with the
// engine's one-line message; the calls that compute (load, session creation, prompt, advance,
// decode) release the GIL, so other Python threads run meanwhile (a Session is still driven by
// one thread at a time; an Engine may be shared).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <deque>
#include <mutex>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "chat/chat_template.h"
#include "chat/reasoning.h"
#include "powerinfer/cpu.h"
#include "powerinfer/engine.h"
#include "powerinfer/generator.h"
#include "powerinfer/grammar.h"
#include "powerinfer/log.h"
#include "powerinfer/perplexity.h"
#include "powerinfer/profile.h"
#include "powerinfer/quantize.h"
#include "powerinfer/session_options.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// powerinfer.Error, created in the module init.
nb::object error_type;

[[noreturn]] void raise(const pi::Error& e) {
  PyErr_SetString(error_type.ptr(), e.message.c_str());
  throw nb::python_error();
}

void check(const pi::Status& s) {
  if (!s.ok()) raise(s.error());
}

// The engine's diagnostics go to Python's logging (the "powerinfer" logger: warnings show on
// stderr by default, info and debug where the application's logging config asks). Messages
// logged while this thread holds the GIL go at once; those logged while it is released (every
// computing call) wait in a queue until the call takes the GIL back (Unlocked), so that an
// engine thread never waits for the GIL a Python thread holds while it waits for the engine.
std::mutex g_log_mutex;
std::deque<std::pair<pi::LogLevel, std::string>> g_log_queue;  // guarded by g_log_mutex

void drain_logs() {
  std::deque<std::pair<pi::LogLevel, std::string>> lines;
  {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    lines.swap(g_log_queue);
  }
  if (lines.empty()) return;
  try {
    nb::object logger = nb::module_::import_("logging").attr("getLogger")("powerinfer");
    for (const auto& [level, message] : lines) {
      const int py_level = level == pi::LogLevel::Debug ? 10 : level == pi::LogLevel::Info ? 20
                           : level == pi::LogLevel::Warn ? 30 : 40;
      logger.attr("log")(py_level, message);
    }
  } catch (nb::python_error& e) {
    e.restore();
    PyErr_WriteUnraisable(nullptr);  // a broken handler must not fail the engine call
  }
}

void to_python_logging(pi::LogLevel level, const char* message, void*) {
  {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    g_log_queue.emplace_back(level, message);
  }
  if (Py_IsInitialized() && PyGILState_Check()) drain_logs();
}

// The GIL released for a computing call; taken back and the call's log lines handed to Python
// when the scope ends.
class Unlocked {
 public:
  Unlocked() : released_(std::in_place) {}
  ~Unlocked() {
    released_.reset();
    drain_logs();
  }
  Unlocked(const Unlocked&) = delete;
  Unlocked& operator=(const Unlocked&) = delete;

 private:
  std::optional<nb::gil_scoped_release> released_;
};

pi::ModelLoad load_mode(const std::string& name) {
  if (name == "auto") return pi::ModelLoad::Auto;
  if (name == "map" || name == "mmap") return pi::ModelLoad::Map;
  if (name == "read") return pi::ModelLoad::Read;
  raise(pi::err("load must be 'auto', 'map' or 'read' (got '%s')", name.c_str()));
}

// An engine and its vocabulary; sessions keep a Python reference to it (nb::keep_alive).
struct PyEngine {
  std::unique_ptr<pi::Engine> engine;

  const pi::Vocabulary& vocab() const {
    if (engine->vocabulary() == nullptr)
      raise(pi::err("%s: the file has no vocabulary (tokenizer.ggml.model)", engine->info().path.c_str()));
    return *engine->vocabulary();
  }
};

struct PySession {
  std::unique_ptr<pi::Session> session;
};

// Runs f (returning a pi::Result) with the GIL released, raising its error as powerinfer.Error.
template <typename F>
auto call_unlocked(F&& f) {
  decltype(f()) r = pi::Error{};
  {
    Unlocked unlocked;
    r = f();
  }
  if (!r.ok()) raise(r.error());
  return std::move(r).value();
}

// The engine's defaults for every option not named; each named one through its table.
pi::SessionOptions options_of(const nb::kwargs& kwargs) {
  pi::SessionOptions o;
  // As the CLI: the original's LLAMA_SPARSE_PRED_THRESHOLD, below the sparse_threshold keyword
  // (the engine reads no environment; its front ends do).
  if (const char* v = std::getenv("LLAMA_SPARSE_PRED_THRESHOLD"); v != nullptr) o.sparse.threshold_env = v;
  for (auto [key, value] : kwargs) {
    const std::string name = nb::cast<std::string>(key);
    pi::OptionValue v;
    if (value.is_none()) {
      v = std::monostate{};
    } else if (nb::isinstance<nb::bool_>(value)) {
      v = nb::cast<bool>(value);
    } else if (nb::isinstance<nb::int_>(value)) {
      v = nb::cast<int64_t>(value);
    } else if (nb::isinstance<nb::float_>(value)) {
      v = nb::cast<double>(value);
    } else if (nb::isinstance<nb::str>(value)) {
      v = nb::cast<std::string>(value);
    } else {
      raise(pi::err("option '%s': expected a bool, a number, text or None", name.c_str()));
    }
    check(pi::set_session_option(o, name, v));
  }
  return o;
}

}  // namespace

NB_MODULE(_powerinfer, m) {
  m.doc() = "The powerinfer engine's C++ API (use the powerinfer package on top of it).";
  error_type = nb::borrow(PyErr_NewException("powerinfer.Error", PyExc_RuntimeError, nullptr));
  m.attr("Error") = error_type;
  pi::set_log_sink(to_python_logging, nullptr);
  // PI_KERNELS_ISA=scalar|avx2|...: the CPU kernels of a lower ISA (tests, benchmarks).
  if (const char* isa = std::getenv("PI_KERNELS_ISA"); isa != nullptr && *isa != '\0') {
    if (const std::string why = pi::set_cpu_isa(isa); !why.empty()) std::fprintf(stderr, "PI_KERNELS_ISA=%s\n", why.c_str());
  }

  nb::class_<PyEngine>(m, "Engine")
      .def_static(
          "load",
          [](const std::string& path, const std::string& load, bool mlock, bool check_tensors, bool repack) {
            pi::LoadOptions o;
            o.load = load_mode(load);
            o.mlock = mlock;
            o.check_tensors = check_tensors;
            o.repack = repack;
            pi::Result<std::unique_ptr<pi::Engine>> r = pi::Error{};
            {
              Unlocked unlocked;
              r = pi::Engine::load(path, o);
            }
            if (!r.ok()) raise(r.error());
            auto e = std::make_unique<PyEngine>();
            e->engine = std::move(*r);
            return e;
          },
          "path"_a, "load"_a = "auto", "mlock"_a = false, "check_tensors"_a = false, "repack"_a = true)
      .def_prop_ro("info",
                   [](const PyEngine& e) {
                     const pi::ModelInfo& i = e.engine->info();
                     nb::dict d;
                     d["path"] = i.path;
                     d["architecture"] = i.architecture;
                     d["name"] = i.name;
                     d["powerinfer"] = i.powerinfer;
                     d["activation"] = i.activation;
                     d["n_vocab"] = i.n_vocab;
                     d["n_ctx_train"] = i.n_ctx_train;
                     d["n_embd"] = i.n_embd;
                     d["n_layer"] = i.n_layer;
                     d["n_ff"] = i.n_ff;
                     d["file_bytes"] = i.file_bytes;
                     d["mapped"] = i.mmap;
                     d["chat_template"] = i.chat_template;
                     return d;
                   })
      .def("tokenize",
           [](const PyEngine& e, const std::string& text, bool add_bos, bool special) {
             return e.vocab().encode(text, add_bos, special);
           },
           "text"_a, "add_bos"_a = true, "special"_a = true)
      .def("detokenize",
           [](const PyEngine& e, const std::vector<int32_t>& ids, bool skip_special) {
             const std::string text = e.vocab().decode(ids, skip_special);
             return nb::bytes(text.data(), text.size());
           },
           "ids"_a, "skip_special"_a = true)
      .def("piece", [](const PyEngine& e, int32_t id) {
        const std::string p = e.vocab().piece(id);
        return nb::bytes(p.data(), p.size());
      })
      .def_prop_ro("add_bos", [](const PyEngine& e) { return e.vocab().add_bos(); })
      .def_prop_ro("bos", [](const PyEngine& e) { return e.vocab().bos(); })
      .def_prop_ro("eos", [](const PyEngine& e) { return e.vocab().eos(); })
      .def("is_eog", [](const PyEngine& e, int32_t id) { return e.vocab().is_eog(id); })
      .def("render_chat",
           [](const PyEngine& e, const std::vector<std::pair<std::string, std::string>>& messages,
              const std::string& tmpl, bool add_generation_prompt) {
             auto t = pi::chat::resolve_template(tmpl, e.engine->info().chat_template);
             if (!t.ok()) raise(t.error());
             std::vector<pi::chat::Message> msgs;
             for (const auto& [role, content] : messages) msgs.push_back({role, content});
             auto r = pi::chat::render(*t, msgs, add_generation_prompt);
             if (!r.ok()) raise(r.error());
             return *r;
           },
           "messages"_a, "template"_a = "", "add_generation_prompt"_a = true)
      // How a chat reply with `template` (as render_chat resolves it) is generated and read:
      // (split, shown, not_end, end) with split "none", "think" or "harmony" (the reasoning
      // split the server applies with --reasoning-format auto) and the ids of the control tokens
      // whose text is part of the reply, of the end-of-generation tokens that do not end it
      // (harmony's <|end|>), and of the tokens that end it besides (<|return|>, <|call|>).
      .def("perplexity",
           [](const PyEngine& e, const std::string& text, int64_t n_ctx, int64_t n_chunks,
              const std::string& kl_save, const std::string& kl_base, nb::kwargs kwargs) {
             pi::PerplexityParams p;
             p.n_ctx = n_ctx;
             p.n_chunks = n_chunks;
             p.kl_save = kl_save;
             p.kl_base = kl_base;
             const pi::SessionOptions o = options_of(kwargs);
             const pi::PerplexityReport r = call_unlocked([&] { return pi::perplexity(*e.engine, o, text, p); });
             nb::dict d;
             d["ppl"] = r.ppl;
             d["ppl_err"] = r.ppl_err;
             d["n_tokens"] = r.n_tokens;
             d["n_ctx"] = r.n_ctx;
             d["n_chunks"] = r.n_done;
             d["n_scored"] = r.n_scored;
             d["seconds"] = r.eval_seconds;
             if (r.kl) {
               const pi::KlReport& k = *r.kl;
               nb::dict kl;
               kl["n"] = k.n;
               kl["base_ppl"] = k.base_ppl;
               kl["base_ppl_err"] = k.base_ppl_err;
               kl["ln_ppl_ratio"] = k.ln_ratio;
               kl["ln_ppl_ratio_err"] = k.ln_ratio_err;
               kl["mean"] = k.mean;
               kl["mean_err"] = k.mean_err;
               kl["median"] = k.median;
               kl["p99"] = k.p99;
               kl["max"] = k.max;
               kl["same_top1"] = k.top1;
               kl["same_top1_err"] = k.top1_err;
               d["kl"] = kl;
             }
             return d;
           },
           "text"_a, "n_ctx"_a, "n_chunks"_a, "kl_save"_a, "kl_base"_a, "kwargs"_a)
      .def("reply_format",
           [](const PyEngine& e, const std::string& tmpl) {
             auto t = pi::chat::resolve_template(tmpl, e.engine->info().chat_template);
             if (!t.ok()) raise(t.error());
             const pi::chat::SplitKind k =
                 pi::chat::split_kind(pi::chat::ReasoningFormat::Auto, *t, e.engine->info().chat_template);
             const char* kind = k == pi::chat::SplitKind::Harmony ? "harmony"
                                : k == pi::chat::SplitKind::Think ? "think"
                                                                   : "none";
             const pi::chat::ReplyTokens r = pi::chat::reply_tokens(*t);
             auto ids = [&](const std::vector<std::string_view>& texts) {
               std::vector<int32_t> out;
               for (std::string_view text : texts) {
                 const std::vector<int32_t> one = e.vocab().encode(text, false, true);
                 if (one.size() == 1) out.push_back(one[0]);  // a token of this vocabulary
               }
               return out;
             };
             return nb::make_tuple(kind, ids(r.shown), ids(r.not_end), ids(r.end));
           },
           "template"_a = "");

  // The generation loop (powerinfer/generator.h): what each sampled token does to the answer.
  // Text comes back as bytes (whole UTF-8 characters unless the model wrote invalid bytes).
  nb::class_<pi::Generator>(m, "_Generator")
      .def("__init__",
           [](pi::Generator* self, const PyEngine& e, const std::vector<int32_t>& context,
              int64_t max_tokens, std::vector<std::string> stop, bool ignore_eos,
              const std::vector<int32_t>& end_ids, const std::vector<int32_t>& keep_ids,
              std::vector<int32_t> shown_ids) {
             const pi::Vocabulary& v = e.vocab();
             new (self) pi::Generator(v);
             (void)self->context(context);
             pi::GenerateParams p;
             p.max_tokens = max_tokens;
             p.stop = std::move(stop);
             p.ignore_eos = ignore_eos;
             p.shown_tokens = std::move(shown_ids);
             // End tokens: the vocabulary's but keep_ids, and end_ids (a chat format's ends).
             if (!end_ids.empty() || !keep_ids.empty()) {
               for (int32_t id : v.eog_tokens())
                 if (std::find(keep_ids.begin(), keep_ids.end(), id) == keep_ids.end()) p.end_tokens.push_back(id);
               for (int32_t id : end_ids)
                 if (std::find(p.end_tokens.begin(), p.end_tokens.end(), id) == p.end_tokens.end())
                   p.end_tokens.push_back(id);
             }
             self->begin(std::move(p));
           },
           "engine"_a, "context"_a, "max_tokens"_a, "stop"_a, "ignore_eos"_a, "end_ids"_a,
           "keep_ids"_a, "shown_ids"_a, nb::keep_alive<1, 2>())
      .def("sample",
           [](pi::Generator& g, PySession& s) {
             pi::Result<pi::GenEnd> r = pi::Error{};
             {
               Unlocked unlocked;
               r = g.sample(*s.session);
             }
             if (!r.ok()) raise(r.error());
             return std::string(pi::gen_end_name(*r));
           })
      .def("feed",
           [](pi::Generator& g, PySession& s) {
             pi::Result<bool> r = pi::Error{};
             {
               Unlocked unlocked;
               r = g.feed(*s.session);
             }
             if (!r.ok()) raise(r.error());
             return *r;
           })
      .def("take", [](pi::Generator& g) { const std::string t = g.take(); return nb::bytes(t.data(), t.size()); })
      .def("finish", [](pi::Generator& g) { const std::string t = g.finish(); return nb::bytes(t.data(), t.size()); })
      .def_prop_ro("last_token", [](const pi::Generator& g) { return g.last_token(); })
      .def_prop_ro("stop_word", [](const pi::Generator& g) { return g.stop_word(); });

  // A reply's reasoning apart from its answer (chat/reasoning.h's ReplySplit): push(bytes)
  // and finish() return (reasoning, content) as bytes.
  nb::class_<pi::chat::ReplySplit>(m, "_ReplySplit")
      .def("__init__",
           [](pi::chat::ReplySplit* self, const std::string& kind, bool open) {
             pi::chat::SplitKind k = pi::chat::SplitKind::None;
             if (kind == "harmony") {
               k = pi::chat::SplitKind::Harmony;
             } else if (kind == "think") {
               k = pi::chat::SplitKind::Think;
             } else if (kind != "none") {
               raise(pi::err("reply split must be 'none', 'think' or 'harmony' (got '%s')", kind.c_str()));
             }
             new (self) pi::chat::ReplySplit(k, open);
           },
           "kind"_a, "open"_a = false)
      .def("push",
           [](pi::chat::ReplySplit& s, nb::bytes piece) {
             const auto d = s.push(std::string_view(piece.c_str(), piece.size()));
             return std::make_pair(nb::bytes(d.reasoning.data(), d.reasoning.size()),
                                   nb::bytes(d.content.data(), d.content.size()));
           })
      .def("finish", [](pi::chat::ReplySplit& s) {
        const auto d = s.finish();
        return std::make_pair(nb::bytes(d.reasoning.data(), d.reasoning.size()),
                              nb::bytes(d.content.data(), d.content.size()));
      });

  m.def(
      "json_schema_to_grammar",
      [](const std::string& schema) {
        auto g = pi::json_schema_to_grammar(schema);
        if (!g.ok()) raise(g.error());
        return *g;
      },
      "schema"_a, "GBNF for a JSON Schema (JSON text); powerinfer.Error names what is unsupported.");

  m.def(
      "_quantize",
      [](const std::string& input, const std::string& output, const std::string& type,
         bool allow_requantize, const std::vector<std::string>& overrides, int threads, bool progress) {
        pi::QuantizeParams p;
        p.input = input;
        p.output = output;
        p.type = type;
        p.allow_requantize = allow_requantize;
        p.threads = threads;
        p.progress = progress;
        for (const std::string& o : overrides) {
          auto ov = pi::parse_quantize_override(o);
          if (!ov.ok()) raise(ov.error());
          p.overrides.push_back(std::move(*ov));
        }
        const pi::QuantizeReport r = call_unlocked([&] { return pi::quantize_model(p); });
        nb::dict d;
        d["bytes_in"] = r.bytes_in;
        d["bytes_out"] = r.bytes_out;
        d["file_in"] = r.file_in;
        d["file_out"] = r.file_out;
        d["n_quantized"] = r.n_quantized;
        d["n_copied"] = r.n_copied;
        nb::list types;
        for (const pi::QuantizeTypeStats& t : r.types) {
          nb::dict e;
          e["type"] = t.type;
          e["n_tensors"] = t.n_tensors;
          e["n_elements"] = t.n_elements;
          e["rmse"] = t.rmse;
          e["relative_rmse"] = t.relative;
          types.append(e);
        }
        d["types"] = types;
        return d;
      },
      "input"_a, "output"_a, "type"_a, "allow_requantize"_a, "overrides"_a, "threads"_a, "progress"_a);

  m.def(
      "_profile",
      [](const std::string& model, const std::string& text, const std::string& output, int64_t n_ctx,
         int64_t n_batch, int threads, int64_t max_tokens, bool progress) {
        pi::ProfileParams p;
        p.model = model;
        p.output = output;
        p.n_ctx = n_ctx;
        p.n_batch = n_batch;
        p.n_threads = threads;
        p.max_tokens = max_tokens;
        p.progress = progress;
        const pi::ProfileReport r = call_unlocked([&] { return pi::profile_model(p, text); });
        nb::dict d;
        d["n_tokens"] = r.n_tokens;
        d["experts"] = r.experts;
        d["n_expert"] = r.n_expert;
        d["n_expert_used"] = r.n_expert_used;
        nb::list layers;
        for (const pi::ProfileLayer& l : r.layers) {
          nb::dict e;
          if (r.experts) {
            e["least_chosen"] = l.least_chosen;
            e["most_chosen"] = l.most_chosen;
            e["reuse"] = l.reuse;
            if (l.fired >= 0) e["fired"] = l.fired;
          } else {
            e["activity"] = l.activity;
            e["top20_share"] = l.top20_share;
          }
          layers.append(e);
        }
        d["layers"] = layers;
        return d;
      },
      "model"_a, "text"_a, "output"_a, "n_ctx"_a, "n_batch"_a, "threads"_a, "max_tokens"_a, "progress"_a);

  m.def(
      "session_options",
      [] {
        std::vector<std::tuple<std::string, std::string, std::string>> out;
        for (const pi::OptionInfo& o : pi::session_option_list()) out.emplace_back(o.name, o.kind, o.help);
        return out;
      },
      "(name, kind, help) of every Session keyword option (the engine's one table).");

  nb::class_<PySession>(m, "Session")
      .def_static(
          "create",
          [](const PyEngine& e, nb::kwargs kwargs) {
            const pi::SessionOptions o = options_of(kwargs);
            pi::Result<std::unique_ptr<pi::Session>> r = pi::Error{};
            {
              Unlocked unlocked;
              r = pi::Session::create(*e.engine, o);
            }
            if (!r.ok()) raise(r.error());
            auto s = std::make_unique<PySession>();
            s->session = std::move(*r);
            return s;
          },
          "engine"_a, "kwargs"_a, nb::keep_alive<0, 1>())
      .def("prompt",
           [](PySession& s, const std::vector<int32_t>& tokens) {
             pi::Status st;
             {
               Unlocked unlocked;
               st = s.session->prompt(tokens);
             }
             check(st);
           })
      .def("sample", [](PySession& s) { return s.session->sample(); })
      .def("grammar_done", [](const PySession& s) { return s.session->grammar_done(); })
      .def("advance",
           [](PySession& s, int32_t token) {
             pi::Status st;
             {
               Unlocked unlocked;
               st = s.session->advance(token);
             }
             check(st);
           })
      .def("seq_rm", [](PySession& s, int32_t seq, int32_t p0, int32_t p1) { check(s.session->seq_rm(seq, p0, p1)); },
           "seq"_a, "p0"_a, "p1"_a = -1)
      .def("seq_tokens", [](PySession& s, int32_t seq) { return s.session->seq_tokens(seq); }, "seq"_a = 0,
           "The token ids sequence seq holds from position 0 (fed, restored or forked into it)")
      .def("seq_can_truncate",
           [](PySession& s, int32_t seq, int32_t p0) { return s.session->seq_can_truncate(seq, p0); },
           "seq"_a, "p0"_a,
           "Whether sequence seq can be cut back to [0, p0) and go on (sliding-window layers kept "
           "bounded may have lost the window before p0)")
      .def("embed",
           [](PySession& s, const std::vector<std::vector<int32_t>>& inputs, const std::string& pooling,
              bool normalize) {
             const auto pool = pi::parse_pooling(pooling);
             if (!pool) raise(pi::err("pooling '%s': expected mean, last, cls or none", pooling.c_str()));
             // Per input, its vectors: one pooled, or (none) one per token.
             std::vector<float> out;
             pi::Status st;
             {
               Unlocked unlocked;
               st = s.session->embed_all(inputs, {.pooling = *pool, .normalize = normalize}, out);
             }
             check(st);
             size_t n_rows_all = 0;
             for (const std::vector<int32_t>& in : inputs) n_rows_all += *pool == pi::Pooling::None ? in.size() : 1;
             const size_t n_embd = n_rows_all > 0 ? out.size() / n_rows_all : 0;
             std::vector<std::vector<std::vector<float>>> rows;
             size_t r = 0;
             for (const std::vector<int32_t>& in : inputs) {
               const size_t n_rows = *pool == pi::Pooling::None ? in.size() : 1;
               std::vector<std::vector<float>>& vs = rows.emplace_back();
               for (size_t k = 0; k < n_rows; ++k, ++r)
                 vs.emplace_back(out.begin() + static_cast<std::ptrdiff_t>(r * n_embd),
                                 out.begin() + static_cast<std::ptrdiff_t>((r + 1) * n_embd));
             }
             return rows;
           },
           "inputs"_a, "pooling"_a = "mean", "normalize"_a = true)
      .def("save_state",
           [](PySession& s, const std::string& path, const std::vector<int32_t>& tokens, int32_t seq) {
             pi::Result<uint64_t> r = pi::Error{};
             {
               Unlocked unlocked;
               r = s.session->save_state(seq, path, tokens);
             }
             if (!r.ok()) raise(r.error());
             return *r;
           },
           "path"_a, "tokens"_a, "seq"_a = 0)
      .def("load_state",
           [](PySession& s, const std::string& path, int32_t seq) {
             pi::Result<pi::SavedState> r = pi::Error{};
             {
               Unlocked unlocked;
               r = s.session->load_state(seq, path);
             }
             if (!r.ok()) raise(r.error());
             return r->tokens;
           },
           "path"_a, "seq"_a = 0)
      .def("reset", [](PySession& s) { s.session->reset(); })
      .def_prop_ro("n_past", [](const PySession& s) { return s.session->n_past(); })
      .def_prop_ro("n_ctx", [](const PySession& s) { return s.session->n_ctx(); })
      .def_prop_ro("timings", [](const PySession& s) {
        const pi::Timings& t = s.session->timings();
        nb::dict d;
        d["prompt_ms"] = t.prompt_ms;
        d["n_prompt"] = t.n_prompt;
        d["eval_ms"] = t.eval_ms;
        d["n_eval"] = t.n_eval;
        d["sample_ms"] = t.sample_ms;
        d["n_sample"] = t.n_sample;
        return d;
      });
}
