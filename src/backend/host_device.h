// Devices whose memory is the host's and whose queues run work inline, before each submission
// returns: the CPU device (SIMD kernels over a thread pool) and the reference device (the
// scalar oracle, one thread). Events are always complete; map() is the identity.
#pragma once

#include <memory>
#include <string>

#include "backend/cpu/cpu_ops.h"
#include "backend/device.h"
#include "backend/host_memory.h"
#include "core/thread_pool.h"
#include "kernels/cpu/kernels.h"

namespace pi::backend {

// What the host kernels (CpuOps) run: matrix ops for every computable weight type (SIMD where
// cpu::supports, else the reference), the rest on f32 data.
bool host_kernels_support(Op op, DType t);

class HostDevice : public Device {
 public:
  bool host_addressable() const override { return true; }
  MemoryInfo memory() const override;
  Result<Buffer> alloc(size_t bytes, const char* what) override;
  Result<Buffer> alloc_host(size_t bytes, const char* what) override { return alloc(bytes, what); }
  Result<const void*> wrap_host(const void* p, size_t) override { return p; }
  void copy_in(QueueId, void* dst, const void* src, size_t bytes) override;
  void copy_out(QueueId, void* dst, const void* src, size_t bytes) override;
  Event record(QueueId) override { return {}; }
  void wait(QueueId, const Event&) override {}
  void sync(QueueId) override {}
  void* map(const void* p, size_t) override { return const_cast<void*>(p); }

 protected:
  // budget 0: the machine's physical memory.
  explicit HostDevice(uint64_t budget);
  void release(void* data, size_t bytes) override;
  HostMemory mem_;
};

// The layout a CPU device of the default ISA (cpu::default_isa()) with `repack` keeps
// transposed weights of type t in: what a model read into memory converts them to at load.
DType cpu_transposed_layout(DType t);
// The same for matrices only dense products read (CpuDevice::dense_layout with dense_repack),
// for whole groups of 16 rows.
DType cpu_dense_layout(DType t);

// The CPU: SIMD kernels of one ISA over a pool of n_threads (the caller included). With
// `repack`, transposed Q4_0 weights are kept as Q4_0_SPLIT where the ISA's axpy reads that
// faster (cpu::axpy_layout: AVX-512): the model's own memory when it converted them at load,
// else a copy of those matrices (model::LayoutCache). Its kernels read either layout.
class CpuDevice final : public HostDevice {
 public:
  CpuDevice(int n_threads, cpu::Isa isa = cpu::default_isa(), uint64_t budget = 0, bool repack = true,
            bool dense_repack = true);
  std::string name() const override { return "cpu"; }
  std::string describe() const override;
  bool supports(Op op, DType t) const override;
  DType transposed_layout(DType t) const override;
  // With `dense_repack`, Q4_0, Q8_0 and Q4_K matrices of whole groups of 16 rows in their R16
  // layouts where the ISA has a leaf for them (cpu::dot_layout), for prompt batches 2-3x faster.
  DType dense_layout(DType t, int64_t rows) const override;
  Ops& ops() override { return ops_; }
  cpu::Isa isa() const { return ops_.isa(); }
  ThreadPool& pool() { return pool_; }

 private:
  ThreadPool pool_;
  CpuOps ops_;
  bool repack_;
  bool dense_repack_;
};

// The scalar reference kernels (src/kernels/ref) on the calling thread: the oracle every
// other device is tested against. Slow by design.
class RefDevice final : public HostDevice {
 public:
  explicit RefDevice(uint64_t budget = 0);
  ~RefDevice() override;
  std::string name() const override { return "ref"; }
  std::string describe() const override { return "ref: scalar reference kernels, 1 thread"; }
  bool supports(Op op, DType t) const override;
  Ops& ops() override { return *ops_; }

 private:
  std::unique_ptr<Ops> ops_;
};

}  // namespace pi::backend
