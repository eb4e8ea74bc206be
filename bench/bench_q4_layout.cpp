// bench_q4_layout: what a "scales apart" row layout would give the Q4_0 axpy of calibrated
// (activation-sparse) files, before any file or loader changes for it.
//
// Transposed Q4_0 rows (ffn_down_t, attn_q_t, ...) interleave each block's f16 scale with its
// 16 quant bytes (18-byte blocks), so the AVX-512 leaf reads two blocks of a row with one
// 64-byte load that nearly always spans two cache lines, and gathers the scales with byte
// permutes. Here the same rows are rearranged as [nb f16 scales][nb x 16 quant bytes] (same
// size): a row's quants for four blocks are one aligned 64-byte load, a chunk's scales one
// 32-byte load. The kernel below is the library leaf's arithmetic (q4_groups.h: the same
// groups, coefficient tables and integer sums), so its results must be bit-identical to the
// leaf's; this tool checks that first, then times both alternately on one matrix shape
// (interleaved rounds, medians). Its accumulators hold four blocks' columns in a permuted
// order; the output slice is permuted into that order before the groups and back after
// (16 lane shuffles per 128 columns).
//
//   bench_q4_layout [--rows N] [--copies C] [--keep 0.5] [--rounds R] [--threads 1|2]
//
// Defaults: 11008 x 4096 (ffn_down_t of Llama-2-7B), 20 copies rotated so the kept rows come
// from DRAM (~500 MB), rows kept 0.5, 9 rounds, 1 thread. --rows 256 --copies 1: L2-resident.
// Not a test and not part of the engine: docs/BENCHMARKS.md ("A scales-apart layout").
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/avx512_leaves.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/q4_groups.h"
#include "tensor/quant.h"

