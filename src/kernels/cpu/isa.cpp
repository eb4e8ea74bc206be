// ISA detection and the choice of kernel table. Each Kernels object holds its ISA's table;
// default_isa() is what devices start from: the CPU's best, or what a front end chose with
// set_default_isa() (the environment's PI_KERNELS_ISA).
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/cpu/dispatch.h"
#include "tensor/quant.h"

#if defined(PI_KERNELS_HAVE_NEON) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace pi::cpu {
namespace {

#if defined(PI_KERNELS_HAVE_NEON)
// The kernel's view of the CPU (Linux: the hardware capability bits; elsewhere the baseline
// Advanced SIMD alone).
unsigned long arm_hwcaps() {
#if defined(__linux__)
  return getauxval(AT_HWCAP);
#else
  return 0;
#endif
}
#endif

bool cpu_has(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return true;
    case Isa::Avx2:
#if defined(PI_KERNELS_HAVE_AVX2)
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
#else
      return false;
#endif
    case Isa::Avx512:
#if defined(PI_KERNELS_HAVE_AVX512)
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vbmi") &&
             __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
      return false;
#endif
    case Isa::Neon:
#if defined(PI_KERNELS_HAVE_NEON) && defined(__linux__)
      return (arm_hwcaps() & HWCAP_ASIMD) != 0;
#elif defined(PI_KERNELS_HAVE_NEON)
      return true;  // Advanced SIMD is part of every aarch64 CPU
#else
      return false;
#endif
    case Isa::NeonDot:
#if defined(PI_KERNELS_HAVE_NEON_DOT) && defined(__linux__)
      return (arm_hwcaps() & HWCAP_ASIMD) != 0 && (arm_hwcaps() & HWCAP_ASIMDDP) != 0 &&
             (arm_hwcaps() & HWCAP_ASIMDHP) != 0;
#else
      return false;
#endif
  }
  return false;
}

Isa best() {
  if (cpu_has(Isa::Avx512)) return Isa::Avx512;
  if (cpu_has(Isa::Avx2)) return Isa::Avx2;
  if (cpu_has(Isa::NeonDot)) return Isa::NeonDot;
  if (cpu_has(Isa::Neon)) return Isa::Neon;
  return Isa::Scalar;
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return "scalar";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
    case Isa::Neon:
      return "neon";
    case Isa::NeonDot:
      return "neon-dot";
  }
  return "?";
}

bool isa_available(Isa isa) { return cpu_has(isa); }

// -1: not chosen yet (the best ISA).
std::atomic<int> g_default_isa{-1};

Isa default_isa() {
  const int v = g_default_isa.load(std::memory_order_relaxed);
  return v < 0 ? best() : static_cast<Isa>(v);
}

std::string set_default_isa(std::string_view name) {
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon, Isa::NeonDot}) {
    if (isa_name(isa) != name) continue;
    if (!cpu_has(isa)) return std::string(name) + " is not available here; using " + std::string(isa_name(best()));
    g_default_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
    return "";
  }
  return std::string(name) + " is unknown (scalar|avx2|avx512|neon|neon-dot); using " +
         std::string(isa_name(best()));
}

Kernels::Kernels(Isa isa) : isa_(isa_available(isa) ? isa : default_isa()), table_(&detail::table_for(isa_)) {}

bool supports(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
    case DType::MXFP4:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

bool supports_axpy(DType t) { return supports(t) || t == DType::Q4_0_SPLIT; }

DType axpy_layout(Isa isa, DType t) {
  return isa == Isa::Avx512 && t == DType::Q4_0 ? DType::Q4_0_SPLIT : t;
}

bool supports_dense(DType t) { return supports(t) || is_r16(t); }

DType dot_layout(Isa isa, DType t, int64_t rows) {
  if (!(isa == Isa::Avx512 || isa == Isa::Avx2) || rows <= 0 || rows % 16 != 0) return t;
  switch (t) {
    case DType::Q4_0: return DType::Q4_0_R16;
    case DType::Q8_0: return DType::Q8_0_R16;
    case DType::Q4_K: return DType::Q4_K_R16;
    case DType::MXFP4: return DType::MXFP4_R16;
    default: return t;
  }
}

namespace detail {

const KernelTable& table_for(Isa isa) {
  switch (isa) {
#if defined(PI_KERNELS_HAVE_AVX512)
    case Isa::Avx512:
      return avx512_table();
#endif
#if defined(PI_KERNELS_HAVE_AVX2)
    case Isa::Avx2:
      return avx2_table();
#endif
#if defined(PI_KERNELS_HAVE_NEON_DOT)
    case Isa::NeonDot:
      return neon_dot_table();
#endif
#if defined(PI_KERNELS_HAVE_NEON)
    case Isa::Neon:
      return neon_table();
#endif
    default:
      return scalar_table();
  }
}

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "pi::cpu kernel precondition failed: %s\n", what);
  std::abort();
}

}  // namespace detail
}  // namespace pi::cpu
