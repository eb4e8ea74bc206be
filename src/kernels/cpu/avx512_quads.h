// Internal to avx512_matrix.cpp: the four-block ("quad") leaves of the two 4-bit formats whose
// blocks are a scale and 16 bytes of nibbles, Q4_0 and MXFP4. Compiled with the AVX-512 flags
// only (internal linkage).
//
// Prepared activation, per quad of four 32-element blocks one 256-byte slot: the int8 quants
// of elements 0-15 of block j at bytes 16j..16j+15 (low halves), those of elements 16-31 at
// 64 + 16j (high halves), the lane terms -offset * (lane sum of both halves) as int32 at 128
// and the scales dx per lane as f32 at 192 (lane k belongs to block k / 4). A partial last
// quad is zero-padded.
//
// A quad's weights (4 blocks of 18 bytes for Q4_0, 17 for MXFP4) are loaded with two loads
// and their nibbles gathered into the activation's order by one byte permute; the row's
// blocks are read with masked loads in a partial last quad, never past the row. A format
// gives each nibble's value + offset as an unsigned byte, so that vpdpbusd starting from the
// lane terms yields sum value * x exactly in int32, and each lane's weight scale as f32:
//   Q4_0:  q - 8 (the nibble itself), scale the block's f16 d;
//   MXFP4: kMxfp4Values[code] + 12 (one vpermb lookup per half), scale 2^(e - 128) from the
//          E8M0 byte e by integer operations, exact for e >= 2. e = 0 and 1 (values below
//          12 x 2^-127 in magnitude, e.g. the all-zero blocks the quantizer writes with e = 0)
//          give scale 0: their exact scales are subnormal floats, and each multiply by one
//          costs a microcode assist on Intel cores (a 2x slower leaf when a row's zero-padded
//          last quad had them).
// Per (row, token) and quad: acc = fma(float(s) * dx, dw, acc) over the 16 lanes, then the
// lanes' sum (_mm512_reduce_add_ps) - the same operations in the same order in every leaf
// below, so one-token and many-token products agree bit for bit.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/avx512_quant.h"
#include "kernels/cpu/scalar_blocks.h"
#include "kernels/cpu/stream_ahead.h"

namespace pi::cpu::detail {
namespace {

constexpr size_t kQuadSlot = 256;

// A quad's weights: value + offset of elements 0-15 (lo) and 16-31 (hi) of its four blocks as
// unsigned bytes in the activation's order, and the scale per lane.
struct Quad {
  __m512i lo, hi;
  __m512 dw;
};

// Q4_0 (tensor/quant.h BlockQ4_0). The permute's source bytes: quants of block j (bytes
// 18j+2 .. 18j+17 of the quad; 64 and up come from the second register), and the f16 scale
// word of the block of each lane.
struct QuadQ4_0 {
  static constexpr size_t kBlockBytes = 18;
  static constexpr int kOffset = 8;
  __m512i perm, words;
  QuadQ4_0() {
    alignas(64) static const uint8_t idx[64] = {
        2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 20, 21, 22, 23, 24, 25,
        26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49,
        50, 51, 52, 53, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71};
    perm = _mm512_load_si512(idx);
    words = _mm512_setr_epi32(0, 0, 9 | 9 << 16, 9 | 9 << 16, 18 | 18 << 16, 18 | 18 << 16, 27 | 27 << 16,
                              27 | 27 << 16, 0, 0, 0, 0, 0, 0, 0, 0);
  }
  Quad decode(__m512i v0, __m512i v1) const {
    const __m512i p = _mm512_permutex2var_epi8(v0, perm, v1);
    const __m512i m = _mm512_set1_epi8(0x0f);
    const __m256i w = _mm512_castsi512_si256(_mm512_permutexvar_epi16(words, v0));
    return {_mm512_and_si512(p, m), _mm512_and_si512(_mm512_srli_epi16(p, 4), m), _mm512_cvtph_ps(w)};
  }
  Quad load(const uint8_t* b) const {
    return decode(_mm512_loadu_si512(b), _mm512_zextsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 64))));
  }
  // The last, partial quad of a row: nbt (1..3) blocks, nothing read past them.
  Quad load_tail(const uint8_t* b, int64_t nbt) const {
    const __mmask64 k = (__mmask64{1} << (kBlockBytes * nbt)) - 1;
    return decode(_mm512_maskz_loadu_epi8(k, b), _mm512_setzero_si512());
  }
};

