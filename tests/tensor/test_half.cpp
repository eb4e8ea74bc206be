// f16 and bf16 conversions: exhaustive round trips, ties to even, subnormals, Inf and NaN.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "tensor/quant.h"

namespace pi {
namespace {

bool f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0; }
bool bf16_is_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x007fu) != 0; }
float bits_f32(uint32_t u) { return std::bit_cast<float>(u); }

TEST(F16, EveryPatternRoundTrips) {
  for (uint32_t i = 0; i <= 0xffffu; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = f16_to_f32(h);
    if (f16_is_nan(h)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << i;
      EXPECT_TRUE(f16_is_nan(f32_to_f16(f))) << std::hex << i;
      EXPECT_EQ(std::signbit(f), (i & 0x8000u) != 0) << std::hex << i;
    } else {
      EXPECT_EQ(f32_to_f16(f), h) << std::hex << i;
    }
  }
}

TEST(F16, KnownValues) {
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000u);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000u);
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00u);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000u);
  EXPECT_EQ(f32_to_f16(0.5f), 0x3800u);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bffu);  // largest finite half
  EXPECT_EQ(f16_to_f32(0x7bffu), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0400u), 0x1p-14f);  // smallest normal
  EXPECT_EQ(f16_to_f32(0x0001u), 0x1p-24f);  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03ffu), 1023 * 0x1p-24f);
  EXPECT_EQ(f16_to_f32(0x8001u), -0x1p-24f);
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000u)));
}

TEST(F16, InfinityAndOverflow) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f32_to_f16(inf), 0x7c00u);
  EXPECT_EQ(f32_to_f16(-inf), 0xfc00u);
  EXPECT_EQ(f16_to_f32(0x7c00u), inf);
  EXPECT_EQ(f16_to_f32(0xfc00u), -inf);
  // 65520 is the midpoint between 65504 and 65536 (= Inf); ties to even go to Inf.
  EXPECT_EQ(f32_to_f16(65519.996f), 0x7bffu);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00u);
  EXPECT_EQ(f32_to_f16(-65520.0f), 0xfc00u);
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00u);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::max()), 0x7c00u);
}

TEST(F16, NaNStaysNaN) {
  // Quiet, signalling, payload only in bits a half drops, and negative NaNs.
  for (uint32_t u : {0x7fc00000u, 0x7f800001u, 0x7f801fffu, 0x7fa00000u, 0xffc00000u,
                     0xff800001u, 0x7fffffffu}) {
    const uint16_t h = f32_to_f16(bits_f32(u));
    EXPECT_TRUE(f16_is_nan(h)) << std::hex << u << " -> " << h;
    EXPECT_EQ((h & 0x8000u) != 0, (u & 0x80000000u) != 0) << std::hex << u;
  }
}

TEST(F16, TiesRoundToEvenEverywhere) {
  // The midpoint of every pair of neighbouring finite positive halves is exact in f32 and
  // must round to the even pattern; a hair above or below rounds to the nearer one.
  for (uint32_t h = 0; h < 0x7bffu; ++h) {
    const double lo = f16_to_f32(static_cast<uint16_t>(h));
    const double hi = f16_to_f32(static_cast<uint16_t>(h + 1));
    const auto mid = static_cast<float>((lo + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const uint16_t even = (h & 1u) ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h);
    EXPECT_EQ(f32_to_f16(mid), even) << "h=" << h;
    EXPECT_EQ(f32_to_f16(std::nextafter(mid, 0.0f)), h) << "h=" << h;
    EXPECT_EQ(f32_to_f16(std::nextafter(mid, 1e9f)), h + 1) << "h=" << h;
    EXPECT_EQ(f32_to_f16(-mid), even | 0x8000u) << "h=" << h;
  }
}

TEST(F16, SubnormalBoundaries) {
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000u);  // half of the smallest subnormal: tie to 0
  EXPECT_EQ(f32_to_f16(std::nextafter(0x1p-25f, 1.0f)), 0x0001u);
  EXPECT_EQ(f32_to_f16(3 * 0x1p-25f), 0x0002u);  // tie between 1 and 2 units: even is 2
  EXPECT_EQ(f32_to_f16(0x1p-26f), 0x0000u);
  EXPECT_EQ(f32_to_f16(-0x1p-30f), 0x8000u);  // underflow keeps the sign
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000u);
  // The largest subnormal plus half a unit rounds up into the smallest normal.
  EXPECT_EQ(f32_to_f16(1023.5f * 0x1p-24f), 0x0400u);
  EXPECT_EQ(f32_to_f16(0x1p-14f), 0x0400u);
}

// The compiler's IEEE binary16: GCC 12 knows _Float16 in C++ on x86 only; on aarch64 Arm's
// __fp16 is the same format, converted by the hardware (round to nearest even).
#if defined(__aarch64__)
using CompilerHalf = __fp16;
#elif defined(__FLT16_MANT_DIG__)
using CompilerHalf = _Float16;
#endif

#if defined(__aarch64__) || defined(__FLT16_MANT_DIG__)
// Cross-check against the compiler's IEEE conversion over a sweep of f32 bit patterns.
TEST(F16, MatchesCompilerHalfOnSweep) {
  for (uint64_t u = 0; u <= 0xffffffffull; u += 257) {
    const float f = bits_f32(static_cast<uint32_t>(u));
    if (std::isnan(f)) continue;
    const auto ref = std::bit_cast<uint16_t>(static_cast<CompilerHalf>(f));
    ASSERT_EQ(f32_to_f16(f), ref) << std::hex << u;
  }
}
#endif

TEST(BF16, EveryPatternRoundTrips) {
  for (uint32_t i = 0; i <= 0xffffu; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = bf16_to_f32(h);
    EXPECT_EQ(std::bit_cast<uint32_t>(f), i << 16);
    if (bf16_is_nan(h)) {
      EXPECT_TRUE(bf16_is_nan(f32_to_bf16(f))) << std::hex << i;
    } else {
      EXPECT_EQ(f32_to_bf16(f), h) << std::hex << i;
    }
  }
}

TEST(BF16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80u);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f808000u)), 0x3f80u);  // tie, even below
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f818000u)), 0x3f82u);  // tie, even above
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f808001u)), 0x3f81u);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f807fffu)), 0x3f80u);
  EXPECT_EQ(f32_to_bf16(bits_f32(0xbf818000u)), 0xbf82u);
  // Subnormals round like any other value.
  EXPECT_EQ(f32_to_bf16(bits_f32(0x00008000u)), 0x0000u);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x00018000u)), 0x0002u);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x00008001u)), 0x0001u);
}

TEST(BF16, InfinityOverflowAndNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f32_to_bf16(inf), 0x7f80u);
  EXPECT_EQ(f32_to_bf16(-inf), 0xff80u);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80u);  // rounds up to Inf
  EXPECT_EQ(f32_to_bf16(bits_f32(0x7f7f7fffu)), 0x7f7fu);
  // NaN whose payload is only in the dropped bits must not become Inf; the quiet bit is set.
  EXPECT_EQ(f32_to_bf16(bits_f32(0x7f800001u)), 0x7fc0u);
  EXPECT_EQ(f32_to_bf16(bits_f32(0xff800001u)), 0xffc0u);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x7fc00000u)), 0x7fc0u);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x7fa00000u)), 0x7fe0u);
  EXPECT_TRUE(std::isnan(bf16_to_f32(0x7fc1u)));
}

}  // namespace
}  // namespace pi
