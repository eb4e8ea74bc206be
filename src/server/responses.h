// JSON shapes of the answers (OpenAI chat/completions, llama.cpp /completion, errors, SSE
// chunks, Prometheus metrics). Pure functions of their inputs (tested in tests/server).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/request.h"
#include "server/scheduler.h"

namespace pi::server {

// What identifies one answer: "chatcmpl-..." / "cmpl-..." id, creation time, model name.
struct AnswerId {
  std::string id;
  int64_t created = 0;
  std::string model;
};

// {"error": {"code": status, "message": ..., "type": ...}}
std::string error_json(const ApiError& e);

// The whole answer of a non-streamed request. `reasoning` (chat, when the reply's <think>
// block was split from `text`): the message's "reasoning_content".
std::string final_json(const GenRequest& rq, const AnswerId& id, const std::string& text,
                       const std::vector<TokenProb>& probs, const JobStats& st,
                       const std::string* reasoning = nullptr);

// One SSE event "data: {...}\n\n" with new text (and its tokens' probabilities); `first`
// marks the chat chunk that carries the role. `reasoning` (chat): new reasoning text, sent as
// the delta's "reasoning_content" (the delta has "content" only when there is some, or no
// reasoning).
std::string chunk_event(const GenRequest& rq, const AnswerId& id, const std::string& text,
                        const std::vector<TokenProb>& probs, bool first, const std::string& reasoning = "");
// The closing events: the chunk with finish_reason (and timings), the usage chunk when
// asked, then "data: [DONE]" (OpenAI endpoints only).
std::string final_events(const GenRequest& rq, const AnswerId& id, const JobStats& st);

// llama.cpp's timings object.
std::string timings_json(const JobStats& st);

// Prometheus text exposition of the scheduler counters, with the slot and queue gauges a
// balancer or an operator watches (slots in use and idle, requests waiting, the queue limit,
// draining).
std::string metrics_text(const SchedulerStats& s, const SchedulerOptions& o);

// What /health answers once the model is loaded.
//   ok:       200 {"status":"ok"}        a slot is free
//   busy:     200 {"status":"busy"}      every slot is in use (requests still queue): alive,
//                                        so a balancer keeps it and its affine clients
//   draining: 503 {"status":"draining"}  stopping (SIGTERM): a balancer takes it out
// (While the model loads: 503 {"status":"loading", "error": {...}}, answered by the server.)
struct Health {
  int status = 200;
  std::string body;
};
Health health(const SchedulerStats& s, const SchedulerOptions& o);

}  // namespace pi::server
