// Request parsing and response shapes of the server (no model, no sockets).
#include <gtest/gtest.h>

#include "grammar/matcher.h"
#include "powerinfer/grammar.h"

#include <nlohmann/json.hpp>

#include "server/request.h"
#include "server/responses.h"

namespace pi::server {
namespace {

using json = nlohmann::json;

ParseResult parse(const std::string& body, Endpoint ep = Endpoint::Completion) {
  return parse_gen_request(body, ep, SamplingParams{});
}

void expect_error(const std::string& body, int status, const std::string& part,
                  Endpoint ep = Endpoint::Completion) {
  ParseResult r = parse(body, ep);
  ASSERT_FALSE(r.request.has_value()) << body;
  EXPECT_EQ(r.error.status, status) << body;
  EXPECT_NE(r.error.message.find(part), std::string::npos) << body << " -> " << r.error.message;
}

TEST(ServerRequest, ReadsEveryField) {
  ParseResult r = parse(R"({"prompt":"hi","max_tokens":7,"temperature":0.5,"top_p":0.9,
    "top_k":5,"min_p":0.1,"repeat_penalty":1.1,"stop":["a","b"],"seed":42,"stream":true,
    "stream_options":{"include_usage":true},"logprobs":2,"cache_prompt":false,
    "response_format":{"type":"text"}})");
  ASSERT_TRUE(r.request.has_value()) << r.error.message;
  const GenRequest& g = *r.request;
  EXPECT_EQ(g.prompt, "hi");
  EXPECT_EQ(g.n_predict, 7);
  EXPECT_FLOAT_EQ(g.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(g.sampling.top_p, 0.9f);
  EXPECT_EQ(g.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(g.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(g.sampling.repeat_penalty, 1.1f);
  EXPECT_EQ(g.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(g.seeded);
  EXPECT_EQ(g.sampling.seed, 42u);
  EXPECT_TRUE(g.stream && g.include_usage && g.logprobs);
  EXPECT_EQ(g.top_logprobs, 2);
  EXPECT_FALSE(g.cache_prompt);
}

TEST(ServerRequest, ChatMessagesAndDefaults) {
  ParseResult r = parse(R"({"messages":[{"role":"system","content":"s"},
    {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
    "stop":"x","seed":-1})", Endpoint::Chat);
  ASSERT_TRUE(r.request.has_value()) << r.error.message;
  ASSERT_EQ(r.request->messages.size(), 2u);
  EXPECT_EQ(r.request->messages[1].content, "ab");
  EXPECT_EQ(r.request->stop, std::vector<std::string>{"x"});
  EXPECT_FALSE(r.request->seeded);
  EXPECT_EQ(r.request->n_predict, -1);
  EXPECT_FLOAT_EQ(r.request->sampling.temperature, SamplingParams{}.temperature);
}

TEST(ServerRequest, RejectsBadBodies) {
  expect_error("{", 400, "not valid JSON");
  expect_error("[1]", 400, "must be a JSON object");
  expect_error(R"({"prompt":"a","temperature":"hot"})", 400, "'temperature' must be a number");
  expect_error(R"({"prompt":"a","max_tokens":1.5})", 400, "'max_tokens' must be an integer");
  expect_error(R"({"prompt":"a","stream":1})", 400, "'stream' must be a boolean");
  expect_error(R"({"prompt":"a","stop":[1]})", 400, "'stop' must be a string or an array");
  expect_error(R"({"prompt":"a","stop":[""]})", 400, "must not be empty");
  expect_error(R"({"prompt":"a","bogus":1})", 400, "unknown field 'bogus'");
  expect_error(R"({"prompt":7})", 400, "'prompt' must be a string");
  expect_error(R"({})", 400, "missing field 'prompt'");
  expect_error(R"({"prompt":"a","top_p":0})", 400, "top-p");
  expect_error(R"({"prompt":"a","temperature":-1})", 400, "temperature");
  expect_error(R"({"prompt":"a","max_tokens":-5})", 400, "max_tokens");
  expect_error(R"({"prompt":"a","logprobs":50})", 400, "top_logprobs must be in [0, 20]");
  expect_error(R"({"prompt":"a","response_format":{"type":"xml"}})", 400,
               "response_format 'xml' is not one of text, json_object, json_schema");
  expect_error(R"({"prompt":"a","response_format":{"type":"json_schema"}})", 400,
               "needs a 'json_schema' object with a 'schema'");
  expect_error(R"({"prompt":"a","json_schema":{"type":"string","pattern":"x"}})", 400,
               "field 'json_schema': json schema: /: unsupported keyword 'pattern'");
  expect_error(R"({"prompt":"a","grammar":"root ::= (\"a\""})", 400,
               "field 'grammar': grammar: line 1, column");
  expect_error(R"({"prompt":"a","grammar":5})", 400, "'grammar' must be a string");
  expect_error(R"({"prompt":"a","grammar":"root ::= \"a\"","json_schema":{}})", 400,
               "give one of");
  expect_error(R"({"prompt":"a","n":2})", 501, "only n = 1");
  expect_error(R"({"messages":"hi"})", 400, "'messages' must be an array", Endpoint::Chat);
  expect_error(R"({"messages":[]})", 400, "must not be empty", Endpoint::Chat);
  expect_error(R"({"messages":[{"content":"x"}]})", 400, "messages[0].role", Endpoint::Chat);
  expect_error(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", 501,
               "only parts of type 'text'", Endpoint::Chat);
  expect_error(R"({"prompt":"a"})", 400, "unknown field 'prompt'", Endpoint::Chat);
}

TEST(ServerRequest, ConstrainedOutputFieldsBecomeAGrammar) {
  auto grammar_of = [](const char* body) {
    auto r = parse_gen_request(body, Endpoint::Completion, pi::SamplingParams{});
    EXPECT_TRUE(r.request.has_value()) << body << ": " << r.error.message;
    return r.request ? r.request->sampling.grammar : std::string("?");
  };
  EXPECT_EQ(grammar_of(R"({"prompt":"a"})"), "");
  EXPECT_EQ(grammar_of(R"({"prompt":"a","grammar":"root ::= \"x\""})"), "root ::= \"x\"");
  EXPECT_EQ(grammar_of(R"({"prompt":"a","response_format":{"type":"json_object"}})"),
            pi::json_object_grammar());
  const std::string schema = R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}}})";
  const std::string want = *pi::json_schema_to_grammar(schema);
  EXPECT_EQ(grammar_of((R"({"prompt":"a","json_schema":)" + schema + "}").c_str()), want);
  EXPECT_EQ(grammar_of((R"({"prompt":"a","response_format":{"type":"json_schema","json_schema":{"name":"x","schema":)" +
                        schema + "}}}").c_str()),
            want);
  // Properties keep the client's order: b before a.
  auto rules = pi::grammar::parse_gbnf(want);
  ASSERT_TRUE(rules.ok());
  auto shared = std::make_shared<const pi::grammar::Rules>(std::move(*rules));
  pi::grammar::Matcher ba(shared), ab(shared);
  EXPECT_TRUE(ba.accept(R"({"b": 1, "a": "x"})"));
  EXPECT_FALSE(ab.accept(R"({"a": "x", "b": 1})"));
}

