// Internal: the Q4_0 axpy computed with integer sums over groups of rows, shared by the scalar
// leaf (the reference) and the AVX2 and AVX-512 leaves, which must agree bit for bit.
//
// Why: a float axpy converts every weight to f32 and does one FMA per weight, which is
// compute-bound on one core (~0.5 of the dense Q4_0 matvec's rate, docs/BENCHMARKS.md). Here a
// group of rows shares, per output block b, one scale s_b:
//   v_rb = coef_r * d_rb                 (f32, the row's coefficient times its block scale)
//   amax_b = max_r |v_rb|, s_b = amax_b / 127, k_rb = round(v_rb * (127 / amax_b))   (|k| <= 127)
//   y_c += s_b * sum_r k_rb (q_rc - 8)    (integer sum exact; one FMA per group)
// so the weights are multiplied as bytes (pmaddubsw over row pairs) and each coefficient is
// quantized to 8 bits against its group's largest, like the dense matvec's Q8_0 activations
// (whose blocks also hold 32 inputs). The sum fits in 16 bits: |k (q - 8)| <= 127 * 8 and a
// group has at most kQ4Window = 16 rows, so |sum| <= 16256 (32 rows would still fit); a SIMD
// leaf may accumulate it in wrapping 16-bit lanes in any order (starting from -8 sum_r k_rb)
// and still get it exactly.
// A block whose amax_b is below FLT_MIN adds s_b = 0; a non-finite v_rb makes s_b NaN (and
// every k_rb of the block 0), so a non-finite weight or coefficient still poisons y.
//
// Groups: a maximal run of consecutive entries of the task's row list (rows with coefficient
// 0 left out) whose rows lie in the same window of kQ4Window rows, at most kQ4Window entries. A
// token's groups depend only on its own nonzero rows and their order, so the many-token form
// (which walks the union list window by window) gives each token the one-token bits whenever
// the union list visits each window once (ascending lists, as every caller passes); lists
// that revisit a window are walked token by token instead, with the same result.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/dispatch.h"

namespace pi::cpu::detail {
namespace {

// Rows per window, and at most this many rows per group. Larger groups share the per-group
// work (the coefficient tables, one conversion and FMA per output) among more rows, but a
// group's rows are read in step, and memory serves scattered rows fastest about 8 at a time
// (16-32 rows in step: ~0.7x; docs/BENCHMARKS.md, "16-row windows again"). At the 40-60% of
// rows kept that calibrated files run at, 16-row windows give groups of 6-10 rows: decode of a
// 7B-shaped SiLU Q4_0 file 1.04-1.08x that with 32-row windows (AVX-512 and AVX2, 1 and 2
// threads), though the L2-resident rate is the same (AVX-512 at 50-60% kept) or 5-10% lower
// (AVX-512 at 40%, AVX2).
constexpr int kQ4Window = 16;
constexpr int64_t kQ4Bytes = 18;  // Q4_0 block: f16 scale, 16 bytes of nibbles
constexpr int64_t kQ4Chunk = 64;  // output blocks per coefficient table (2048 columns; L1-sized)

struct Q4Group {
  const uint8_t* rows[kQ4Window];
  float coef[kQ4Window];
  int g = 0;
};

inline int64_t q4_window(int32_t row) { return row / kQ4Window; }

// The rows a group kernel may prefetch while it works: those of the list entries that follow
// in the next group's window (all of the next group's rows, and at most kQ4Window). Covering
// the whole next group matters: with 16 of them ahead, the groups of ~19 rows that 32-row
// windows gave at density 0.6 decoded 7B-shaped files 1.2x slower than with all.
struct Q4Next {
  const uint8_t* rows[kQ4Window];
  int n = 0;
};

// Calls fn(group, y, next) for every group of every token of t, y the token's output row
// (Y + i * ldy, column 0), next the rows read after this group. The order of the calls per
// token is the list order.
template <class Fn>
void for_each_q4_group(const AxpyTask& t, Fn&& fn) {
  auto row_ptr = [&](int64_t k) { return t.D + static_cast<size_t>(t.rows[k]) * t.row_bytes; };
  // Does the list visit each window in one run? (Asked only of the many-token forms.)
  bool runs_once = t.m > 1;
  for (int64_t k = 1; k < t.n && runs_once; ++k)
    runs_once = q4_window(t.rows[k]) >= q4_window(t.rows[k - 1]);
  Q4Group grp;
  Q4Next next;
  auto upcoming = [&](int64_t k) {  // the rows of entries k, k + 1, ... in entry k's window
    next.n = 0;
    const int64_t w = k < t.n ? q4_window(t.rows[k]) : -1;
    for (; k < t.n && next.n < kQ4Window && q4_window(t.rows[k]) == w; ++k) next.rows[next.n++] = row_ptr(k);
    return static_cast<const Q4Next&>(next);
  };
  if (t.m == 1 || !runs_once) {
    for (int64_t i = 0; i < t.m; ++i) {
      float* y = t.Y + i * t.ldy;
      grp.g = 0;
      int64_t win = -1;
      for (int64_t k = 0; k < t.n; ++k) {
        const float c = t.coef[k * t.m + i];
        if (c == 0.0f) continue;
        const int64_t w = q4_window(t.rows[k]);
        if (grp.g > 0 && (w != win || grp.g == kQ4Window)) {
          fn(static_cast<const Q4Group&>(grp), y, upcoming(k));
          grp.g = 0;
        }
        win = w;
        grp.rows[grp.g] = row_ptr(k);
        grp.coef[grp.g++] = c;
      }
      if (grp.g > 0) fn(static_cast<const Q4Group&>(grp), y, upcoming(t.n));
    }
    return;
  }
  // Window by window over the union, every token in turn: the window's rows stay in cache.
  for (int64_t k0 = 0; k0 < t.n;) {
    const int64_t w = q4_window(t.rows[k0]);
    int64_t k1 = k0;
    while (k1 < t.n && q4_window(t.rows[k1]) == w) ++k1;
    for (int64_t i = 0; i < t.m; ++i) {
      // The first token brings the next window's rows in; the others find them cached.
      const Q4Next& ahead = upcoming(i == 0 ? k1 : t.n);
      grp.g = 0;
      for (int64_t k = k0; k < k1; ++k) {
        const float c = t.coef[k * t.m + i];
        if (c == 0.0f) continue;
        if (grp.g == kQ4Window) {
          fn(static_cast<const Q4Group&>(grp), t.Y + i * t.ldy, ahead);
          grp.g = 0;
        }
        grp.rows[grp.g] = row_ptr(k);
        grp.coef[grp.g++] = c;
      }
      if (grp.g > 0) fn(static_cast<const Q4Group&>(grp), t.Y + i * t.ldy, ahead);
    }
    k0 = k1;
  }
}

}  // namespace
}  // namespace pi::cpu::detail
