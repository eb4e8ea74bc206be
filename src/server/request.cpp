#include "server/request.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <set>

#include "powerinfer/grammar.h"

namespace pi::server {
namespace {

using json = nlohmann::json;

ApiError bad(std::string message) { return ApiError{400, "invalid_request_error", std::move(message)}; }

// Fields each endpoint accepts. Unknown fields are rejected (a typo must not pass silently).
const std::set<std::string>& known_fields(Endpoint e) {
  static const std::set<std::string> common = {
      "model", "temperature", "top_p", "top_k", "min_p", "repeat_penalty", "repeat_last_n",
      "presence_penalty", "frequency_penalty", "seed", "stop", "stream", "stream_options",
      "cache_prompt", "ignore_eos", "n", "user", "response_format", "grammar", "json_schema"};
  static const std::set<std::string> chat = [] {
    auto s = common;
    s.insert({"messages", "max_tokens", "max_completion_tokens", "logprobs", "top_logprobs",
              "reasoning_format", "reasoning_effort", "chat_template_kwargs"});
    return s;
  }();
  static const std::set<std::string> completion = [] {
    auto s = common;
    s.insert({"prompt", "max_tokens", "logprobs", "echo", "suffix"});
    return s;
  }();
  static const std::set<std::string> llama = [] {
    auto s = common;
    s.insert({"prompt", "n_predict", "n_probs", "max_tokens"});
    return s;
  }();
  return e == Endpoint::Chat ? chat : e == Endpoint::Completion ? completion : llama;
}

// Reads an optional field of the wanted JSON kind; sets `error` and returns false when the
// field is present with the wrong type.
struct Reader {
  const json& obj;
  std::optional<ApiError> error;

  const json* get(const char* key) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
  }
  void number(const char* key, float& out) {
    if (const json* v = get(key); v != nullptr && !error) {
      if (!v->is_number()) {
        error = bad(std::string("field '") + key + "' must be a number");
        return;
      }
      out = v->get<float>();
    }
  }
  template <typename Int>
  void integer(const char* key, Int& out) {
    if (const json* v = get(key); v != nullptr && !error) {
      if (!v->is_number_integer()) {
        error = bad(std::string("field '") + key + "' must be an integer");
        return;
      }
      out = static_cast<Int>(v->get<int64_t>());
    }
  }
  void boolean(const char* key, bool& out) {
    if (const json* v = get(key); v != nullptr && !error) {
      if (!v->is_boolean()) {
        error = bad(std::string("field '") + key + "' must be a boolean");
        return;
      }
      out = v->get<bool>();
    }
  }
  void string(const char* key, std::string& out) {
    if (const json* v = get(key); v != nullptr && !error) {
      if (!v->is_string()) {
        error = bad(std::string("field '") + key + "' must be a string");
        return;
      }
      out = v->get<std::string>();
    }
  }
};

std::optional<ApiError> read_messages(const json& v, std::vector<chat::Message>& out) {
  if (!v.is_array()) return bad("field 'messages' must be an array");
  if (v.empty()) return bad("field 'messages' must not be empty");
  for (size_t i = 0; i < v.size(); ++i) {
    const json& m = v[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return bad(at + " must be an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) return bad(at + ".role must be a string");
    chat::Message msg{role->get<std::string>(), ""};
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      // An assistant message may carry no content.
    } else if (content->is_string()) {
      msg.content = content->get<std::string>();
    } else if (content->is_array()) {
      // Content parts: only text parts are supported.
      for (const json& part : *content) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          return ApiError{501, "not_supported_error",
                          at + ".content: only parts of type 'text' are supported"};
        }
        msg.content += part["text"].get<std::string>();
      }
    } else {
      return bad(at + ".content must be a string or an array of text parts");
    }
    out.push_back(std::move(msg));
  }
  return std::nullopt;
}

}  // namespace

