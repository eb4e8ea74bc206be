// Device-side helpers of the kernels, for CUDA and HIP from the same source: the lane group
// (32 lanes; hd.h) and its shuffles, reductions and ballot. On CUDA a group is a warp. On AMD
// a wavefront is 32 (RDNA, gfx1030) or 64 lanes (CDNA, gfx90a); every helper here works
// within the 32-lane half of a wave64 the calling lane belongs to (HIP's shuffles take a width
// of 32, and the ballot's 64-bit result is shifted to the group's half), so the kernels never
// depend on the hardware's warp size. Blocks are one-dimensional, a multiple of 32 threads.
// Kernels are started with launch() (the triple-chevron launch, or the CPU emulation's with
// PI_GPU_EMU: emu.h). Included only by .cu files.
#pragma once

#include <cstdint>

#include "kernels/cuda/hd.h"
#include "kernels/cuda/runtime.h"
#if defined(PI_HIP)
#include <hip/hip_runtime.h>
#endif

namespace pi::gpu {

__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x) & (kGroup - 1); }
// The group's index within its block.
__device__ __forceinline__ int group_id() { return static_cast<int>(threadIdx.x) / kGroup; }

__device__ __forceinline__ float shfl_xor(float v, int mask) {
#if defined(PI_GPU_EMU)
  return emu::shfl_xor(v, mask);
#elif defined(PI_HIP)
  return __shfl_xor(v, mask, kGroup);
#else
  return __shfl_xor_sync(0xffffffffu, v, mask);
#endif
}
__device__ __forceinline__ int shfl_xor(int v, int mask) {
#if defined(PI_GPU_EMU)
  return emu::shfl_xor(v, mask);
#elif defined(PI_HIP)
  return __shfl_xor(v, mask, kGroup);
#else
  return __shfl_xor_sync(0xffffffffu, v, mask);
#endif
}
__device__ __forceinline__ int shfl(int v, int src) {
#if defined(PI_GPU_EMU)
  return emu::shfl(v, src);
#elif defined(PI_HIP)
  return __shfl(v, src, kGroup);
#else
  return __shfl_sync(0xffffffffu, v, src);
#endif
}

// The group's sum by the xor butterfly (hd_reduce.h: butterfly_sum32): every lane gets it.
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int off = kGroup / 2; off > 0; off >>= 1) v += shfl_xor(v, off);
  return v;
}
__device__ __forceinline__ int group_sum(int v) {
#pragma unroll
  for (int off = kGroup / 2; off > 0; off >>= 1) v += shfl_xor(v, off);
  return v;
}
// NaN-propagating maximum over the group.
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int off = kGroup / 2; off > 0; off >>= 1) {
    const float o = shfl_xor(v, off);
    v = (o > v || o != o) ? o : v;
  }
  return v;
}

// Bit l set when lane l of the group passes p.
__device__ __forceinline__ uint32_t group_ballot(bool p) {
#if defined(PI_GPU_EMU)
  return emu::ballot(p);
#elif defined(PI_HIP)
  return static_cast<uint32_t>(__ballot(p) >> (__lane_id() & 32));
#else
  return __ballot_sync(0xffffffffu, p);
#endif
}

// Lanes below this one.
__device__ __forceinline__ uint32_t lanes_below() { return (1u << lane_id()) - 1u; }

// The block's dynamic shared memory (the launch's smem bytes), as T.
#if !defined(PI_GPU_EMU)
extern __shared__ float4 pi_dynamic_smem[];
#endif
template <typename T>
__device__ __forceinline__ T* dynamic_smem() {
#if defined(PI_GPU_EMU)
  return static_cast<T*>(emu::dynamic_shared());
#else
  return reinterpret_cast<T*>(pi_dynamic_smem);
#endif
}

// Starts kernel on `grid` blocks of `block` threads with `smem` bytes of dynamic shared memory
// on `stream`; the launch's error (cudaGetLastError).
template <typename... Params, typename... Args>
cudaError_t launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, Args... args) {
#if defined(PI_GPU_EMU)
  (void)stream;
  emu::launch(grid, block, smem, [&] { kernel(args...); });
  return cudaSuccess;
#else
  // clang-format off
  kernel<<<grid, block, smem, stream>>>(args...);
  // clang-format on
  return cudaGetLastError();
#endif
}

}  // namespace pi::gpu
