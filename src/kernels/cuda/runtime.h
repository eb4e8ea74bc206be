// The GPU runtime API under CUDA's names, for the host side of the kernels (launchers) and
// for the CUDA backend. A HIP build (-DPI_HIP=ON, hipcc) maps the few names the kernels'
// launchers use to HIP's; the backend (src/backend/cuda) is CUDA-only. With PI_GPU_EMU (tests)
// the names come from the CPU emulation (emu.h).
#pragma once

#include <cstdint>

#if defined(PI_GPU_EMU)
#include "kernels/cuda/emu.h"
#elif defined(PI_HIP)
#include <hip/hip_runtime_api.h>
#define cudaError_t hipError_t
#define cudaSuccess hipSuccess
#define cudaErrorInvalidValue hipErrorInvalidValue
#define cudaStream_t hipStream_t
#define cudaGetLastError hipGetLastError
#define cudaGetErrorString hipGetErrorString
#define cudaMemsetAsync hipMemsetAsync
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaFuncSetAttribute hipFuncSetAttribute
#define cudaFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize
#else
#include <cuda_runtime_api.h>
#endif