ParseResult parse_gen_request(std::string_view body, Endpoint endpoint,
                              const SamplingParams& defaults) {
  ParseResult r;
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    r.error = bad("the request body is not valid JSON");
    return r;
  }
  if (!j.is_object()) {
    r.error = bad("the request body must be a JSON object");
    return r;
  }
  const auto& known = known_fields(endpoint);
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (known.count(it.key()) == 0) {
      r.error = bad("unknown field '" + it.key() + "'");
      return r;
    }
  }
  GenRequest g;
  g.endpoint = endpoint;
  g.sampling = defaults;
  Reader rd{j, std::nullopt};
  rd.string("model", g.model);
  rd.number("temperature", g.sampling.temperature);
  rd.number("top_p", g.sampling.top_p);
  rd.integer("top_k", g.sampling.top_k);
  rd.number("min_p", g.sampling.min_p);
  rd.number("repeat_penalty", g.sampling.repeat_penalty);
  rd.integer("repeat_last_n", g.sampling.repeat_last_n);
  rd.number("presence_penalty", g.sampling.presence_penalty);
  rd.number("frequency_penalty", g.sampling.frequency_penalty);
  if (const json* s = rd.get("seed"); s != nullptr && !rd.error) {
    if (!s->is_number_integer()) {
      rd.error = bad("field 'seed' must be an integer");
    } else if (s->get<int64_t>() >= 0) {  // -1 (llama.cpp): random
      g.sampling.seed = s->is_number_unsigned() ? s->get<uint64_t>()
                                                : static_cast<uint64_t>(s->get<int64_t>());
      g.seeded = true;
    }
  }
  rd.integer("max_tokens", g.n_predict);
  rd.integer("max_completion_tokens", g.n_predict);
  rd.integer("n_predict", g.n_predict);
  rd.boolean("stream", g.stream);
  rd.boolean("cache_prompt", g.cache_prompt);
  rd.boolean("ignore_eos", g.ignore_eos);
  if (endpoint == Endpoint::Chat) {
    std::string format;
    rd.string("reasoning_format", format);
    chat::ReasoningFormat f{};
    if (!format.empty() && !rd.error) {
      if (!chat::parse_reasoning_format(format, f)) {
        rd.error = bad("field 'reasoning_format' must be \"none\", \"deepseek\" or \"auto\" (got \"" + format + "\")");
      } else {
        g.reasoning_format = f;
      }
    }
    std::string effort;
    rd.string("reasoning_effort", effort);
    // llama.cpp's chat_template_kwargs: the variables its Jinja templates read. Ours render
    // without Jinja, so the two that change a rendering are taken, anything else refused.
    if (const json* kw = rd.get("chat_template_kwargs"); kw != nullptr && !rd.error) {
      if (!kw->is_object()) {
        rd.error = bad("field 'chat_template_kwargs' must be an object");
      } else {
        for (const auto& [key, value] : kw->items()) {
          if (key == "enable_thinking" && value.is_boolean()) {
            g.enable_thinking = value.get<bool>();
          } else if (key == "reasoning_effort" && value.is_string()) {
            if (effort.empty()) effort = value.get<std::string>();
          } else if (key == "enable_thinking" || key == "reasoning_effort") {
            rd.error = bad("chat_template_kwargs." + key + " must be a " +
                           (key == "enable_thinking" ? "boolean" : "string"));
            break;
          } else {
            rd.error = bad("chat_template_kwargs." + key +
                           " is not supported (known: enable_thinking, reasoning_effort)");
            break;
          }
        }
      }
    }
    chat::ReasoningEffort e{};
    if (!effort.empty() && !rd.error) {
      if (!chat::parse_reasoning_effort(effort, e)) {
        rd.error = bad("field 'reasoning_effort' must be \"low\", \"medium\" or \"high\" (got \"" +
                       effort + "\")");
      } else {
        g.reasoning_effort = e;
      }
    }
  }
  if (rd.error) {
    r.error = *rd.error;
    return r;
  }
  if (g.n_predict < -1) {
    r.error = bad("max_tokens must be -1 (no limit) or >= 0");
    return r;
  }
  if (Status v = validate_sampling(g.sampling); !v.ok()) {
    r.error = bad(v.error().message);
    return r;
  }
  if (const json* n = rd.get("n"); n != nullptr) {
    if (!n->is_number_integer()) {
      r.error = bad("field 'n' must be an integer");
      return r;
    }
    if (n->get<int64_t>() != 1) {
      r.error = ApiError{501, "not_supported_error", "only n = 1 is supported"};
      return r;
    }
  }
  if (const json* so = rd.get("stream_options"); so != nullptr) {
    if (!so->is_object()) {
      r.error = bad("field 'stream_options' must be an object");
      return r;
    }
    if (auto u = so->find("include_usage"); u != so->end()) {
      if (!u->is_boolean()) {
        r.error = bad("field 'stream_options.include_usage' must be a boolean");
        return r;
      }
      g.include_usage = u->get<bool>();
    }
  }
  // Constrained output: llama.cpp's grammar (GBNF) and json_schema fields, OpenAI's
  // response_format; at most one of them.
  int constraints = 0;
  if (const json* rf = rd.get("response_format"); rf != nullptr) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string()) {
      r.error = bad("field 'response_format' must be an object with a string 'type'");
      return r;
    }
    const std::string type = (*rf)["type"].get<std::string>();
    const json* schema = nullptr;
    if (type == "json_schema") {
      auto js = rf->find("json_schema");
      if (js == rf->end() || !js->is_object() || !js->contains("schema")) {
        r.error = bad("response_format 'json_schema' needs a 'json_schema' object with a 'schema'");
        return r;
      }
      schema = &(*js)["schema"];
    } else if (type == "json_object") {
      if (auto sc = rf->find("schema"); sc != rf->end()) schema = &*sc;  // llama.cpp's extension
    } else if (type != "text") {
      r.error = ApiError{400, "invalid_request_error",
                         "response_format '" + type + "' is not one of text, json_object, json_schema"};
      return r;
    }
    if (schema != nullptr) {
      // From the body as written: json sorts keys, and properties keep the client's order.
      const auto ordered = nlohmann::ordered_json::parse(body);
      const auto& rfo = ordered["response_format"];
      const std::string text = type == "json_schema" ? rfo["json_schema"]["schema"].dump()
                                                     : rfo["schema"].dump();
      auto conv = json_schema_to_grammar(text);
      if (!conv.ok()) {
        r.error = bad("response_format: " + conv.error().message);
        return r;
      }
      g.sampling.grammar = *conv;
    } else if (type == "json_object") {
      g.sampling.grammar = json_object_grammar();
    }
    constraints += type != "text";
  }
  if (const json* js = rd.get("json_schema"); js != nullptr) {
    auto gr = json_schema_to_grammar(nlohmann::ordered_json::parse(body)["json_schema"].dump());
    if (!gr.ok()) {
      r.error = bad("field 'json_schema': " + gr.error().message);
      return r;
    }
    g.sampling.grammar = *gr;
    constraints += 1;
  }
  if (const json* gm = rd.get("grammar"); gm != nullptr) {
    if (!gm->is_string()) {
      r.error = bad("field 'grammar' must be a string (GBNF)");
      return r;
    }
    if (Status c = check_grammar(gm->get<std::string>()); !c.ok()) {
      r.error = bad("field 'grammar': " + c.error().message);
      return r;
    }
    g.sampling.grammar = gm->get<std::string>();
    constraints += !g.sampling.grammar.empty();
  }
  if (constraints > 1) {
    r.error = bad("give one of 'grammar', 'json_schema' and a JSON 'response_format'");
    return r;
  }
  if (const json* st = rd.get("stop"); st != nullptr) {
    if (st->is_string()) {
      g.stop.push_back(st->get<std::string>());
    } else if (st->is_array()) {
      for (const json& s : *st) {
        if (!s.is_string()) {
          r.error = bad("field 'stop' must be a string or an array of strings");
          return r;
        }
        g.stop.push_back(s.get<std::string>());
      }
    } else {
      r.error = bad("field 'stop' must be a string or an array of strings");
      return r;
    }
    if (g.stop.size() > 16) {
      r.error = bad("at most 16 stop strings");
      return r;
    }
    for (const std::string& s : g.stop) {
      if (s.empty()) {
        r.error = bad("stop strings must not be empty");
        return r;
      }
    }
  }
  // logprobs: a boolean (+ top_logprobs) for chat, a count for completions, n_probs (llama).
  if (const json* lp = rd.get("logprobs"); lp != nullptr) {
    if (endpoint == Endpoint::Chat) {
      if (!lp->is_boolean()) {
        r.error = bad("field 'logprobs' must be a boolean");
        return r;
      }
      g.logprobs = lp->get<bool>();
    } else {
      if (!lp->is_number_integer()) {
        r.error = bad("field 'logprobs' must be an integer");
        return r;
      }
      g.logprobs = true;
      g.top_logprobs = static_cast<int>(lp->get<int64_t>());
    }
  }
  if (const json* tl = rd.get("top_logprobs"); tl != nullptr) {
    if (!tl->is_number_integer()) {
      r.error = bad("field 'top_logprobs' must be an integer");
      return r;
    }
    g.top_logprobs = static_cast<int>(tl->get<int64_t>());
  }
  if (const json* np = rd.get("n_probs"); np != nullptr) {
    if (!np->is_number_integer()) {
      r.error = bad("field 'n_probs' must be an integer");
      return r;
    }
    g.top_logprobs = static_cast<int>(np->get<int64_t>());
    g.logprobs = g.top_logprobs > 0;
  }
  if (g.top_logprobs < 0 || g.top_logprobs > 20) {
    r.error = bad("top_logprobs must be in [0, 20]");
    return r;
  }
  if (endpoint == Endpoint::Chat) {
    const json* m = rd.get("messages");
    if (m == nullptr) {
      r.error = bad("missing field 'messages'");
      return r;
    }
    if (auto e = read_messages(*m, g.messages)) {
      r.error = *e;
      return r;
    }
  } else {
    const json* p = rd.get("prompt");
    if (p == nullptr) {
      r.error = bad("missing field 'prompt'");
      return r;
    }
    if (p->is_string()) {
      g.prompt = p->get<std::string>();
    } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
      g.prompt = (*p)[0].get<std::string>();
    } else {
      r.error = bad("field 'prompt' must be a string");
      return r;
    }
    if (const json* echo = rd.get("echo"); echo != nullptr && echo->is_boolean() && echo->get<bool>()) {
      r.error = ApiError{501, "not_supported_error", "echo is not supported"};
      return r;
    }
    if (const json* sfx = rd.get("suffix"); sfx != nullptr) {
      r.error = ApiError{501, "not_supported_error", "suffix is not supported"};
      return r;
    }
  }
  r.request = std::move(g);
  return r;
}

}  // namespace pi::server
