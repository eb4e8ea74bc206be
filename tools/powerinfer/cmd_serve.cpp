// `powerinfer serve`: the HTTP server (src/server). Binds first (so /health answers 503 while
// the model loads), loads the model, then serves until SIGINT or SIGTERM. The listening
// address is logged as "listening on http://HOST:PORT" (with --port 0 the port is the one
// the system picked). A stop signal drains: new generation requests get 503, running and
// queued ones have --drain-timeout seconds to finish (a second signal cuts that short), then
// whatever is left ends with an error and the process exits 0.
#include <CLI/CLI.hpp>
#include <pthread.h>

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include "cli_checks.h"
#include "commands.h"
#include "core/log.h"
#include "gen_options.h"
#include "server/http.h"
#include "server/scheduler.h"
#include "server/server.h"

namespace pi::cli {
namespace {

struct ServeOptions {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  int n_slots = 1;
  int64_t n_ctx = 0;
  int64_t n_batch = 512;
  int n_threads = 0;
  int max_queue = 16;
  size_t max_body = 1 << 20;
  int64_t max_prompt = 0;
  int timeout_s = 600;
  int drain_timeout_s = 30;
  int heartbeat_s = 1;
  std::string replica_id;
  std::string slot_save_path;  // --slot-save-path DIR: slot save/restore files; empty: off
  std::string alias;
  std::string api_key;
  std::string cors_origin;
  std::string chat_template;
  SamplingParams sampling;
  ModelLoad load = ModelLoad::Auto;  // --mmap, --no-mmap
  ModelFlags flags;  // -ngl, --vram-budget, --stats, --mlock, ... (llama_flags.h)
  bool dense = false;
  std::string sparse_threshold;
  ActSparsityFlags act;  // calibrated files: --sparsity, --sparsity-alloc, --sparsity-sites
  std::string device = "cpu";
  std::string pooling = "mean";  // embeddings (/v1/embeddings, /embedding)
  std::string reasoning_format = "auto";  // chat replies' <think> blocks
  std::string reasoning_effort = "medium";  // a harmony (gpt-oss) prompt's "Reasoning:"
};

// "<hostname>:<port>": unique among the replicas of one host and across hosts.
std::string default_replica_id(int port) {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = 0;
  return std::string(host[0] != 0 ? host : "localhost") + ":" + std::to_string(port);
}

// Waits until the scheduler has nothing running or queued, at most `timeout_s` seconds; a
// further stop signal ends the wait at once. True when it drained.
bool wait_drained(server::Scheduler& sched, const sigset_t& stop_signals, int timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (sched.wait_idle(std::chrono::milliseconds(100))) return true;
    const timespec zero{0, 0};
    if (const int sig = sigtimedwait(&stop_signals, nullptr, &zero); sig > 0) {
      log_info("signal %d: stopping without waiting for the running requests", sig);
      return false;
    }
  }
  return sched.wait_idle(std::chrono::milliseconds(0));
}

int serve(const ServeOptions& o) {
  GenOptions g;
  g.model = o.model;
  auto model = resolve_model(g);
  if (!model.ok()) return fail(model.error().message);
  if (o.n_slots < 1 || o.n_slots > 64) return fail("-np must be 1..64 (got " + std::to_string(o.n_slots) + ")");
  if (o.n_ctx < 0) return fail("-c must be >= 0");
  if (o.max_queue < 0) return fail("--max-queue must be >= 0");
  if (o.timeout_s < 1) return fail("--timeout must be >= 1");
  if (o.drain_timeout_s < 0) return fail("--drain-timeout must be >= 0");
  if (o.heartbeat_s < 0) return fail("--heartbeat must be >= 0");
  if (o.port < 0 || o.port > 65535) return fail("--port must be 0..65535");
  if (Status v = validate_sampling(o.sampling); !v.ok()) return fail(v.error().message);
  const std::optional<Pooling> pooling = parse_pooling(o.pooling);
  if (!pooling) return fail("--pooling must be mean, last, cls or none (got '" + o.pooling + "')");
  chat::ReasoningFormat reasoning{};
  if (!chat::parse_reasoning_format(o.reasoning_format, reasoning))
    return fail("--reasoning-format must be none, deepseek or auto (got '" + o.reasoning_format + "')");
  chat::ReasoningEffort effort{};
  if (!chat::parse_reasoning_effort(o.reasoning_effort, effort))
    return fail("--reasoning-effort must be low, medium or high (got '" + o.reasoning_effort + "')");
  if (!o.slot_save_path.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.slot_save_path, ec);
    if (!std::filesystem::is_directory(o.slot_save_path, ec))
      return fail("--slot-save-path " + o.slot_save_path + ": not a directory and cannot be created");
  }

  // Every thread started from here on inherits the blocked signals; main waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that closes its socket must not end the server

