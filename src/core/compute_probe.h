// A compute probe: the multiply-accumulate peak of each SIMD path the CPU has, the ceiling a
// compute-bound prompt batch is compared with (`powerinfer bench`), as the read probe
// (bandwidth_probe.h) is the ceiling of a memory-bound decode step.
//
// Each path is a loop of one instruction sequence over many independent accumulators (16 zmm,
// or 12 ymm where 16 registers must also hold the operands), so that the instructions'
// throughput binds, never their latency; the loop touches no memory. A pass runs the same
// number of iterations on every thread of a pool; its rate is the MACs of all threads / the
// wall time of the pass, in GMAC/s (1e9 multiply-accumulates per second). One MAC is one
// multiply and its add: an 8-bit u8 x s8 product for the int8 paths, a bf16 x bf16 or an
// f32 x f32 product for the others.
//
// Every MAC multiplies kComputeA by kComputeB, so the sum of every accumulator lane of every
// thread after a pass is kComputeA * kComputeB * macs (exactly, while no lane overflows an
// int32 or leaves the integers a float holds: a few million iterations): tests check the MAC
// count against it, and it keeps the loops from being optimised away.
//
// Thread-safety: every function may be called from any thread; passes on different pools
// may run concurrently (they then share the cores, which is rarely what one wants).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"

namespace pi {

enum class ComputePath {
  Int8Vnni512,  // vpdpbusd zmm (AVX512-VNNI): 64 MACs per instruction
  Int8AvxVnni,  // vpdpbusd ymm (AVX-VNNI, VEX encoded): 32 MACs
  Int8Avx2,     // vpmaddubsw + vpmaddwd (by ones) + vpaddd ymm (AVX2): 32 MACs per sequence
  Bf16Avx512,   // vdpbf16ps zmm (AVX512-BF16): 32 MACs
  F32Fma512,    // vfmadd231ps zmm (AVX-512F): 16 MACs
  F32Fma256,    // vfmadd231ps ymm (AVX2 + FMA): 8 MACs
};

// Every path, in the order the reports list them.
inline constexpr std::array kComputePaths = {
    ComputePath::Int8Vnni512, ComputePath::Int8AvxVnni, ComputePath::Int8Avx2,
    ComputePath::Bf16Avx512,  ComputePath::F32Fma512,   ComputePath::F32Fma256};

// The operands of every MAC (exact in u8, s8, bf16 and f32).
inline constexpr int kComputeA = 2, kComputeB = -3;

// Pass length the bench uses (seconds of one thread's loop; compute_iterations).
inline constexpr double kComputePassSeconds = 0.03;

// A short identifier ("int8_vnni_zmm") for reports and JSON keys, and the instructions
// ("vpdpbusd zmm") for people.
std::string_view compute_path_name(ComputePath path);
std::string_view compute_path_instructions(ComputePath path);
// True when this build and CPU can run the path's loop (always false off x86-64).
bool compute_path_available(ComputePath path);
// MACs one loop iteration of one thread executes (every accumulator once).
uint64_t compute_macs_per_iteration(ComputePath path);

struct ComputePass {
  double gmacs = 0;   // macs / wall seconds / 1e9
  uint64_t macs = 0;  // every thread's iterations x compute_macs_per_iteration
  double sum = 0;     // every accumulator lane of every thread: kComputeA * kComputeB * macs
};

// One pass: `iterations` loop iterations on each thread of `pool`, timed together. An
// unavailable path runs nothing and returns zeros.
ComputePass compute_pass(ThreadPool& pool, ComputePath path, uint64_t iterations);

// Iterations per thread for a pass of about `seconds` of one thread's loop, timed on the
// calling thread (short trial loops, a few milliseconds); at least 1. 0 for an unavailable path.
uint64_t compute_iterations(ComputePath path, double seconds);

// `passes` passes of about `seconds` each (their length found once, by compute_iterations);
// the rates in GMAC/s, in order. Empty for an unavailable path.
std::vector<double> measure_compute(ThreadPool& pool, ComputePath path, int passes,
                                    double seconds = kComputePassSeconds);

}  // namespace pi