namespace pi::cpu::detail {
namespace {

// Blocks per coefficient table: 16 measured best here (32: ~0.9x, 64 and 128: 0.7-0.85x).
constexpr int64_t kTable = 16;

struct Tables {
  alignas(64) float v[kQ4Window][kTable];
  alignas(64) int32_t k[kQ4Window / 4][kTable / 4][16];  // quad words, each block's in its 128-bit lane
  alignas(64) float s[kTable / 4][16];                   // block scales s_b, the same way
  alignas(64) int32_t start[kTable / 4][16];             // -8 sum_r k_rb, the same way
};

// Lane L of a four-block vector holds block L: dword i of lane L <- dword u * 4 + L of x.
inline __m512i spread(__m512i x, int u) {
  const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(4 * u),
                                       _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
  return _mm512_permutexvar_epi32(idx, x);
}

// One group over blocks [b0, b1) (multiples of kTable) of rows laid out scales-apart with nb
// blocks per row; yp the slice in the permuted order.
void group_apart(const Q4Group& grp, int64_t b0, int64_t b1, int64_t nb, float* yp, const Q4Next& next) {
  Tables tb;
  const int g = grp.g, nq = (g + 3) / 4;
  const uint8_t* rows[kQ4Window];
  for (int r = 0; r < g; ++r) rows[r] = grp.rows[r];
  for (int r = g; r < 4 * nq; ++r) rows[r] = rows[g - 1];  // partners whose coefficient is 0
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), m4 = _mm512_set1_epi8(0x0f);
  const size_t quants = static_cast<size_t>(nb) * 2;
  for (int64_t cb0 = b0; cb0 < b1; cb0 += kTable) {
    for (int r = 0; r < next.n; ++r) _mm_prefetch(reinterpret_cast<const char*>(next.rows[r] + 2 * cb0), _MM_HINT_T0);
    // v, amax, s and k exactly as the library leaf (q4_groups.h), 16 blocks at a time.
    __m512i amax_bits = _mm512_setzero_si512();
    for (int r = 0; r < g; ++r) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp.rows[r] + 2 * cb0));
      const __m512 v = _mm512_mul_ps(_mm512_set1_ps(grp.coef[r]), _mm512_cvtph_ps(h));
      _mm512_store_ps(tb.v[r], v);
      amax_bits = _mm512_max_epu32(amax_bits, _mm512_and_si512(_mm512_castps_si512(v), abs_mask));
    }
    const __m512 amax = _mm512_castsi512_ps(amax_bits);
    const __mmask16 bad = _mm512_cmpge_epu32_mask(amax_bits, _mm512_set1_epi32(0x7f800000));
    const __mmask16 off = bad | _mm512_cmp_ps_mask(amax, _mm512_set1_ps(FLT_MIN), _CMP_LT_OQ);
    const __mmask16 on = static_cast<__mmask16>(~off), good = static_cast<__mmask16>(~bad);
    const __m512 inv = _mm512_maskz_div_ps(on, _mm512_set1_ps(127.0f), amax);
    const __m512 sv = _mm512_mask_blend_ps(bad, _mm512_maskz_div_ps(on, amax, _mm512_set1_ps(127.0f)),
                                           _mm512_castsi512_ps(_mm512_set1_epi32(-1)));
    __m512i ksum = _mm512_setzero_si512();
    for (int q = 0; q < nq; ++q) {
      __m512i word = _mm512_setzero_si512();
      for (int u = 0; u < 4 && 4 * q + u < g; ++u) {
        const __m512i k = _mm512_maskz_cvtps_epi32(good, _mm512_mul_ps(_mm512_load_ps(tb.v[4 * q + u]), inv));
        word = _mm512_or_si512(word, _mm512_slli_epi32(_mm512_and_si512(k, _mm512_set1_epi32(0xff)), 8 * u));
      }
      for (int u = 0; u < 4; ++u) _mm512_store_si512(tb.k[q][u], spread(word, u));
      ksum = _mm512_dpbusd_epi32(ksum, _mm512_set1_epi8(1), word);
    }
    const __m512i start = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(ksum, 3));
    for (int u = 0; u < 4; ++u) {
      _mm512_store_si512(tb.start[u], spread(start, u));
      _mm512_store_si512(tb.s[u], spread(_mm512_castps_si512(sv), u));
    }
    // Four blocks per step: per quad, four aligned loads; byte then word unpacks put, in each
    // 32-bit lane of t[i], quant byte 4 i + (lane % 4) of the four rows, block lane / 4.
    for (int u = 0; u < kTable / 4; ++u) {
      const size_t at = quants + static_cast<size_t>(cb0 + 4 * u) * 16;
      for (int r = 0; r < next.n; ++r) _mm_prefetch(reinterpret_cast<const char*>(next.rows[r] + at), _MM_HINT_T0);
      __m512i acc[8];
      for (auto& a : acc) a = _mm512_load_si512(tb.start[u]);
      for (int q = 0; q < nq; ++q) {
        const uint8_t* const* rq = rows + 4 * q;
        const __m512i a = _mm512_load_si512(rq[0] + at), b = _mm512_load_si512(rq[1] + at);
        const __m512i c = _mm512_load_si512(rq[2] + at), d = _mm512_load_si512(rq[3] + at);
        const __m512i ab0 = _mm512_unpacklo_epi8(a, b), ab1 = _mm512_unpackhi_epi8(a, b);
        const __m512i cd0 = _mm512_unpacklo_epi8(c, d), cd1 = _mm512_unpackhi_epi8(c, d);
        const __m512i t[4] = {_mm512_unpacklo_epi16(ab0, cd0), _mm512_unpackhi_epi16(ab0, cd0),
                              _mm512_unpacklo_epi16(ab1, cd1), _mm512_unpackhi_epi16(ab1, cd1)};
        const __m512i k = _mm512_load_si512(tb.k[q][u]);
        for (int i = 0; i < 4; ++i) {
          acc[2 * i] = _mm512_dpbusd_epi32(acc[2 * i], _mm512_and_si512(t[i], m4), k);
          acc[2 * i + 1] = _mm512_dpbusd_epi32(acc[2 * i + 1], _mm512_and_si512(_mm512_srli_epi16(t[i], 4), m4), k);
        }
      }
      const __m512 s = _mm512_load_ps(tb.s[u]);
      float* y = yp + 32 * (cb0 + 4 * u);
      for (int i = 0; i < 8; ++i)
        _mm512_store_ps(y + 16 * i, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i]), s, _mm512_load_ps(y + 16 * i)));
    }
  }
}