  server::HttpOptions ho;
  ho.host = o.host;
  ho.port = o.port;
  ho.max_body = o.max_body;
  ho.read_timeout_s = 30;
  ho.write_timeout_s = 30;
  ho.threads = o.n_slots + o.max_queue + 8;
  server::HttpServer http(ho);
  server::ApiOptions ao;
  ao.model_path = *model;
  ao.model_name = !o.alias.empty() ? o.alias : std::filesystem::path(*model).filename().string();
  ao.api_key = o.api_key;
  ao.cors_origin = o.cors_origin;
  ao.defaults = o.sampling;
  ao.max_prompt_tokens = o.max_prompt;
  ao.timeout_s = o.timeout_s;
  ao.heartbeat_s = o.heartbeat_s;
  ao.pooling = *pooling;
  ao.reasoning_format = reasoning;
  ao.reasoning_effort = effort;
  ao.slot_save_path = o.slot_save_path;
  if (Status b = http.bind(); !b.ok()) return fail(b.error().message);
  ao.replica_id = !o.replica_id.empty() ? o.replica_id : default_replica_id(http.port());
  server::ApiServer api(http, ao);
  std::thread http_thread([&http] { http.run(); });
  log_info("listening on http://%s:%d", o.host.c_str(), http.port());

  auto stop_http = [&] {
    http.stop();
    http_thread.join();
  };
  if (Status f = check_model_flags(o.flags); !f.ok()) {
    stop_http();
    return fail(f.error().message);
  }
  auto engine = Engine::load(*model, load_options(o.flags, o.load));
  if (!engine.ok()) {
    stop_http();
    return fail(engine.error().message);
  }
  if ((*engine)->vocabulary() == nullptr) {
    stop_http();
    return fail(*model + ": the file has no vocabulary (tokenizer.ggml.model), so it cannot serve text");
  }
  auto tmpl = chat::resolve_template(o.chat_template, (*engine)->info().chat_template);
  if (!tmpl.ok()) {
    if (!o.chat_template.empty() || !(*engine)->info().chat_template.empty()) {
      stop_http();
      return fail(tmpl.error().message);
    }
    log_warn("the model has no chat template: /v1/chat/completions uses chatml (--chat-template NAME to choose)");
    tmpl = chat::Template::ChatML;
  }
  GenOptions sg;
  sg.n_ctx = o.n_ctx;
  sg.n_batch = o.n_batch;
  sg.n_threads = o.n_threads > 0 ? o.n_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  sg.sampling = o.sampling;
  sg.dense = o.dense;
  sg.sparse_threshold = o.sparse_threshold;
  sg.act = o.act;
  sg.device = o.device;
  static_cast<ModelFlags&>(sg) = o.flags;
  auto so = session_options(sg, o.sampling.seed);
  if (!so.ok()) {
    stop_http();
    return fail(so.error().message);
  }
  so->n_seq_max = o.n_slots;
  auto session = Session::create(**engine, *so);
  if (!session.ok()) {
    stop_http();
    return fail(session.error().message);
  }
  const Vocabulary& v = *(*engine)->vocabulary();
  if (Status w = (*session)->warmup(v.bos() >= 0 ? v.bos() : 0); !w.ok()) {
    stop_http();
    return fail(w.error().message);
  }
  server::SchedulerOptions sco;
  sco.n_slots = o.n_slots;
  sco.n_ctx_slot = (*session)->n_ctx() / o.n_slots;
  sco.max_queue = o.max_queue;
  const bool sparse = (*session)->sparsity().sparse;
  log_model_info(*model, (*engine)->info(), sparse);
  log_info("%d slots of %lld tokens, batch %lld, threads %d, queue %d, chat template %s",
           o.n_slots, static_cast<long long>(sco.n_ctx_slot),
           static_cast<long long>((*session)->n_batch()), (*session)->n_threads(), o.max_queue,
           chat::template_name(*tmpl));
  server::Scheduler sched(**engine, std::move(*session), sco);
  api.attach(**engine, sched, *tmpl);
  log_info("model loaded: serving");

  int sig = 0;
  sigwait(&stop_signals, &sig);
  if (o.drain_timeout_s > 0) {
    log_info("signal %d: draining (new requests get 503; running ones have %d s to finish; "
             "a second signal stops at once)", sig, o.drain_timeout_s);
    api.drain();
    if (wait_drained(sched, stop_signals, o.drain_timeout_s)) {
      log_info("drained: every accepted request finished");
    } else {
      const server::SchedulerStats st = sched.snapshot();
      log_warn("stopping with %lld requests running and %lld queued: they end with an error",
               static_cast<long long>(st.processing), static_cast<long long>(st.queued));
    }
  } else {
    log_info("signal %d: stopping", sig);
  }
  sched.shutdown();
  stop_http();
  log_info("stopped");
  return 0;
}

}  // namespace