// MXFP4 (tensor/quant.h BlockMXFP4): codes of block j at bytes 17j+1 .. 17j+16 of the quad,
// its exponent byte at 17j. The lookup (vpermb reads an index's low 6 bits, so the table is
// the 16 values four times) takes a code with anything in bits 4-7 of its byte: the gathered
// bytes for the low halves, the bytes shifted right by 4 within 16-bit words for the high.
struct QuadMXFP4 {
  static constexpr size_t kBlockBytes = 17;
  static constexpr int kOffset = 12;
  __m512i perm, exps, table;
  QuadMXFP4() {
    alignas(64) uint8_t idx[64];
    alignas(64) uint8_t eidx[64] = {};
    for (int j = 0; j < 4; ++j)
      for (int c = 0; c < 16; ++c) idx[16 * j + c] = static_cast<uint8_t>(kBlockBytes * j + 1 + c);
    for (int l = 0; l < 16; ++l) eidx[4 * l] = static_cast<uint8_t>(kBlockBytes * (l / 4));
    perm = _mm512_load_si512(idx);
    exps = _mm512_load_si512(eidx);
    alignas(16) int8_t t[16];
    for (int c = 0; c < 16; ++c) t[c] = static_cast<int8_t>(kMxfp4Values[c] + kOffset);
    table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
  }
  Quad decode(__m512i v0, __m512i v1) const {
    const __m512i p = _mm512_permutex2var_epi8(v0, perm, v1);
    // 2^(e - 128) as f32 bits, (e - 1) << 23, with e - 1 saturated at 0 (see the header).
    const __m512i e = _mm512_maskz_permutexvar_epi8(0x1111111111111111ull, exps, v0);
    const __m512 dw = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_subs_epu8(e, _mm512_set1_epi32(1)), 23));
    return {_mm512_permutexvar_epi8(p, table), _mm512_permutexvar_epi8(_mm512_srli_epi16(p, 4), table), dw};
  }
  Quad load(const uint8_t* b) const {
    return decode(_mm512_loadu_si512(b), _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(load_u32(b + 64)))));
  }
  Quad load_tail(const uint8_t* b, int64_t nbt) const {
    const __mmask64 k = (__mmask64{1} << (kBlockBytes * nbt)) - 1;
    return decode(_mm512_maskz_loadu_epi8(k, b), _mm512_setzero_si512());
  }
};

// Activation quads of nb blocks for format F (see the header comment).
template <class F>
inline void prepare_quads(const float* x, int64_t nb, uint8_t* out) {
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t qd = 0; qd < (nb + 3) / 4; ++qd) {
    alignas(64) int8_t lo[64] = {};
    alignas(64) int8_t hi[64] = {};
    alignas(64) float dx[16] = {};
    for (int j = 0; j < 4 && 4 * qd + j < nb; ++j) {
      alignas(64) int8_t q[32];
      const float d = quantize32(x + 32 * (4 * qd + j), q);
      for (int e = 0; e < 16; ++e) {
        lo[16 * j + e] = q[e];
        hi[16 * j + e] = q[16 + e];
      }
      for (int l = 0; l < 4; ++l) dx[4 * j + l] = d;
    }
    const __m512i xlo = _mm512_load_si512(lo), xhi = _mm512_load_si512(hi);
    const __m512i sums = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, xlo), ones, xhi);
    uint8_t* slot = out + qd * kQuadSlot;
    _mm512_store_si512(slot, xlo);
    _mm512_store_si512(slot + 64, xhi);
    _mm512_store_si512(slot + 128, _mm512_mullo_epi32(sums, _mm512_set1_epi32(-F::kOffset)));
    _mm512_store_ps(slot + 192, _mm512_load_ps(dx));
  }
}

// A token's slot of one quad: low and high halves, the offset term, the scales.
struct QuadAct {
  __m512i lo, hi, off;
  __m512 scale;
};
inline QuadAct quad_act(const uint8_t* a) {
  return {_mm512_load_si512(a), _mm512_load_si512(a + 64), _mm512_load_si512(a + 128), _mm512_load_ps(a + 192)};
}
// acc += (sum over the quad's lanes of w . x) per lane, scaled.
inline __m512 quad_step(const Quad& w, const QuadAct& x, __m512 acc) {
  __m512i s = _mm512_dpbusd_epi32(x.off, w.lo, x.lo);
  s = _mm512_dpbusd_epi32(s, w.hi, x.hi);
  return _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), x.scale), w.dw, acc);
}
inline __m512 quad_step(const Quad& w, const uint8_t* a, __m512 acc) { return quad_step(w, quad_act(a), acc); }

