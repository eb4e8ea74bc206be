// StreamDecoder: characters split across tokens are held back until complete.
#include <gtest/gtest.h>

#include "tokenizer/vocab_builder.h"

namespace pi {
namespace {

using testing::load_vocab;
using testing::spm_vocab;

int32_t byte_id(int b) { return 3 + b; }  // spm_vocab puts <0x00> at id 3

TEST(StreamDecoder, HoldsBackIncompleteCharacters) {
  auto tok = load_vocab(spm_vocab({"\xE2\x96\x81" "a"}));
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  Tokenizer::StreamDecoder sd(*tok);
  // U+1F600 as four byte tokens, then "▁a".
  EXPECT_EQ(sd.push(byte_id(0xF0)), "");
  EXPECT_EQ(sd.push(byte_id(0x9F)), "");
  EXPECT_EQ(sd.push(byte_id(0x98)), "");
  EXPECT_EQ(sd.push(byte_id(0x80)), "\xF0\x9F\x98\x80");
  EXPECT_EQ(sd.push(259), " a");
  EXPECT_EQ(sd.flush(), "");
}

TEST(StreamDecoder, StripsTheDummyPrefixOnlyAtTheStart) {
  auto tok = load_vocab(spm_vocab({"\xE2\x96\x81" "a"}));
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  Tokenizer::StreamDecoder sd(*tok);
  EXPECT_EQ(sd.push(1), "");  // <s> is skipped and does not end the start
  EXPECT_EQ(sd.push(259), "a");
  EXPECT_EQ(sd.push(259), " a");
  EXPECT_EQ(sd.flush(), "");
  EXPECT_EQ(sd.push(259), "a");  // flush() starts a new sequence
  Tokenizer::StreamDecoder keep(*tok, /*skip_special=*/false);
  EXPECT_EQ(keep.push(1), "<s>");
  EXPECT_EQ(keep.push(259), "a");
}

TEST(StreamDecoder, PassesInvalidBytesThrough) {
  auto tok = load_vocab(spm_vocab({"\xE2\x96\x81" "a"}));
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  Tokenizer::StreamDecoder sd(*tok);
  EXPECT_EQ(sd.push(byte_id(0xFF)), "\xFF");
  EXPECT_EQ(sd.push(byte_id(0xE6)), "");
  // A byte that cannot continue the sequence releases both.
  EXPECT_EQ(sd.push(byte_id(0x41)), "\xE6" "A");
  EXPECT_EQ(sd.push(byte_id(0xE6)), "");
  EXPECT_EQ(sd.push(byte_id(0xBC)), "");
  EXPECT_EQ(sd.flush(), "\xE6\xBC");  // an unfinished sequence comes out at the end
}

TEST(StreamDecoder, SplitsCharactersOfByteLevelTokens) {
  // GPT-2 byte-level: U+6F22 (E6 BC A2) as the three byte characters "æ" "¼" "¢".
  auto tok = load_vocab(testing::bpe_vocab({}));
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  const std::vector<int32_t> ids = tok->encode("\xE6\xBC\xA2!", false, false);
  ASSERT_EQ(ids.size(), 4u);
  Tokenizer::StreamDecoder sd(*tok);
  EXPECT_EQ(sd.push(ids[0]), "");
  EXPECT_EQ(sd.push(ids[1]), "");
  EXPECT_EQ(sd.push(ids[2]), "\xE6\xBC\xA2");
  EXPECT_EQ(sd.push(ids[3]), "!");
}

}  // namespace
}  // namespace pi
