#include "server/server.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <random>

#include "server/chat_page.h"
#include "server/json_text.h"
#include "server/responses.h"

namespace pi::server {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

HttpResponse error_response(const ApiError& e) {
  HttpResponse r;
  r.status = e.status;
  r.body = error_json(e);
  if (e.status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

HttpResponse json_response(const json& j) {
  HttpResponse r;
  r.body = dump(j);
  return r;
}

const ApiError kLoading{503, "unavailable_error", "Loading model"};
const ApiError kDraining{503, "unavailable_error",
                         "the server is shutting down: send the request to another replica"};
const ApiError kStopped{503, "unavailable_error",
                        "the server stopped before the request finished"};

uint64_t random_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// Parses a JSON object body for the small endpoints; sets `e` on failure.
std::optional<json> object_body(const std::string& body, ApiError& e) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) {
    e = {400, "invalid_request_error", "the request body is not valid JSON"};
    return std::nullopt;
  }
  if (!j.is_object()) {
    e = {400, "invalid_request_error", "the request body must be a JSON object"};
    return std::nullopt;
  }
  return j;
}

}  // namespace

ApiServer::ApiServer(HttpServer& http, const ApiOptions& o) : o_(o) {
  auto guard = [this](bool needs_model, std::function<HttpResponse(const HttpRequest&)> f) {
    return [this, needs_model, f = std::move(f)](const HttpRequest& r) {
      if (!authorised(r))
        return error_response({401, "authentication_error", "Invalid API Key"});
      if (needs_model && !ready_.load(std::memory_order_acquire)) return error_response(kLoading);
      return f(r);
    };
  };
  http.route("GET", "/health", [this](const HttpRequest&) {
    if (!ready_.load(std::memory_order_acquire)) {
      HttpResponse r = error_response(kLoading);
      json j = json::parse(r.body);
      j["status"] = "loading";
      r.body = dump(j);
      return r;
    }
    const Health h = health(sched_->snapshot(), sched_->options());
    HttpResponse r;
    r.status = h.status;
    r.body = h.body;
    if (h.status == 503) r.headers.emplace_back("Retry-After", "1");
    return r;
  });
  http.route("GET", "/", [](const HttpRequest&) {
    HttpResponse r;
    r.content_type = "text/html; charset=utf-8";
    r.body = chat_page_html();
    return r;
  });
  for (const char* path : {"/v1/chat/completions", "/chat/completions"})
    http.route("POST", path, guard(true, [this](const HttpRequest& r) { return generate(r, Endpoint::Chat); }));
  for (const char* path : {"/v1/completions", "/completions"})
    http.route("POST", path, guard(true, [this](const HttpRequest& r) { return generate(r, Endpoint::Completion); }));
  http.route("POST", "/completion", guard(true, [this](const HttpRequest& r) { return generate(r, Endpoint::Llama); }));
  for (const char* path : {"/v1/embeddings", "/embeddings"})
    http.route("POST", path, guard(true, [this](const HttpRequest& r) { return embeddings(r, EmbedEndpoint::OpenAI); }));
  http.route("POST", "/embedding", guard(true, [this](const HttpRequest& r) { return embeddings(r, EmbedEndpoint::Llama); }));
  http.route("POST", "/tokenize", guard(true, [this](const HttpRequest& r) { return tokenize(r); }));
  http.route("POST", "/detokenize", guard(true, [this](const HttpRequest& r) { return detokenize(r); }));
  for (const char* path : {"/v1/models", "/models"})
    http.route("GET", path, guard(false, [this](const HttpRequest&) { return models(); }));
  http.route("GET", "/props", guard(true, [this](const HttpRequest&) { return props(); }));
  http.route("GET", "/slots", guard(true, [this](const HttpRequest&) { return slots(); }));
  http.route_prefix("POST", "/slots/",
                    guard(true, [this](const HttpRequest& r) { return slot_action(r); }));
  http.route("GET", "/metrics", guard(true, [this](const HttpRequest&) {
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4";
    r.body = metrics_text(sched_->snapshot(), sched_->options());
    return r;
  }));
  http.set_error_body([](int status) {
    ApiError e{status, "invalid_request_error", "HTTP error"};
    if (status == 404) e = {404, "not_found_error", "File Not Found"};
    if (status == 413) e = {413, "invalid_request_error", "the request body is too large"};
    if (status >= 500) e = {status, "server_error", "internal server error"};
    return error_json(e);
  });
  http.set_post_process([this](HttpResponse& r) {
    if (!o_.replica_id.empty()) r.headers.emplace_back("X-Replica", o_.replica_id);
    // While draining every connection ends after its answer, so that kept-alive clients (a
    // balancer's connection pool) reconnect elsewhere and the server can stop.
    if (draining_.load(std::memory_order_relaxed)) r.headers.emplace_back("Connection", "close");
    if (!o_.cors_origin.empty()) {
      r.headers.emplace_back("Access-Control-Allow-Origin", o_.cors_origin);
      r.headers.emplace_back("Access-Control-Allow-Headers", "Authorization, Content-Type");
      r.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    }
  });
  if (!o_.cors_origin.empty()) {
    for (const char* path : {"/v1/chat/completions", "/chat/completions", "/v1/completions",
                             "/completions", "/completion", "/v1/embeddings", "/embeddings",
                             "/embedding", "/tokenize", "/detokenize",
                             "/v1/models", "/models", "/props", "/slots", "/metrics", "/health"}) {
      http.route("OPTIONS", path, [](const HttpRequest&) {
        HttpResponse r;
        r.status = 204;
        return r;
      });
    }
  }
}

