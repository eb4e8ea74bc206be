// Loading: every malformed vocabulary is refused with a message that names the key, and
// the well-formed hand-made vocabularies behave as the rules in docs/FORMATS.md say.
#include <gtest/gtest.h>

#include <algorithm>

#include "tokenizer/vocab_builder.h"

namespace pi {
namespace {

using testing::bpe_vocab;
using testing::floats;
using testing::ints;
using testing::Kvs;
using testing::load_vocab;
using testing::spm_vocab;
using testing::strings;

// Expects loading to fail with a message containing every one of `needles`.
void expect_error(const Kvs& kv, std::initializer_list<const char*> needles) {
  auto tok = load_vocab(kv, "bad");
  ASSERT_FALSE(tok.ok()) << "loaded a vocabulary that should be refused";
  const std::string& msg = tok.error().message;
  for (const char* n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "message: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "message is not one line: " << msg;
}

TEST(TokenizerLoad, MissingModel) {
  Kvs kv = spm_vocab({"a"});
  kv.erase("tokenizer.ggml.model");
  expect_error(kv, {"tokenizer.ggml.model", "missing"});
}

TEST(TokenizerLoad, UnsupportedModel) {
  Kvs kv = spm_vocab({"a"});
  kv["tokenizer.ggml.model"] = gguf::Value(std::string("bert"));
  expect_error(kv, {"tokenizer.ggml.model", "bert", "not supported"});
}

TEST(TokenizerLoad, ModelOfWrongType) {
  Kvs kv = spm_vocab({"a"});
  kv["tokenizer.ggml.model"] = gguf::Value(uint32_t{1});
  expect_error(kv, {"tokenizer.ggml.model", "expected str"});
}

TEST(TokenizerLoad, MissingTokens) {
  Kvs kv = spm_vocab({"a"});
  kv.erase("tokenizer.ggml.tokens");
  expect_error(kv, {"tokenizer.ggml.tokens", "missing"});
}

TEST(TokenizerLoad, TokensOfWrongType) {
  Kvs kv = spm_vocab({"a"});
  kv["tokenizer.ggml.tokens"] = ints({1, 2, 3});
  expect_error(kv, {"tokenizer.ggml.tokens", "expected array of str"});
  kv["tokenizer.ggml.tokens"] = gguf::Value(std::string("a"));
  expect_error(kv, {"tokenizer.ggml.tokens", "expected an array"});
}

TEST(TokenizerLoad, EmptyTokens) {
  Kvs kv = spm_vocab({});
  kv["tokenizer.ggml.tokens"] = strings({});
  expect_error(kv, {"tokenizer.ggml.tokens", "empty"});
}

TEST(TokenizerLoad, SpmNeedsScores) {
  Kvs kv = spm_vocab({"a"});
  kv.erase("tokenizer.ggml.scores");
  expect_error(kv, {"tokenizer.ggml.scores", "missing"});
}

TEST(TokenizerLoad, ScoresOfWrongLengthOrType) {
  Kvs kv = spm_vocab({"a"});
  kv["tokenizer.ggml.scores"] = floats({0, 0});
  expect_error(kv, {"tokenizer.ggml.scores", "2 entries for 260 tokens"});
  kv["tokenizer.ggml.scores"] = strings(std::vector<std::string>(260, "x"));
  expect_error(kv, {"tokenizer.ggml.scores", "expected array of float32"});
}

TEST(TokenizerLoad, TokenTypesOfWrongLengthOrValue) {
  Kvs kv = spm_vocab({"a"});
  kv["tokenizer.ggml.token_type"] = ints({1});
  expect_error(kv, {"tokenizer.ggml.token_type", "1 entries for 260 tokens"});
  std::vector<int32_t> types(260, 1);
  types[259] = 7;
  kv["tokenizer.ggml.token_type"] = ints(types);
  expect_error(kv, {"tokenizer.ggml.token_type", "entry 259 is 7"});
}

TEST(TokenizerLoad, MalformedByteToken) {
  Kvs kv = spm_vocab({"a"});
  std::vector<int32_t> types(260, 1);
  types[259] = 6;  // "a" marked as a byte token
  kv["tokenizer.ggml.token_type"] = ints(types);
  expect_error(kv, {"tokenizer.ggml.tokens", "token 259 'a'", "<0xXX>"});
}

TEST(TokenizerLoad, SpecialIdsOutOfRange) {
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
                          "tokenizer.ggml.eot_token_id"}) {
    Kvs kv = spm_vocab({"a"});
    kv[key] = gguf::Value(uint32_t{260});
    expect_error(kv, {key, "260 is out of range [0, 260)"});
    kv[key] = gguf::Value(int32_t{-1});
    expect_error(kv, {key, "-1 is out of range"});
    kv[key] = gguf::Value(std::string("1"));
    expect_error(kv, {key, "expected an integer"});
  }
}

TEST(TokenizerLoad, FlagsOfWrongType) {
  Kvs kv = spm_vocab({"a"});
  kv["tokenizer.ggml.add_bos_token"] = gguf::Value(uint8_t{1});
  expect_error(kv, {"tokenizer.ggml.add_bos_token", "expected bool"});
}

TEST(TokenizerLoad, BpeNeedsMerges) {
  Kvs kv = bpe_vocab({"a b"});
  kv.erase("tokenizer.ggml.merges");
  expect_error(kv, {"tokenizer.ggml.merges", "missing"});
}

TEST(TokenizerLoad, MergeWithUnknownToken) {
  Kvs kv = bpe_vocab({"a b", "ab c"});
  kv["tokenizer.ggml.merges"] = strings({"a b", "ab zz"});
  expect_error(kv, {"tokenizer.ggml.merges", "entry 1 'ab zz'", "token 'zz' is not in the vocabulary"});
}

TEST(TokenizerLoad, MergeIntoUnknownToken) {
  Kvs kv = bpe_vocab({"a b"});
  kv["tokenizer.ggml.merges"] = strings({"a b", "b a"});
  expect_error(kv, {"tokenizer.ggml.merges", "entry 1 'b a'", "merged token 'ba' is not in the vocabulary"});
}

TEST(TokenizerLoad, MergeWithoutSeparator) {
  Kvs kv = bpe_vocab({"a b"});
  kv["tokenizer.ggml.merges"] = strings({"ab"});
  expect_error(kv, {"tokenizer.ggml.merges", "entry 0 'ab'", "not two tokens"});
  kv["tokenizer.ggml.merges"] = strings({"a "});
  expect_error(kv, {"tokenizer.ggml.merges", "not two tokens"});
}

TEST(TokenizerLoad, UnsupportedPreTokenizer) {
  Kvs kv = bpe_vocab({"a b"});
  kv["tokenizer.ggml.pre"] = gguf::Value(std::string("deepseek-llm"));
  expect_error(kv, {"tokenizer.ggml.pre", "deepseek-llm", "not supported"});
}

TEST(TokenizerLoad, MessageNamesTheFile) {
  Kvs kv = spm_vocab({"a"});
  kv.erase("tokenizer.ggml.tokens");
  auto tok = load_vocab(kv, "named");
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.error().message.find("named_"), std::string::npos) << tok.error().message;
}

