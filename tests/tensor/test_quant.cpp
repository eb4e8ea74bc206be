// Block formats by hand: blocks built byte by byte decode to the values the layout defines,
// known inputs quantize to known bytes, and random rows round-trip within bounds derived
// from each format. The oracle comparison against gguf-py is in test_quant_vectors.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/quant.h"

namespace pi {
namespace {

template <typename Block>
Block quantize_one(DType t, const float* x) {
  Block b{};
  EXPECT_TRUE(quantize_row(t, x, &b, dtype_info(t).block_size).ok());
  return b;
}

template <typename Block>
std::vector<float> dequantize_one(DType t, const Block& b) {
  std::vector<float> y(static_cast<size_t>(dtype_info(t).block_size));
  EXPECT_TRUE(dequantize_row(t, &b, y.data(), dtype_info(t).block_size).ok());
  return y;
}

template <typename Block>
std::vector<uint8_t> bytes_of(const Block& b) {
  std::vector<uint8_t> v(sizeof(Block));
  std::memcpy(v.data(), &b, sizeof(Block));
  return v;
}

// ---- Q4_0 --------------------------------------------------------------------------------

TEST(Q4_0, HandBuiltBlockDecodes) {
  BlockQ4_0 b{};
  b.d = 0x3800;  // 0.5
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = dequantize_one(DType::Q4_0, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f) << j;              // low nibble: element j
    EXPECT_EQ(y[j + 16], (15 - j - 8) * 0.5f) << j;    // high nibble: element j + 16
  }
}

TEST(Q4_0, KnownInputGivesKnownBytes) {
  // x = -16..15: the largest magnitude is -16, so d = -16 / -8 = 2 and q = trunc(x/2 + 8.5),
  // clamped to 15 (x = 15 gives 16).
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  const auto b = quantize_one<BlockQ4_0>(DType::Q4_0, x);
  const std::vector<uint8_t> want = {0x00, 0x40,  // d = 2.0
                                     0x80, 0x91, 0x91, 0xa2, 0xa2, 0xb3, 0xb3, 0xc4,
                                     0xc4, 0xd5, 0xd5, 0xe6, 0xe6, 0xf7, 0xf7, 0xf8};
  EXPECT_EQ(bytes_of(b), want);
}

// Q4_0_SPLIT rows: a Q4_0 row's scales first, then its quants, each whole four-block unit's
// 4-byte words transposed (word 4 L + i of the unit is word L of its block i), the blocks past
// the last whole unit as they are; the same values.
TEST(Q4_0, SplitRowsHoldTheSameValues) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t n : {32, 96, 4096, 4128, 4160}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = nd(rng);
    std::vector<uint8_t> q4(row_bytes(DType::Q4_0, n)), split(q4.size()), direct(q4.size());
    ASSERT_TRUE(quantize_row(DType::Q4_0, x.data(), q4.data(), n).ok());
    split_q4_0_row(q4.data(), split.data(), n);
    const int64_t nb = n / 32, units = nb / 4;
    for (int64_t b = 0; b < nb; ++b) EXPECT_EQ(0, std::memcmp(split.data() + 2 * b, q4.data() + 18 * b, 2));
    const uint8_t* quants = split.data() + 2 * nb;
    for (int64_t u = 0; u < units; ++u) {
      for (int64_t word = 0; word < 4; ++word) {
        for (int64_t i = 0; i < 4; ++i) {
          const int64_t b = 4 * u + i;
          EXPECT_EQ(0, std::memcmp(quants + 64 * u + 16 * word + 4 * i, q4.data() + 18 * b + 2 + 4 * word, 4));
          for (int64_t c = 4 * word; c < 4 * word + 4; ++c)
            EXPECT_EQ(q4_0_split_quant(nb, b, c), 2 * nb + 64 * u + 16 * word + 4 * i + c % 4);
        }
      }
    }
    for (int64_t b = 4 * units; b < nb; ++b) {
      EXPECT_EQ(0, std::memcmp(quants + 16 * b, q4.data() + 18 * b + 2, 16));
      EXPECT_EQ(q4_0_split_quant(nb, b, 5), 2 * nb + 16 * b + 5);
    }
    ASSERT_TRUE(quantize_row(DType::Q4_0_SPLIT, x.data(), direct.data(), n).ok());
    EXPECT_EQ(direct, split);
    std::vector<float> a(x.size()), b(x.size());
    ASSERT_TRUE(dequantize_row(DType::Q4_0, q4.data(), a.data(), n).ok());
    ASSERT_TRUE(dequantize_row(DType::Q4_0_SPLIT, split.data(), b.data(), n).ok());
    EXPECT_EQ(a, b);
    // Joined back, the file's bytes exactly (models read into memory hold the split layout
    // and give other devices the file's: model::LayoutCache).
    std::vector<uint8_t> joined(q4.size(), 0xA5);
    join_q4_0_row(split.data(), joined.data(), n);
    EXPECT_EQ(joined, q4);
  }
}

