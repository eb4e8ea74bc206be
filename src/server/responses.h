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

// The whole answer of a non-streamed request.
std::string final_json(const GenRequest& rq, const AnswerId& id, const std::string& text,
                       const std::vector<TokenProb>& probs, const JobStats& st);

// One SSE event "data: {...}\n\n" with new text (and its tokens' probabilities); `first`
// marks the chat chunk that carries the role.
std::string chunk_event(const GenRequest& rq, const AnswerId& id, const std::string& text,
                        const std::vector<TokenProb>& probs, bool first);
// The closing events: the chunk with finish_reason (and timings), the usage chunk when
// asked, then "data: [DONE]" (OpenAI endpoints only).
std::string final_events(const GenRequest& rq, const AnswerId& id, const JobStats& st);

// llama.cpp's timings object.
std::string timings_json(const JobStats& st);

// Prometheus text exposition of the scheduler counters.
std::string metrics_text(const SchedulerStats& s, int64_t n_ctx_slot);

}  // namespace pi::server
