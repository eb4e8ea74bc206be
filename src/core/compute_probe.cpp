#include "core/compute_probe.h"

#include <chrono>
#include <cstdint>
#include <iterator>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define PI_PROBE_X86 1
#endif

namespace pi {
namespace {

using Clock = std::chrono::steady_clock;

// A loop runs `n` iterations of its path on the calling thread and returns the sum of every
// accumulator lane (compute_probe.h: kComputeA * kComputeB per MAC).
using LoopFn = double (*)(uint64_t n);

constexpr int kZmmAcc = 16;  // 32 zmm registers: 16 accumulators and the operands
constexpr int kYmmAcc = 12;  // 16 ymm registers (VEX): 12 accumulators, operands, a temporary

#if defined(PI_PROBE_X86)
// Hides a value from the optimiser at no cost (no instruction): applied to each accumulator
// after each step, it keeps identical accumulator chains from being merged into one (which
// would make the loop latency-bound); applied to an operand before each step, it keeps a
// product of loop-invariant operands from being computed once and reused.
template <typename V>
[[gnu::always_inline]] inline void opaque(V& v) {
  asm volatile("" : "+v"(v));
}

// The sum of a vector's lanes, read as `Lane`s.
template <typename Lane, typename V>
double lane_sum(const V& v) {
  Lane lanes[sizeof(V) / sizeof(Lane)];
  __builtin_memcpy(lanes, &v, sizeof(V));
  double s = 0;
  for (Lane x : lanes) s += static_cast<double>(x);
  return s;
}

// The loops below share one shape but are written out per path: a template skeleton would
// be compiled without the path's target attribute, and GCC refuses to inline the path's
// intrinsics into it (target specific option mismatch).
__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) double loop_vnni512(uint64_t n) {
  const __m512i a = _mm512_set1_epi8(static_cast<char>(kComputeA));
  const __m512i b = _mm512_set1_epi8(static_cast<char>(kComputeB));
  __m512i acc[kZmmAcc];
#pragma GCC unroll 16
  for (__m512i& v : acc) v = _mm512_setzero_si512();
  for (uint64_t i = 0; i < n; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kZmmAcc; ++k) {
      acc[k] = _mm512_dpbusd_epi32(acc[k], a, b);
      opaque(acc[k]);
    }
  }
  auto total = acc[0];
#pragma GCC unroll 16
  for (int k = 1; k < kZmmAcc; ++k) total = _mm512_add_epi32(total, acc[k]);
  return lane_sum<int32_t>(total);
}

__attribute__((target("avx2,avxvnni"), noinline)) double loop_avxvnni(uint64_t n) {
  const __m256i a = _mm256_set1_epi8(static_cast<char>(kComputeA));
  const __m256i b = _mm256_set1_epi8(static_cast<char>(kComputeB));
  __m256i acc[kYmmAcc];
#pragma GCC unroll 16
  for (__m256i& v : acc) v = _mm256_setzero_si256();
  for (uint64_t i = 0; i < n; ++i) {
#pragma GCC unroll 12
    for (int k = 0; k < kYmmAcc; ++k) {
      acc[k] = _mm256_dpbusd_avx_epi32(acc[k], a, b);
      opaque(acc[k]);
    }
  }
  auto total = acc[0];
#pragma GCC unroll 16
  for (int k = 1; k < kYmmAcc; ++k) total = _mm256_add_epi32(total, acc[k]);
  return lane_sum<int32_t>(total);
}

