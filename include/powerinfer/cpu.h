// The CPU kernels' instruction set. By default the best this binary and CPU have (AVX-512,
// AVX2, NEON with or without the dot product, else scalar); a front end may choose a lower
// one for tests and benchmarks before it loads a model (the CLI, the C API, Python, the tests
// and the benchmarks pass the environment's PI_KERNELS_ISA here).
#pragma once

#include <string>
#include <string_view>

namespace pi {

// "scalar", "avx2", "avx512", "neon" or "neon-dot": the ISA sessions and loads use now.
std::string cpu_isa();
// Makes `name` the ISA of what is loaded and created afterwards. An unknown name, or one this
// binary or CPU lacks, keeps the best ISA: the text returned says so ("" when done).
std::string set_cpu_isa(std::string_view name);

}  // namespace pi