void ApiServer::attach(const Engine& engine, Scheduler& scheduler, chat::Template tmpl) {
  engine_ = &engine;
  sched_ = &scheduler;
  tmpl_ = tmpl;
  const chat::ReplyTokens rt = chat::reply_tokens(tmpl);
  ReplyIds ids = reply_ids(*engine.vocabulary(), rt.shown, rt.not_end, rt.end);
  shown_tokens_ = std::move(ids.shown);
  end_tokens_ = std::move(ids.end);
  ready_.store(true, std::memory_order_release);
  if (draining_.load()) sched_->drain();
}

void ApiServer::drain() {
  draining_.store(true);
  if (ready_.load(std::memory_order_acquire)) sched_->drain();
}

bool ApiServer::authorised(const HttpRequest& r) const {
  if (o_.api_key.empty()) return true;
  return r.header("Authorization") == "Bearer " + o_.api_key;
}

HttpResponse ApiServer::generate(const HttpRequest& r, Endpoint ep) {
  if (draining_.load()) return error_response(kDraining);
  ParseResult pr = parse_gen_request(r.body, ep, o_.defaults);
  if (!pr.request) return error_response(pr.error);
  GenRequest rq = std::move(*pr.request);
  std::string text = rq.prompt;
  // Chat replies of thinking models: the <think> block or harmony's analysis channel apart, as
  // "reasoning_content".
  chat::SplitKind split = chat::SplitKind::None;
  bool open = false;
  if (ep == Endpoint::Chat) {
    chat::RenderOptions ro;
    ro.reasoning_effort = rq.reasoning_effort.value_or(o_.reasoning_effort);
    // enable_thinking: only where the model's template has the switch (Qwen3's); elsewhere an
    // empty <think> block would be text the model never saw, so the field is ignored.
    ro.enable_thinking = rq.enable_thinking.value_or(true) ||
                         !chat::has_thinking_switch(engine_->info().chat_template);
    auto rendered = chat::render(tmpl_, rq.messages, true, ro);
    if (!rendered.ok()) return error_response({400, "invalid_request_error", rendered.error().message});
    text = std::move(*rendered);
    split = chat::split_kind(rq.reasoning_format.value_or(o_.reasoning_format), tmpl_,
                             engine_->info().chat_template);
    // A template that opens the block itself (DeepSeek-R1's): the reply starts inside it.
    std::string_view t = text;
    while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.remove_suffix(1);
    open = split == chat::SplitKind::Think && t.ends_with("<think>");
  }
  const Vocabulary& v = *engine_->vocabulary();
  JobSpec spec;
  spec.prompt = v.encode(text, v.add_bos(), /*parse_special=*/true);
  const int64_t ctx = sched_->options().n_ctx_slot;
  const int64_t limit = o_.max_prompt_tokens > 0 ? std::min(o_.max_prompt_tokens, ctx - 1) : ctx - 1;
  if (spec.prompt.empty())
    return error_response({400, "invalid_request_error", "the prompt is empty"});
  if (static_cast<int64_t>(spec.prompt.size()) > limit) {
    return error_response(
        {400, "invalid_request_error",
         "the prompt is " + std::to_string(spec.prompt.size()) + " tokens; at most " +
             std::to_string(limit) + " fit (slot context " + std::to_string(ctx) + ")"});
  }
  spec.sampling = rq.sampling;
  if (!rq.seeded) spec.sampling.seed = random_seed();
  spec.n_predict = rq.n_predict;
  spec.stop = rq.stop;
  spec.logprobs = rq.logprobs;
  spec.top_logprobs = rq.top_logprobs;
  spec.cache_prompt = rq.cache_prompt;
  spec.ignore_eos = rq.ignore_eos;
  spec.shown_tokens = shown_tokens_;
  spec.end_tokens = end_tokens_;
  std::shared_ptr<Job> job = sched_->submit(std::move(spec));
  if (!job) {
    if (sched_->draining()) return error_response(kDraining);
    return error_response({503, "unavailable_error",
                           "the server is busy: every slot is in use and the queue is full"});
  }
  AnswerId id;
  id.id = std::string(ep == Endpoint::Chat ? "chatcmpl-" : "cmpl-") +
          std::to_string(next_id_.fetch_add(1));
  id.created = static_cast<int64_t>(std::time(nullptr));
  id.model = o_.model_name;
  const auto deadline = Clock::now() + std::chrono::seconds(o_.timeout_s);
  constexpr auto kTick = std::chrono::milliseconds(500);

  if (rq.stream) {
    HttpResponse resp;
    resp.content_type = "text/event-stream";
    resp.headers.emplace_back("Cache-Control", "no-cache");
    resp.stream = [job, rq, id, deadline, kTick, split, open](const BodyWriter& write) {
      bool first = true;
      chat::ReplySplit splitter(split, open);
      while (true) {
        Job::Output out = job->take(kTick);
        bool ok = true;
        const chat::ReplySplit::Delta d =
            out.done ? splitter.push(out.text) + splitter.finish() : splitter.push(out.text);
        if (!d.empty() || !out.probs.empty()) {
          ok = write(chunk_event(rq, id, d.content, out.probs, first, d.reasoning));
          first = false;
        } else if (!out.done) {
          ok = write(": ping\n\n");  // an SSE comment: notices a gone client while waiting
        }
        if (!ok) {
          job->cancel();
          return;
        }
        if (out.done) {
          if (out.stats.finish == Finish::Error) {
            write("data: " + error_json({500, "server_error", out.stats.error}) + "\n\n");
            return;
          }
          if (out.stats.finish == Finish::Shutdown) {
            write("data: " + error_json(kStopped) + "\n\n");
            return;
          }
          if (first && rq.endpoint == Endpoint::Chat) write(chunk_event(rq, id, "", {}, true));
          write(final_events(rq, id, out.stats));
          return;
        }
        if (Clock::now() > deadline) job->cancel();
      }
    };
    return resp;
  }

  // Not streamed: answer directly when the job ends within heartbeat_s (default a second).
  // Longer jobs switch to a chunked body that writes a space (leading JSON whitespace) every
  // half second, so that a gone client is noticed and its slot freed; the status is then
  // already 200, and an engine failure becomes an error object in a 200 answer. With
  // heartbeat_s 0 the answer is always direct.
  auto collected = std::make_shared<std::pair<std::string, std::vector<TokenProb>>>();
  auto collect = [collected](Job::Output& o) {
    collected->first += o.text;
    for (TokenProb& p : o.probs) collected->second.push_back(std::move(p));
  };
  auto body = [rq, id, collected, split, open](const JobStats& st) {
    if (st.finish == Finish::Error) return error_json({500, "server_error", st.error});
    if (st.finish == Finish::Shutdown) return error_json(kStopped);
    if (split == chat::SplitKind::None) return final_json(rq, id, collected->first, collected->second, st);
    chat::ReplySplit splitter(split, open);
    const chat::ReplySplit::Delta d = splitter.push(collected->first) + splitter.finish();
    return final_json(rq, id, d.content, collected->second, st, &d.reasoning);
  };
  const bool heartbeat = o_.heartbeat_s > 0;
  const auto direct_until = Clock::now() + std::chrono::seconds(o_.heartbeat_s);
  while (!heartbeat || Clock::now() < direct_until) {
    auto wait = kTick;
    if (heartbeat) {
      wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(
                                direct_until - Clock::now()));
    }
    Job::Output o = job->take(wait);
    collect(o);
    if (!o.done) {
      if (Clock::now() > deadline) job->cancel();
      continue;
    }
    HttpResponse resp;
    if (o.stats.finish == Finish::Error) resp.status = 500;
    if (o.stats.finish == Finish::Shutdown) {
      resp.status = 503;
      resp.headers.emplace_back("Retry-After", "1");
    }
    resp.body = body(o.stats);
    return resp;
  }
  HttpResponse resp;
  resp.stream = [job, collect, body, deadline, kTick](const BodyWriter& write) {
    auto last = Clock::now();
    while (true) {
      Job::Output o = job->take(kTick);
      collect(o);
      if (o.done) {
        write(body(o.stats));
        return;
      }
      if (Clock::now() - last >= kTick) {
        if (!write(" ")) {
          job->cancel();
          return;
        }
        last = Clock::now();
      }
      if (Clock::now() > deadline) job->cancel();
    }
  };
  return resp;
}