// The plain-AVX2 int8 dot of the kernels (src/kernels/cpu/avx2_matrix.cpp): u8 x s8 pairs
// summed to s16 (no saturation here: |2 * 2 * -3| is small), s16 pairs summed to s32, added.
__attribute__((target("avx2"), noinline)) double loop_avx2(uint64_t n) {
  __m256i a = _mm256_set1_epi8(static_cast<char>(kComputeA));
  const __m256i b = _mm256_set1_epi8(static_cast<char>(kComputeB));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[kYmmAcc];
#pragma GCC unroll 16
  for (__m256i& v : acc) v = _mm256_setzero_si256();
  for (uint64_t i = 0; i < n; ++i) {
#pragma GCC unroll 12
    for (int k = 0; k < kYmmAcc; ++k) {
      opaque(a);
      acc[k] = _mm256_add_epi32(acc[k], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
      opaque(acc[k]);
    }
  }
  auto total = acc[0];
#pragma GCC unroll 16
  for (int k = 1; k < kYmmAcc; ++k) total = _mm256_add_epi32(total, acc[k]);
  return lane_sum<int32_t>(total);
}

__attribute__((target("avx512f,avx512bf16"), noinline)) double loop_bf16(uint64_t n) {
  // cvtne2ps packs the second operand's lanes low: every bf16 lane of a is 2, of b is -3.
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(kComputeA), _mm512_set1_ps(kComputeA));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(kComputeB), _mm512_set1_ps(kComputeB));
  __m512 acc[kZmmAcc];
#pragma GCC unroll 16
  for (__m512& v : acc) v = _mm512_setzero_ps();
  for (uint64_t i = 0; i < n; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kZmmAcc; ++k) {
      acc[k] = _mm512_dpbf16_ps(acc[k], a, b);
      opaque(acc[k]);
    }
  }
  auto total = acc[0];
#pragma GCC unroll 16
  for (int k = 1; k < kZmmAcc; ++k) total = _mm512_add_ps(total, acc[k]);
  return lane_sum<float>(total);
}

__attribute__((target("avx512f"), noinline)) double loop_fma512(uint64_t n) {
  const __m512 a = _mm512_set1_ps(kComputeA), b = _mm512_set1_ps(kComputeB);
  __m512 acc[kZmmAcc];
#pragma GCC unroll 16
  for (__m512& v : acc) v = _mm512_setzero_ps();
  for (uint64_t i = 0; i < n; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kZmmAcc; ++k) {
      acc[k] = _mm512_fmadd_ps(a, b, acc[k]);
      opaque(acc[k]);
    }
  }
  auto total = acc[0];
#pragma GCC unroll 16
  for (int k = 1; k < kZmmAcc; ++k) total = _mm512_add_ps(total, acc[k]);
  return lane_sum<float>(total);
}

__attribute__((target("avx2,fma"), noinline)) double loop_fma256(uint64_t n) {
  const __m256 a = _mm256_set1_ps(kComputeA), b = _mm256_set1_ps(kComputeB);
  __m256 acc[kYmmAcc];
#pragma GCC unroll 16
  for (__m256& v : acc) v = _mm256_setzero_ps();
  for (uint64_t i = 0; i < n; ++i) {
#pragma GCC unroll 12
    for (int k = 0; k < kYmmAcc; ++k) {
      acc[k] = _mm256_fmadd_ps(a, b, acc[k]);
      opaque(acc[k]);
    }
  }
  auto total = acc[0];
#pragma GCC unroll 16
  for (int k = 1; k < kYmmAcc; ++k) total = _mm256_add_ps(total, acc[k]);
  return lane_sum<float>(total);
}

bool has_vnni512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni");
}
bool has_avxvnni() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avxvnni"); }
bool has_avx2() { return __builtin_cpu_supports("avx2"); }
bool has_bf16() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16"); }
bool has_avx512f() { return __builtin_cpu_supports("avx512f"); }
bool has_fma256() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
#else
// No loops off x86-64: every path is unavailable there.
constexpr LoopFn loop_vnni512 = nullptr, loop_avxvnni = nullptr, loop_avx2 = nullptr,
                 loop_bf16 = nullptr, loop_fma512 = nullptr, loop_fma256 = nullptr;
bool never() { return false; }
constexpr auto has_vnni512 = never, has_avxvnni = never, has_avx2 = never, has_bf16 = never,
               has_avx512f = never, has_fma256 = never;
#endif

struct PathInfo {
  std::string_view name;
  std::string_view instructions;
  uint64_t macs_per_iteration;  // accumulators x MACs per instruction (or sequence)
  LoopFn loop;                  // nullptr off x86-64
  bool (*cpu_has)();            // the CPU features the loop's target attribute names
};

