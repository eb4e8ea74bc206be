// The CPU emulation of emu.h.
#undef _FORTIFY_SOURCE  // fibers jump between stacks, which longjmp's checks refuse
#include "kernels/cuda/emu.h"

#include <setjmp.h>
#include <ucontext.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace pi::gpu::emu {
namespace {

// The threads of a block are fibers run by the launching thread: a fiber runs until it waits
// at a barrier or returns, then the next one runs. Each fiber starts on its own stack
// (makecontext/swapcontext, once per block); switches after that are _setjmp/_longjmp, which
// save no signal mask (no system call). A real thread per GPU thread was far too slow.
struct Fiber {
  ucontext_t ctx;
  jmp_buf jmp;
  char* stack = nullptr;
  bool started = false;
  bool done = false;
};

constexpr size_t kStack = size_t{256} << 10;

// A barrier over the fibers that have not returned from the kernel (those stop counting).
struct LiveBarrier {
  int expected = 0, arrived = 0;
  uint64_t gen = 0;
  void release() {
    arrived = 0;
    ++gen;
  }
};

struct Group {
  LiveBarrier bar;
  float f[32];
  int i[32];
};

struct Block {
  LiveBarrier bar;
  std::vector<Group> groups;
  std::vector<std::byte> smem;
  std::vector<Fiber> fibers;
  ucontext_t sched;
  jmp_buf sched_jmp;
  int current = 0;
  const std::function<void()>* body = nullptr;
};

Block* g_block = nullptr;  // the launch in progress (launches run on one host thread)

void yield() {
  Fiber& f = g_block->fibers[static_cast<size_t>(g_block->current)];
  if (_setjmp(f.jmp) == 0) _longjmp(g_block->sched_jmp, 1);
}

// Stacks reused from launch to launch (launches run on one thread at a time).
std::vector<char*> g_stacks;

void wait(LiveBarrier& b) {
  const uint64_t g = b.gen;
  if (++b.arrived == b.expected) {
    b.release();
    return;
  }
  while (b.gen == g) yield();
}

void leave(LiveBarrier& b) {
  --b.expected;
  if (b.arrived > 0 && b.arrived == b.expected) b.release();
}

Group& my_group() { return g_block->groups[threadIdx.x / 32]; }
int my_lane() { return static_cast<int>(threadIdx.x % 32); }

void fiber_main() {
  Block& b = *g_block;
  (*b.body)();
  leave(b.bar);
  leave(b.groups[static_cast<size_t>(b.current / 32)].bar);
  b.fibers[static_cast<size_t>(b.current)].done = true;
  _longjmp(b.sched_jmp, 1);  // never returns: the stack is abandoned
}

}  // namespace

float shfl_xor(float v, int mask) {
  Group& g = my_group();
  g.f[my_lane()] = v;
  wait(g.bar);
  const float r = g.f[my_lane() ^ mask];
  wait(g.bar);
  return r;
}

int shfl_xor(int v, int mask) {
  Group& g = my_group();
  g.i[my_lane()] = v;
  wait(g.bar);
  const int r = g.i[my_lane() ^ mask];
  wait(g.bar);
  return r;
}

int shfl(int v, int src) {
  Group& g = my_group();
  g.i[my_lane()] = v;
  wait(g.bar);
  const int r = g.i[src & 31];
  wait(g.bar);
  return r;
}

uint32_t ballot(bool p) {
  Group& g = my_group();
  g.i[my_lane()] = p ? 1 : 0;
  wait(g.bar);
  uint32_t r = 0;
  for (int l = 0; l < 32; ++l) r |= static_cast<uint32_t>(g.i[l] != 0) << l;
  wait(g.bar);
  return r;
}

void* dynamic_shared() { return g_block->smem.data(); }

void block_sync() { wait(g_block->bar); }