HttpResponse ApiServer::embeddings(const HttpRequest& r, EmbedEndpoint ep) {
  if (draining_.load()) return error_response(kDraining);
  EmbedParseResult pr = parse_embed_request(r.body, ep);
  if (!pr.request) return error_response(pr.error);
  const EmbedRequest& rq = *pr.request;
  const bool per_token = o_.pooling == Pooling::None;
  if (per_token && ep == EmbedEndpoint::OpenAI) {
    return error_response({400, "invalid_request_error",
                           "pooling 'none' (--pooling none) gives one vector per token, which "
                           "OpenAI's embeddings API cannot carry: use POST /embedding, or start "
                           "the server with --pooling mean, last or cls"});
  }
  const Vocabulary& v = *engine_->vocabulary();
  const int64_t ctx = sched_->options().n_ctx_slot;
  JobSpec spec;
  spec.kind = JobKind::Embed;
  spec.embed = EmbedParams{o_.pooling, !per_token};
  std::vector<size_t> token_rows;
  int64_t n_tokens = 0;
  for (size_t i = 0; i < rq.inputs.size(); ++i) {
    const EmbedRequest::Input& in = rq.inputs[i];
    std::vector<int32_t> ids = in.is_tokens ? in.tokens : v.encode(in.text, v.add_bos(), true);
    const std::string which = rq.single ? "the input" : "input " + std::to_string(i);
    for (int32_t t : ids) {
      if (t >= v.n_vocab()) {
        return error_response({400, "invalid_request_error",
                               which + ": token id " + std::to_string(t) +
                                   " is outside the vocabulary [0, " + std::to_string(v.n_vocab()) + ")"});
      }
    }
    if (ids.empty()) return error_response({400, "invalid_request_error", which + " is empty"});
    if (static_cast<int64_t>(ids.size()) > ctx) {
      return error_response({400, "invalid_request_error",
                             which + " is " + std::to_string(ids.size()) + " tokens; at most " +
                                 std::to_string(ctx) + " fit (slot context)"});
    }
    n_tokens += static_cast<int64_t>(ids.size());
    if (per_token) token_rows.push_back(ids.size());
    spec.inputs.push_back(std::move(ids));
  }
  std::shared_ptr<Job> job = sched_->submit(std::move(spec));
  if (!job) {
    if (sched_->draining()) return error_response(kDraining);
    return error_response({503, "unavailable_error",
                           "the server is busy: every slot is in use and the queue is full"});
  }
  const auto deadline = Clock::now() + std::chrono::seconds(o_.timeout_s);
  while (true) {
    Job::Output o = job->take(std::chrono::milliseconds(500));
    if (!o.done) {
      if (Clock::now() > deadline) job->cancel();
      continue;
    }
    if (o.stats.finish == Finish::Error)
      return error_response({500, "server_error", o.stats.error});
    if (o.stats.finish == Finish::Shutdown) return error_response(kStopped);
    if (o.stats.finish == Finish::Cancelled)
      return error_response({504, "timeout_error", "the request ran out of time (--timeout)"});
    HttpResponse resp;
    resp.body = embeddings_json(rq, o_.model_name, o.embeddings, engine_->info().n_embd, n_tokens,
                                token_rows);
    return resp;
  }
}

