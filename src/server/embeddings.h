// The embeddings endpoints' request parsing and answer shapes: OpenAI's /v1/embeddings
// (`input`: a string, an array of strings, an array of token ids or an array of such arrays;
// `encoding_format` float or base64) and llama.cpp's /embedding (`content`, or `input`: a
// string or an array of strings). Pure functions: no model, no threads (tested in
// tests/server).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/request.h"

namespace pi::server {

enum class EmbedEndpoint {
  OpenAI,  // /v1/embeddings, /embeddings
  Llama,   // /embedding
};

struct EmbedRequest {
  EmbedEndpoint endpoint = EmbedEndpoint::OpenAI;
  // One entry per input: a text, or token ids given directly (is_tokens).
  struct Input {
    std::string text;
    std::vector<int32_t> tokens;
    bool is_tokens = false;
  };
  std::vector<Input> inputs;  // at least one
  bool single = false;        // the input was one string or one token list, not a list of them
  std::string model;          // as sent; informational
  bool base64 = false;        // encoding_format "base64": little-endian f32 bytes in base64
};

// Rejects (status 400) malformed JSON, a body that is not an object, a missing or empty
// input, an empty string, inputs of the wrong type, negative token ids, an encoding_format
// other than float or base64, `dimensions` (the model's size is the only one), unknown fields.
struct EmbedParseResult {
  std::optional<EmbedRequest> request;
  ApiError error;  // when !request
};
EmbedParseResult parse_embed_request(std::string_view body, EmbedEndpoint endpoint);

// The answer to `rq` for `vectors` (f32 [rq.inputs.size(), n_embd]) and the tokens evaluated.
//   OpenAI: {"object":"list","data":[{"object":"embedding","index":i,"embedding":[...] or
//            "base64"}],"model":...,"usage":{"prompt_tokens":n,"total_tokens":n}}
//   Llama:  {"embedding":[...]} for one string; [{"index":i,"embedding":[...]}, ...] for a list
// Unpooled (--pooling none; /embedding only): `token_rows` gives each input's token count,
// `vectors` holds one row per token, input after input, and each input's "embedding" is the
// array of its tokens' vectors ([[...], [...], ...]), as llama.cpp answers then.
std::string embeddings_json(const EmbedRequest& rq, const std::string& model,
                            const std::vector<float>& vectors, int64_t n_embd,
                            int64_t prompt_tokens, const std::vector<size_t>& token_rows = {});

// Standard base64 (RFC 4648, with padding) of `bytes`.
std::string base64_encode(std::string_view bytes);

}  // namespace pi::server
