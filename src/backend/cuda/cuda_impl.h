// Internal to the CUDA backend: the device's state, shared by cuda_device.cpp (memory,
// queues, events, map), cuda_ops.cpp (the ops) and cuda_probe.cpp.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_staging.h"
#include "backend/ops.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/runtime.h"

namespace pi::backend {

// The device's own scratch arena, carved into regions at creation (bytes, 256-aligned).
struct CudaArena {
  static constexpr size_t kStaging = size_t{8} << 20;   // device side of the staging ring
  static constexpr size_t kQ8 = size_t{8} << 20;        // 8-bit activations
  static constexpr size_t kTile = size_t{16} << 20;     // decoded weight rows for cuBLAS
  static constexpr size_t kGather = size_t{4} << 20;    // gathered coefficients (linear_t)
  static constexpr size_t kPartial = size_t{16} << 20;  // partial sums (linear_t*, attention)
  static constexpr size_t kRealign = size_t{4} << 20;   // copies of misaligned weight views
  static constexpr size_t kTotal = kStaging + kQ8 + kTile + kGather + kPartial + kRealign;
  static constexpr size_t kCublasWorkspace = size_t{4} << 20;

  uint8_t* base = nullptr;
  uint8_t* staging = nullptr;
  int8_t* q8 = nullptr;
  float* tile = nullptr;
  float* gather = nullptr;
  float* partial = nullptr;
  uint8_t* realign = nullptr;
  void* cublas_ws = nullptr;
};

struct CudaDevice::Impl {
  int index = 0;
  std::string gpu_name;
  int sm_count = 0;
  uint64_t total = 0;   // cudaMemGetInfo total
  uint64_t free0 = 0;   // free before setup
  uint64_t own = 0;     // what setup took (free0 - free after setup)
  uint64_t budget = 0;  // MemoryInfo::budget
  uint64_t used = 0, peak = 0;
  std::unordered_map<void*, uint64_t> device_allocs;  // pointer -> footprint
  std::unordered_map<void*, size_t> host_allocs;      // pinned
  uint64_t pinned_bytes = 0;

  cudaStream_t streams[kNumQueues] = {};
  cublasHandle_t cublas = nullptr;
  CudaArena arena;
  uint8_t* staging_host = nullptr;  // pinned, CudaArena::kStaging bytes
  std::unique_ptr<cuda::Stager> stager;

  // Events: per queue, the recorded ones not yet known complete (value, event), ascending.
  uint64_t recorded[kNumQueues] = {};
  uint64_t completed[kNumQueues] = {};
  std::deque<std::pair<uint64_t, cudaEvent_t>> live[kNumQueues];
  std::vector<cudaEvent_t> event_pool;

  // map() mirrors: pinned buffers handed out since the last submission.
  std::vector<std::pair<void*, size_t>> mirrors;
  size_t mirrors_used = 0;

  // DeviceActivity: copies through copy_in/copy_out/map (the staging ring counts its own) and
  // ops submitted. Submissions come from one thread at a time (the Device contract).
  uint64_t bytes_in = 0, bytes_out = 0, copies_in = 0, copies_out = 0, n_ops = 0;

  Status first_error;  // ok until the first failure
  std::unique_ptr<Ops> ops;

  ~Impl();
  // Records a failed CUDA call (the first one only), naming what and the call. True when ok.
  bool check(cudaError_t e, const char* what, const char* call);
  bool check(const Status& s);
  // Every submission ends the validity of map()'s mirrors.
  void submitted() { mirrors_used = 0; }
  cudaStream_t stream(QueueId q) const { return streams[q]; }
  // Returns events of queue q known complete (up to value v) to the pool.
  void retire(int q, uint64_t v);
};

std::unique_ptr<Ops> make_cuda_ops(CudaDevice::Impl& impl);

}  // namespace pi::backend