// ---- Q4_1 --------------------------------------------------------------------------------

TEST(Q4_1, HandBuiltBlockDecodes) {
  BlockQ4_1 b{};
  b.d = 0x3800;  // 0.5
  b.m = 0xbc00;  // -1.0
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(((j * 3) % 16) | (j << 4));
  const auto y = dequantize_one(DType::Q4_1, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], ((j * 3) % 16) * 0.5f - 1.0f) << j;
    EXPECT_EQ(y[j + 16], j * 0.5f - 1.0f) << j;
  }
}

TEST(Q4_1, KnownInputGivesKnownBytes) {
  // x[j] = 1 + 0.25 * (j % 16): min 1, max 4.75, d = 3.75 / 15 = 0.25, q[j] = j % 16.
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = 1.0f + 0.25f * static_cast<float>(j % 16);
  const auto b = quantize_one<BlockQ4_1>(DType::Q4_1, x);
  std::vector<uint8_t> want = {0x00, 0x34, 0x00, 0x3c};  // d = 0.25, m = 1.0
  for (int j = 0; j < 16; ++j) want.push_back(static_cast<uint8_t>(j * 0x11));
  EXPECT_EQ(bytes_of(b), want);
  const auto y = dequantize_one(DType::Q4_1, b);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]);
}

// ---- Q5_0 --------------------------------------------------------------------------------

TEST(Q5_0, HandBuiltBlockDecodes) {
  BlockQ5_0 b{};
  b.d = 0x3400;  // 0.25
  // qh = 0x80000001: the fifth bit is set for elements 0 and 31 only.
  b.qh[0] = 0x01;
  b.qh[3] = 0x80;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = dequantize_one(DType::Q5_0, b);
  for (int j = 0; j < 16; ++j) {
    const int q_lo = j + (j == 0 ? 16 : 0);
    const int q_hi = (15 - j) + (j == 15 ? 16 : 0);  // element j + 16 == 31 when j == 15
    EXPECT_EQ(y[j], (q_lo - 16) * 0.25f) << j;
    EXPECT_EQ(y[j + 16], (q_hi - 16) * 0.25f) << j;
  }
}

TEST(Q5_0, KnownInputGivesKnownBytes) {
  // x = -16..15: d = -16 / -16 = 1, q = trunc(x + 16.5) = j. Elements 16..31 have bit 4 set.
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  const auto b = quantize_one<BlockQ5_0>(DType::Q5_0, x);
  std::vector<uint8_t> want = {0x00, 0x3c, 0x00, 0x00, 0xff, 0xff};  // d = 1, qh = 0xffff0000
  for (int j = 0; j < 16; ++j) want.push_back(static_cast<uint8_t>(j * 0x11));
  EXPECT_EQ(bytes_of(b), want);
  const auto y = dequantize_one(DType::Q5_0, b);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]);
}

