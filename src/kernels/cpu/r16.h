// Internal: dense products over Q4_0_R16 matrices (tensor/dtype.h): groups of 16 rows whose
// blocks lie side by side, so that one 64-byte load holds 4 quant bytes of each of 16 rows and
// vector lane i is row 16g + i. One decoded block serves every token of a tile, and each
// token's 32 activation bytes are broadcast 4 at a time (vpdpbusd with a broadcast operand):
// 8 integer dot instructions per block, token and 16 rows, against 2 per 4 rows before.
//
// Prepared activation of one token: per 32-element block kR16ActBytes bytes, the block's int8
// quants in natural order (bytes 0-31), its scale d (f32, bytes 32-35) and -8 x the sum of
// its quants (int32, bytes 36-39), the Q4_0 offset applied to the whole block at once.
//
// MXFP4_R16 is Q4_0_R16's walk with an E8M0 exponent byte per row instead of an f16 scale: a
// code c stands for kMxfp4Values[c] + 12 (0..24, unsigned for vpdpbusd), the activation's
// offset is -12 x the sum of its quants, and the row's scale is 2^(e - 128) from the exponent
// byte e, taken as 0 for e = 0 and 1 (see avx512_quads.h: subnormal scales, values below
// 12 x 2^-127, which the SIMD leaves of the row layout also drop).
//
// Q8_0_R16 is the same with 8 parts of 64 bytes per block, quants stored as q + 128 (unsigned
// for vpdpbusd) and 16 x off (= -128 x the sum) taking the offset back out.
//
// Q4_K_R16 (tensor/dtype.h) takes another activation: per 256-element super-block
// kR16KActBytes bytes, its int8 quants in natural order (bytes 0-255, one scale for the
// super-block, dx = amax / 127 as below), the sums of the quants of each 32-element sub-block
// (8 x int16 at byte 256) and dx (f32 at byte 272). A row's 4-bit quants z (0..15) with its
// sub-block scales sc_j and mins m_j (6 bits each) decode to d sc_j z - dmin m_j, so per
// super-block, exactly in int32:
//   isum = sum_j sc_j sum_{e in j} z_e q_e,   imin = sum_j m_j bsum_j,
// and acc = fma(float(isum), d * dx, acc), then acc = fma(float(imin), -(dmin * dx), acc), the
// products d * dx and dmin * dx rounded to f32 first; the row's result is acc.
//
// Order of operations, the same on every ISA and for any token count, so that results are
// bit-identical across ISAs, thread counts and batch splits: for each row, acc = 0; for each
// block b in order, s = sum_c w_c x_c exactly in int32 (w the weight quants: 4-bit q - 8, or
// 8-bit q), then
// acc = fma(float(s), scale_w_b * d_b, acc) with the product rounded to f32 first; the row's
// result is acc. The activation quantizer (r16 prepare) is also bit-identical everywhere: d =
// amax / 127, quants round-to-nearest-even of x * (127 / amax) (0 when amax is 0 or not
// finite), a NaN product giving -128 as the vector conversion does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/dispatch.h"
#include "tensor/quant.h"

