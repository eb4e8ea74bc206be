#include "server/embeddings.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <set>

#include "server/json_text.h"

namespace pi::server {
namespace {

using json = nlohmann::json;

ApiError invalid(std::string message) { return ApiError{400, "invalid_request_error", std::move(message)}; }

bool is_token_list(const json& v) {
  if (!v.is_array() || v.empty()) return false;
  for (const json& t : v)
    if (!t.is_number_integer()) return false;
  return true;
}

// Token ids of a JSON array of integers; an error names the first negative one.
std::optional<ApiError> tokens_of(const json& v, const std::string& where,
                                  std::vector<int32_t>& out) {
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t t = v[i].get<int64_t>();
    if (t < 0 || t > INT32_MAX)
      return invalid(where + "[" + std::to_string(i) + "] is not a token id (" + std::to_string(t) + ")");
    out.push_back(static_cast<int32_t>(t));
  }
  return std::nullopt;
}

}  // namespace

EmbedParseResult parse_embed_request(std::string_view body, EmbedEndpoint endpoint) {
  EmbedParseResult r;
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) {
    r.error = invalid("the request body is not valid JSON");
    return r;
  }
  if (!j.is_object()) {
    r.error = invalid("the request body must be a JSON object");
    return r;
  }
  const bool oai = endpoint == EmbedEndpoint::OpenAI;
  static const std::set<std::string> kOai = {"input", "model", "encoding_format", "dimensions", "user"};
  static const std::set<std::string> kLlama = {"content", "input", "model", "encoding_format"};
  for (const auto& [key, value] : j.items()) {
    if ((oai ? kOai : kLlama).count(key) == 0) {
      r.error = invalid("unknown field '" + key + "'");
      return r;
    }
  }
  EmbedRequest rq;
  rq.endpoint = endpoint;
  if (auto m = j.find("model"); m != j.end() && !m->is_null()) {
    if (!m->is_string()) {
      r.error = invalid("field 'model' must be a string");
      return r;
    }
    rq.model = m->get<std::string>();
  }
  if (auto e = j.find("encoding_format"); e != j.end() && !e->is_null()) {
    if (!e->is_string() || (*e != "float" && *e != "base64")) {
      r.error = invalid("field 'encoding_format' must be \"float\" or \"base64\"");
      return r;
    }
    rq.base64 = *e == "base64";
  }
  if (j.contains("dimensions") && !j["dimensions"].is_null()) {
    r.error = invalid("field 'dimensions' is not supported: the embeddings have the model's size");
    return r;
  }
  const char* key = oai ? "input" : (j.contains("content") ? "content" : "input");
  auto in = j.find(key);
  if (in == j.end() || in->is_null()) {
    r.error = invalid(oai ? "field 'input' is required" : "field 'content' is required");
    return r;
  }
  const std::string name = std::string("'") + key + "'";
  const std::string what = oai ? "a string, an array of strings, an array of token ids or an "
                                 "array of token-id arrays"
                               : "a string or an array of strings";
  const auto add_text = [&](const json& v, const std::string& where) -> bool {
    if (v.get_ref<const std::string&>().empty()) {
      r.error = invalid(where + " is an empty string");
      return false;
    }
    rq.inputs.push_back({v.get<std::string>(), {}, false});
    return true;
  };
  const auto add_tokens = [&](const json& v, const std::string& where) -> bool {
    EmbedRequest::Input x;
    x.is_tokens = true;
    if (auto e = tokens_of(v, where, x.tokens)) {
      r.error = *e;
      return false;
    }
    rq.inputs.push_back(std::move(x));
    return true;
  };
  if (in->is_string()) {
    rq.single = true;
    if (!add_text(*in, "field " + name)) return r;
  } else if (oai && is_token_list(*in)) {
    rq.single = true;
    if (!add_tokens(*in, name)) return r;
  } else if (in->is_array() && !in->empty()) {
    for (size_t i = 0; i < in->size(); ++i) {
      const json& v = (*in)[i];
      const std::string where = std::string(key) + "[" + std::to_string(i) + "]";
      if (v.is_string()) {
        if (!add_text(v, where)) return r;
      } else if (oai && is_token_list(v)) {
        if (!add_tokens(v, where)) return r;
      } else {
        r.error = invalid(where + " must be " + (oai ? "a string or an array of token ids" : "a string"));
        return r;
      }
    }
  } else {
    r.error = invalid("field " + name + " must be " + what + " (not empty)");
    return r;
  }
  r.request = std::move(rq);
  return r;
}

std::string base64_encode(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16 |
                       static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8 |
                       static_cast<uint8_t>(bytes[i + 2]);
    for (int k = 3; k >= 0; --k) out += kAlphabet[(v >> (6 * k)) & 63];
  }
  if (const size_t rest = bytes.size() - i; rest > 0) {
    uint32_t v = static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16;
    if (rest == 2) v |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string embeddings_json(const EmbedRequest& rq, const std::string& model,
                            const std::vector<float>& vectors, int64_t n_embd,
                            int64_t prompt_tokens, const std::vector<size_t>& token_rows) {
  const auto d = static_cast<size_t>(n_embd);
  const auto vec = [&](size_t r) -> json {
    const float* p = vectors.data() + r * d;
    if (rq.base64) {
      // The engine's floats are little-endian on every supported host.
      return base64_encode(std::string_view(reinterpret_cast<const char*>(p), d * sizeof(float)));
    }
    return std::vector<float>(p, p + d);
  };
  // Input i's first row (unpooled: its first token's).
  std::vector<size_t> first(rq.inputs.size(), 0);
  for (size_t i = 1; !token_rows.empty() && i < first.size(); ++i)
    first[i] = first[i - 1] + token_rows[i - 1];
  const auto row = [&](size_t i) -> json {
    if (token_rows.empty()) return vec(i);
    json a = json::array();
    for (size_t k = 0; k < token_rows[i]; ++k) a.push_back(vec(first[i] + k));
    return a;
  };
  const size_t n = rq.inputs.size();
  if (rq.endpoint == EmbedEndpoint::Llama) {
    if (rq.single) return dump({{"embedding", row(0)}});
    json a = json::array();
    for (size_t i = 0; i < n; ++i) a.push_back({{"index", i}, {"embedding", row(i)}});
    return dump(a);
  }
  json data = json::array();
  for (size_t i = 0; i < n; ++i)
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", row(i)}});
  return dump({{"object", "list"},
               {"data", data},
               {"model", model},
               {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}});
}

}  // namespace pi::server
