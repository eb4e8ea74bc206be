// The CUDA device: an NVIDIA GPU behind the Device/Ops seam (device.h, ops.h). This header
// has no CUDA types, so the registry and the tests include it in any build with PI_CUDA.
//
// Memory. Plain cudaMalloc allocations, counted exactly: alloc_footprint() is what cudaMalloc
// takes (requests below 1 MiB rounded up to 512 bytes, larger ones to the 2 MiB pages the
// driver maps them with), and the budget counts those footprints. At creation the device takes
// its own working memory (a 56 MiB scratch arena for the ops' staged index arrays, 8-bit
// activations, decoded tiles and partial sums; the cuBLAS handle and its 4 MiB workspace); the
// driver's free memory before and after that is measured, and MemoryInfo::budget is
// min(requested or free, free) less what setup took, so a ledger that keeps runtime_margin()
// free inside MemoryInfo::budget stays inside the budget the user gave. runtime_margin() is
// kRuntimeMargin: what the CUDA runtime may still take after setup, outside our allocations:
// modules of kernels loaded lazily at their first launch (ours and cuBLAS's: a few MiB), the
// slack of the 2 MiB pages the driver packs small allocations into, and growth of the
// per-thread local memory for a kernel that needs more than the context reserved. The GPU
// test checks the driver's free memory against this ledger after a warm-up.
// Pinned host buffers (cudaMallocHost) for alloc_host; wrap_host is an error (weights are
// copied in).
//
// Queues. Two CUDA streams (kCompute, kCopy); record/wait are cudaEventRecord and
// cudaStreamWaitEvent on pooled events; sync is cudaStreamSynchronize; no op synchronises the
// device. map() synchronises both streams and returns a host copy (a pinned mirror owned by
// the device, valid until the next submission): on this device map is READ-ONLY, writes to it
// are not copied back.
//
// Errors. A failed launch or copy (every CUDA call is checked) is kept as the device's first
// error (status()), named after the op and the call, and logged once; ops never abort.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/device.h"

namespace pi::backend {

struct CudaOptions {
  int index = 0;        // which GPU (cudaSetDevice)
  uint64_t budget = 0;  // bytes the device may take in all (0: all the driver reports free)
  // Bytes of the index-array staging ring in use (0: all 8 MiB of it). Tests pass a small one
  // so that the ring wraps after a few ops.
  size_t staging_bytes = 0;
};

// Bandwidth of device memory, measured with CUDA events over large buffers: a device-to-device
// cudaMemcpy (counted as bytes read plus bytes written) and a read kernel (bytes read).
struct CudaProbe {
  uint64_t bytes = 0;  // buffer size
  double copy_gbps = 0;
  double read_gbps = 0;
};

class CudaDevice final : public Device {
 public:
  // Device memory the CUDA runtime may take beyond alloc() after setup (see the file comment).
  static constexpr uint64_t kRuntimeMargin = uint64_t{64} << 20;

  // Fails with one line when there is no GPU ("cuda: no CUDA device (cudaGetDeviceCount:
  // ...)"), when the index is out of range, or when setup fails (naming the call).
  static Result<std::unique_ptr<CudaDevice>> create(const CudaOptions& o);
  ~CudaDevice() override;

  std::string name() const override { return "cuda"; }
  std::string describe() const override;
  bool host_addressable() const override { return false; }
  MemoryInfo memory() const override;
  uint64_t alloc_footprint(size_t bytes) const override;
  uint64_t runtime_margin() const override { return kRuntimeMargin; }
  bool supports(Op op, DType t) const override;
  Result<Buffer> alloc(size_t bytes, const char* what) override;
  Result<Buffer> alloc_host(size_t bytes, const char* what) override;
  Result<const void*> wrap_host(const void* p, size_t bytes) override;
  void copy_in(QueueId q, void* dst, const void* src, size_t bytes) override;
  void copy_out(QueueId q, void* dst, const void* src, size_t bytes) override;
  Event record(QueueId q) override;
  void wait(QueueId q, const Event& e) override;
  void sync(QueueId q) override;
  void* map(const void* p, size_t bytes) override;
  Ops& ops() override;
  DeviceActivity activity() const override;

  // The first error of any queued work or op since creation (ok when none).
  Status status() const;
  // The driver's free device memory now (cudaMemGetInfo), and at creation before setup.
  Result<uint64_t> driver_free() const;
  uint64_t free_at_creation() const;
  // Bytes setup took from the driver (arena, cuBLAS), outside MemoryInfo::used.
  uint64_t own_bytes() const;
  // Measures the bandwidth of device memory with two buffers of `bytes` each (allocated from
  // the budget for the measurement, then freed): the median of `passes` runs of each.
  Result<CudaProbe> probe(size_t bytes, int passes);

  struct Impl;

 protected:
  void release(void* data, size_t bytes) override;

 private:
  explicit CudaDevice(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// GPUs the CUDA runtime sees; 0 with `why` set (one line) when there is none or no driver.
int cuda_device_count(std::string* why = nullptr);

}  // namespace pi::backend