// --- behaviour on hand-made vocabularies -----------------------------------------------

TEST(TokenizerSpm, MergesByScoreAndFallsBackToBytes) {
  // Scores descend in list order: "▁a" merges before "ab", so "▁ab" is reached through
  // "▁a" + "b", and "é" (not a piece) falls back to its two bytes.
  auto tok = load_vocab(spm_vocab({"\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "ab", "\xE2\x96\x81" "ab"}));
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  const int32_t sp = tok->find_token("\xE2\x96\x81");
  const int32_t sp_ab = tok->find_token("\xE2\x96\x81" "ab");
  ASSERT_GE(sp_ab, 0);
  EXPECT_EQ(tok->encode("ab", false, false), std::vector<int32_t>({sp_ab}));
  EXPECT_EQ(tok->encode("ab", true, false), std::vector<int32_t>({1, sp_ab}));
  EXPECT_EQ(tok->encode("\xC3\xA9", false, false), std::vector<int32_t>({sp, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok->encode("", true, false), std::vector<int32_t>({1}));
  EXPECT_TRUE(tok->encode("", false, false).empty());
  EXPECT_EQ(tok->decode(tok->encode(" ab \xC3\xA9", true, false), true), " ab \xC3\xA9");
  EXPECT_EQ(tok->kind(), Tokenizer::Kind::Spm);
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_EQ(tok->unk(), 0);
  EXPECT_EQ(tok->pad(), -1);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_FALSE(tok->add_eos());
  EXPECT_EQ(tok->n_vocab(), 265);
}

TEST(TokenizerSpm, ControlTokensInTextOnlyWithParseSpecial) {
  auto tok = load_vocab(spm_vocab({"\xE2\x96\x81", "a", "<", "/", "s", ">"}));
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  const auto with = tok->encode("a</s>", false, true);
  ASSERT_EQ(with.size(), 3u);  // ▁ a </s>
  EXPECT_EQ(with.back(), 2);
  const auto without = tok->encode("a</s>", false, false);
  EXPECT_EQ(std::count(without.begin(), without.end(), 2), 0);
  EXPECT_EQ(tok->decode(with, false), "a</s>");
  EXPECT_EQ(tok->decode(with, true), "a");
}

TEST(TokenizerSpm, TokenToPiece) {
  auto tok = load_vocab(spm_vocab({"\xE2\x96\x81" "ab"}));
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  EXPECT_EQ(tok->token_to_piece(3 + 'A'), "A");
  EXPECT_EQ(tok->token_to_piece(3 + 0xFF), "\xFF");
  EXPECT_EQ(tok->token_to_piece(259), " ab");
  EXPECT_EQ(tok->token_to_piece(1), "<s>");
  EXPECT_EQ(tok->token_text(259), "\xE2\x96\x81" "ab");
  EXPECT_EQ(tok->token_type(259), Tokenizer::TokenType::Normal);
  EXPECT_EQ(tok->token_type(3), Tokenizer::TokenType::Byte);
  EXPECT_EQ(tok->token_type(0), Tokenizer::TokenType::Unknown);
}

TEST(TokenizerDecode, OutOfRangeIdsBecomeReplacementCharacters) {
  auto tok = load_vocab(spm_vocab({"\xE2\x96\x81" "ab"}));
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  const std::vector<int32_t> ids = {259, -1, 260, 1 << 30, 259};
  EXPECT_EQ(tok->decode(ids, true), "ab\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD ab");
  EXPECT_EQ(tok->token_to_piece(-5), "\xEF\xBF\xBD");
  EXPECT_EQ(tok->token_to_piece(100000), "\xEF\xBF\xBD");
  EXPECT_EQ(tok->token_text(-5), "");
  EXPECT_FALSE(tok->is_eog(-1));
  EXPECT_FALSE(tok->is_eog(1 << 30));
  Tokenizer::StreamDecoder sd(*tok);
  EXPECT_EQ(sd.push(-7), "\xEF\xBF\xBD");
}

TEST(TokenizerBpe, MergesByRankWithinPreTokens) {
  // "Ġ" is the byte-level space. Ranks: "a b" first, then "Ġ ab".
  auto tok = load_vocab(bpe_vocab({"a b", "\xC4\xA0 ab", "b c"}));
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  const int32_t ab = tok->find_token("ab");
  const int32_t sp_ab = tok->find_token("\xC4\xA0" "ab");
  const int32_t c = tok->find_token("c");
  // "abc": "a b" (rank 0) beats "b c" (rank 2).
  EXPECT_EQ(tok->encode("abc ab", false, false), std::vector<int32_t>({ab, c, sp_ab}));
  EXPECT_EQ(tok->decode(tok->encode("abc ab", false, false), false), "abc ab");
  EXPECT_EQ(tok->token_to_piece(sp_ab), " ab");
  EXPECT_EQ(tok->token_to_piece(tok->find_token("\xC4\x8A")), "\n");
  EXPECT_EQ(tok->kind(), Tokenizer::Kind::Bpe);
  EXPECT_FALSE(tok->add_bos());
  EXPECT_EQ(tok->bos(), -1);
  EXPECT_EQ(tok->encode("x", true, false).size(), 1u);  // no BOS to add
}

TEST(TokenizerBpe, O200kPreTokenizerNames) {
  // The o200k split ends a word where lower case turns upper; GPT-2's does not.
  Kvs kv = bpe_vocab({"a B"});
  auto gpt2 = load_vocab(kv);
  ASSERT_TRUE(gpt2.ok()) << gpt2.error().message;
  const int32_t a = gpt2->find_token("a");
  const int32_t b = gpt2->find_token("B");
  EXPECT_EQ(gpt2->encode("aB", false, false), std::vector<int32_t>({gpt2->find_token("aB")}));
  for (const char* name : {"gpt-4o", "o200k"}) {
    kv["tokenizer.ggml.pre"] = gguf::Value(std::string(name));
    auto tok = load_vocab(kv);
    ASSERT_TRUE(tok.ok()) << name << ": " << tok.error().message;
    EXPECT_EQ(tok->encode("aB", false, false), std::vector<int32_t>({a, b})) << name;
  }
}

TEST(TokenizerBpe, SpecialTokensAndEndOfGeneration) {
  auto tok = load_vocab(bpe_vocab({"a b"}));
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  EXPECT_EQ(tok->encode("ab<|endoftext|>", false, true), std::vector<int32_t>({257, 256}));
  EXPECT_GT(tok->encode("ab<|endoftext|>", false, false).size(), 2u);
  EXPECT_TRUE(tok->is_eog(256));
  EXPECT_FALSE(tok->is_eog(257));
  Kvs kv = bpe_vocab({"a b"});
  kv["tokenizer.ggml.eot_token_id"] = gguf::Value(uint32_t{257});
  auto with_eot = load_vocab(kv);
  ASSERT_TRUE(with_eot.ok()) << with_eot.error().message;
  EXPECT_TRUE(with_eot->is_eog(257));
  EXPECT_TRUE(with_eot->is_eog(256));
  EXPECT_EQ(tok->decode(std::vector<int32_t>{257, 256}, true), "ab");
  EXPECT_EQ(tok->decode(std::vector<int32_t>{257, 256}, false), "ab<|endoftext|>");
}

TEST(TokenizerLoad, MovedTokenizerStillDecodes) {
  auto loaded = load_vocab(spm_vocab({"\xE2\x96\x81" "ab"}));
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  Tokenizer a = std::move(loaded.value());
  Tokenizer::StreamDecoder sd(a);
  Tokenizer b = std::move(a);
  EXPECT_EQ(sd.push(259), "ab");
  EXPECT_EQ(b.decode(std::vector<int32_t>{259}, true), "ab");
}

}  // namespace
}  // namespace pi
