// The C API (include/powerinfer/powerinfer.h) over the bundled model: what it computes equals
// the C++ API's, errors are statuses with one-line messages on the handle (never an abort or an
// exception), buffers follow the size-query convention, and sequences fork and forget.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include <unistd.h>

#include "powerinfer/engine.h"
#include "powerinfer/grammar.h"
#include "powerinfer/powerinfer.h"

namespace {

const std::string kModel = std::string(PI_SOURCE_DIR) + "/models/kjv-relu/kjv-relu.pwri.gguf";
// The bundled mixture of experts (smallthinker: sigmoid-routed ReGLU experts, sparse inside).
const std::string kMoeModel = std::string(PI_SOURCE_DIR) + "/models/kjv-moe/kjv-moe.gguf";

struct Loaded {
  pi_engine* e = nullptr;
  explicit Loaded(const std::string& path = kModel) {
    const pi_status st = pi_engine_load(path.c_str(), nullptr, &e);
    EXPECT_EQ(st, PI_OK) << pi_engine_error(e);
  }
  ~Loaded() { pi_engine_free(e); }
};

std::vector<int32_t> tokenize(const pi_engine* e, const std::string& text) {
  const int32_t n = pi_tokenize(e, text.c_str(), -1, pi_add_bos(e), true, nullptr, 0);
  EXPECT_GE(n, 0);
  std::vector<int32_t> ids(static_cast<size_t>(std::max(n, 0)));
  EXPECT_EQ(pi_tokenize(e, text.c_str(), -1, pi_add_bos(e), true, ids.data(), n), n);
  return ids;
}

pi_session* session(const pi_engine* e, pi_session_options o) {
  pi_session* s = nullptr;
  const pi_status st = pi_session_create(e, &o, &s);
  EXPECT_EQ(st, PI_OK) << pi_session_error(s);
  return s;
}

pi_session_options greedy() {
  pi_session_options o = pi_session_options_default();
  o.sampling.temperature = 0;
  o.n_threads = 1;
  return o;
}

TEST(CApi, VersionAndStatusNames) {
  EXPECT_STREQ(pi_version(), PI_VERSION_STRING);
  EXPECT_STREQ(pi_status_name(PI_OK), "ok");
  EXPECT_STREQ(pi_status_name(PI_ERR_CONTEXT_FULL), "context_full");
  EXPECT_STREQ(pi_status_name(99), "unknown");
}

TEST(CApi, MissingAndCorruptFilesAreStatusesWithTheirMessage) {
  pi_engine* e = nullptr;
  EXPECT_EQ(pi_engine_load("/nonexistent/model.gguf", nullptr, &e), PI_ERR_LOAD);
  ASSERT_NE(e, nullptr);
  EXPECT_NE(std::string(pi_engine_error(e)).find("/nonexistent/model.gguf"), std::string::npos);
  EXPECT_EQ(pi_n_vocab(e), 0);  // a failed engine answers, empty
  pi_session* s = nullptr;
  EXPECT_EQ(pi_session_create(e, nullptr, &s), PI_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(pi_session_error(s)).find("failed to load"), std::string::npos);
  pi_session_free(s);
  pi_engine_free(e);

  // The bundled model cut in half: an error naming the file, never an abort.
  const auto cut = std::filesystem::temp_directory_path() / "pi_capi_cut.gguf";
  {
    std::ifstream in(kModel, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  e = nullptr;
  EXPECT_EQ(pi_engine_load(cut.c_str(), nullptr, &e), PI_ERR_LOAD);
  EXPECT_NE(std::string(pi_engine_error(e)).find(cut.string()), std::string::npos) << pi_engine_error(e);
  pi_engine_free(e);
  std::filesystem::remove(cut);

  EXPECT_EQ(pi_engine_load(kModel.c_str(), nullptr, nullptr), PI_ERR_INVALID_ARGUMENT);
  e = nullptr;
  EXPECT_EQ(pi_engine_load(nullptr, nullptr, &e), PI_ERR_INVALID_ARGUMENT);
  pi_engine_free(e);
  pi_load_options bad = pi_load_options_default();
  bad.mode = 7;
  e = nullptr;
  EXPECT_EQ(pi_engine_load(kModel.c_str(), &bad, &e), PI_ERR_INVALID_ARGUMENT);
  pi_engine_free(e);
  pi_engine_free(nullptr);
  pi_session_free(nullptr);
  EXPECT_EQ(pi_session_prompt(nullptr, nullptr, 0), PI_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(pi_session_sample(nullptr), -1);
}

TEST(CApi, InfoAndTokenizerFollowTheSizeConvention) {
  Loaded l;
  pi_model_info info;
  ASSERT_EQ(pi_engine_info(l.e, &info), PI_OK);
  EXPECT_STREQ(info.architecture, "llama");
  EXPECT_TRUE(info.powerinfer);
  EXPECT_EQ(info.n_vocab, pi_n_vocab(l.e));
  EXPECT_EQ(info.n_layer, 6);

  const std::string text = "And God said, Let there be light";
  const std::vector<int32_t> ids = tokenize(l.e, text);
  ASSERT_GT(ids.size(), 2u);
  EXPECT_EQ(ids[0], pi_token_bos(l.e));
  int32_t small[2];
  EXPECT_EQ(pi_tokenize(l.e, text.c_str(), -1, true, true, small, 2), static_cast<int32_t>(ids.size()));
  // Detokenized (BOS skipped as special) back to the text; a short buffer gets the length.
  const int32_t n = pi_detokenize(l.e, ids.data(), static_cast<int32_t>(ids.size()), true, nullptr, 0);
  ASSERT_GT(n, 0);
  std::string back(static_cast<size_t>(n) + 1, 'x');
  EXPECT_EQ(pi_detokenize(l.e, ids.data(), static_cast<int32_t>(ids.size()), true, back.data(), n + 1), n);
  EXPECT_EQ(back[static_cast<size_t>(n)], '\0');
  back.resize(static_cast<size_t>(n));
  EXPECT_NE(back.find("Let there be light"), std::string::npos) << back;
  char two[2] = {'a', 'b'};
  EXPECT_EQ(pi_detokenize(l.e, ids.data(), static_cast<int32_t>(ids.size()), true, two, 2), n);
  // Pieces concatenate to the same bytes (SentencePiece: the first word's piece keeps the
  // space marker that decoding drops at the start of the text).
  std::string pieces;
  for (size_t i = 1; i < ids.size(); ++i) {
    char buf[64];
    const int32_t k = pi_token_piece(l.e, ids[i], buf, sizeof buf);
    ASSERT_GE(k, 0);
    pieces.append(buf, static_cast<size_t>(k));
  }
  EXPECT_EQ(pieces, " " + back);
  EXPECT_EQ(pi_tokenize(nullptr, "x", -1, true, true, nullptr, 0), -1);
  EXPECT_EQ(pi_detokenize(l.e, ids.data(), -1, true, nullptr, 0), -1);
}

// Greedy generation through the C API gives the C++ API's tokens.
// 24 greedy tokens of `path` through the C API equal the C++ API's.
void expect_greedy_equals_cpp_api(const std::string& path) {
  Loaded l(path);
  const std::vector<int32_t> prompt = tokenize(l.e, "In the beginning");
  pi_session* s = session(l.e, greedy());
  ASSERT_EQ(pi_session_prompt(s, prompt.data(), prompt.size()), PI_OK) << pi_session_error(s);
  std::vector<int32_t> got;
  for (int i = 0; i < 24; ++i) {
    got.push_back(pi_session_sample(s));
    ASSERT_EQ(pi_session_advance(s, got.back()), PI_OK) << pi_session_error(s);
  }
  pi_timings t;
  ASSERT_EQ(pi_session_timings(s, &t), PI_OK);
  EXPECT_EQ(t.n_prompt, static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(t.n_eval, 24);
  EXPECT_EQ(pi_session_n_past(s), static_cast<int64_t>(prompt.size()) + 24);
  pi_placement p;
  ASSERT_EQ(pi_session_placement(s, &p), PI_OK);
  EXPECT_FALSE(p.hybrid);
  pi_session_free(s);

  auto engine = pi::Engine::load(path);
  ASSERT_TRUE(engine.ok()) << engine.error().message;
  pi::SessionOptions so;
  so.sampling.temperature = 0;
  so.n_threads = 1;
  auto cs = pi::Session::create(**engine, so);
  ASSERT_TRUE(cs.ok()) << cs.error().message;
  ASSERT_TRUE((*cs)->prompt(prompt).ok());
  std::vector<int32_t> want;
  for (int i = 0; i < 24; ++i) {
    want.push_back((*cs)->sample());
    ASSERT_TRUE((*cs)->advance(want.back()).ok());
  }
  EXPECT_EQ(got, want);
}

TEST(CApi, GreedyTokensEqualTheCppApi) { expect_greedy_equals_cpp_api(kModel); }

TEST(CApi, MixtureOfExpertsModelGreedyEqualsTheCppApi) { expect_greedy_equals_cpp_api(kMoeModel); }

// moe_ram: the bundled MoE mapped, its experts read into a small cache, gives the whole model's
// tokens; with the file read into memory it is refused by name; the defaults are the engine's.
TEST(CApi, MoeRamReadsExpertsOnDemandWithTheSameTokens) {
  const pi::SessionOptions cpp;
  const pi_session_options d = pi_session_options_default();
  EXPECT_EQ(d.moe_ram, cpp.moe_ram);
  EXPECT_EQ(d.n_cpu_moe, cpp.n_cpu_moe);
  EXPECT_EQ(d.expert_cache, cpp.expert_cache);
  EXPECT_EQ(d.swa_full, cpp.swa_full);
  pi_load_options lo = pi_load_options_default();
  lo.mode = PI_LOAD_MAP;
  pi_engine* e = nullptr;
  ASSERT_EQ(pi_engine_load(kMoeModel.c_str(), &lo, &e), PI_OK) << pi_engine_error(e);
  const std::vector<int32_t> prompt = tokenize(e, "In the beginning");
  std::vector<int32_t> runs[2];
  for (int limited = 0; limited < 2; ++limited) {
    pi_session_options o = greedy();
    if (limited == 1) o.moe_ram = 10u << 20;
    pi_session* s = session(e, o);
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(pi_session_prompt(s, prompt.data(), prompt.size()), PI_OK) << pi_session_error(s);
    for (int i = 0; i < 16; ++i) {
      runs[limited].push_back(pi_session_sample(s));
      ASSERT_EQ(pi_session_advance(s, runs[limited].back()), PI_OK);
    }
    pi_session_free(s);
  }
  EXPECT_EQ(runs[0], runs[1]);
  pi_engine_free(e);

  Loaded read_in(kMoeModel);
  pi_session_options o = greedy();
  o.moe_ram = 10u << 20;
  pi_session* s = nullptr;
  EXPECT_EQ(pi_session_create(read_in.e, &o, &s), PI_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(pi_session_error(s)).find("needs the file mapped"), std::string::npos) << pi_session_error(s);
  pi_session_free(s);
}

// A JSON Schema through pi_json_schema_to_grammar constrains the greedy text exactly as it
// constrains the C++ API's; generation ends where the grammar is complete; bad input says why.
TEST(CApi, GrammarConstrainsSamplingAsInTheCppApi) {
  Loaded l;
  const char* schema = R"({"type":"object","properties":{"w":{"enum":["light","dark"]}},"required":["w"]})";
  const int32_t n = pi_json_schema_to_grammar(l.e, schema, nullptr, 0);
  ASSERT_GT(n, 0) << pi_engine_error(l.e);
  std::string gbnf(static_cast<size_t>(n), '\0');
  ASSERT_EQ(pi_json_schema_to_grammar(l.e, schema, gbnf.data(), n + 1), n);
  EXPECT_EQ(gbnf, *pi::json_schema_to_grammar(schema));
  EXPECT_EQ(pi_json_schema_to_grammar(l.e, R"({"type":"string","pattern":"a"})", nullptr, 0), -1);
  EXPECT_NE(std::string(pi_engine_error(l.e)).find("unsupported keyword 'pattern'"), std::string::npos);

  pi_session_options o = greedy();
  o.sampling.grammar = gbnf.c_str();
  pi_session* s = session(l.e, o);
  const std::vector<int32_t> prompt = tokenize(l.e, "And God said");
  ASSERT_EQ(pi_session_prompt(s, prompt.data(), prompt.size()), PI_OK);
  std::string text;
  for (int i = 0; i < 40 && !pi_session_grammar_done(s, 0); ++i) {
    const int32_t t = pi_session_sample(s);
    ASSERT_GE(t, 0);
    int32_t len = pi_token_piece(l.e, t, nullptr, 0);
    std::string piece(static_cast<size_t>(len), '\0');
    pi_token_piece(l.e, t, piece.data(), len + 1);
    text += piece;
    if (!pi_session_grammar_done(s, 0)) ASSERT_EQ(pi_session_advance(s, t), PI_OK);
  }
  EXPECT_TRUE(pi_session_grammar_done(s, 0));
  EXPECT_TRUE(text == R"({"w": "light"})" || text == R"({"w": "dark"})" ||
              text == R"({"w":"light"})" || text == R"({"w":"dark"})" ||
              text.find("\"w\"") != std::string::npos) << text;
  pi_session_free(s);

  o.sampling.grammar = "root ::= (";
  pi_session* bad = nullptr;
  EXPECT_NE(pi_session_create(l.e, &o, &bad), PI_OK);
  EXPECT_NE(std::string(pi_session_error(bad)).find("grammar: line 1"), std::string::npos)
      << pi_session_error(bad);
  pi_session_free(bad);
}

// A quantized KV cache: q8_0 keys and values equal the C++ API's session of the same types,
// token for token; an unknown type is refused by name.
TEST(CApi, KvCacheTypesAsInTheCppApi) {
  Loaded l;
  const std::vector<int32_t> prompt = tokenize(l.e, "In the beginning God created");
  pi_session_options o = greedy();
  o.type_k = PI_KV_Q8_0;
  o.type_v = PI_KV_Q4_0;
  pi_session* s = session(l.e, o);
  ASSERT_EQ(pi_session_prompt(s, prompt.data(), prompt.size()), PI_OK) << pi_session_error(s);
  std::vector<int32_t> got;
  for (int i = 0; i < 12; ++i) {
    got.push_back(pi_session_sample(s));
    ASSERT_EQ(pi_session_advance(s, got.back()), PI_OK);
  }
  pi_session_free(s);

  auto engine = pi::Engine::load(kModel);
  ASSERT_TRUE(engine.ok());
  pi::SessionOptions so;
  so.sampling.temperature = 0;
  so.n_threads = 1;
  so.kv_type_k = pi::KvCacheType::Q8_0;
  so.kv_type_v = pi::KvCacheType::Q4_0;
  auto cpp = pi::Session::create(**engine, so);
  ASSERT_TRUE(cpp.ok());
  ASSERT_TRUE((*cpp)->prompt(prompt).ok());
  std::vector<int32_t> want;
  for (int i = 0; i < 12; ++i) {
    want.push_back((*cpp)->sample());
    ASSERT_TRUE((*cpp)->advance(want.back()).ok());
  }
  EXPECT_EQ(got, want);

  o.type_v = 7;
  pi_session* bad = nullptr;
  EXPECT_EQ(pi_session_create(l.e, &o, &bad), PI_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(pi_session_error(bad)).find("type_v 7 is not a pi_kv_type"), std::string::npos)
      << pi_session_error(bad);
  pi_session_free(bad);
}

// Embeddings: the C++ API's vector, the size-query convention, bad pooling and no tokens.
TEST(CApi, EmbeddingsEqualTheCppApi) {
  Loaded l;
  pi_session* s = session(l.e, greedy());
  const std::vector<int32_t> toks = tokenize(l.e, "Blessed are the meek");
  const int32_t n_embd = pi_session_embed(s, toks.data(), toks.size(), PI_POOLING_MEAN, true, nullptr, 0);
  pi_model_info info{};
  ASSERT_EQ(pi_engine_info(l.e, &info), PI_OK);
  ASSERT_EQ(n_embd, info.n_embd) << pi_session_error(s);
  std::vector<float> v(static_cast<size_t>(n_embd));
  ASSERT_EQ(pi_session_embed(s, toks.data(), toks.size(), PI_POOLING_MEAN, true, v.data(), n_embd), n_embd);
  double norm = 0;
  for (float x : v) norm += double(x) * x;
  EXPECT_NEAR(norm, 1.0, 1e-5);

  auto engine = pi::Engine::load(kModel);
  ASSERT_TRUE(engine.ok());
  pi::SessionOptions so;
  so.n_threads = 1;
  auto cpp = pi::Session::create(**engine, so);
  ASSERT_TRUE(cpp.ok());
  for (auto [pooling, cpp_pooling] : {std::pair{PI_POOLING_MEAN, pi::Pooling::Mean},
                                      {PI_POOLING_LAST, pi::Pooling::Last}, {PI_POOLING_CLS, pi::Pooling::Cls}}) {
    std::vector<float> want;
    ASSERT_TRUE((*cpp)->embed(toks, {.pooling = cpp_pooling, .normalize = false}, want).ok());
    ASSERT_EQ(pi_session_embed(s, toks.data(), toks.size(), pooling, false, v.data(), n_embd), n_embd);
    EXPECT_EQ(v, want) << pooling;
  }
  // No pooling: n_tokens * n_embd floats, sized by a cap-0 call, written only when they fit.
  const auto n_all = static_cast<int32_t>(toks.size()) * n_embd;
  ASSERT_EQ(pi_session_embed(s, toks.data(), toks.size(), PI_POOLING_NONE, false, nullptr, 0), n_all)
      << pi_session_error(s);
  std::vector<float> rows(static_cast<size_t>(n_all), -7.0f);
  EXPECT_EQ(pi_session_embed(s, toks.data(), toks.size(), PI_POOLING_NONE, false, rows.data(), n_embd),
            n_all);
  EXPECT_EQ(rows[0], -7.0f);  // too small: nothing written
  ASSERT_EQ(pi_session_embed(s, toks.data(), toks.size(), PI_POOLING_NONE, false, rows.data(), n_all),
            n_all);
  std::vector<float> want;
  ASSERT_TRUE((*cpp)->embed(toks, {.pooling = pi::Pooling::None, .normalize = false}, want).ok());
  EXPECT_EQ(rows, want);
  EXPECT_EQ(pi_session_embed(s, toks.data(), toks.size(), 5, true, v.data(), n_embd), -1);
  EXPECT_NE(std::string(pi_session_error(s)).find("pooling 5"), std::string::npos) << pi_session_error(s);
  EXPECT_EQ(pi_session_embed(s, toks.data(), 0, PI_POOLING_MEAN, true, v.data(), n_embd), -1);
  EXPECT_EQ(pi_session_embed(nullptr, toks.data(), toks.size(), PI_POOLING_MEAN, true, v.data(), n_embd), -1);
  pi_session_free(s);
}

// A saved prompt: restored into a fresh session it continues exactly as the session that
// evaluated it; a truncated file and a file of another KV type are PI_ERR_LOAD, naming the file.
TEST(CApi, SavedStateContinuesAsTheSessionThatEvaluatedIt) {
  Loaded l;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("pi_capi_state_" + std::to_string(::getpid()) + ".bin")).string();
  const std::vector<int32_t> prompt = tokenize(l.e, "And the earth was without form, and void");
  pi_session* a = session(l.e, greedy());
  ASSERT_EQ(pi_session_prompt(a, prompt.data(), prompt.size()), PI_OK);
  uint64_t bytes = 0;
  ASSERT_EQ(pi_session_state_save(a, 0, path.c_str(), prompt.data(), prompt.size(), &bytes), PI_OK)
      << pi_session_error(a);
  EXPECT_EQ(bytes, std::filesystem::file_size(path));
  std::vector<int32_t> want;
  for (int i = 0; i < 10; ++i) {
    want.push_back(pi_session_sample(a));
    ASSERT_EQ(pi_session_advance(a, want.back()), PI_OK);
  }
  // The sequence now holds more positions than the tokens given: refused.
  EXPECT_NE(pi_session_state_save(a, 0, path.c_str(), prompt.data(), prompt.size(), nullptr), PI_OK);
  pi_session_free(a);

  pi_session* b = session(l.e, greedy());
  size_t n = 0;
  ASSERT_EQ(pi_session_state_load(b, 0, path.c_str(), nullptr, 0, &n), PI_OK) << pi_session_error(b);
  EXPECT_EQ(n, prompt.size());
  EXPECT_EQ(pi_session_n_past(b), static_cast<int64_t>(prompt.size()));
  std::vector<int32_t> got;
  for (int i = 0; i < 10; ++i) {
    got.push_back(pi_session_sample(b));
    ASSERT_EQ(pi_session_advance(b, got.back()), PI_OK);
  }
  EXPECT_EQ(got, want);
  pi_session_reset(b);
  std::vector<int32_t> ids(prompt.size());
  ASSERT_EQ(pi_session_state_load(b, 0, path.c_str(), ids.data(), ids.size(), &n), PI_OK);
  EXPECT_EQ(ids, prompt);
  pi_session_free(b);

  pi_session_options q8 = greedy();
  q8.type_k = PI_KV_Q8_0;
  pi_session* c = session(l.e, q8);
  EXPECT_EQ(pi_session_state_load(c, 0, path.c_str(), nullptr, 0, nullptr), PI_ERR_LOAD);
  EXPECT_NE(std::string(pi_session_error(c)).find(path), std::string::npos) << pi_session_error(c);
  EXPECT_EQ(pi_session_n_past(c), 0);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  pi_session_free(c);
  pi_session* d = session(l.e, greedy());
  EXPECT_EQ(pi_session_state_load(d, 0, path.c_str(), nullptr, 0, nullptr), PI_ERR_LOAD);
  EXPECT_NE(std::string(pi_session_error(d)).find(path), std::string::npos) << pi_session_error(d);
  EXPECT_EQ(pi_session_state_load(d, 0, nullptr, nullptr, 0, nullptr), PI_ERR_INVALID_ARGUMENT);
  pi_session_free(d);
  std::filesystem::remove(path);
}

// Two sequences: one prompt, forked, decoded together; each equals a one-sequence run of its
// own; dropping a sequence's tail and the context overflow are statuses.
TEST(CApi, BatchesForksAndContextOverflow) {
  Loaded l;
  const std::vector<int32_t> prompt = tokenize(l.e, "And the earth was");
  pi_session_options o = greedy();
  o.n_seq_max = 2;
  o.n_ctx = 64;
  pi_session* s = session(l.e, o);
  std::vector<pi_batch_token> b;
  for (size_t i = 0; i < prompt.size(); ++i)
    b.push_back({prompt[i], 0, static_cast<int32_t>(i), i + 1 == prompt.size()});
  ASSERT_EQ(pi_session_decode(s, b.data(), b.size()), PI_OK) << pi_session_error(s);
  const float* logits = pi_session_batch_logits(s, prompt.size() - 1);
  ASSERT_NE(logits, nullptr);
  ASSERT_EQ(pi_session_fork(s, 0, 1), PI_OK) << pi_session_error(s);
  EXPECT_EQ(pi_session_seq_pos_max(s, 1), static_cast<int32_t>(prompt.size()) - 1);
  const int32_t t0 = pi_session_sample_seq(s, 0, logits);
  ASSERT_GE(t0, 0);
  pi_batch_token next[2] = {{t0, 0, static_cast<int32_t>(prompt.size()), true},
                            {t0, 1, static_cast<int32_t>(prompt.size()), true}};
  ASSERT_EQ(pi_session_decode(s, next, 2), PI_OK) << pi_session_error(s);
  const float* a = pi_session_batch_logits(s, 0);
  const float* c = pi_session_batch_logits(s, 1);
  ASSERT_TRUE(a != nullptr && c != nullptr);
  EXPECT_EQ(std::vector<float>(a, a + pi_n_vocab(l.e)), std::vector<float>(c, c + pi_n_vocab(l.e)));
  ASSERT_EQ(pi_session_seq_rm(s, 1, 2, -1), PI_OK);
  EXPECT_EQ(pi_session_seq_pos_max(s, 1), 1);
  // A bad sequence and a position already held fail without changing anything.
  pi_batch_token bad = {t0, 5, 0, false};
  EXPECT_EQ(pi_session_decode(s, &bad, 1), PI_ERR_INVALID_ARGUMENT);
  EXPECT_FALSE(std::string(pi_session_error(s)).empty());
  EXPECT_EQ(pi_session_fork(s, 0, 0), PI_ERR_INVALID_ARGUMENT);
  pi_session_free(s);

  o.n_seq_max = 1;
  o.n_ctx = 8;
  s = session(l.e, o);
  std::vector<int32_t> many(20, prompt.back());
  EXPECT_EQ(pi_session_prompt(s, many.data(), many.size()), PI_ERR_CONTEXT_FULL);
  EXPECT_NE(std::string(pi_session_error(s)).find("context"), std::string::npos) << pi_session_error(s);
  pi_session_free(s);

  o.n_seq_max = 0;
  s = nullptr;
  EXPECT_EQ(pi_session_create(l.e, &o, &s), PI_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(pi_session_error(s)).find("sequences"), std::string::npos) << pi_session_error(s);
  pi_session_free(s);
}

TEST(CApi, ChatTemplatesRenderOrSayWhy) {
  Loaded l;
  const pi_chat_message msgs[] = {{"system", "Be brief."}, {"user", "Hello"}};
  const int32_t n = pi_chat_apply_template(l.e, "chatml", msgs, 2, true, nullptr, 0);
  ASSERT_GT(n, 0) << pi_engine_error(l.e);
  std::string out(static_cast<size_t>(n), '\0');
  ASSERT_EQ(pi_chat_apply_template(l.e, "chatml", msgs, 2, true, out.data(), n), n);
  EXPECT_EQ(out, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
                 "<|im_start|>assistant\n");
  EXPECT_EQ(pi_chat_apply_template(l.e, "no-such-template", msgs, 2, true, nullptr, 0), -1);
  EXPECT_NE(std::string(pi_engine_error(l.e)).find("no-such-template"), std::string::npos) << pi_engine_error(l.e);
  const pi_chat_message bad[] = {{"wizard", "x"}};
  EXPECT_EQ(pi_chat_apply_template(l.e, "chatml", bad, 1, true, nullptr, 0), -1);
  EXPECT_NE(std::string(pi_engine_error(l.e)).find("wizard"), std::string::npos) << pi_engine_error(l.e);
}

// A session on the simulated GPU under a budget is hybrid, and its tokens are the CPU's.
TEST(CApi, HybridSessionOnTheSimulatedDevice) {
  Loaded l;
  const std::vector<int32_t> prompt = tokenize(l.e, "In the beginning");
  std::vector<int32_t> runs[2];
  const std::string index = (std::filesystem::temp_directory_path() / "pi_capi_test.gpuidx").string();
  for (int dev = 0; dev < 2; ++dev) {
    pi_session_options o = greedy();
    if (dev == 1) {
      o.device = "sim";
      o.vram_budget = 4 << 20;
      o.gpu_index = index.c_str();
    }
    pi_session* s = session(l.e, o);
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(pi_session_prompt(s, prompt.data(), prompt.size()), PI_OK) << pi_session_error(s);
    for (int i = 0; i < 12; ++i) {
      runs[dev].push_back(pi_session_sample(s));
      ASSERT_EQ(pi_session_advance(s, runs[dev].back()), PI_OK);
    }
    pi_placement p;
    ASSERT_EQ(pi_session_placement(s, &p), PI_OK);
    EXPECT_EQ(p.hybrid, dev == 1);
    if (dev == 1) {
      EXPECT_LE(p.device_bytes, p.budget);
    }
    pi_session_free(s);
  }
  EXPECT_EQ(runs[0], runs[1]);
  std::filesystem::remove(index);
}

// pi_log_set: the diagnostics a load and a hybrid session print on stderr reach the callback
// instead, one line each with its level; pi_log_set_level drops those below it; NULL restores
// stderr.
struct Lines {
  std::mutex mu;
  std::vector<std::pair<int32_t, std::string>> got;
};

void collect(int32_t level, const char* message, void* user) {
  auto* lines = static_cast<Lines*>(user);
  std::lock_guard<std::mutex> lock(lines->mu);
  lines->got.emplace_back(level, message);
}

std::vector<std::pair<int32_t, std::string>> logged_by_a_hybrid_session(int32_t level) {
  Lines lines;
  pi_log_set(collect, &lines);
  pi_log_set_level(level);
  {
    Loaded l;
    pi_session_options o = greedy();
    o.device = "sim";
    o.vram_budget = 4 << 20;
    const std::string index = (std::filesystem::temp_directory_path() / "pi_capi_log.gpuidx").string();
    o.gpu_index = index.c_str();
    pi_session_free(session(l.e, o));
    pi_engine_free(nullptr);
    std::filesystem::remove(index);
  }
  pi_log_set(nullptr, nullptr);
  pi_log_set_level(PI_LOG_INFO);
  return lines.got;
}

TEST(CApi, LogCallbackReceivesTheDiagnosticsWithTheirLevel) {
  const auto all = logged_by_a_hybrid_session(PI_LOG_DEBUG);
  ASSERT_FALSE(all.empty());
  bool info = false, debug = false;
  for (const auto& [level, line] : all) {
    EXPECT_GE(level, PI_LOG_DEBUG);
    EXPECT_LE(level, PI_LOG_ERROR);
    EXPECT_FALSE(line.empty());
    EXPECT_NE(line.back(), '\n') << line;  // a line, or a table of lines, without the newline
    EXPECT_NE(line.rfind("warning: ", 0), 0u) << line;  // the level says it, not a prefix
    info = info || level == PI_LOG_INFO;
    debug = debug || level == PI_LOG_DEBUG;
  }
  EXPECT_TRUE(info);
  // Above the threshold only.
  const auto warn = logged_by_a_hybrid_session(PI_LOG_WARN);
  for (const auto& [level, line] : warn) EXPECT_GE(level, PI_LOG_WARN) << line;
  EXPECT_LT(warn.size(), all.size());
  EXPECT_TRUE(logged_by_a_hybrid_session(PI_LOG_NONE).empty());
}

}  // namespace

namespace {

struct Collected {
  std::string text;
  int pieces = 0;
  int stop_after = -1;  // the callback returns false after this many pieces (-1: never)
};

bool collect(const char* text, size_t n, void* user) {
  auto* c = static_cast<Collected*>(user);
  c->text.append(text, n);
  c->pieces += 1;
  return c->stop_after < 0 || c->pieces < c->stop_after;
}

// pi_session_generate: the engine's loop; `stop` cuts the text, the callback can end it.
TEST(CApi, GenerateStreamsTheDecodedAnswerAndStopsWhereAsked) {
  Loaded l;
  const std::vector<int32_t> prompt = tokenize(l.e, "In the beginning");
  auto run = [&](pi_generate_params p, Collected& c, pi_gen_end& end, int64_t* n_past = nullptr) {
    pi_session* s = session(l.e, greedy());
    ASSERT_EQ(pi_session_prompt(s, prompt.data(), prompt.size()), PI_OK);
    p.context = prompt.data();
    p.n_context = prompt.size();
    ASSERT_EQ(pi_session_generate(s, &p, collect, &c, &end), PI_OK) << pi_session_error(s);
    if (n_past != nullptr) *n_past = pi_session_n_past(s);
    pi_session_free(s);
  };
  pi_generate_params p = pi_generate_params_default();
  p.max_tokens = 24;
  Collected whole;
  pi_gen_end end{};
  int64_t n_past = 0;
  run(p, whole, end, &n_past);
  EXPECT_EQ(end, PI_GEN_LENGTH);
  EXPECT_EQ(n_past, static_cast<int64_t>(prompt.size()) + 24);  // the answer is fed, all of it
  ASSERT_GT(whole.text.size(), 12u);
  EXPECT_EQ(whole.text.front(), ' ') << "the first word keeps its space: " << whole.text;

  // A stop string from the middle of that text: the answer ends before its first occurrence.
  const std::string stop = whole.text.substr(whole.text.size() / 2, 4);
  const char* stops[] = {stop.c_str()};
  p.stop = stops;
  p.n_stop = 1;
  Collected cut;
  run(p, cut, end);
  EXPECT_EQ(end, PI_GEN_STOP_STRING);
  EXPECT_EQ(cut.text, whole.text.substr(0, whole.text.find(stop)));

  // The callback ends it.
  p = pi_generate_params_default();
  p.max_tokens = 24;
  Collected two;
  two.stop_after = 2;
  run(p, two, end);
  EXPECT_EQ(end, PI_GEN_CALLER);
  EXPECT_EQ(two.pieces, 2);
  EXPECT_TRUE(whole.text.starts_with(two.text));

  // Bad arguments are statuses with a message.
  pi_session* s = session(l.e, greedy());
  p.stop = nullptr;
  p.n_stop = 1;
  EXPECT_EQ(pi_session_generate(s, &p, collect, &two, &end), PI_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(pi_session_error(s)).find("stop"), std::string::npos);
  pi_session_free(s);
  EXPECT_EQ(pi_session_generate(nullptr, &p, collect, &two, &end), PI_ERR_INVALID_ARGUMENT);
}

}  // namespace

namespace {

// pi_model_quantize: the CLI's quantization as a call; the copy loads and generates, errors are
// statuses with the reason in the caller's buffer.
TEST(CApi, QuantizeWritesALoadableCopyAndRefusesBadArguments) {
  // The bundled model is Q8_0: converting it again must be allowed.
  const std::string out = std::filesystem::temp_directory_path() / "capi_quant.q4.gguf";
  const std::string again = std::filesystem::temp_directory_path() / "capi_quant.again.gguf";
  pi_quantize_params p = pi_quantize_params_default();
  EXPECT_EQ(p.n_threads, 2);
  char error[256] = "";
  EXPECT_EQ(pi_model_quantize(kModel.c_str(), out.c_str(), &p, nullptr, error, sizeof error), PI_ERR_LOAD);
  EXPECT_NE(std::string(error).find("--allow-requantize"), std::string::npos) << error;
  p.type = "Q4_0";
  p.n_threads = 1;
  p.allow_requantize = true;
  const char* ov[] = {"blk.0.*=q8_0"};
  p.overrides = ov;
  p.n_overrides = 1;
  pi_quantize_report r{};
  ASSERT_EQ(pi_model_quantize(kModel.c_str(), out.c_str(), &p, &r, error, sizeof error), PI_OK) << error;
  EXPECT_GT(r.n_quantized, 0);
  EXPECT_GT(r.n_copied, 0);  // blk.0 stays Q8_0, the norms as they are
  EXPECT_LT(r.file_out, r.file_in);
  {
    Loaded l(out);
    ASSERT_NE(l.e, nullptr);
    pi_session* s = session(l.e, greedy());
    const std::vector<int32_t> prompt = tokenize(l.e, "In the beginning");
    EXPECT_EQ(pi_session_prompt(s, prompt.data(), prompt.size()), PI_OK) << pi_session_error(s);
    pi_session_free(s);
  }

  p = pi_quantize_params_default();
  p.type = "q9_9";
  EXPECT_EQ(pi_model_quantize(kModel.c_str(), again.c_str(), &p, nullptr, error, sizeof error),
            PI_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error).find("q9_9"), std::string::npos) << error;
  char tiny[8];  // the reason is cut to fit, NUL-terminated
  EXPECT_EQ(pi_model_quantize(kModel.c_str(), again.c_str(), &p, nullptr, tiny, sizeof tiny),
            PI_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(tiny).size(), sizeof tiny - 1);
  p = pi_quantize_params_default();
  const char* bad[] = {"nonsense"};
  p.overrides = bad;
  p.n_overrides = 1;
  EXPECT_EQ(pi_model_quantize(kModel.c_str(), again.c_str(), &p, nullptr, error, sizeof error),
            PI_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error).find("nonsense"), std::string::npos) << error;
  p = pi_quantize_params_default();
  EXPECT_EQ(pi_model_quantize("/nonexistent.gguf", again.c_str(), &p, nullptr, error, sizeof error),
            PI_ERR_LOAD);
  EXPECT_NE(std::string(error).find("/nonexistent.gguf"), std::string::npos) << error;
  EXPECT_EQ(pi_model_quantize(kModel.c_str(), kModel.c_str(), &p, nullptr, nullptr, 0), PI_ERR_LOAD);
  EXPECT_EQ(pi_model_quantize(nullptr, again.c_str(), &p, nullptr, error, sizeof error),
            PI_ERR_INVALID_ARGUMENT);
  std::filesystem::remove(out);
  std::filesystem::remove(again);
}

}  // namespace

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// pi_engine_perplexity: the CLI's perplexity as a call. The model compared with itself through
// a saved base has KL 0 and every top-1 token the same; errors are statuses naming the cause.
TEST(CApi, PerplexityAndTheKlComparisonWithABase) {
  Loaded l;
  const std::string text = read_file(std::string(PI_SOURCE_DIR) + "/models/kjv-relu/heldout.txt");
  ASSERT_GT(text.size(), 4000u);
  pi_session_options o = pi_session_options_default();
  o.n_threads = 2;
  const std::string base = std::filesystem::temp_directory_path() / "capi_ppl.kld";
  pi_perplexity_params p = pi_perplexity_params_default();
  p.n_ctx = 128;
  p.n_chunks = 3;
  p.kl_save = base.c_str();
  pi_perplexity_report r{};
  ASSERT_EQ(pi_engine_perplexity(l.e, &o, text.c_str(), -1, &p, &r), PI_OK) << pi_engine_error(l.e);
  EXPECT_EQ(r.n_chunks, 3);
  EXPECT_EQ(r.n_scored, 3 * 63);
  EXPECT_GT(r.ppl, 1.0);
  EXPECT_LT(r.ppl, 100.0);  // a trained model on held-out text of its corpus
  EXPECT_GT(r.ppl_err, 0.0);
  EXPECT_FALSE(r.has_kl);

  p = pi_perplexity_params_default();  // n_ctx and chunks from the base
  p.kl_base = base.c_str();
  pi_perplexity_report k{};
  ASSERT_EQ(pi_engine_perplexity(l.e, &o, text.data(), static_cast<int64_t>(text.size()), &p, &k), PI_OK)
      << pi_engine_error(l.e);
  ASSERT_TRUE(k.has_kl);
  EXPECT_EQ(k.n_chunks, 3);
  EXPECT_DOUBLE_EQ(k.ppl, r.ppl);
  EXPECT_NEAR(k.base_ppl, r.ppl, 1e-9 * r.ppl);
  EXPECT_EQ(k.kl_max, 0.0);
  EXPECT_EQ(k.same_top1, 1.0);

  p.n_ctx = 64;  // not the base's
  EXPECT_EQ(pi_engine_perplexity(l.e, &o, text.c_str(), -1, &p, &k), PI_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(pi_engine_error(l.e)).find("the base used -c 128"), std::string::npos)
      << pi_engine_error(l.e);
  p = pi_perplexity_params_default();
  p.n_ctx = 63;
  EXPECT_EQ(pi_engine_perplexity(l.e, &o, text.c_str(), -1, &p, &k), PI_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(pi_engine_error(l.e)).find("even"), std::string::npos);
  p.n_ctx = 128;
  EXPECT_EQ(pi_engine_perplexity(l.e, &o, "In the beginning", -1, &p, &k), PI_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(pi_engine_error(l.e)).find("needs at least 256"), std::string::npos)
      << pi_engine_error(l.e);
  EXPECT_EQ(pi_engine_perplexity(l.e, &o, nullptr, -1, &p, &k), PI_ERR_INVALID_ARGUMENT);
  std::filesystem::remove(base);
}

}  // namespace

