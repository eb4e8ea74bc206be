// IEEE binary16 and bfloat16 conversions, done on bit patterns so that the result does not
// depend on the compiler, the FPU rounding mode or the instruction set. Declared in quant.h.
#include <bit>
#include <cstdint>

#include "tensor/quant.h"

namespace pi {
namespace {

constexpr uint32_t kF32ExpMask = 0x7f800000u;
constexpr uint32_t kF32ManMask = 0x007fffffu;
constexpr uint16_t kF16Inf = 0x7c00u;
constexpr uint16_t kF16QuietBit = 0x0200u;

// Shifts `v` right by `shift` bits (1..31) and rounds the dropped bits to nearest, ties to
// even. A carry out of the kept bits is returned in the result (the caller's encoding turns
// it into the next exponent).
uint32_t shift_right_rne(uint32_t v, int shift) {
  const uint32_t kept = v >> shift;
  const uint32_t dropped = v & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (dropped > half || (dropped == half && (kept & 1u))) return kept + 1u;
  return kept;
}

}  // namespace

uint16_t f32_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t exp = (u & kF32ExpMask) >> 23;
  const uint32_t man = u & kF32ManMask;

  if (exp == 0xff) {
    if (man == 0) return sign | kF16Inf;
    // NaN: keep the top payload bits and force the quiet bit so the result cannot read as Inf.
    return static_cast<uint16_t>(sign | kF16Inf | kF16QuietBit | (man >> 13));
  }

  // Exponent rebiased from f32 (127) to f16 (15).
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 0x1f) return sign | kF16Inf;
  if (e >= 1) {
    // Normal in f16: drop 13 mantissa bits. A rounding carry moves into the exponent field,
    // and a carry out of exponent 30 yields exactly the Inf pattern 0x7c00.
    const uint32_t bits = (static_cast<uint32_t>(e) << 10) | (man >> 13);
    const uint32_t dropped = man & 0x1fffu;
    uint32_t r = bits;
    if (dropped > 0x1000u || (dropped == 0x1000u && (bits & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }

  // Subnormal (or zero) in f16: the value in units of 2^-24 is (1.man) * 2^(exp - 126),
  // i.e. the 24-bit significand shifted right by 14 - e. Shifts of 25 or more leave less than
  // half a unit and round to zero (f32 subnormals and zeros land here too).
  const int shift = 14 - e;
  if (shift > 24) return sign;
  const uint32_t significand = man | 0x00800000u;
  // A carry to 0x400 is the smallest normal, which is the correct encoding.
  return static_cast<uint16_t>(sign | shift_right_rne(significand, shift));
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;

  if (exp == 0x1f) return std::bit_cast<float>(sign | kF32ExpMask | (man << 13));
  if (exp == 0) {
    // Zero or subnormal: man * 2^-24, exact in f32.
    const float magnitude = static_cast<float>(man) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((exp + 127 - 15) << 23) | (man << 13));
}

uint16_t f32_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > kF32ExpMask) {
    // NaN: truncate and force the quiet bit (bit 6 of the bf16 mantissa), as ggml does, so a
    // payload held only in the dropped bits cannot turn into Inf.
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  // Round to nearest even on the 16 dropped bits; a carry into the exponent is correct,
  // including overflow of the largest finite values to Inf.
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

}  // namespace pi
