// Host memory for devices whose memory is the host's (cpu, ref) and for the simulated GPU's
// backing store: zero-filled, 64-byte aligned; requests of 2 MiB and more come from
// transparent-huge-page regions (core/HugeRegion), so that the KV cache and large scratch
// get 2 MiB TLB entries as before the device layer existed. Counts bytes in use and the peak
// against a budget. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "backend/device.h"
#include "core/huge_region.h"

namespace pi::backend {

class HostMemory {
 public:
  explicit HostMemory(uint64_t budget) : budget_(budget) {}
  ~HostMemory();
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;

  // nullptr with an error naming `device`, `what`, the request and the budget past it.
  Result<void*> alloc(size_t bytes, const char* device, const char* what);
  void release(void* p);
  uint64_t used() const;
  uint64_t peak() const;
  uint64_t budget() const { return budget_; }

 private:
  struct Block {
    size_t bytes = 0;
    HugeRegion region;  // empty for small blocks (from aligned_alloc)
  };
  const uint64_t budget_;
  mutable std::mutex mu_;
  std::unordered_map<void*, Block> blocks_;
  uint64_t used_ = 0, peak_ = 0;
};

// Physical memory of this machine in bytes (sysconf), 0 if unknown.
uint64_t physical_memory();

}  // namespace pi::backend