// NR rows x one token. kLight: prefetch each line of the next rows once (one per quad, plus
// the ninth line of every eight quads), else both ends of every quad (most lines twice);
// kTwoLevel: each also far into L2 (stream_ahead.h's prefetch_next).
// Light measured ~15% faster for short consecutive Q4_0 rows (the predictor's fc2: 1024
// columns) and slower for the 4096-column matrices of the model.
template <class F, int NR, bool kLight = false, bool kTwoLevel = false>
inline void quad_rows(const F& fmt, const uint8_t* const* rows, const uint8_t* const* next, const uint8_t* act,
                      int64_t nb, float* out) {
  constexpr size_t kQuadBytes = 4 * F::kBlockBytes;
  const F f = fmt;  // its constants in registers
  __m512 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
  const int64_t nq = nb / 4;
  for (int64_t qd = 0; qd < nq; ++qd) {
    const uint8_t* a = act + qd * kQuadSlot;
    const size_t off = static_cast<size_t>(qd) * kQuadBytes;
    for (int r = 0; r < NR; ++r) {
      prefetch_next<kTwoLevel>(next[r] + off);
      if (!kLight || (qd & 7) == 7) prefetch_next<kTwoLevel>(next[r] + off + (kLight ? 64 : kQuadBytes - 1));
      acc[r] = quad_step(f.load(rows[r] + off), a, acc[r]);
    }
  }
  if (nb % 4 != 0) {
    const uint8_t* a = act + nq * kQuadSlot;
    for (int r = 0; r < NR; ++r) acc[r] = quad_step(f.load_tail(rows[r] + nq * kQuadBytes, nb % 4), a, acc[r]);
  }
  for (int r = 0; r < NR; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

// One row x NT tokens: the row is decoded once per quad for all tokens.
template <class F, int NT>
inline void quad_tokens(const F& fmt, const uint8_t* row, const uint8_t* const* acts, int64_t nb, float* out) {
  constexpr size_t kQuadBytes = 4 * F::kBlockBytes;
  const F f = fmt;  // its constants in registers
  __m512 acc[NT];
  for (int i = 0; i < NT; ++i) acc[i] = _mm512_setzero_ps();
  const int64_t nq = nb / 4;
  for (int64_t qd = 0; qd < nq; ++qd) {
    const Quad w = f.load(row + qd * kQuadBytes);
    for (int i = 0; i < NT; ++i) acc[i] = quad_step(w, acts[i] + qd * kQuadSlot, acc[i]);
  }
  if (nb % 4 != 0) {
    const Quad w = f.load_tail(row + nq * kQuadBytes, nb % 4);
    for (int i = 0; i < NT; ++i) acc[i] = quad_step(w, acts[i] + nq * kQuadSlot, acc[i]);
  }
  for (int i = 0; i < NT; ++i) out[i] = _mm512_reduce_add_ps(acc[i]);
}

// Two rows x NT tokens: each token's activation slot is loaded once for both rows (one row
// per call left the loads, four per row x token x quad, as the bound of prompt matmuls).
template <class F, int NT>
inline void quad_tokens2(const F& fmt, const uint8_t* row0, const uint8_t* row1, const uint8_t* const* acts,
                         int64_t nb, float* out0, float* out1) {
  constexpr size_t kQuadBytes = 4 * F::kBlockBytes;
  const F f = fmt;  // its constants in registers
  __m512 acc0[NT], acc1[NT];
  for (int i = 0; i < NT; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  const int64_t nq = nb / 4;
  for (int64_t qd = 0; qd < nq; ++qd) {
    const Quad w0 = f.load(row0 + qd * kQuadBytes), w1 = f.load(row1 + qd * kQuadBytes);
    for (int i = 0; i < NT; ++i) {
      const QuadAct x = quad_act(acts[i] + qd * kQuadSlot);
      acc0[i] = quad_step(w0, x, acc0[i]);
      acc1[i] = quad_step(w1, x, acc1[i]);
    }
  }
  if (nb % 4 != 0) {
    const Quad w0 = f.load_tail(row0 + nq * kQuadBytes, nb % 4), w1 = f.load_tail(row1 + nq * kQuadBytes, nb % 4);
    for (int i = 0; i < NT; ++i) {
      const QuadAct x = quad_act(acts[i] + nq * kQuadSlot);
      acc0[i] = quad_step(w0, x, acc0[i]);
      acc1[i] = quad_step(w1, x, acc1[i]);
    }
  }
  for (int i = 0; i < NT; ++i) {
    out0[i] = _mm512_reduce_add_ps(acc0[i]);
    out1[i] = _mm512_reduce_add_ps(acc1[i]);
  }
}

}  // namespace
}  // namespace pi::cpu::detail
