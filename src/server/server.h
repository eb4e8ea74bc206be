// The HTTP API of `powerinfer serve`: OpenAI-compatible (/v1/chat/completions,
// /v1/completions, /v1/embeddings, /v1/models) and llama.cpp-compatible (/completion,
// /embedding, /tokenize, /detokenize, /props, /slots, POST /slots/{id}?action=save|restore|erase,
// /metrics, /health) endpoints over a Scheduler, plus the chat page at /. Embeddings are jobs
// of the scheduler (embeddings.h).
// Routes are registered on construction; until attach() (the model is loading) /health and
// the model endpoints answer 503. After drain() (a graceful stop) generation requests get 503
// with "Connection: close", /health answers 503 "draining", and requests already accepted go
// on. Every answer carries "X-Replica: <replica_id>" when one is set, so that a client behind
// a balancer can tell which replica served it.
//
// Thread-safety: handlers run on the HTTP worker threads and reach the model only through the
// Scheduler's queue; attach() publishes the engine and scheduler with release/acquire.
#pragma once

#include <atomic>
#include <string>

#include "chat/chat_template.h"
#include "powerinfer/engine.h"
#include "server/embeddings.h"
#include "server/http.h"
#include "server/request.h"
#include "server/scheduler.h"

namespace pi::server {

struct ApiOptions {
  std::string model_name;   // reported as the model id
  std::string model_path;
  std::string api_key;      // empty: no authentication
  std::string cors_origin;  // empty: no CORS headers
  SamplingParams defaults;  // sampling where a request leaves a field out
  int64_t max_prompt_tokens = 0;  // 0: the slot context minus one
  int timeout_s = 600;            // longest a request may run; then it is cancelled
  std::string replica_id;         // X-Replica header and /props "replica_id"; empty: none
  // A non-streamed answer still being generated after this many seconds is sent chunked with
  // a space every 0.5 s, so that a gone client is noticed. 0: never; the answer is sent whole
  // or not at all, so a balancer can retry it elsewhere when this replica dies (a gone client
  // is then noticed only when the answer ends).
  int heartbeat_s = 1;
  // Embeddings: how each input's token states are pooled (--pooling); pooled vectors are
  // L2-normalised, as llama.cpp's server does. None: /embedding answers every token's state
  // as it is (llama.cpp normalises only pooled vectors), /v1/embeddings refuses (400).
  Pooling pooling = Pooling::Mean;
  // --slot-save-path: the directory of POST /slots/{id}?action=save|restore files; empty: slot
  // actions are refused (501), as in llama.cpp.
  std::string slot_save_path;
  // --reasoning-format: chat replies' <think> blocks as "reasoning_content" (deepseek), left
  // in "content" (none), or split when the model's chat template mentions <think> (auto).
  chat::ReasoningFormat reasoning_format = chat::ReasoningFormat::Auto;
  // --reasoning-effort: a harmony (gpt-oss) prompt's "Reasoning:" where a request has no
  // "reasoning_effort".
  chat::ReasoningEffort reasoning_effort = chat::ReasoningEffort::Medium;
};

class ApiServer {
 public:
  ApiServer(HttpServer& http, const ApiOptions& o);
  // From now on requests are served by `scheduler` (which must outlive this object's use).
  // With a harmony template (gpt-oss) every generation shows the message headers and ends at
  // <|return|> or <|call|>, not at <|end|> (chat::reply_tokens), on every endpoint; chat
  // replies are split into reasoning_content (analysis) and content.
  void attach(const Engine& engine, Scheduler& scheduler, chat::Template tmpl);
  // Starts a graceful stop: new generation requests are refused (503, Connection: close) and
  // the scheduler, if attached, takes no new jobs. Idempotent; callable from any thread.
  void drain();

 private:
  HttpResponse generate(const HttpRequest& r, Endpoint ep);
  HttpResponse embeddings(const HttpRequest& r, EmbedEndpoint ep);
  HttpResponse tokenize(const HttpRequest& r);
  HttpResponse detokenize(const HttpRequest& r);
  HttpResponse props();
  HttpResponse slots();
  HttpResponse slot_action(const HttpRequest& r);
  HttpResponse models();
  bool authorised(const HttpRequest& r) const;

  ApiOptions o_;
  const Engine* engine_ = nullptr;
  Scheduler* sched_ = nullptr;
  chat::Template tmpl_ = chat::Template::ChatML;
  std::vector<int32_t> shown_tokens_, end_tokens_;  // JobSpec's, from chat::reply_tokens(tmpl_)
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace pi::server