void launch(dim3 grid, dim3 block, size_t smem, const std::function<void()>& body) {
  const int n = static_cast<int>(block.x * block.y * block.z);
  Block b;
  b.groups = std::vector<Group>(static_cast<size_t>((n + 31) / 32));
  b.smem.resize(smem);
  b.fibers = std::vector<Fiber>(static_cast<size_t>(n));
  b.body = &body;
  while (g_stacks.size() < b.fibers.size()) g_stacks.push_back(new char[kStack]);
  for (size_t t = 0; t < b.fibers.size(); ++t) b.fibers[t].stack = g_stacks[t];
  Block* outer = g_block;
  g_block = &b;
  blockDim = block;
  gridDim = grid;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        b.bar = LiveBarrier{n, 0, 0};
        for (size_t g = 0; g < b.groups.size(); ++g)
          b.groups[g].bar = LiveBarrier{std::min(32, n - static_cast<int>(g) * 32), 0, 0};
        for (Fiber& f : b.fibers) {
          f.done = false;
          f.started = false;
        }
        blockIdx = uint3{x, y, z};
        for (int live = n; live > 0;) {
          live = 0;
          for (int t = 0; t < n; ++t) {
            Fiber& f = b.fibers[static_cast<size_t>(t)];
            if (f.done) continue;
            b.current = t;
            threadIdx = uint3{static_cast<unsigned>(t), 0, 0};
            if (_setjmp(b.sched_jmp) == 0) {
              if (f.started) _longjmp(f.jmp, 1);
              f.started = true;
              getcontext(&f.ctx);
              f.ctx.uc_stack.ss_sp = f.stack;
              f.ctx.uc_stack.ss_size = kStack;
              f.ctx.uc_link = nullptr;
              makecontext(&f.ctx, fiber_main, 0);
              swapcontext(&b.sched, &f.ctx);
            }
            if (!f.done) ++live;
          }
        }
      }
  g_block = outer;
}

}  // namespace pi::gpu::emu

void __syncthreads() { pi::gpu::emu::block_sync(); }

// ---- Runtime ------------------------------------------------------------------------------

struct EmuStream {};
struct EmuEvent {
  std::chrono::steady_clock::time_point at;
};
struct EmuBlas {};

namespace {

constexpr size_t kTotal = size_t{16} << 30;
std::mutex g_mu;
std::map<void*, size_t> g_device;  // emulated device allocations
size_t g_used = 0;

}  // namespace

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorNotReady:
      return "device not ready";
  }
  return "unknown error";
}
cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  std::snprintf(p->name, sizeof p->name, "emulated GPU (CPU threads)");
  p->multiProcessorCount = 4;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  std::lock_guard<std::mutex> l(g_mu);
  *total = kTotal;
  *free = kTotal - g_used;
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** p, size_t bytes) {
  if (p == nullptr) return cudaErrorInvalidValue;
  const size_t n = (bytes + 255) / 256 * 256;
  std::lock_guard<std::mutex> l(g_mu);
  if (g_used + n > kTotal) return cudaErrorMemoryAllocation;
  *p = std::aligned_alloc(256, n);
  if (*p == nullptr) return cudaErrorMemoryAllocation;
  std::memset(*p, 0xff, n);  // uninitialised device memory reads as NaN
  g_device[*p] = n;
  g_used += n;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  std::lock_guard<std::mutex> l(g_mu);
  auto it = g_device.find(p);
  if (it == g_device.end()) return cudaErrorInvalidValue;
  g_used -= it->second;
  g_device.erase(it);
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  return *p != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = new EmuStream;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new EmuEvent;
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  e->at = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  if (*ms <= 0) *ms = 1e-3f;
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (bytes > 0) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind k,
                            cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, k);
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind, cudaStream_t) {
  for (size_t r = 0; r < height; ++r)
    std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch,
                 width);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t) {
  std::memset(p, value, bytes);
  return cudaSuccess;
}

// ---- cuBLAS -------------------------------------------------------------------------------

cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = new EmuBlas;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetWorkspace(cublasHandle_t, void*, size_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }

cublasStatus_t cublasSgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                           int k, const float* alpha, const float* A, int lda, const float* B,
                           int ldb, const float* beta, float* C, int ldc) {
  if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      float acc = 0.0f;
      for (int p = 0; p < k; ++p) {
        const float a = ta == CUBLAS_OP_N ? A[i + static_cast<int64_t>(p) * lda]
                                          : A[p + static_cast<int64_t>(i) * lda];
        const float b = tb == CUBLAS_OP_N ? B[p + static_cast<int64_t>(j) * ldb]
                                          : B[j + static_cast<int64_t>(p) * ldb];
        acc = std::fma(a, b, acc);
      }
      float& c = C[i + static_cast<int64_t>(j) * ldc];
      c = *alpha * acc + (*beta != 0.0f ? *beta * c : 0.0f);
    }
  return CUBLAS_STATUS_SUCCESS;
}
