// Parsing of the JSON request bodies of the generation endpoints (/v1/chat/completions,
// /v1/completions, /completion) into a GenRequest, with the HTTP status and one-line message
// of every rejection. Pure functions: no model, no threads (tested in tests/server).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"
#include "chat/reasoning.h"
#include "powerinfer/sampling.h"

namespace pi::server {

// An error answer: {"error": {"code": status, "message": message, "type": type}}.
struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
};

enum class Endpoint {
  Chat,        // /v1/chat/completions: messages
  Completion,  // /v1/completions: prompt
  Llama,       // /completion (llama.cpp): prompt, n_predict, llama.cpp's response shape
};

struct GenRequest {
  Endpoint endpoint = Endpoint::Completion;
  std::vector<chat::Message> messages;  // Chat
  std::string prompt;                   // Completion, Llama
  std::string model;                    // as sent; informational
  SamplingParams sampling;              // the server's defaults where a field is absent
  bool seeded = false;                  // "seed" given; else the server draws one
  int64_t n_predict = -1;               // max_tokens / n_predict; -1: until the context is full
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;
  int top_logprobs = 0;  // 0..20
  bool cache_prompt = true;
  bool ignore_eos = false;
  // Chat: "reasoning_format" ("none", "deepseek", "auto"); absent: the server's --reasoning-format.
  std::optional<chat::ReasoningFormat> reasoning_format;
  // Chat: OpenAI's "reasoning_effort" ("low", "medium", "high"), written into a harmony
  // (gpt-oss) prompt; other templates ignore it. Absent: the server's --reasoning-effort.
  std::optional<chat::ReasoningEffort> reasoning_effort;
  // Chat: "chat_template_kwargs" {"enable_thinking": false} (llama.cpp's field, Qwen3's switch:
  // the reply starts after an empty <think> block); "reasoning_effort" may come there too.
  // Absent: thinking on.
  std::optional<bool> enable_thinking;
};

// Parses `body` for `endpoint`. `defaults` are the server's sampling settings (its flags).
// Rejects (status 400) malformed JSON, a body that is not an object, fields of the wrong
// type or out of range, unknown fields, a missing prompt/messages; status 501 for a
// response_format other than text and for n > 1.
struct ParseResult {
  std::optional<GenRequest> request;
  ApiError error;  // when !request
};
ParseResult parse_gen_request(std::string_view body, Endpoint endpoint,
                              const SamplingParams& defaults);

}  // namespace pi::server