// Column order within a four-block unit: acc[2 i + h] lane 4 L + j holds column
// 32 L + 16 h + 4 i + j. With Y[L][h] = columns 32 L + 16 h + [0, 16), the permuted vector
// 2 i + h takes 128-bit lane i of Y[0][h], Y[1][h], Y[2][h], Y[3][h]: a 4 x 4 transpose of
// 128-bit lanes (its own inverse).
inline void transpose_lanes(float* p0, float* p1, float* p2, float* p3) {
  const __m512 a = _mm512_load_ps(p0), b = _mm512_load_ps(p1), c = _mm512_load_ps(p2), d = _mm512_load_ps(p3);
  const __m512 t0 = _mm512_shuffle_f32x4(a, b, 0x44), t1 = _mm512_shuffle_f32x4(a, b, 0xee);
  const __m512 t2 = _mm512_shuffle_f32x4(c, d, 0x44), t3 = _mm512_shuffle_f32x4(c, d, 0xee);
  _mm512_store_ps(p0, _mm512_shuffle_f32x4(t0, t2, 0x88));
  _mm512_store_ps(p1, _mm512_shuffle_f32x4(t0, t2, 0xdd));
  _mm512_store_ps(p2, _mm512_shuffle_f32x4(t1, t3, 0x88));
  _mm512_store_ps(p3, _mm512_shuffle_f32x4(t1, t3, 0xdd));
}

// Between the column order and the permuted one, in place (either direction).
void permute_units(float* y, int64_t c0, int64_t c1) {
  for (int64_t c = c0; c < c1; c += 128) {
    float* u = y + c;
    for (int h = 0; h < 2; ++h) transpose_lanes(u + 16 * h, u + 32 + 16 * h, u + 64 + 16 * h, u + 96 + 16 * h);
  }
}

// The axpy of one token over columns [c0, c1) (multiples of 32 * kTable), rows scales-apart;
// Y 64-byte aligned.
void axpy_apart(const AxpyTask& t) {
  const int64_t nb = static_cast<int64_t>(t.row_bytes / kQ4Bytes);
  permute_units(t.Y, t.c0, t.c1);
  for_each_q4_group(t, [&](const Q4Group& grp, float* y, const Q4Next& next) {
    group_apart(grp, t.c0 / 32, t.c1 / 32, nb, y, next);
  });
  permute_units(t.Y, t.c0, t.c1);
}

}  // namespace
}  // namespace pi::cpu::detail