// ---- Q5_1 --------------------------------------------------------------------------------

TEST(Q5_1, HandBuiltBlockDecodes) {
  BlockQ5_1 b{};
  b.d = 0x4000;  // 2.0
  b.m = 0x3c00;  // 1.0
  b.qh[1] = 0x81;  // bits 8 and 15: elements 8 and 15
  b.qh[2] = 0x02;  // bit 17: element 17
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(0x0f - (j % 16) + 0x50);
  const auto y = dequantize_one(DType::Q5_1, b);
  for (int j = 0; j < 32; ++j) {
    int q = j < 16 ? (0x0f - j) : 0x5;
    if (j == 8 || j == 15 || j == 17) q += 16;
    EXPECT_EQ(y[j], q * 2.0f + 1.0f) << j;
  }
}

TEST(Q5_1, KnownInputGivesKnownBytes) {
  // x[j] = 2 + 0.5 j: min 2, max 17.5, d = 15.5 / 31 = 0.5, q[j] = j.
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = 2.0f + 0.5f * static_cast<float>(j);
  const auto b = quantize_one<BlockQ5_1>(DType::Q5_1, x);
  std::vector<uint8_t> want = {0x00, 0x38, 0x00, 0x40, 0x00, 0x00, 0xff, 0xff};
  for (int j = 0; j < 16; ++j) want.push_back(static_cast<uint8_t>(j * 0x11));
  EXPECT_EQ(bytes_of(b), want);
}

// ---- MXFP4 -------------------------------------------------------------------------------

TEST(MXFP4, HandBuiltBlockDecodes) {
  // e = 128: d = 2^(128 - 128) = 1, so each code gives its doubled E2M1 value; e = 0 and 1
  // are subnormal scales (2^-128, 2^-127), exact.
  BlockMXFP4 b{};
  b.e = 128;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (15 - j) << 4);
  const auto y = dequantize_one(DType::MXFP4, b);
  const float e2m1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], e2m1x2[j]) << j;
    EXPECT_EQ(y[j + 16], e2m1x2[15 - j]) << j;
  }
  EXPECT_EQ(e8m0_half(0), std::ldexp(1.0f, -128));
  EXPECT_EQ(e8m0_half(1), std::ldexp(1.0f, -127));
  EXPECT_EQ(e8m0_half(127), 0.5f);
  EXPECT_EQ(e8m0_half(255), std::ldexp(1.0f, 127));
}

TEST(MXFP4, KnownInputGivesKnownBytes) {
  // amax 6: e = floor(log2 6) - 2 + 127 = 127, d = 0.5; x = 3 is code 5 (6 x 0.5), -0.25 is
  // halfway between 0 and -0.5: the lower code (0) wins the tie.
  float x[32] = {};
  x[0] = 6.0f;
  x[1] = 3.0f;
  x[2] = -0.25f;
  x[16] = -1.5f;
  const auto b = quantize_one<BlockMXFP4>(DType::MXFP4, x);
  std::vector<uint8_t> want(17, 0);
  want[0] = 127;
  want[1] = 0x07 | 0x0b << 4;  // 6 = code 7 (12 x 0.5); -1.5 = code 11 (-3 x 0.5)
  want[2] = 0x05;
  EXPECT_EQ(bytes_of(b), want);
}

TEST(MXFP4, NonFiniteInputsQuantizeWithoutOverflow) {
  // Inputs should be finite; an infinite one must still not overflow the exponent's cast.
  float x[32] = {};
  x[3] = std::numeric_limits<float>::infinity();
  x[4] = 1.0f;
  const auto b = quantize_one<BlockMXFP4>(DType::MXFP4, x);
  EXPECT_EQ(b.e, 255);
}

// ---- Q8_0 --------------------------------------------------------------------------------

TEST(Q8_0, HandBuiltBlockDecodes) {
  BlockQ8_0 b{};
  b.d = 0x3800;  // 0.5
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j * 8 - 128);
  const auto y = dequantize_one(DType::Q8_0, b);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], (j * 8 - 128) * 0.5f) << j;
}