Runner add_serve(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  o->sampling = SamplingParams{};
  CLI::App* sub = app.add_subcommand(
      "serve",
      "OpenAI- and llama.cpp-compatible HTTP server with continuous batching over -np slots\n"
      "(/v1/chat/completions, /v1/completions, /completion, /tokenize, /detokenize, /v1/models,\n"
      "/props, /slots, /metrics, /health; a chat page at /). SIGINT/SIGTERM drain it, then it\n"
      "exits 0 (deploy/README.md: several replicas behind HAProxy).");
  sub->add_option("-m,--model", o->model, std::string("Model file (default: ") + kDefaultModel + " if present)");
  sub->add_option("--host", o->host, "Address to listen on (loopback by default)")->capture_default_str();
  sub->add_option("--port", o->port, "Port (0: any free port, logged)")->capture_default_str();
  sub->add_option("--np,--parallel", o->n_slots, "Slots: requests generated at once (1..64; -np accepted)")->capture_default_str();
  sub->add_option("-c,--ctx-size", o->n_ctx, "KV-cache tokens of all slots together, split evenly (0: the model's, at most 4096)")->capture_default_str();
  sub->add_option("-b,--batch-size", o->n_batch, "Tokens per forward pass (generating slots first, then prompt chunks)")->capture_default_str();
  sub->add_option("-t,--threads", o->n_threads, "Threads (0: one per hardware thread)")->capture_default_str();
  sub->add_option("--max-queue", o->max_queue, "Requests that may wait for a slot; more get 503")->capture_default_str();
  sub->add_option("--max-body", o->max_body, "Largest request body in bytes; larger get 413")->capture_default_str();
  sub->add_option("--max-prompt", o->max_prompt, "Most prompt tokens (0: the slot context minus one)")->capture_default_str();
  sub->add_option("--timeout", o->timeout_s, "Seconds a request may run before it is cancelled")->capture_default_str();
  sub->add_option("--drain-timeout", o->drain_timeout_s, "On SIGTERM/SIGINT: seconds running requests get to finish while new ones get 503 (0: stop at once)")->capture_default_str();
  sub->add_option("--heartbeat", o->heartbeat_s, "Non-streamed answers running longer are sent chunked with a space every 0.5 s to notice gone clients (0: never, so a balancer can retry them)")->capture_default_str();
  sub->add_option("--slot-save-path", o->slot_save_path, "Directory of the slot save/restore files of POST /slots/{id}?action=save|restore (created if missing); without it slot actions answer 501");
  sub->add_option("--replica-id", o->replica_id, "Name sent as the X-Replica header of every answer and in /props (default: HOSTNAME:PORT)");
  sub->add_option("-a,--alias", o->alias, "Model name reported by the API (default: the file name)");
  sub->add_option("--api-key", o->api_key, "Require 'Authorization: Bearer KEY' (not on /health and /)");
  sub->add_option("--cors-origin", o->cors_origin, "Send CORS headers allowing this origin (off by default)");
  sub->add_option("--pooling", o->pooling, "Embeddings (/v1/embeddings, /embedding): mean, last or cls (the first token) of the normalized final hidden states; answers are L2-normalised. none: /embedding gives every token's state, unnormalised; /v1/embeddings refuses")->capture_default_str();
  sub->add_option("--reasoning-format", o->reasoning_format,
                  "Chat replies' <think>...</think> block: deepseek returns it as reasoning_content, none leaves "
                  "it in content, auto splits it when the model's chat template has <think> (Qwen3, DeepSeek-R1); "
                  "with the gpt-oss template, auto and deepseek return the analysis channel as reasoning_content "
                  "and none gives the reply as written, message headers included; a request's "
                  "\"reasoning_format\" overrides it")
      ->capture_default_str();
  sub->add_option("--reasoning-effort", o->reasoning_effort,
                  "gpt-oss (harmony) prompts: the system message's reasoning effort, low, medium or high; "
                  "a chat request's \"reasoning_effort\" overrides it")
      ->capture_default_str();
  sub->add_option("--chat-template", o->chat_template, "Chat template name (" + chat::template_names() + ") or Jinja text; default: the model's, else chatml");
  sub->add_option("--temp", o->sampling.temperature, "Default temperature")->capture_default_str();
  sub->add_option("--top-k", o->sampling.top_k, "Default top-k")->capture_default_str();
  sub->add_option("--top-p", o->sampling.top_p, "Default top-p")->capture_default_str();
  sub->add_option("--min-p", o->sampling.min_p, "Default min-p")->capture_default_str();
  sub->add_option("--repeat-penalty", o->sampling.repeat_penalty, "Default repetition penalty")->capture_default_str();
  sub->add_option("--repeat-last-n", o->sampling.repeat_last_n, "Default penalty window")->capture_default_str();
  add_load_flags(sub, o->load);
  sub->add_flag("--dense", o->dense, kDenseHelp);
  sub->add_option("--sparse-threshold", o->sparse_threshold, "Predictor threshold (see run)");
  add_act_sparsity_flags(sub, o->act);
  add_device_option(sub, o->device);
  add_model_flags(sub, o->flags);
  return [o]() -> int { return serve(*o); };
}

}  // namespace pi::cli