TEST(ServerResponses, ShapesOfAnswersAndErrors) {
  const json e = json::parse(error_json({503, "unavailable_error", "busy"}));
  EXPECT_EQ(e["error"]["code"], 503);
  EXPECT_EQ(e["error"]["type"], "unavailable_error");
  EXPECT_EQ(e["error"]["message"], "busy");

  GenRequest rq;
  rq.endpoint = Endpoint::Chat;
  rq.include_usage = true;
  AnswerId id{"chatcmpl-1", 100, "m"};
  JobStats st;
  st.finish = Finish::Length;
  st.n_prompt = 5;
  st.n_predicted = 3;
  const json f = json::parse(final_json(rq, id, "abc", {}, st));
  EXPECT_EQ(f["object"], "chat.completion");
  EXPECT_EQ(f["choices"][0]["message"]["content"], "abc");
  EXPECT_EQ(f["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(f["usage"]["total_tokens"], 8);
  EXPECT_EQ(f["timings"]["predicted_n"], 3);
  const std::string events = final_events(rq, id, st);
  EXPECT_EQ(events.rfind("data: [DONE]\n\n"), events.size() - 14);
  EXPECT_NE(events.find("\"usage\""), std::string::npos);
  // Invalid UTF-8 (a lone byte token) is replaced, never thrown on.
  const std::string chunk = chunk_event(rq, id, "\xff", {}, true);
  EXPECT_NE(chunk.find("\"role\":\"assistant\""), std::string::npos);
  EXPECT_EQ(chunk.rfind("data: ", 0), 0u);
}

// Thinking models: the message's reasoning_content, and stream deltas that carry reasoning,
// content or both; a request's reasoning_format is parsed and checked.
TEST(ServerResponses, ReasoningContent) {
  GenRequest rq;
  rq.endpoint = Endpoint::Chat;
  AnswerId id{"chatcmpl-2", 100, "m"};
  JobStats st;
  const std::string thought = "hmm";
  json f = json::parse(final_json(rq, id, "4", {}, st, &thought));
  EXPECT_EQ(f["choices"][0]["message"]["content"], "4");
  EXPECT_EQ(f["choices"][0]["message"]["reasoning_content"], "hmm");
  f = json::parse(final_json(rq, id, "4", {}, st));
  EXPECT_FALSE(f["choices"][0]["message"].contains("reasoning_content"));
  const auto delta = [&](const std::string& content, const std::string& reasoning) {
    const std::string ev = chunk_event(rq, id, content, {}, false, reasoning);
    return json::parse(ev.substr(6))["choices"][0]["delta"];
  };
  json d = delta("", "step one");
  EXPECT_EQ(d["reasoning_content"], "step one");
  EXPECT_FALSE(d.contains("content"));
  d = delta("4", "");
  EXPECT_EQ(d["content"], "4");
  EXPECT_FALSE(d.contains("reasoning_content"));
  d = delta("4", "done.");
  EXPECT_EQ(d["content"], "4");
  EXPECT_EQ(d["reasoning_content"], "done.");

  ParseResult r = parse(R"({"messages":[{"role":"user","content":"hi"}],"reasoning_format":"none"})", Endpoint::Chat);
  ASSERT_TRUE(r.request.has_value()) << r.error.message;
  EXPECT_EQ(r.request->reasoning_format, chat::ReasoningFormat::None);
  expect_error(R"({"messages":[{"role":"user","content":"hi"}],"reasoning_format":"r1"})", 400,
               "field 'reasoning_format' must be", Endpoint::Chat);
  expect_error(R"({"prompt":"hi","reasoning_format":"none"})", 400, "reasoning_format");
}

// OpenAI's reasoning_effort (harmony prompts): low, medium or high, chat only; absent: unset
// (the server's --reasoning-effort applies).
TEST(ServerRequest, ReasoningEffort) {
  ParseResult r = parse(R"({"messages":[{"role":"user","content":"hi"}],"reasoning_effort":"high"})", Endpoint::Chat);
  ASSERT_TRUE(r.request.has_value()) << r.error.message;
  EXPECT_EQ(r.request->reasoning_effort, chat::ReasoningEffort::High);
  r = parse(R"({"messages":[{"role":"user","content":"hi"}]})", Endpoint::Chat);
  ASSERT_TRUE(r.request.has_value()) << r.error.message;
  EXPECT_FALSE(r.request->reasoning_effort.has_value());
  expect_error(R"({"messages":[{"role":"user","content":"hi"}],"reasoning_effort":"minimal"})", 400,
               "field 'reasoning_effort' must be \"low\", \"medium\" or \"high\"", Endpoint::Chat);
  expect_error(R"({"messages":[{"role":"user","content":"hi"}],"reasoning_effort":2})", 400,
               "field 'reasoning_effort' must be a string", Endpoint::Chat);
  expect_error(R"({"prompt":"hi","reasoning_effort":"low"})", 400, "reasoning_effort");
}

// llama.cpp's chat_template_kwargs: enable_thinking (a boolean) and reasoning_effort (the
// top-level field wins); anything else, or a wrong type, is a 400 naming the key.
TEST(ServerRequest, ChatTemplateKwargs) {
  ParseResult r = parse(
      R"({"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":false,"reasoning_effort":"low"}})",
      Endpoint::Chat);
  ASSERT_TRUE(r.request.has_value()) << r.error.message;
  EXPECT_EQ(r.request->enable_thinking, false);
  EXPECT_EQ(r.request->reasoning_effort, chat::ReasoningEffort::Low);
  r = parse(R"({"messages":[{"role":"user","content":"hi"}],"reasoning_effort":"high",)"
            R"("chat_template_kwargs":{"reasoning_effort":"low"}})",
            Endpoint::Chat);
  ASSERT_TRUE(r.request.has_value()) << r.error.message;
  EXPECT_EQ(r.request->reasoning_effort, chat::ReasoningEffort::High);
  EXPECT_FALSE(r.request->enable_thinking.has_value());
  expect_error(R"({"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":"no"}})",
               400, "chat_template_kwargs.enable_thinking must be a boolean", Endpoint::Chat);
  expect_error(R"({"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"tools":[]}})", 400,
               "chat_template_kwargs.tools is not supported", Endpoint::Chat);
  expect_error(R"({"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":[1]})", 400,
               "field 'chat_template_kwargs' must be an object", Endpoint::Chat);
  expect_error(R"({"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"reasoning_effort":"max"}})",
               400, "must be \"low\", \"medium\" or \"high\"", Endpoint::Chat);
  expect_error(R"({"prompt":"hi","chat_template_kwargs":{}})", 400, "chat_template_kwargs");
}

