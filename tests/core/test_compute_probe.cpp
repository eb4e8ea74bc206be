// Tests for the compute probe (core/compute_probe.h): each path's loop executes exactly the
// MACs it reports (the sum of its accumulators against the closed form kComputeA * kComputeB
// per MAC, for several iteration and thread counts), every available path measures a
// positive rate, and an unavailable one runs nothing. No test looks at how fast a rate is.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/compute_probe.h"

namespace {

TEST(ComputeProbe, EveryPassExecutesTheMacsItCounts) {
  for (pi::ComputePath path : pi::kComputePaths) {
    if (!pi::compute_path_available(path)) continue;
    const std::string name(pi::compute_path_name(path));
    for (int threads : {1, 2, 3}) {
      pi::ThreadPool pool(threads);
      for (uint64_t iterations : {uint64_t{1}, uint64_t{7}, uint64_t{1000}}) {
        const pi::ComputePass p = pi::compute_pass(pool, path, iterations);
        EXPECT_EQ(p.macs, static_cast<uint64_t>(threads) * iterations *
                              pi::compute_macs_per_iteration(path))
            << name;
        // Exact: every lane stays far below 2^24 here.
        EXPECT_EQ(p.sum, static_cast<double>(pi::kComputeA * pi::kComputeB) *
                             static_cast<double>(p.macs))
            << name << ", " << threads << " threads, " << iterations << " iterations";
        EXPECT_GT(p.gmacs, 0.0) << name;
      }
    }
  }
}

TEST(ComputeProbe, AvailablePathsMeasureAndOthersAreSkipped) {
  std::set<std::string> names;
  int available = 0;
  pi::ThreadPool pool(2);
  for (pi::ComputePath path : pi::kComputePaths) {
    const std::string name(pi::compute_path_name(path));
    EXPECT_FALSE(name.empty());
    EXPECT_FALSE(pi::compute_path_instructions(path).empty());
    EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
    EXPECT_GT(pi::compute_macs_per_iteration(path), 0u);
    const std::vector<double> rates = pi::measure_compute(pool, path, 3, 0.002);
    if (!pi::compute_path_available(path)) {
      EXPECT_TRUE(rates.empty()) << name;
      EXPECT_EQ(pi::compute_iterations(path, 0.002), 0u) << name;
      const pi::ComputePass p = pi::compute_pass(pool, path, 100);
      EXPECT_EQ(p.macs, 0u) << name;
      EXPECT_EQ(p.gmacs, 0.0) << name;
      continue;
    }
    ++available;
    EXPECT_GE(pi::compute_iterations(path, 0.002), 1u) << name;
    ASSERT_EQ(rates.size(), 3u) << name;
    for (double r : rates) EXPECT_GT(r, 0.0) << name;
  }
#if defined(__x86_64__)
  // Every x86-64 machine the engine targets has AVX2 and FMA.
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_TRUE(pi::compute_path_available(pi::ComputePath::Int8Avx2));
    EXPECT_TRUE(pi::compute_path_available(pi::ComputePath::F32Fma256));
  }
  EXPECT_EQ(pi::compute_path_available(pi::ComputePath::Int8Vnni512),
            __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512vnni"));
  EXPECT_EQ(pi::compute_path_available(pi::ComputePath::Int8AvxVnni),
            __builtin_cpu_supports("avxvnni") != 0);
  EXPECT_EQ(pi::compute_path_available(pi::ComputePath::Bf16Avx512),
            __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16"));
#else
  EXPECT_EQ(available, 0);
#endif
  (void)available;
}

}  // namespace