TEST(Q8_0, KnownInputGivesKnownBytes) {
  // amax = 127 so d = 1 and q = round(x), halves away from zero.
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.49f;
  x[4] = -126.5f;
  const auto b = quantize_one<BlockQ8_0>(DType::Q8_0, x);
  EXPECT_EQ(b.d, 0x3c00u);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], 3);
  EXPECT_EQ(b.qs[2], -3);
  EXPECT_EQ(b.qs[3], 0);
  EXPECT_EQ(b.qs[4], -127);
  for (int j = 5; j < 32; ++j) EXPECT_EQ(b.qs[j], j - 16) << j;
}

// ---- Q6_K --------------------------------------------------------------------------------

// Packs 256 quants (0..63) the way ggml lays out block_q6_K, written independently of the
// library: per 128-element half and l = 0..31, ql[l] holds elements l (low nibble) and l+64
// (high nibble), ql[l+32] holds l+32 and l+96, and qh[l] holds the top two bits of
// elements l, l+32, l+64, l+96 at bits 0, 2, 4, 6.
void pack_q6k(const int* q, BlockQ6_K& b) {
  for (int half = 0; half < 2; ++half) {
    const int* v = q + 128 * half;
    uint8_t* ql = b.ql + 64 * half;
    uint8_t* qh = b.qh + 32 * half;
    for (int l = 0; l < 32; ++l) {
      ql[l] = static_cast<uint8_t>((v[l] & 15) | ((v[l + 64] & 15) << 4));
      ql[l + 32] = static_cast<uint8_t>((v[l + 32] & 15) | ((v[l + 96] & 15) << 4));
      qh[l] = static_cast<uint8_t>((v[l] >> 4) | ((v[l + 32] >> 4) << 2) |
                                   ((v[l + 64] >> 4) << 4) | ((v[l + 96] >> 4) << 6));
    }
  }
}

TEST(Q6_K, LiteralBytesDecode) {
  // d = 1, every scale 1 except sub-block 6 (elements 96..111) with 2. ql[33] = 0x5c and
  // qh[1] = 0b11'10'01'00 give element 33 q = 0xc | 1 << 4 = 28, element 65 q = 0 | 2 << 4
  // = 32, element 97 q = 5 | 3 << 4 = 53; every other element has q = 0.
  BlockQ6_K b{};
  b.d = 0x3c00;
  for (auto& s : b.scales) s = 1;
  b.scales[6] = 2;
  b.ql[33] = 0x5c;
  b.qh[1] = 0xe4;
  const auto y = dequantize_one(DType::Q6_K, b);
  for (int e = 0; e < 256; ++e) {
    float want = (e / 16 == 6) ? -64.0f : -32.0f;
    if (e == 33) want = -4.0f;
    if (e == 65) want = 0.0f;
    if (e == 97) want = 2.0f * 21.0f;
    EXPECT_EQ(y[e], want) << e;
  }
}

TEST(Q6_K, HandPackedBlockDecodes) {
  int q[256];
  for (int e = 0; e < 256; ++e) q[e] = (e * 7 + e / 64) % 64;
  BlockQ6_K b{};
  pack_q6k(q, b);
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s * 17 - 128);  // -128..127
  b.d = 0x3800;  // 0.5
  const auto y = dequantize_one(DType::Q6_K, b);
  for (int e = 0; e < 256; ++e) {
    const float step = 0.5f * static_cast<float>(b.scales[e / 16]);
    EXPECT_EQ(y[e], step * static_cast<float>(q[e] - 32)) << e;
  }
}

TEST(Q6_K, ZerosGiveKnownBytes) {
  std::vector<float> x(256, 0.0f);
  const auto b = quantize_one<BlockQ6_K>(DType::Q6_K, x.data());
  BlockQ6_K want{};
  std::memset(want.qh, 0xaa, sizeof(want.qh));  // every quant at level 32 (value 0)
  EXPECT_EQ(bytes_of(b), bytes_of(want));
  for (float v : dequantize_one(DType::Q6_K, b)) EXPECT_EQ(v, 0.0f);
}

