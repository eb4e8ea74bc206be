// Every malformed-file case the reader must refuse with a one-line error naming the file,
// the offset and the problem -- and never crash, hang or allocate without bound.
#include <gtest/gtest.h>

#include <random>

#include "gguf/byte_builder.h"
#include "gguf/reader.h"
#include "gguf/writer.h"

namespace pi::gguf {
namespace {

using testing::ByteBuilder;

constexpr uint32_t kF32 = 0, kQ4_0 = 2;

// Parses `b` and expects an error mentioning `needle`, the file name and an offset.
void expect_error(const ByteBuilder& b, const std::string& needle, const ReadLimits& lim = {}) {
  auto f = parse_bytes("bad.gguf", b.bytes().data(), b.size(), lim);
  ASSERT_FALSE(f.ok()) << "accepted a file that should fail with: " << needle;
  const std::string& m = f.error().message;
  EXPECT_NE(m.find(needle), std::string::npos) << m;
  EXPECT_EQ(m.rfind("bad.gguf: offset ", 0), 0u) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

// A valid file with one KV, one array KV and two F32 tensors.
ByteBuilder valid_file() {
  ByteBuilder b;
  b.header(3, 2, 2).str("general.architecture").u32(8).str("llama");
  b.str("tokens").u32(9).u32(8).u64(2).str("a").str("bc");
  b.tensor_info("t0", {4, 2}, kF32, 0).tensor_info("t1", {8}, kF32, 32).pad_to(32);
  b.zeros(64);
  return b;
}

TEST(GgufMalformed, ValidBaselineParses) {
  ByteBuilder b = valid_file();
  auto f = parse_bytes("ok.gguf", b.bytes().data(), b.size());
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->tensors().size(), 2u);
}

TEST(GgufMalformed, BadMagic) {
  ByteBuilder b;
  b.header(3, 0, 0, 0x4c4c4548);  // "HELL"
  expect_error(b, "bad magic");
}

TEST(GgufMalformed, EmptyFile) {
  ByteBuilder b;
  expect_error(b, "truncated");
}

TEST(GgufMalformed, UnsupportedVersion) {
  for (uint32_t v : {0u, 1u, 4u, 0xffffffffu}) {
    ByteBuilder b;
    b.header(v, 0, 0);
    expect_error(b, "unsupported GGUF version");
  }
}

TEST(GgufMalformed, EveryTruncationFailsCleanly) {
  ByteBuilder full = valid_file();
  // Cutting anywhere before the last tensor's final byte must fail (never crash).
  const size_t data_end = full.size();
  for (size_t n = 0; n < data_end; ++n) {
    auto f = parse_bytes("cut.gguf", full.bytes().data(), n);
    EXPECT_FALSE(f.ok()) << "prefix of " << n << " bytes accepted";
    if (!f.ok()) {
      EXPECT_EQ(f.error().message.rfind("cut.gguf: offset ", 0), 0u);
    }
  }
}

TEST(GgufMalformed, CountsThatCannotFit) {
  ByteBuilder b;
  b.header(3, 0, uint64_t{1} << 60);
  expect_error(b, "metadata count");
  ByteBuilder c;
  c.header(3, uint64_t{1} << 60, 0);
  expect_error(c, "tensor count");
}

TEST(GgufMalformed, StringLengthPastEnd) {
  ByteBuilder b;
  b.header(3, 0, 1).u64(1000).raw("abc", 3).zeros(20);
  expect_error(b, "runs past end of file");
  ByteBuilder c;
  c.header(3, 0, 1).str("k").u32(8).u64(~uint64_t{0});
  expect_error(c, "runs past end of file");
}

TEST(GgufMalformed, ArrayLengthPastEnd) {
  ByteBuilder b;
  b.header(3, 0, 1).str("k").u32(9).u32(4).u64(uint64_t{1} << 61).u32(1);
  expect_error(b, "runs past end of file");
}

TEST(GgufMalformed, ArrayOverItemLimit) {
  ByteBuilder b;
  b.header(3, 0, 1).str("k").u32(9).u32(0).u64(100).zeros(100);
  ReadLimits lim;
  lim.max_array_items = 10;
  expect_error(b, "exceeds the limit", lim);
}

TEST(GgufMalformed, ArraysNestedTooDeep) {
  ByteBuilder b;
  b.header(3, 0, 1).str("k").u32(9);
  for (int i = 0; i < 20; ++i) b.u32(9).u64(1);
  b.u32(0).u64(0);
  expect_error(b, "nested deeper");
}

TEST(GgufMalformed, UnknownValueTypes) {
  ByteBuilder b;
  b.header(3, 0, 1).str("k").u32(13).u32(0);
  expect_error(b, "unknown value type 13");
  ByteBuilder c;
  c.header(3, 0, 1).str("k").u32(9).u32(77).u64(0);
  expect_error(c, "unknown array element type 77");
}

TEST(GgufMalformed, BoolOutOfRange) {
  ByteBuilder b;
  b.header(3, 0, 1).str("k").u32(7).pod(uint8_t{2});
  expect_error(b, "not 0 or 1");
}

TEST(GgufMalformed, DuplicateKey) {
  ByteBuilder b;
  b.header(3, 0, 2).str("k").u32(4).u32(1).str("k").u32(4).u32(2);
  expect_error(b, "duplicate metadata key 'k'");
}

TEST(GgufMalformed, EmptyKey) {
  ByteBuilder b;
  b.header(3, 0, 1).str("").u32(4).u32(1);
  expect_error(b, "empty");
}

TEST(GgufMalformed, BadAlignment) {
  ByteBuilder b;
  b.header(3, 0, 1).str("general.alignment").u32(4).u32(48);
  expect_error(b, "not a power of two");
  ByteBuilder c;
  c.header(3, 0, 1).str("general.alignment").u32(4).u32(0);
  expect_error(c, "not a power of two");
  ByteBuilder d;
  d.header(3, 0, 1).str("general.alignment").u32(10).u64(32);
  expect_error(d, "must be u32");
}

TEST(GgufMalformed, DuplicateTensorName) {
  ByteBuilder b;
  b.header(3, 2, 0).tensor_info("t", {4}, kF32, 0).tensor_info("t", {4}, kF32, 32).pad_to(32).zeros(64);
  expect_error(b, "duplicate tensor name 't'");
}

TEST(GgufMalformed, UnknownTensorType) {
  ByteBuilder b;
  b.header(3, 1, 0).tensor_info("t", {4}, 31, 0).pad_to(32).zeros(64);
  expect_error(b, "unknown tensor type 31");
  ByteBuilder c;
  c.header(3, 1, 0).tensor_info("t", {4}, 1000, 0).pad_to(32).zeros(64);
  expect_error(c, "unknown tensor type 1000");
}

TEST(GgufMalformed, BadRank) {
  ByteBuilder b;
  b.header(3, 1, 0).tensor_info("t", {}, kF32, 0).pad_to(32).zeros(64);
  expect_error(b, "rank 0");
  ByteBuilder c;
  c.header(3, 1, 0).tensor_info("t", {1, 1, 1, 1, 1}, kF32, 0).pad_to(32).zeros(64);
  expect_error(c, "rank 5");
}

TEST(GgufMalformed, ZeroAndAbsurdDimensions) {
  ByteBuilder b;
  b.header(3, 1, 0).tensor_info("t", {4, 0}, kF32, 0).pad_to(32).zeros(64);
  expect_error(b, "dimension 1 is 0");
  ByteBuilder c;
  c.header(3, 1, 0).tensor_info("t", {uint64_t{1} << 50}, kF32, 0).pad_to(32).zeros(64);
  expect_error(c, "dimension 0 is");
}

TEST(GgufMalformed, ElementCountOverflow) {
  ByteBuilder b;
  b.header(3, 1, 0)
      .tensor_info("t", {uint64_t{1} << 40, uint64_t{1} << 40, uint64_t{1} << 40}, kF32, 0)
      .pad_to(32)
      .zeros(64);
  expect_error(b, "overflows");
}

TEST(GgufMalformed, RowNotMultipleOfBlock) {
  ByteBuilder b;
  b.header(3, 1, 0).tensor_info("t", {33, 2}, kQ4_0, 0).pad_to(32).zeros(128);
  expect_error(b, "not a multiple of the q4_0 block size 32");
}

// gpt-oss's experts: an MXFP4 (type 39) row must hold whole blocks of 32 too.
TEST(GgufMalformed, RowNotMultipleOfMxfp4Block) {
  ByteBuilder b;
  b.header(3, 1, 0).tensor_info("blk.0.ffn_up_exps.weight", {48, 2}, 39, 0).pad_to(32).zeros(128);
  expect_error(b, "tensor 'blk.0.ffn_up_exps.weight': row length 48 is not a multiple of the mxfp4 block size 32");
}

TEST(GgufMalformed, MisalignedTensorOffset) {
  ByteBuilder b;
  b.header(3, 1, 0).tensor_info("t", {4}, kF32, 8).pad_to(32).zeros(64);
  expect_error(b, "not a multiple of the alignment");
}

TEST(GgufMalformed, TensorDataOutOfBounds) {
  ByteBuilder b;
  b.header(3, 1, 0).tensor_info("t", {64}, kF32, 0).pad_to(32).zeros(100);
  expect_error(b, "runs past end of file");
  ByteBuilder c;
  c.header(3, 1, 0).tensor_info("t", {4}, kF32, uint64_t{1} << 62).pad_to(32).zeros(64);
  expect_error(c, "runs past end of file");
}

TEST(GgufMalformed, OverlappingTensors) {
  ByteBuilder b;
  b.header(3, 2, 0).tensor_info("a", {16}, kF32, 0).tensor_info("b", {16}, kF32, 32).pad_to(32).zeros(128);
  expect_error(b, "overlaps");
}

// A small in-process fuzz: random byte flips of a valid file must parse or fail cleanly.
TEST(GgufMalformed, RandomMutationsNeverCrash) {
  const ByteBuilder base = valid_file();
  std::mt19937 rng(1234);
  int accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<std::byte> bytes = base.bytes();
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      size_t at = rng() % bytes.size();
      bytes[at] = static_cast<std::byte>(rng());
    }
    auto f = parse_bytes("fuzz.gguf", bytes.data(), bytes.size());
    if (f.ok()) ++accepted;
  }
  EXPECT_GT(accepted, 0);  // flips in tensor data are harmless
}

}  // namespace
}  // namespace pi::gguf
