// Internal to the AVX2 Q4_0 axpy leaf (avx2_axpy.cpp; compiled with F16C): the per-chunk table
// of coefficient times block scale that it rounds to 8 bits (q4_groups.h), eight blocks per
// load8 call. (The AVX-512 leaf builds its table 16 blocks at a time, with the blocks' largest
// magnitudes in the same pass.)
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/q4_groups.h"
#include "kernels/cpu/scalar_blocks.h"

namespace pi::cpu::detail {
namespace {

// v[r][j] = coef_r * d_r,(cb0 + j) for j < nb and every row of the group, 0 for nb <= j < nv.
// load8(p) returns the eight f16 scales of the blocks at p, p + 18, ..., p + 126 (the
// leaf's fastest way to gather them); the blocks past the last full eight go one by one.
template <class Load8>
inline void q4_scale_table(const Q4Group& grp, int64_t cb0, int64_t nb, int64_t nv,
                           float (*v)[kQ4Chunk], Load8&& load8) {
  for (int r = 0; r < grp.g; ++r) {
    const float c = grp.coef[r];
    const uint8_t* blk = grp.rows[r] + cb0 * kQ4Bytes;
    const __m256 cv = _mm256_set1_ps(c);
    int64_t j = 0;
    for (; j + 8 <= nb; j += 8) _mm256_store_ps(&v[r][j], _mm256_mul_ps(cv, _mm256_cvtph_ps(load8(blk + j * kQ4Bytes))));
    for (; j < nb; ++j) v[r][j] = c * _cvtsh_ss(load_u16(blk + j * kQ4Bytes));
    for (; j < nv; ++j) v[r][j] = 0.0f;
  }
}

}  // namespace
}  // namespace pi::cpu::detail