HttpResponse ApiServer::tokenize(const HttpRequest& r) {
  ApiError e;
  auto j = object_body(r.body, e);
  if (!j) return error_response(e);
  auto c = j->find("content");
  if (c == j->end() || !c->is_string())
    return error_response({400, "invalid_request_error", "field 'content' must be a string"});
  bool add_special = false, with_pieces = false;
  if (auto a = j->find("add_special"); a != j->end()) {
    if (!a->is_boolean())
      return error_response({400, "invalid_request_error", "field 'add_special' must be a boolean"});
    add_special = a->get<bool>();
  }
  if (auto a = j->find("with_pieces"); a != j->end()) {
    if (!a->is_boolean())
      return error_response({400, "invalid_request_error", "field 'with_pieces' must be a boolean"});
    with_pieces = a->get<bool>();
  }
  const Vocabulary& v = *engine_->vocabulary();
  const std::vector<int32_t> ids = v.encode(c->get<std::string>(), add_special && v.add_bos(), true);
  json tokens = json::array();
  for (int32_t id : ids) {
    if (with_pieces) {
      tokens.push_back({{"id", id}, {"piece", v.piece(id)}});
    } else {
      tokens.push_back(id);
    }
  }
  return json_response({{"tokens", tokens}});
}

HttpResponse ApiServer::detokenize(const HttpRequest& r) {
  ApiError e;
  auto j = object_body(r.body, e);
  if (!j) return error_response(e);
  auto t = j->find("tokens");
  if (t == j->end() || !t->is_array())
    return error_response({400, "invalid_request_error", "field 'tokens' must be an array of token ids"});
  const Vocabulary& v = *engine_->vocabulary();
  std::vector<int32_t> ids;
  for (size_t i = 0; i < t->size(); ++i) {
    const json& x = (*t)[i];
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= v.n_vocab()) {
      return error_response({400, "invalid_request_error",
                             "tokens[" + std::to_string(i) + "] is not a token id in [0, " +
                                 std::to_string(v.n_vocab()) + ")"});
    }
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return json_response({{"content", v.decode(ids, false)}});
}