namespace {

using pi::cpu::detail::AxpyTask;

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buf = std::unique_ptr<uint8_t, FreeDeleter>;
Buf alloc(size_t n) { return Buf(static_cast<uint8_t*>(std::aligned_alloc(64, (n + 63) / 64 * 64))); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int usage() {
  std::fprintf(stderr, "usage: bench_q4_layout [--rows N] [--copies C] [--keep F] [--rounds R] [--threads 1|2]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 11008;
  int copies = 20, rounds = 9, threads = 1;
  double keep = 0.5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    const char* v = argv[++i];
    if (a == "--rows") rows = std::atoll(v);
    else if (a == "--copies") copies = std::atoi(v);
    else if (a == "--keep") keep = std::atof(v);
    else if (a == "--rounds") rounds = std::atoi(v);
    else if (a == "--threads") threads = std::atoi(v);
    else return usage();
  }
  if (!__builtin_cpu_supports("avx512vbmi") || !__builtin_cpu_supports("avx512vnni")) {
    std::fprintf(stderr, "bench_q4_layout: needs AVX-512 VBMI and VNNI (the library's Q4_0 axpy leaf)\n");
    return 1;
  }
  if (rows < 16 || copies < 1 || rounds < 1 || keep <= 0 || keep > 1 || (threads != 1 && threads != 2)) return usage();
  constexpr int64_t cols = 4096;
  constexpr size_t rb = cols / 32 * 18;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<Buf> file(static_cast<size_t>(copies)), apart(static_cast<size_t>(copies));
  std::vector<float> x(cols);
  Buf first = alloc(static_cast<size_t>(rows) * rb);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : x) v = normal(rng);
    if (!pi::quantize_row(pi::DType::Q4_0, x.data(), first.get() + r * rb, cols).ok()) return 1;
  }
  for (int c = 0; c < copies; ++c) {
    file[c] = alloc(static_cast<size_t>(rows) * rb);
    apart[c] = alloc(static_cast<size_t>(rows) * rb);
    std::memcpy(file[c].get(), first.get(), static_cast<size_t>(rows) * rb);
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* p = first.get() + r * rb;
      uint8_t* q = apart[c].get() + r * rb;
      for (int64_t b = 0; b < cols / 32; ++b) {
        std::memcpy(q + 2 * b, p + 18 * b, 2);
        std::memcpy(q + 2 * (cols / 32) + 16 * b, p + 18 * b + 2, 16);
      }
    }
  }
  // Lists of kept rows (ascending, random) and their coefficients, rotated with the copies.
  constexpr int kLists = 17;
  std::vector<std::vector<int32_t>> lists(kLists);
  std::vector<std::vector<float>> coefs(kLists);
  for (int l = 0; l < kLists; ++l) {
    std::vector<int32_t> all(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) all[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    std::mt19937 lr(static_cast<uint32_t>(50 + l));
    std::shuffle(all.begin(), all.end(), lr);
    all.resize(static_cast<size_t>(static_cast<double>(rows) * keep));
    std::sort(all.begin(), all.end());
    lists[l] = all;
    for (size_t k = 0; k < all.size(); ++k) coefs[l].push_back(normal(rng));
  }
  pi::ThreadPool pool(threads);
  std::vector<float> y_file(cols);
  Buf y_apart_buf = alloc(cols * sizeof(float));  // 64-byte aligned: the kernel's y loads are
  float* y_apart = reinterpret_cast<float*>(y_apart_buf.get());
  auto call = [&](bool is_apart, const uint8_t* D, int l, float* Y) {
    pool.parallel_for(threads, [&](int64_t part, int) {
      AxpyTask t{};
      t.type = pi::DType::Q4_0;
      t.D = D;
      t.row_bytes = rb;
      t.n_rows = rows;
      t.rows = lists[l].data();
      t.n = static_cast<int64_t>(lists[l].size());
      t.coef = coefs[l].data();
      t.m = 1;
      t.c0 = cols / threads * part;
      t.c1 = t.c0 + cols / threads;
      t.Y = Y;
      t.ldy = cols;
      if (is_apart) {
        pi::cpu::detail::axpy_apart(t);
      } else {
        pi::cpu::detail::avx512_axpy(t);
      }
    });
  };
  for (int l = 0; l < 3; ++l) {
    std::fill(y_file.begin(), y_file.end(), 0.5f);
    std::fill(y_apart, y_apart + cols, 0.5f);
    call(false, file[0].get(), l, y_file.data());
    call(true, apart[0].get(), l, y_apart);
    if (std::memcmp(y_file.data(), y_apart, cols * sizeof(float)) != 0) {
      std::fprintf(stderr, "bench_q4_layout: the scales-apart kernel differs from the library leaf (list %d)\n", l);
      return 1;
    }
  }
  const double bytes = static_cast<double>(lists[0].size() * rb);
  const int calls = std::max(4, static_cast<int>(400e6 / bytes));
  std::vector<double> rate[2];
  int n = 0;
  for (int round = 0; round < rounds; ++round) {
    for (int which = 0; which < 2; ++which) {
      const double t0 = now();
      for (int i = 0; i < calls; ++i, ++n)
        call(which == 1, (which == 1 ? apart : file)[n % copies].get(), n % kLists, which == 1 ? y_apart : y_file.data());
      rate[which].push_back(bytes * calls / (now() - t0) / 1e9);
    }
  }
  const double a = median(rate[0]), b = median(rate[1]);
  std::printf("bench_q4_layout: %lld x %lld Q4_0, %d copies, %.0f%% of rows kept, %d thread(s), medians of %d rounds: "
              "file layout %.1f GB/s, scales apart %.1f GB/s (%.2fx); results bit-identical\n",
              static_cast<long long>(rows), static_cast<long long>(cols), copies, 100.0 * keep, threads, rounds, a, b, b / a);
  return 0;
}