// Indexed by ComputePath (checked below).
constexpr PathInfo kPaths[] = {
    {.name = "int8_vnni_zmm", .instructions = "vpdpbusd zmm",
     .macs_per_iteration = kZmmAcc * 64, .loop = loop_vnni512, .cpu_has = has_vnni512},
    {.name = "int8_avxvnni_ymm", .instructions = "vpdpbusd ymm (AVX-VNNI)",
     .macs_per_iteration = kYmmAcc * 32, .loop = loop_avxvnni, .cpu_has = has_avxvnni},
    {.name = "int8_avx2", .instructions = "vpmaddubsw+vpmaddwd+vpaddd ymm",
     .macs_per_iteration = kYmmAcc * 32, .loop = loop_avx2, .cpu_has = has_avx2},
    {.name = "bf16_zmm", .instructions = "vdpbf16ps zmm",
     .macs_per_iteration = kZmmAcc * 32, .loop = loop_bf16, .cpu_has = has_bf16},
    {.name = "f32_fma_zmm", .instructions = "vfmadd231ps zmm",
     .macs_per_iteration = kZmmAcc * 16, .loop = loop_fma512, .cpu_has = has_avx512f},
    {.name = "f32_fma_ymm", .instructions = "vfmadd231ps ymm",
     .macs_per_iteration = kYmmAcc * 8, .loop = loop_fma256, .cpu_has = has_fma256},
};
static_assert(std::size(kPaths) == kComputePaths.size());
static_assert(static_cast<int>(ComputePath::Int8Vnni512) == 0 &&
              static_cast<int>(ComputePath::F32Fma256) == 5);

const PathInfo& info(ComputePath path) { return kPaths[static_cast<size_t>(path)]; }

// Runs `n` iterations on the calling thread; seconds.
double time_loop(LoopFn loop, uint64_t n) {
  const auto t0 = Clock::now();
  volatile double sink = loop(n);
  (void)sink;
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

std::string_view compute_path_name(ComputePath path) { return info(path).name; }
std::string_view compute_path_instructions(ComputePath path) { return info(path).instructions; }
bool compute_path_available(ComputePath path) {
  return info(path).loop != nullptr && info(path).cpu_has();
}
uint64_t compute_macs_per_iteration(ComputePath path) { return info(path).macs_per_iteration; }

ComputePass compute_pass(ThreadPool& pool, ComputePath path, uint64_t iterations) {
  ComputePass r;
  if (!compute_path_available(path)) return r;
  const LoopFn loop = info(path).loop;
  std::vector<double> sums(static_cast<size_t>(pool.size()));
  const auto t0 = Clock::now();
  pool.run_on_all([&](int thread) { sums[static_cast<size_t>(thread)] = loop(iterations); });
  const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
  for (double s : sums) r.sum += s;
  r.macs = static_cast<uint64_t>(pool.size()) * iterations * compute_macs_per_iteration(path);
  r.gmacs = dt > 0 ? static_cast<double>(r.macs) / dt / 1e9 : 0.0;
  return r;
}

uint64_t compute_iterations(ComputePath path, double seconds) {
  if (!compute_path_available(path)) return 0;
  const LoopFn loop = info(path).loop;
  // Double a trial until it runs 2 ms (well above the clock's resolution), then scale.
  uint64_t n = 256;
  double dt = time_loop(loop, n);
  while (dt < 0.002 && n < (uint64_t{1} << 40)) {
    n *= 2;
    dt = time_loop(loop, n);
  }
  const double scaled = static_cast<double>(n) * seconds / dt;
  return scaled < 1.0 ? 1 : static_cast<uint64_t>(scaled);
}

std::vector<double> measure_compute(ThreadPool& pool, ComputePath path, int passes,
                                    double seconds) {
  std::vector<double> rates;
  const uint64_t n = compute_iterations(path, seconds);
  if (n == 0) return rates;
  for (int i = 0; i < passes; ++i) rates.push_back(compute_pass(pool, path, n).gmacs);
  return rates;
}

}  // namespace pi
