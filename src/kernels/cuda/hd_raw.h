// A unit of a weight row (hd_blocks.h) as loaded but not yet decoded, host and device (hd.h):
// what a kernel keeps in registers for several rows at once so that their loads are in flight
// together (axpy_t.cu), decoding element j only when it is used. raw_value(load_raw(row, u), j)
// is bit for bit decode_unit(row, u)[j].
//   Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4: the packed quants (MXFP4: code values), scale and
//   minimum (hd_q8.h: WBlock);
//   F16, BF16: the 8 halves as 4 words; F32: the 4 floats;
//   K formats: the 32 decoded values (their quants sit apart from their scales; no gain).
#pragma once

#include <cstdint>

#include "kernels/cuda/hd_q8.h"

namespace pi::gpu {

template <DType T>
struct RawUnit {
  static constexpr bool kPacked = q8_path(T);
  static constexpr int kWords = Unit<T>::kFloat ? 4 : 32;
  // q8 formats: w; F16/BF16: bits as half pairs; F32: values; K formats: values.
  WBlock<T> w;
  uint32_t bits[4];
  float v[kWords];
};

// Rows a kernel should hold at once for type T: several for compact units, one for K formats.
PI_HD constexpr int raw_batch(DType t) {
  if (t == DType::Q2_K || t == DType::Q3_K || t == DType::Q4_K || t == DType::Q5_K ||
      t == DType::Q6_K)
    return 1;
  return t == DType::Q8_0 ? 4 : 8;  // Q8_0's 8 quant words per row: 4 rows keep it in registers
}

template <DType T>
PI_HD RawUnit<T> load_raw(const uint8_t* row, int64_t u) {
  RawUnit<T> r;
  if constexpr (q8_path(T)) {
    r.w = load_wblock<T>(row, u);
  } else if constexpr (T == DType::F16 || T == DType::BF16) {
    for (int k = 0; k < 4; ++k) r.bits[k] = load_u32_a2(row + u * 16 + 4 * k);
  } else {
    decode_unit<T>(row, u, r.v);
  }
  return r;
}

// Element j (0 <= j < Unit<T>::kElems) of a loaded unit.
template <DType T>
PI_HD float raw_value(const RawUnit<T>& r, int j) {
  if constexpr (q8_path(T)) {
    const uint32_t byte = (static_cast<uint32_t>(r.w.q[j / 4]) >> (8 * (j % 4))) & 0xffu;
    if constexpr (T == DType::Q8_0 || T == DType::MXFP4)
      return static_cast<float>(static_cast<int8_t>(byte)) * r.w.d;
    if constexpr (T == DType::Q4_0) return static_cast<float>(static_cast<int>(byte) - 8) * r.w.d;
    if constexpr (T == DType::Q5_0) return static_cast<float>(static_cast<int>(byte) - 16) * r.w.d;
    return add_rn(mul_rn(static_cast<float>(byte), r.w.d), r.w.m);
  } else if constexpr (T == DType::F16 || T == DType::BF16) {
    const auto h = static_cast<uint16_t>(r.bits[j / 2] >> (16 * (j % 2)));
    return T == DType::F16 ? half_to_float(h) : bf16_to_float(h);
  } else {
    return r.v[j];
  }
}

}  // namespace pi::gpu