TEST(Q6_K, RepresentableInputGivesKnownBytes) {
  // Sub-block s has step sc[s] / 128 and contains its largest magnitude at level -32 (for a
  // negative max, positive scale) or +32 * |step| (positive max, negative scale). The search
  // starts at step = max / -32, which reproduces these exactly; then d = 127/128 / 127 =
  // 2^-7 (half 0x2000) and the integer scales are sc[s].
  const int sc[16] = {127, 64, -64, 1, 100, -127, 3, -2, 50, 77, -90, 10, 5, -5, 126, 32};
  int q[256];
  std::vector<float> x(256);
  for (int s = 0; s < 16; ++s) {
    for (int k = 0; k < 16; ++k) {
      const int e = s * 16 + k;
      q[e] = (k == 0) ? 0 : (s * 5 + k * 3) % 60 + 2;  // level -32 first, then 2..61
      x[e] = static_cast<float>(sc[s]) / 128.0f * static_cast<float>(q[e] - 32);
    }
  }
  const auto b = quantize_one<BlockQ6_K>(DType::Q6_K, x.data());
  BlockQ6_K want{};
  pack_q6k(q, want);
  for (int s = 0; s < 16; ++s) want.scales[s] = static_cast<int8_t>(sc[s]);
  want.d = 0x2000;
  EXPECT_EQ(bytes_of(b), bytes_of(want));
  const auto y = dequantize_one(DType::Q6_K, b);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], x[e]) << e;
}

// ---- Round-trip bounds ------------------------------------------------------------------

// Rows of blocks at very different scales, with some all-zero and constant blocks.
std::vector<float> test_row(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> expo(-4.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t b = 0; b < n / 32; ++b) {
    const float scale = std::pow(10.0f, expo(rng));
    for (int64_t j = 0; j < 32; ++j) {
      float v = normal(rng) * scale;
      if (b % 11 == 5) v = 0.0f;
      if (b % 13 == 7) v = scale;
      x[static_cast<size_t>(b * 32 + j)] = v;
    }
  }
  return x;
}

struct BlockStats {
  float amax, max_signed, lo, hi;
};

BlockStats stats(const float* x, int n) {
  BlockStats s{0.0f, 0.0f, x[0], x[0]};
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > s.amax) {
      s.amax = std::fabs(x[j]);
      s.max_signed = x[j];
    }
    s.lo = std::fmin(s.lo, x[j]);
    s.hi = std::fmax(s.hi, x[j]);
  }
  return s;
}

float f16_round(float v) { return f16_to_f32(f32_to_f16(v)); }

// The bound for one 32-element block of type t, from the format's definition:
//   Q8_0: q = round(x / d), d = amax / 127: d / 2, plus 127 |d - half(d)| from storing d.
//   Q4_0: d = max / -8; levels -8..7, so -max (level +8) clamps to 7: one step |d|,
//         plus 8 |d - half(d)|. Q5_0 likewise with 16 levels each side.
//   Q4_1: d = (max - min) / 15, q = round((x - min) / d): d / 2, plus 15 |d - half(d)| and
//         |min - half(min)|. Q5_1 likewise with 31.
// eps covers f32 rounding in x / d and in the decode (a few ulps of the block's range).
float block_bound(DType t, const float* x) {
  const BlockStats s = stats(x, 32);
  const float eps = 4e-6f * std::fmax(s.amax, std::fabs(s.hi - s.lo));
  switch (t) {
    case DType::Q8_0: {
      const float d = s.amax / 127.0f;
      return d / 2 + 127 * std::fabs(d - f16_round(d)) + eps;
    }
    case DType::Q4_0: {
      const float d = s.max_signed / -8.0f;
      return std::fabs(d) + 8 * std::fabs(d - f16_round(d)) + eps;
    }
    case DType::Q5_0: {
      const float d = s.max_signed / -16.0f;
      return std::fabs(d) + 16 * std::fabs(d - f16_round(d)) + eps;
    }
    case DType::Q4_1: {
      const float d = (s.hi - s.lo) / 15.0f;
      return d / 2 + 15 * std::fabs(d - f16_round(d)) + std::fabs(s.lo - f16_round(s.lo)) + eps;
    }
    case DType::Q5_1: {
      const float d = (s.hi - s.lo) / 31.0f;
      return d / 2 + 31 * std::fabs(d - f16_round(d)) + std::fabs(s.lo - f16_round(s.lo)) + eps;
    }
    default:
      ADD_FAILURE() << "no bound for " << dtype_name(t);
      return 0.0f;
  }
}

