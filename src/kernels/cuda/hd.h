// Qualifiers for the per-element arithmetic that the CUDA/HIP kernels and the host tests
// share. Headers written with PI_HD compile with nvcc, hipcc and plain g++: under a GPU
// compiler a function is __host__ __device__; under g++ it is an ordinary inline function,
// so tests/kernels/cuda checks it on the CPU against src/kernels/ref without a GPU.
// PI_DEVICE_PASS is 1 only while a GPU compiler generates device code: a PI_HD function may
// pick a hardware instruction there (it must compute the same value as its host branch).
#pragma once

#include <cstdint>

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>  // __host__, __device__, __forceinline__ (nvcc has them built in)
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
#define PI_HD __host__ __device__ __forceinline__
#else
#define PI_HD inline
#endif

#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define PI_DEVICE_PASS 1
#else
#define PI_DEVICE_PASS 0
#endif

namespace pi::gpu {

// Lanes of a lane group: the unit every kernel maps work to (one row, one mask word, one
// block of activations). A group is a CUDA warp; on AMD wave64 hardware a wavefront holds
// two groups, and every shuffle and ballot works within one group (vendor.cuh).
constexpr int kGroup = 32;

PI_HD constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace pi::gpu
