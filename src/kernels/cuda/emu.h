// A CPU emulation of the parts of the CUDA language, runtime and cuBLAS that the GPU kernels
// (src/kernels/cuda) and the cuda device (src/backend/cuda) use, for tests on machines
// without a GPU: with PI_GPU_EMU, g++ compiles the very same sources against this header
// (runtime.h and blas.h include it instead of the toolkit's), and the op tests run the cuda
// device's code, thread mapping included, on the CPU (tests/backend: test_backend_cuda_emu).
//
// Execution model: a launch runs its blocks one after another on the calling thread; a
// block's threads are fibers that switch at __syncthreads and at the lane-group shuffles and
// ballots (barriers among the live threads of the block or group); a thread that returns
// stops counting in its barriers, as exited threads do on the GPU. __shared__ variables are
// function statics (one block runs at a time). Streams and events are synchronous: work
// completes before the call returns.
// Memory is host memory. What this cannot show: timing, races between streams, alignment
// faults, and anything about the real compiler's code generation.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) int4 {
  int x, y, z, w;
};

extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

void __syncthreads();
inline int __popc(unsigned v) { return __builtin_popcount(v); }

namespace pi::gpu::emu {

// Within the calling thread's group of 32 (threadIdx.x / 32): every live lane must call.
float shfl_xor(float v, int mask);
int shfl_xor(int v, int mask);
int shfl(int v, int src);
uint32_t ballot(bool p);
// The block's dynamic shared memory (the launch's smem bytes).
void* dynamic_shared();
void block_sync();
// Runs body in every thread of every block of the grid (one-dimensional blocks).
void launch(dim3 grid, dim3 block, size_t smem, const std::function<void()>& body);

}  // namespace pi::gpu::emu

// ---- Runtime ------------------------------------------------------------------------------
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorNotReady = 600,
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
constexpr unsigned cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDisableTiming = 2;
using cudaStream_t = struct EmuStream*;
using cudaEvent_t = struct EmuEvent*;
struct cudaDeviceProp {
  char name[256];
  int multiProcessorCount;
};

const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError();
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaSetDevice(int i);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int i);
cudaError_t cudaMemGetInfo(size_t* free, size_t* total);
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocHost(void** p, size_t bytes);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind k,
                            cudaStream_t s);
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind k, cudaStream_t s);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s);
template <typename F>
cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) {
  return cudaSuccess;
}

// ---- cuBLAS -------------------------------------------------------------------------------
enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7 };
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0 };
using cublasHandle_t = struct EmuBlas*;
cublasStatus_t cublasCreate(cublasHandle_t* h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void* ws, size_t bytes);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m);
// Column-major C = alpha op(A) op(B) + beta C, each element summed in k order.
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float* alpha, const float* A, int lda,
                           const float* B, int ldb, const float* beta, float* C, int ldc);
