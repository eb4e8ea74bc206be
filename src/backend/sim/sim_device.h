// The simulated GPU: a device that behaves like a discrete GPU and runs here, so that
// everything the GPU path does (placement, budgets, copies, queue ordering) is tested in CI.
//
// - Memory: its own arena behind opaque handles (allocations rounded up to 256 bytes, which
//   alloc_footprint() says). A device address is a handle into an address
//   range mapped PROT_NONE, so host code that dereferences one faults at once; only the
//   device's own work (and map()) translates handles to the arena. Capacity is hard: an
//   allocation past it fails like a GPU out-of-memory, naming the bytes and what is free.
//   New memory is poisoned (0xFF bytes: NaN as f32 and f16). Peak usage is tracked.
// - Queues: one worker thread per queue drains it in order; events are counters (queue,
//   submission number). Copies may carry an injected latency and bandwidth, so overlap shows
//   in timings; bytes copied each way are counted.
// - Race checker: every submission names the buffers it reads and writes; vector clocks built
//   from queue order, events and host syncs report a buffer accessed on one queue while another
//   queue writes it (or reads it, for a write) with no event between them (hazards()).
// - Ops: the CPU kernels (CpuOps) on the compute queue's thread with the device's own pool, so
//   results are bit-identical to the CPU device of the same ISA.
// Thread-safety: driven by one host thread; the queue workers are internal.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/device.h"
#include "kernels/cpu/kernels.h"

namespace pi::backend {

struct SimOptions {
  uint64_t capacity = uint64_t{8} << 30;  // device memory in bytes (the hard limit)
  double copy_latency_us = 0;             // added to every copy
  double copy_gbps = 0;                   // copy bandwidth in GB/s; 0: as fast as memcpy
  bool abort_on_hazard = false;           // print the first hazard and abort (debugging)
  uint64_t runtime_margin = 0;            // Device::runtime_margin(): none by default (exact)
};

struct SimCounters {
  uint64_t bytes_in = 0, bytes_out = 0;  // host -> device, device -> host
  uint64_t copies_in = 0, copies_out = 0;
  uint64_t ops = 0;  // ops run on the compute queue
};

class SimDevice final : public Device {
 public:
  static Result<std::unique_ptr<SimDevice>> create(const SimOptions& o, int n_threads,
                                                   cpu::Isa isa);
  ~SimDevice() override;

  std::string name() const override { return "sim"; }
  std::string describe() const override;
  bool host_addressable() const override { return false; }
  MemoryInfo memory() const override;
  uint64_t alloc_footprint(size_t bytes) const override;
  uint64_t runtime_margin() const override;
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

  SimCounters counters() const;
  DeviceActivity activity() const override;
  // Hazards the race checker found, one line each, in submission order.
  std::vector<std::string> hazards() const;
  uint64_t pinned_bytes() const;

  struct Impl;

 protected:
  void release(void* data, size_t bytes) override;

 private:
  explicit SimDevice(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pi::backend