namespace {

// pi_model_profile: `powerinfer profile` as a call; a hybrid session plans with what it wrote.
TEST(CApi, ProfileWritesStatisticsAHybridSessionPlansWith) {
  const std::string text = read_file(std::string(PI_SOURCE_DIR) + "/models/kjv-relu/heldout.txt");
  const std::string stats = std::filesystem::temp_directory_path() / "capi_profile.activations.gguf";
  pi_profile_params p = pi_profile_params_default();
  EXPECT_EQ(p.n_ctx, 512);
  p.n_ctx = 128;
  p.n_threads = 2;
  p.max_tokens = 600;
  pi_profile_report r{};
  char error[256] = "";
  ASSERT_EQ(pi_model_profile(kModel.c_str(), text.c_str(), -1, stats.c_str(), &p, &r, error, sizeof error), PI_OK)
      << error;
  EXPECT_EQ(r.n_tokens, 600u);
  EXPECT_EQ(r.n_layer, 6);
  EXPECT_FALSE(r.experts);
  {
    Loaded l;
    pi_session_options o = greedy();
    o.device = "sim";
    o.vram_budget = 8 << 20;
    o.activation_stats = stats.c_str();
    const std::string index = stats + ".gpuidx";  // the plan's index file, not the bundled one
    o.gpu_index = index.c_str();
    pi_session* s = nullptr;
    ASSERT_EQ(pi_session_create(l.e, &o, &s), PI_OK) << pi_session_error(s);
    pi_placement pl;
    ASSERT_EQ(pi_session_placement(s, &pl), PI_OK);
    EXPECT_TRUE(pl.hybrid);
    pi_session_free(s);
    std::filesystem::remove(index);
  }
  p.n_ctx = 1;
  EXPECT_EQ(pi_model_profile(kModel.c_str(), text.c_str(), -1, stats.c_str(), &p, nullptr, error, sizeof error),
            PI_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error).find("n_ctx"), std::string::npos) << error;
  p = pi_profile_params_default();
  EXPECT_EQ(pi_model_profile(kModel.c_str(), "", 0, stats.c_str(), &p, nullptr, error, sizeof error),
            PI_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error).find("no tokens"), std::string::npos) << error;
  EXPECT_EQ(pi_model_profile("/nonexistent.gguf", "x", -1, stats.c_str(), &p, nullptr, error, sizeof error),
            PI_ERR_LOAD);
  EXPECT_NE(std::string(error).find("/nonexistent.gguf"), std::string::npos) << error;
  EXPECT_EQ(pi_model_profile(kModel.c_str(), nullptr, -1, stats.c_str(), &p, nullptr, error, sizeof error),
            PI_ERR_INVALID_ARGUMENT);
  std::filesystem::remove(stats);
}

}  // namespace
