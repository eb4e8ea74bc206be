// Decoding of weight rows on the GPU, host and device (hd.h): every weight type the CPU
// computes with, as bit-exact f32 values (the same roundings as src/tensor's dequantizers).
//
// A row is decoded in units: the elements one lane decodes in one step.
//   F32: 4 elements (16 bytes); F16, BF16: 8 (16 bytes);
//   Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4: one 32-element block;
//   Q2_K..Q6_K: one 32-element eighth of a 256-element super-block.
// Unit u of a row covers elements [u * kElems, (u + 1) * kElems). A row of the block formats
// holds whole units; a float row may end in a partial unit, decoded element by element
// (decode_elem). Block pointers must be 2-byte aligned, f32 rows 4-byte aligned; MXFP4's
// 17-byte blocks are read byte by byte, at any address.
#pragma once

#include <cstdint>

#include "kernels/cuda/hd_scalar.h"
#include "tensor/dtype.h"

namespace pi::gpu {

template <DType T>
struct Unit {
  static constexpr int kElems = T == DType::F32                         ? 4
                                : (T == DType::F16 || T == DType::BF16) ? 8
                                                                        : 32;
  static constexpr bool kFloat = T == DType::F32 || T == DType::F16 || T == DType::BF16;
  static constexpr bool kSuper = T == DType::Q2_K || T == DType::Q3_K || T == DType::Q4_K ||
                                 T == DType::Q5_K || T == DType::Q6_K;
  // Bytes of one block (32-element formats) or super-block (K formats); element bytes for floats.
  static constexpr int kBlockBytes = T == DType::F32                         ? 4
                                     : (T == DType::F16 || T == DType::BF16) ? 2
                                     : T == DType::Q4_0                      ? 18
                                     : T == DType::Q4_1                      ? 20
                                     : T == DType::Q5_0                      ? 22
                                     : T == DType::Q5_1                      ? 24
                                     : T == DType::Q8_0                      ? 34
                                     : T == DType::MXFP4                     ? 17
                                     : T == DType::Q2_K                      ? 84
                                     : T == DType::Q3_K                      ? 110
                                     : T == DType::Q4_K                      ? 144
                                     : T == DType::Q5_K                      ? 176
                                                                             : 210;
};

// The types the GPU kernels decode.
PI_HD constexpr bool decodable(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
    case DType::MXFP4:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

namespace detail {

// Nibble j (0..31) of a 32-element block's 16 quant bytes: byte j low, byte j - 16 high.
PI_HD int nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; }

// MXFP4: the value of code c (0..15), kMxfp4Values[c] (tensor/quant.h): the magnitudes
// 0 1 2 3 4 6 8 12 of c & 7 as the nibbles of one word (no table in memory), bit 3 the sign.
PI_HD int mxfp4_value(int c) {
  const int mag = static_cast<int>((0xc8643210u >> (4 * (c & 7))) & 15u);
  return (c & 8) != 0 ? -mag : mag;
}

// Q4_K/Q5_K: the 6-bit scale and min of sub-block g (0..7) from their 12 packed bytes.
PI_HD void k4_scale_min(const uint8_t* s, int g, int& sc, int& m) {
  if (g < 4) {
    sc = s[g] & 63;
    m = s[g + 4] & 63;
  } else {
    sc = (s[g + 4] & 15) | ((s[g - 4] >> 6) << 4);
    m = (s[g + 4] >> 4) | ((s[g] >> 6) << 4);
  }
}

// Q3_K: the signed scale of sub-block i (0..15) from its 12 packed bytes.
PI_HD int q3_scale(const uint8_t* s, int i) {
  const int low = i < 8 ? s[i] & 15 : s[i - 8] >> 4;
  const int high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
  return (low | (high << 4)) - 32;
}

}  // namespace detail

// y[0 .. kElems) = unit u of `row` (a full unit).
template <DType T>
PI_HD void decode_unit(const uint8_t* row, int64_t u, float* y) {
  using U = Unit<T>;
  if constexpr (T == DType::F32) {
    const uint8_t* p = row + u * 16;
    for (int j = 0; j < 4; ++j) y[j] = bits_float(load_u32(p + 4 * j));
  } else if constexpr (T == DType::F16) {
    const uint8_t* p = row + u * 16;
    for (int j = 0; j < 8; ++j) y[j] = half_to_float(load_u16(p + 2 * j));
  } else if constexpr (T == DType::BF16) {
    const uint8_t* p = row + u * 16;
    for (int j = 0; j < 8; ++j) y[j] = bf16_to_float(load_u16(p + 2 * j));
  } else if constexpr (T == DType::Q4_0) {
    const uint8_t* b = row + u * U::kBlockBytes;
    const float d = half_to_float(load_u16(b));
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(detail::nibble(b + 2, j) - 8) * d;
  } else if constexpr (T == DType::Q4_1) {
    const uint8_t* b = row + u * U::kBlockBytes;
    const float d = half_to_float(load_u16(b)), m = half_to_float(load_u16(b + 2));
    for (int j = 0; j < 32; ++j)
      y[j] = add_rn(mul_rn(static_cast<float>(detail::nibble(b + 4, j)), d), m);
  } else if constexpr (T == DType::Q5_0) {
    const uint8_t* b = row + u * U::kBlockBytes;
    const float d = half_to_float(load_u16(b));
    const uint32_t qh = load_u32_a2(b + 2);
    for (int j = 0; j < 32; ++j) {
      const int q = detail::nibble(b + 6, j) | static_cast<int>(((qh >> j) & 1u) << 4);
      y[j] = static_cast<float>(q - 16) * d;
    }
  } else if constexpr (T == DType::Q5_1) {
    const uint8_t* b = row + u * U::kBlockBytes;
    const float d = half_to_float(load_u16(b)), m = half_to_float(load_u16(b + 2));
    const uint32_t qh = load_u32_a2(b + 4);
    for (int j = 0; j < 32; ++j) {
      const int q = detail::nibble(b + 8, j) | static_cast<int>(((qh >> j) & 1u) << 4);
      y[j] = add_rn(mul_rn(static_cast<float>(q), d), m);
    }
  } else if constexpr (T == DType::Q8_0) {
    const uint8_t* b = row + u * U::kBlockBytes;
    const float d = half_to_float(load_u16(b));
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
  } else if constexpr (T == DType::MXFP4) {
    // An integer of at most 12 times a power of two: exact, or Inf past FLT_MAX (e 255).
    const uint8_t* b = row + u * U::kBlockBytes;
    const float d = e8m0_half(b[0]);
    for (int j = 0; j < 32; ++j)
      y[j] = static_cast<float>(detail::mxfp4_value(detail::nibble(b + 1, j))) * d;
  } else {
    // K formats: super-block u / 8, 32-element group g = u % 8.
    const uint8_t* b = row + (u / 8) * U::kBlockBytes;
    const int g = static_cast<int>(u % 8);
    if constexpr (T == DType::Q6_K) {
      // ql[128] qh[64] scales[16] (int8) d: element 32 g + l of half h = g / 4 keeps its low
      // nibble in ql[64 h + l + 32 (g & 1)] (high nibble for g % 4 >= 2), its top two bits in
      // qh[32 h + l] at bit 2 (g % 4).
      const float d = half_to_float(load_u16(b + 208));
      const int h = g / 4, gg = g % 4;
      const uint8_t* ql = b + 64 * h + 32 * (gg & 1);
      const uint8_t* qh = b + 128 + 32 * h;
      const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
      for (int l = 0; l < 32; ++l) {
        const int low = (ql[l] >> (gg >= 2 ? 4 : 0)) & 15, high = (qh[l] >> (2 * gg)) & 3;
        const float ds = mul_rn(d, static_cast<float>(sc[2 * g + l / 16]));
        y[l] = mul_rn(ds, static_cast<float>((low | (high << 4)) - 32));
      }
    } else if constexpr (T == DType::Q2_K) {
      // scales[16] qs[64] d dmin; sub-blocks of 16 with a 4-bit scale (low) and min (high).
      const float d = half_to_float(load_u16(b + 80)), dmin = half_to_float(load_u16(b + 82));
      const uint8_t* qs = b + 16 + 32 * (g / 4);
      const int shift = 2 * (g % 4);
      for (int l = 0; l < 32; ++l) {
        const int s = b[2 * g + l / 16];
        const int q = (qs[l] >> shift) & 3;
        y[l] = sub_rn(mul_rn(mul_rn(d, static_cast<float>(s & 15)), static_cast<float>(q)),
                      mul_rn(dmin, static_cast<float>(s >> 4)));
      }
    } else if constexpr (T == DType::Q3_K) {
      // hmask[32] qs[64] scales[12] d; q = low two bits - (hmask bit clear ? 4 : 0).
      const float d = half_to_float(load_u16(b + 108));
      const uint8_t* qs = b + 32 + 32 * (g / 4);
      const int shift = 2 * (g % 4);
      for (int l = 0; l < 32; ++l) {
        const int low = (qs[l] >> shift) & 3;
        const int q = low - (((b[l] >> g) & 1) != 0 ? 0 : 4);
        const float ds = mul_rn(d, static_cast<float>(detail::q3_scale(b + 96, 2 * g + l / 16)));
        y[l] = mul_rn(ds, static_cast<float>(q));
      }
    } else {
      // Q4_K: d dmin scales[12] qs[128]; Q5_K: d dmin scales[12] qh[32] qs[128].
      static_assert(T == DType::Q4_K || T == DType::Q5_K, "unhandled weight type");
      const float d = half_to_float(load_u16(b)), dmin = half_to_float(load_u16(b + 2));
      int sc = 0, m = 0;
      detail::k4_scale_min(b + 4, g, sc, m);
      const float ds = mul_rn(d, static_cast<float>(sc)), dm = mul_rn(dmin, static_cast<float>(m));
      const uint8_t* qs = b + (T == DType::Q5_K ? 48 : 16) + 32 * (g / 2);
      const int shift = 4 * (g % 2);
      for (int l = 0; l < 32; ++l) {
        int q = (qs[l] >> shift) & 15;
        if constexpr (T == DType::Q5_K) q |= ((b[16 + l] >> g) & 1) << 4;
        y[l] = sub_rn(mul_rn(ds, static_cast<float>(q)), dm);
      }
    }
  }
}

// Element j of a float row (the partial unit at the end of a row).
template <DType T>
PI_HD float decode_elem(const uint8_t* row, int64_t j) {
  static_assert(Unit<T>::kFloat, "decode_elem: float types only");
  if constexpr (T == DType::F32) return bits_float(load_u32(row + 4 * j));
  if constexpr (T == DType::F16) return half_to_float(load_u16(row + 2 * j));
  return bf16_to_float(load_u16(row + 2 * j));
}

// Decodes elements [0, n) of a row (n a multiple of 32 for the block formats): the scalar
// loop every kernel's unit loop is equal to.
template <DType T>
PI_HD void decode_row(const uint8_t* row, int64_t n, float* y) {
  constexpr int E = Unit<T>::kElems;
  const int64_t full = n / E;
  for (int64_t u = 0; u < full; ++u) decode_unit<T>(row, u, y + u * E);
  if constexpr (Unit<T>::kFloat) {
    for (int64_t j = full * E; j < n; ++j) y[j] = decode_elem<T>(row, j);
  }
}

}  // namespace pi::gpu