TEST(QuantRoundTrip, BlockFormatsWithinDerivedBound) {
  const int64_t n = 32 * 200;
  const auto x = test_row(n, 1234);
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1}) {
    std::vector<uint8_t> q(row_bytes(t, n));
    std::vector<float> y(static_cast<size_t>(n));
    ASSERT_TRUE(quantize_row(t, x.data(), q.data(), n).ok());
    ASSERT_TRUE(dequantize_row(t, q.data(), y.data(), n).ok());
    for (int64_t b = 0; b < n / 32; ++b) {
      const float* xb = x.data() + b * 32;
      const float bound = block_bound(t, xb);
      for (int j = 0; j < 32; ++j) {
        ASSERT_LE(std::fabs(xb[j] - y[static_cast<size_t>(b * 32 + j)]), bound)
            << dtype_name(t) << " block " << b << " element " << j;
      }
    }
  }
}

TEST(QuantRoundTrip, Q6_KWithinDerivedBound) {
  // quant_q6k.cpp: |x - x'| <= amax_sub / 32 + 16 d, d the stored super-scale.
  const int64_t n = 256 * 40;
  auto x = test_row(n, 99);
  // Sub-blocks of very different size inside one super-block stress the integer scales.
  for (int64_t i = 0; i < n; ++i) {
    if ((i / 16) % 5 == 3) x[static_cast<size_t>(i)] *= 1e-3f;
  }
  std::vector<BlockQ6_K> q(static_cast<size_t>(n / 256));
  std::vector<float> y(static_cast<size_t>(n));
  ASSERT_TRUE(quantize_row(DType::Q6_K, x.data(), q.data(), n).ok());
  ASSERT_TRUE(dequantize_row(DType::Q6_K, q.data(), y.data(), n).ok());
  double sq_err = 0.0, sq_x = 0.0;
  for (int64_t sb = 0; sb < n / 16; ++sb) {
    const float* xs = x.data() + sb * 16;
    const float d = f16_to_f32(q[static_cast<size_t>(sb / 16)].d);
    const float amax = stats(xs, 16).amax;
    const float bound = amax / 32 + 16 * d + 1e-6f * amax;
    for (int k = 0; k < 16; ++k) {
      const float e = xs[k] - y[static_cast<size_t>(sb * 16 + k)];
      ASSERT_LE(std::fabs(e), bound) << "sub-block " << sb << " element " << k;
      sq_err += static_cast<double>(e) * e;
      sq_x += static_cast<double>(xs[k]) * xs[k];
    }
  }
  // Not a bound, a sanity check on quality: Gaussian data gives ~1.7% relative RMS error.
  EXPECT_LT(std::sqrt(sq_err / sq_x), 0.03);
}