HttpResponse ApiServer::models() {
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  json m = {{"id", o_.model_name}, {"object", "model"}, {"created", created}, {"owned_by", "powerinfer"}};
  if (ready_.load(std::memory_order_acquire)) {
    const ModelInfo& i = engine_->info();
    m["meta"] = {{"n_vocab", i.n_vocab}, {"n_ctx_train", i.n_ctx_train}, {"n_embd", i.n_embd},
                 {"n_params_layers", i.n_layer}, {"size", i.file_bytes},
                 {"architecture", i.architecture}, {"powerinfer", i.powerinfer}};
  }
  return json_response({{"object", "list"}, {"data", json::array({m})}});
}

HttpResponse ApiServer::props() {
  const SamplingParams& d = o_.defaults;
  json params = {{"temperature", d.temperature}, {"top_k", d.top_k}, {"top_p", d.top_p},
                 {"min_p", d.min_p}, {"repeat_penalty", d.repeat_penalty},
                 {"repeat_last_n", d.repeat_last_n}, {"presence_penalty", d.presence_penalty},
                 {"frequency_penalty", d.frequency_penalty}, {"n_predict", -1}};
  return json_response({{"default_generation_settings",
                         {{"n_ctx", sched_->options().n_ctx_slot}, {"params", params}}},
                        {"total_slots", sched_->options().n_slots},
                        {"chat_template", chat::template_name(tmpl_)},
                        {"model_path", o_.model_path},
                        {"model", o_.model_name},
                        {"max_queue", sched_->options().max_queue},
                        {"replica_id", o_.replica_id},
                        {"draining", sched_->draining()}});
}