namespace pi::cpu::detail {

constexpr int64_t kR16Rows = 16;
constexpr size_t kR16BlockBytes = 288;    // Q4_0_R16: 16 scales + 16 rows x 16 quant bytes
constexpr size_t kR16Q8BlockBytes = 544;  // Q8_0_R16: 16 scales + 16 rows x 32 quants (q + 128)
constexpr size_t kR16MxBlockBytes = 272;  // MXFP4_R16: 16 exponents + 16 rows x 16 code bytes
constexpr size_t kR16ActBytes = 40;     // per block: 32 quants, d, offset
constexpr size_t kR16KBlockBytes = 2304;  // Q4_K_R16: a super-block of 16 rows
constexpr size_t kR16KActBytes = 288;     // per super-block: 256 quants, 8 sums, dx (and padding)
constexpr int kR16TokenTile = 8;        // tokens one leaf call keeps in registers

// 4 activation bytes as one int32 (for a broadcast).
inline int32_t load_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline size_t r16_act_bytes(DType t, int64_t cols) {
  return t == DType::Q4_K_R16 ? static_cast<size_t>(cols / 256) * kR16KActBytes
                              : static_cast<size_t>(cols / 32) * kR16ActBytes;
}

using pi::is_r16;  // tensor/quant.h
inline size_t r16_block_bytes(DType t) {
  return t == DType::Q8_0_R16 ? kR16Q8BlockBytes : t == DType::MXFP4_R16 ? kR16MxBlockBytes : kR16BlockBytes;
}

// The activation's offset factor of a 32-element R16 type (bytes 36-39 hold it x the quants'
// sum): what its weight bytes add to each value so that they are unsigned.
inline int32_t r16_act_offset(DType t) { return t == DType::MXFP4_R16 ? 12 : 8; }

// MXFP4_R16's row scale from its exponent byte e: 2^(e - 128), 0 for e < 2 (f32 bits
// (e - 1) << 23 with e - 1 saturated at 0, as the vector leaves compute it).
inline float mxfp4_r16_scale(uint8_t e) {
  const uint32_t bits = e < 2 ? 0u : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The walk every R16 leaf shares: the task's groups of 16 rows, and per group its tokens in
// tiles of up to kMaxTile: tile(std::integral_constant<int, NT>, G, acts, ys, end) with G the
// group's first byte, acts[i] / ys[i] token i's activation and its 16 outputs, and end the end
// of the task's rows (a bound for prefetching).
template <int N, typename F>
inline void with_tile_size(int nt, F&& f) {
  if constexpr (N == 1) {
    f(std::integral_constant<int, 1>{});
  } else if (nt == N) {
    f(std::integral_constant<int, N>{});
  } else {
    with_tile_size<N - 1>(nt, f);
  }
}

template <int kMaxTile, typename Tile>
inline void r16_walk(const DotTask& t, Tile&& tile) {
  const size_t group_bytes = static_cast<size_t>(kR16Rows) * t.row_bytes;
  const uint8_t* end = t.W + static_cast<size_t>(t.k1 / kR16Rows) * group_bytes;
  for (int64_t g = t.k0 / kR16Rows; g < t.k1 / kR16Rows; ++g) {
    const uint8_t* G = t.W + static_cast<size_t>(g) * group_bytes;
    for (int64_t i0 = 0; i0 < t.m; i0 += kMaxTile) {
      const int nt = static_cast<int>(t.m - i0 < kMaxTile ? t.m - i0 : kMaxTile);
      const uint8_t* acts[kMaxTile];
      float* ys[kMaxTile];
      for (int i = 0; i < nt; ++i) {
        acts[i] = t.act + (i0 + i) * t.act_stride;
        ys[i] = t.Y + (i0 + i) * t.ldy + g * kR16Rows;
      }
      with_tile_size<kMaxTile>(nt, [&](auto n) { tile(n, G, acts, ys, end); });
    }
  }
}

// Leaves (DotTask with an R16 type, idx and masks null, k0 and k1 multiples of 16, act from
// the same ISA's prepare for that type): Y[i * ldy + r] for rows r in [k0, k1) and tokens i < m.
// The prepares write r16_act_bytes(t, cols) bytes.
void scalar_r16_prepare(DType t, const float* x, int64_t cols, uint8_t* out);
void scalar_r16_dot(const DotTask& task);
#if defined(PI_KERNELS_HAVE_AVX2)
void avx2_r16_dot(const DotTask& task);  // with scalar_r16_prepare
#endif
#if defined(PI_KERNELS_HAVE_AVX512)
void avx512_r16_prepare(DType t, const float* x, int64_t cols, uint8_t* out);
void avx512_r16_dot(const DotTask& task);
void avx512_r16k_dot(const DotTask& task);  // Q4_K_R16 (avx512_r16k.cpp)
#endif

}  // namespace pi::cpu::detail