// Q2_K..Q5_K: for each sub-block, the min-max grid with nmax steps (step = (max - min(0,
// min)) / nmax, or 2 amax / (2^bits - 1) for the symmetric Q3_K) bounds what a quantizer of
// the format should reach: every element within one grid step (half a step of rounding, half
// for the fit) plus the integer sub-scales' rounding (half a super-scale d per level, half a
// dmin for the min), and the RMS error within the uniform-rounding value step / sqrt(12)
// averaged over sub-blocks, with 10% slack.
TEST(QuantRoundTrip, KQuantsWithinMinMaxGrid) {
  struct Case {
    DType t;
    int sub, nmax;
    bool symmetric;
    size_t d_at, dmin_at;  // byte offsets of the f16 super-scales (dmin_at 0: none)
  };
  const int64_t n = 256 * 40;
  auto x = test_row(n, 77);
  for (int64_t i = 0; i < n; ++i) {
    if ((i / 32) % 7 == 3) x[static_cast<size_t>(i)] *= 0.05f;  // uneven sub-blocks
  }
  for (const Case& c : {Case{DType::Q2_K, 16, 3, false, 80, 82}, Case{DType::Q3_K, 16, 7, true, 108, 0},
                        Case{DType::Q4_K, 32, 15, false, 0, 2}, Case{DType::Q5_K, 32, 31, false, 0, 2}}) {
    std::vector<uint8_t> q(row_bytes(c.t, n));
    std::vector<float> y(static_cast<size_t>(n));
    ASSERT_TRUE(quantize_row(c.t, x.data(), q.data(), n).ok());
    ASSERT_TRUE(dequantize_row(c.t, q.data(), y.data(), n).ok());
    double sq_err = 0.0, sq_theory = 0.0;
    for (int64_t sb = 0; sb < n / c.sub; ++sb) {
      const float* xs = x.data() + sb * c.sub;
      const BlockStats st = stats(xs, c.sub);
      const float step = c.symmetric ? 2 * st.amax / c.nmax : (st.hi - std::fmin(st.lo, 0.0f)) / c.nmax;
      const uint8_t* blk = q.data() + (sb * c.sub / 256) * row_bytes(c.t, 256);
      uint16_t h[2] = {0, 0};
      std::memcpy(&h[0], blk + c.d_at, 2);
      if (c.dmin_at != 0) std::memcpy(&h[1], blk + c.dmin_at, 2);
      const float levels = c.symmetric ? (c.nmax + 1) / 2.0f : static_cast<float>(c.nmax);
      const float bound = step + (levels * f16_to_f32(h[0]) + f16_to_f32(h[1])) / 2 + 1e-6f * st.amax;
      for (int k = 0; k < c.sub; ++k) {
        const float e = xs[k] - y[static_cast<size_t>(sb * c.sub + k)];
        ASSERT_LE(std::fabs(e), bound)
            << dtype_name(c.t) << " sub-block " << sb << " element " << k;
        sq_err += static_cast<double>(e) * e;
      }
      sq_theory += c.sub * static_cast<double>(step) * step / 12.0;
    }
    EXPECT_LE(std::sqrt(sq_err / sq_theory), 1.1) << dtype_name(c.t);
  }
}

TEST(QuantRoundTrip, PlainTypes) {
  const int64_t n = 37;  // no block constraint
  const auto x = test_row(64, 7);
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    std::vector<uint8_t> q(row_bytes(t, n));
    std::vector<float> y(static_cast<size_t>(n));
    ASSERT_TRUE(quantize_row(t, x.data(), q.data(), n).ok());
    ASSERT_TRUE(dequantize_row(t, q.data(), y.data(), n).ok());
    // Relative half-ulp bound: 2^-24 (f32), 2^-11 (f16, normal range; the test values are
    // well above the f16 subnormal range or exactly 0), 2^-8 (bf16).
    const float rel = t == DType::F32 ? 0.0f : t == DType::F16 ? 0x1p-11f : 0x1p-8f;
    for (int64_t i = 0; i < n; ++i) {
      const float xi = x[static_cast<size_t>(i)];
      if (t == DType::F16 && std::fabs(xi) < 0x1p-14f && xi != 0.0f) continue;
      EXPECT_LE(std::fabs(xi - y[static_cast<size_t>(i)]), rel * std::fabs(xi))
          << dtype_name(t) << " " << i;
    }
  }
}