TEST(ServerResponses, MetricsAreParseablePrometheusText) {
  SchedulerStats s;
  s.submitted = 3;
  s.finished = 2;
  s.slots.resize(2);
  s.slots[0].n_cached = 50;
  s.processing = 1;
  s.queued = 4;
  const std::string m = metrics_text(s, SchedulerOptions{2, 100, 8});
  EXPECT_NE(m.find("# TYPE powerinfer_requests_submitted_total counter\npowerinfer_requests_submitted_total 3\n"),
            std::string::npos);
  EXPECT_NE(m.find("powerinfer_kv_cache_tokens 50\n"), std::string::npos);
  EXPECT_NE(m.find("powerinfer_kv_cache_usage_ratio 0.25\n"), std::string::npos);
  EXPECT_NE(m.find("powerinfer_slots_total 2\n"), std::string::npos);
  EXPECT_NE(m.find("powerinfer_slots_idle 1\n"), std::string::npos);
  EXPECT_NE(m.find("powerinfer_slots_usage_ratio 0.5\n"), std::string::npos);
  EXPECT_NE(m.find("powerinfer_requests_deferred 4\n"), std::string::npos);
  EXPECT_NE(m.find("powerinfer_queue_limit 8\n"), std::string::npos);
  EXPECT_NE(m.find("powerinfer_draining 0\n"), std::string::npos);
  s.draining = true;
  EXPECT_NE(metrics_text(s, SchedulerOptions{2, 100, 8}).find("powerinfer_draining 1\n"),
            std::string::npos);
}

// /health: ok while a slot is free, busy (still 200: alive) when none is, 503 while draining
// whatever the load.
TEST(ServerResponses, HealthTellsOkBusyAndDraining) {
  const SchedulerOptions o{2, 100, 8};
  SchedulerStats s;
  s.processing = 1;
  EXPECT_EQ(health(s, o).status, 200);
  EXPECT_EQ(json::parse(health(s, o).body)["status"], "ok");
  s.processing = 2;
  s.queued = 3;
  EXPECT_EQ(health(s, o).status, 200);
  EXPECT_EQ(json::parse(health(s, o).body)["status"], "busy");
  s.draining = true;
  EXPECT_EQ(health(s, o).status, 503);
  EXPECT_EQ(json::parse(health(s, o).body)["status"], "draining");
  s.processing = 0;
  s.queued = 0;
  EXPECT_EQ(health(s, o).status, 503);
}

}  // namespace
}  // namespace pi::server