HttpResponse ApiServer::slots() {
  const SchedulerStats s = sched_->snapshot();
  json a = json::array();
  for (const auto& sl : s.slots) {
    a.push_back({{"id", sl.id},
                 {"n_ctx", sched_->options().n_ctx_slot},
                 {"is_processing", sl.busy},
                 {"n_cached", sl.n_cached},
                 {"n_decoded", sl.n_predicted}});
  }
  return json_response(a);
}

namespace {

// A slot save file's name: one path component, no separators, no "..", printable.
bool valid_slot_filename(const std::string& f) {
  if (f.empty() || f.size() > 255 || f == "." || f.find("..") != std::string::npos) return false;
  for (unsigned char c : f)
    if (c < 0x20 || c == 0x7f || c == '/' || c == '\\' || c == ':') return false;
  return true;
}

}  // namespace

HttpResponse ApiServer::slot_action(const HttpRequest& r) {
  if (o_.slot_save_path.empty()) {
    return error_response({501, "not_supported_error",
                           "This server does not support slot actions: start it with "
                           "--slot-save-path DIR"});
  }
  const std::string id_text = r.path.substr(std::string_view("/slots/").size());
  int id = -1;
  if (id_text.empty() || id_text.size() > 6 ||
      !std::all_of(id_text.begin(), id_text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return error_response({400, "invalid_request_error", "Invalid slot id: " + id_text});
  id = std::stoi(id_text);
  const auto action_it = r.query.find("action");
  const std::string action = action_it == r.query.end() ? "" : action_it->second;
  SlotAction a;
  if (action == "save") {
    a = SlotAction::Save;
  } else if (action == "restore") {
    a = SlotAction::Restore;
  } else if (action == "erase") {
    a = SlotAction::Erase;
  } else {
    return error_response({400, "invalid_request_error",
                           "Invalid action \"" + action + "\": save, restore or erase"});
  }
  std::string filename;
  if (a != SlotAction::Erase) {
    ApiError e;
    auto body = object_body(r.body, e);
    if (!body) return error_response(e);
    const auto f = body->find("filename");
    if (f == body->end() || !f->is_string())
      return error_response({400, "invalid_request_error", "\"filename\" (a string) is required"});
    filename = f->get<std::string>();
    if (!valid_slot_filename(filename))
      return error_response({400, "invalid_request_error", "Invalid filename"});
  }
  const std::string path = o_.slot_save_path + "/" + filename;
  const SlotActionResult res = sched_->slot_action(a, id, path);
  if (res.status != 200) {
    const char* type = res.status == 400   ? "invalid_request_error"
                       : res.status == 503 ? "unavailable_error"
                                           : "server_error";
    return error_response({res.status, type, res.error});
  }
  json j = {{"id_slot", id}};
  if (a == SlotAction::Save) {
    j["filename"] = filename;
    j["n_saved"] = res.n_tokens;
    j["n_written"] = res.n_bytes;
    j["timings"] = {{"save_ms", res.ms}};
  } else if (a == SlotAction::Restore) {
    j["filename"] = filename;
    j["n_restored"] = res.n_tokens;
    j["n_read"] = res.n_bytes;
    j["timings"] = {{"restore_ms", res.ms}};
  } else {
    j["n_erased"] = res.n_tokens;
  }
  return json_response(j);
}

}  // namespace pi::server