TEST(QuantRoundTrip, I32RoundsAndSaturates) {
  const float x[6] = {1.5f, 2.5f, -3.7f, 3e9f, -3e9f, NAN};
  int32_t q[6];
  ASSERT_TRUE(quantize_row(DType::I32, x, q, 6).ok());
  EXPECT_EQ(q[0], 2);
  EXPECT_EQ(q[1], 2);
  EXPECT_EQ(q[2], -4);
  EXPECT_EQ(q[3], INT32_MAX);
  EXPECT_EQ(q[4], INT32_MIN);
  EXPECT_EQ(q[5], 0);
  float y[6];
  ASSERT_TRUE(dequantize_row(DType::I32, q, y, 6).ok());
  EXPECT_EQ(y[2], -4.0f);
}

// ---- Preconditions -----------------------------------------------------------------------

TEST(QuantErrors, LengthNotMultipleOfBlockSizeIsRejected) {
  std::vector<float> x(512, 1.0f);
  std::vector<uint8_t> buf(4096);
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0}) {
    for (int64_t n : {1, 31, 33, 48}) {
      const Status s = quantize_row(t, x.data(), buf.data(), n);
      ASSERT_FALSE(s.ok()) << dtype_name(t) << " n=" << n;
      EXPECT_NE(s.error().message.find("block size 32"), std::string::npos) << s.error().message;
      EXPECT_FALSE(dequantize_row(t, buf.data(), x.data(), n).ok());
    }
  }
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    EXPECT_FALSE(quantize_row(t, x.data(), buf.data(), 128).ok()) << dtype_name(t);
    EXPECT_FALSE(dequantize_row(t, buf.data(), x.data(), 288).ok()) << dtype_name(t);
  }
  EXPECT_FALSE(quantize_row(DType::Q8_0, x.data(), buf.data(), -32).ok());
  // Zero elements is a valid, empty row.
  EXPECT_TRUE(quantize_row(DType::Q4_0, x.data(), buf.data(), 0).ok());
}

TEST(QuantErrors, TypesWithoutReferenceAreRejected) {
  std::vector<float> x(256, 1.0f);
  std::vector<uint8_t> buf(1024);
  for (DType t : {DType::Q8_K, DType::Q8_1, DType::IQ2_XXS, DType::F64, DType::I8}) {
    const Status s = quantize_row(t, x.data(), buf.data(), 256);
    ASSERT_FALSE(s.ok()) << dtype_name(t);
    EXPECT_NE(s.error().message.find(std::string(dtype_name(t))), std::string::npos);
    EXPECT_FALSE(dequantize_row(t, buf.data(), x.data(), 256).ok());
  }
}

TEST(QuantErrors, UnalignedBuffersWork) {
  const int64_t n = 256;
  const auto x = test_row(n, 5);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                  DType::Q5_1, DType::Q8_0, DType::Q6_K, DType::Q2_K, DType::Q3_K, DType::Q4_K,
                  DType::Q5_K}) {
    const size_t nb = row_bytes(t, n);
    std::vector<uint8_t> aligned(nb), shifted(nb + 1);
    ASSERT_TRUE(quantize_row(t, x.data(), aligned.data(), n).ok());
    ASSERT_TRUE(quantize_row(t, x.data(), shifted.data() + 1, n).ok());
    EXPECT_EQ(0, std::memcmp(aligned.data(), shifted.data() + 1, nb)) << dtype_name(t);
    std::vector<float> ya(n), ys(n);
    ASSERT_TRUE(dequantize_row(t, aligned.data(), ya.data(), n).ok());
    ASSERT_TRUE(dequantize_row(t, shifted.data() + 1, ys.data(), n).ok());
    EXPECT_EQ(ya, ys) << dtype_name(t);
  }
}

}  // namespace
}  // namespace pi
