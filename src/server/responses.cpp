#include "server/responses.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>

#include "server/json_text.h"

namespace pi::server {
namespace {

using json = nlohmann::json;

const char* finish_reason(const JobStats& st) {
  return st.finish == Finish::Length ? "length" : "stop";
}

json bytes_of(const std::string& s) {
  json a = json::array();
  for (unsigned char c : s) a.push_back(static_cast<int>(c));
  return a;
}

json chat_logprobs(const std::vector<TokenProb>& probs) {
  json content = json::array();
  for (const TokenProb& p : probs) {
    json top = json::array();
    for (const TopProb& t : p.top)
      top.push_back({{"token", t.text}, {"logprob", t.logprob}, {"bytes", bytes_of(t.text)}});
    content.push_back({{"token", p.text},
                       {"logprob", p.logprob},
                       {"bytes", bytes_of(p.text)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json completion_logprobs(const std::vector<TokenProb>& probs) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  size_t off = 0;
  for (const TokenProb& p : probs) {
    tokens.push_back(p.text);
    lps.push_back(p.logprob);
    json top = json::object();
    for (const TopProb& t : p.top) top[t.text] = t.logprob;
    tops.push_back(top);
    offs.push_back(off);
    off += p.text.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

json llama_probs(const std::vector<TokenProb>& probs) {
  json a = json::array();
  for (const TokenProb& p : probs) {
    json top = json::array();
    for (const TopProb& t : p.top) top.push_back({{"id", t.id}, {"token", t.text}, {"logprob", t.logprob}});
    a.push_back({{"id", p.id}, {"token", p.text}, {"logprob", p.logprob}, {"top_logprobs", top}});
  }
  return a;
}

json timings(const JobStats& st) {
  const auto n_eval = static_cast<double>(st.n_prompt - st.n_cached);
  const auto n_pred = static_cast<double>(st.n_predicted);
  return {{"cache_n", st.n_cached},
          {"prompt_n", st.n_prompt - st.n_cached},
          {"prompt_ms", st.prompt_ms},
          {"prompt_per_token_ms", n_eval > 0 ? st.prompt_ms / n_eval : 0.0},
          {"prompt_per_second", st.prompt_ms > 0 ? 1e3 * n_eval / st.prompt_ms : 0.0},
          {"predicted_n", st.n_predicted},
          {"predicted_ms", st.predict_ms},
          {"predicted_per_token_ms", n_pred > 0 ? st.predict_ms / n_pred : 0.0},
          {"predicted_per_second", st.predict_ms > 0 ? 1e3 * n_pred / st.predict_ms : 0.0}};
}

json usage(const JobStats& st) {
  return {{"prompt_tokens", st.n_prompt},
          {"completion_tokens", st.n_predicted},
          {"total_tokens", st.n_prompt + st.n_predicted}};
}

json head(const AnswerId& id, const char* object) {
  return {{"id", id.id}, {"object", object}, {"created", id.created}, {"model", id.model}};
}

json llama_final(const GenRequest& rq, const AnswerId& id, const std::string& text,
                 const JobStats& st) {
  json j = {{"content", text},
            {"stop", true},
            {"id_slot", st.slot},
            {"model", id.model},
            {"tokens_predicted", st.n_predicted},
            {"tokens_evaluated", st.n_prompt},
            {"tokens_cached", st.n_cached},
            {"stopped_eos", st.finish == Finish::Stop && st.stop_word.empty()},
            {"stopped_word", !st.stop_word.empty()},
            {"stopped_limit", st.finish == Finish::Length},
            {"stopping_word", st.stop_word},
            {"truncated", false},
            {"timings", timings(st)}};
  return j;
}

}  // namespace

std::string error_json(const ApiError& e) {
  return dump(json{{"error", {{"code", e.status}, {"message", e.message}, {"type", e.type}}}});
}

std::string timings_json(const JobStats& st) { return dump(timings(st)); }

std::string final_json(const GenRequest& rq, const AnswerId& id, const std::string& text,
                       const std::vector<TokenProb>& probs, const JobStats& st, const std::string* reasoning) {
  if (rq.endpoint == Endpoint::Llama) {
    json j = llama_final(rq, id, text, st);
    if (rq.logprobs) j["completion_probabilities"] = llama_probs(probs);
    return dump(j);
  }
  json choice = {{"index", 0}, {"finish_reason", finish_reason(st)}};
  json j;
  if (rq.endpoint == Endpoint::Chat) {
    j = head(id, "chat.completion");
    choice["message"] = {{"role", "assistant"}, {"content", text}};
    if (reasoning != nullptr && !reasoning->empty()) choice["message"]["reasoning_content"] = *reasoning;
    choice["logprobs"] = rq.logprobs ? chat_logprobs(probs) : json(nullptr);
  } else {
    j = head(id, "text_completion");
    choice["text"] = text;
    choice["logprobs"] = rq.logprobs ? completion_logprobs(probs) : json(nullptr);
  }
  j["choices"] = json::array({choice});
  j["usage"] = usage(st);
  j["timings"] = timings(st);
  return dump(j);
}

std::string chunk_event(const GenRequest& rq, const AnswerId& id, const std::string& text,
                        const std::vector<TokenProb>& probs, bool first, const std::string& reasoning) {
  json j;
  if (rq.endpoint == Endpoint::Llama) {
    j = {{"content", text}, {"stop", false}};
    if (rq.logprobs) j["completion_probabilities"] = llama_probs(probs);
  } else if (rq.endpoint == Endpoint::Chat) {
    j = head(id, "chat.completion.chunk");
    json delta = json::object();
    if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
    if (!text.empty() || reasoning.empty()) delta["content"] = text;
    if (first) delta["role"] = "assistant";
    json choice = {{"index", 0}, {"delta", delta}, {"finish_reason", nullptr}};
    choice["logprobs"] = rq.logprobs ? chat_logprobs(probs) : json(nullptr);
    j["choices"] = json::array({choice});
  } else {
    j = head(id, "text_completion");
    json choice = {{"index", 0}, {"text", text}, {"finish_reason", nullptr}};
    choice["logprobs"] = rq.logprobs ? completion_logprobs(probs) : json(nullptr);
    j["choices"] = json::array({choice});
  }
  return "data: " + dump(j) + "\n\n";
}

std::string final_events(const GenRequest& rq, const AnswerId& id, const JobStats& st) {
  if (rq.endpoint == Endpoint::Llama) return "data: " + dump(llama_final(rq, id, "", st)) + "\n\n";
  json j;
  json choice = {{"index", 0}, {"finish_reason", finish_reason(st)}};
  if (rq.endpoint == Endpoint::Chat) {
    j = head(id, "chat.completion.chunk");
    choice["delta"] = json::object();
  } else {
    j = head(id, "text_completion");
    choice["text"] = "";
  }
  choice["logprobs"] = nullptr;
  j["choices"] = json::array({choice});
  j["timings"] = timings(st);
  std::string out = "data: " + dump(j) + "\n\n";
  if (rq.include_usage) {
    json u = head(id, rq.endpoint == Endpoint::Chat ? "chat.completion.chunk" : "text_completion");
    u["choices"] = json::array();
    u["usage"] = usage(st);
    out += "data: " + dump(u) + "\n\n";
  }
  return out + "data: [DONE]\n\n";
}

std::string metrics_text(const SchedulerStats& s, const SchedulerOptions& o) {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    char line[512];
    std::snprintf(line, sizeof line, "# HELP powerinfer_%s %s\n# TYPE powerinfer_%s %s\npowerinfer_%s %.17g\n",
                  name, help, name, type, name, v);
    out += line;
  };
  auto d = [](int64_t v) { return static_cast<double>(v); };
  metric("requests_submitted_total", "counter", "Requests accepted into the queue.", d(s.submitted));
  metric("requests_rejected_total", "counter", "Requests refused because the queue was full.", d(s.rejected));
  metric("requests_finished_total", "counter", "Requests that ended with stop or length.", d(s.finished));
  metric("requests_cancelled_total", "counter",
         "Requests cancelled (client gone, time limit, or the server stopped first).", d(s.cancelled));
  metric("requests_failed_total", "counter", "Requests that failed in the engine.", d(s.failed));
  metric("requests_processing", "gauge", "Requests holding a slot.", d(s.processing));
  metric("requests_deferred", "gauge", "Requests waiting for a slot.", d(s.queued));
  metric("slots_total", "gauge", "Slots (-np).", d(o.n_slots));
  metric("slots_idle", "gauge", "Slots free for a new request.",
         d(std::max<int64_t>(0, o.n_slots - s.processing)));
  metric("slots_usage_ratio", "gauge", "Share of the slots in use.",
         o.n_slots > 0 ? d(s.processing) / d(o.n_slots) : 0.0);
  metric("queue_limit", "gauge", "Requests that may wait for a slot (--max-queue).", d(o.max_queue));
  metric("draining", "gauge", "1 while the server drains before stopping (SIGTERM), else 0.",
         s.draining ? 1.0 : 0.0);
  metric("prompt_tokens_total", "counter", "Prompt tokens evaluated.", d(s.prompt_tokens));
  metric("prompt_tokens_cached_total", "counter", "Prompt tokens reused from a slot's cache.", d(s.cached_tokens));
  metric("tokens_predicted_total", "counter", "Tokens generated.", d(s.predicted_tokens));
  metric("prompt_seconds_total", "counter", "Time spent on prompts.", s.prompt_seconds);
  metric("tokens_predicted_seconds_total", "counter", "Time spent generating.", s.predict_seconds);
  metric("decode_steps_total", "counter", "Batched decode steps.", d(s.steps));
  int64_t cells = 0;
  for (const auto& sl : s.slots) cells += sl.n_cached;
  metric("kv_cache_tokens", "gauge", "Tokens held in the KV cache over all slots.", d(cells));
  metric("kv_cache_usage_ratio", "gauge", "Share of the KV cache in use.",
         o.n_ctx_slot > 0 && !s.slots.empty() ? d(cells) / d(o.n_ctx_slot * static_cast<int64_t>(s.slots.size())) : 0.0);
  return out;
}

Health health(const SchedulerStats& s, const SchedulerOptions& o) {
  if (s.draining) return {503, R"({"status":"draining"})"};
  if (s.processing >= o.n_slots) return {200, R"({"status":"busy"})"};
  return {200, R"({"status":"ok"})"};
}

}  // namespace pi::server
