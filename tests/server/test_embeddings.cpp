// The embeddings endpoints' parsing and answer shapes (server/embeddings.h), without a model.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/embeddings.h"

namespace {

using namespace pi::server;
using json = nlohmann::json;

TEST(Embeddings, Base64MatchesRfc4648) {
  const std::pair<const char*, const char*> cases[] = {
      {"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"}, {"foob", "Zm9vYg=="},
      {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"}};
  for (const auto& [in, want] : cases) EXPECT_EQ(base64_encode(in), want) << in;
  EXPECT_EQ(base64_encode(std::string_view("\xff\xfe\x00", 3)), "//4A");
}

TEST(Embeddings, ParsesEveryInputForm) {
  auto r = parse_embed_request(R"({"input": "hi", "model": "m"})", EmbedEndpoint::OpenAI);
  ASSERT_TRUE(r.request) << r.error.message;
  EXPECT_TRUE(r.request->single);
  EXPECT_EQ(r.request->inputs.size(), 1u);
  EXPECT_EQ(r.request->inputs[0].text, "hi");
  EXPECT_FALSE(r.request->base64);
  r = parse_embed_request(R"({"input": ["a", [1, 2, 3]], "encoding_format": "base64"})",
                          EmbedEndpoint::OpenAI);
  ASSERT_TRUE(r.request) << r.error.message;
  EXPECT_FALSE(r.request->single);
  ASSERT_EQ(r.request->inputs.size(), 2u);
  EXPECT_TRUE(r.request->inputs[1].is_tokens);
  EXPECT_EQ(r.request->inputs[1].tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(r.request->base64);
  r = parse_embed_request(R"({"input": [4, 5]})", EmbedEndpoint::OpenAI);
  ASSERT_TRUE(r.request) << r.error.message;
  EXPECT_TRUE(r.request->single && r.request->inputs[0].is_tokens);
  r = parse_embed_request(R"({"content": "x"})", EmbedEndpoint::Llama);
  ASSERT_TRUE(r.request) << r.error.message;
  EXPECT_EQ(r.request->inputs[0].text, "x");
}

TEST(Embeddings, RejectsBadBodies) {
  const std::pair<const char*, const char*> cases[] = {
      {"[1]", "must be a JSON object"},
      {R"({"input": ""})", "empty string"},
      {R"({"input": []})", "field 'input' must be"},
      {R"({"input": [true]})", "input[0] must be"},
      {R"({"input": [[0, -1]]})", "input[0][1] is not a token id"},
      {R"({"input": "a", "encoding_format": 1})", "'encoding_format' must be"},
      {R"({"input": "a", "extra": 1})", "unknown field 'extra'"},
  };
  for (const auto& [body, message] : cases) {
    auto r = parse_embed_request(body, EmbedEndpoint::OpenAI);
    EXPECT_FALSE(r.request) << body;
    EXPECT_EQ(r.error.status, 400) << body;
    EXPECT_NE(r.error.message.find(message), std::string::npos) << body << ": " << r.error.message;
  }
  auto r = parse_embed_request(R"({"content": [[1]]})", EmbedEndpoint::Llama);
  EXPECT_FALSE(r.request);
}

TEST(Embeddings, AnswerShapes) {
  auto rq = *parse_embed_request(R"({"input": ["a", "b"]})", EmbedEndpoint::OpenAI).request;
  const std::vector<float> v = {1, 0, 0.5f, -0.5f};
  json j = json::parse(embeddings_json(rq, "m", v, 2, 7));
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["model"], "m");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(j["usage"]["total_tokens"], 7);
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][1]["object"], "embedding");
  EXPECT_EQ(j["data"][1]["index"], 1);
  EXPECT_EQ(j["data"][1]["embedding"], json({0.5, -0.5}));
  rq.base64 = true;
  j = json::parse(embeddings_json(rq, "m", v, 2, 7));
  EXPECT_EQ(j["data"][0]["embedding"], "AACAPwAAAAA=");  // 1.0f, 0.0f little-endian
  auto one = *parse_embed_request(R"({"content": "a"})", EmbedEndpoint::Llama).request;
  j = json::parse(embeddings_json(one, "m", {1, 2}, 2, 1));
  EXPECT_EQ(j, json({{"embedding", {1.0, 2.0}}}));
  auto two = *parse_embed_request(R"({"content": ["a", "b"]})", EmbedEndpoint::Llama).request;
  j = json::parse(embeddings_json(two, "m", v, 2, 2));
  ASSERT_TRUE(j.is_array());
  EXPECT_EQ(j[1]["index"], 1);
  EXPECT_EQ(j[1]["embedding"], json({0.5, -0.5}));
}

// Unpooled answers: each input's embedding is its tokens' vectors, rows taken in input order.
TEST(Embeddings, UnpooledAnswersNestOneVectorPerToken) {
  auto two = *parse_embed_request(R"({"content": ["a", "b c"]})", EmbedEndpoint::Llama).request;
  const std::vector<float> v = {1, 2, 3, 4, 5, 6};  // 1 + 2 tokens of n_embd 2
  json j = json::parse(embeddings_json(two, "m", v, 2, 3, {1, 2}));
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["embedding"], json::parse("[[1, 2]]"));
  EXPECT_EQ(j[1]["index"], 1);
  EXPECT_EQ(j[1]["embedding"], json::parse("[[3, 4], [5, 6]]"));
  auto one = *parse_embed_request(R"({"content": "b c"})", EmbedEndpoint::Llama).request;
  j = json::parse(embeddings_json(one, "m", {3, 4, 5, 6}, 2, 2, {2}));
  EXPECT_EQ(j, json::parse(R"({"embedding": [[3, 4], [5, 6]]})"));
}

}  // namespace
