#include "backend/host_memory.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/mapped_file.h"
#include "core/os.h"

namespace pi::backend {

uint64_t physical_memory() { return physical_memory_bytes(); }

HostMemory::~HostMemory() {
  for (auto& [p, b] : blocks_)
    if (!b.region.ok()) os::aligned_free(p);
}

Result<void*> HostMemory::alloc(size_t bytes, const char* device, const char* what) {
  const size_t n = std::max<size_t>(bytes, 1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (used_ + n > budget_) {
      return err("%s: out of memory allocating %s: %zu bytes requested, %llu of %llu bytes free",
                 device, what, bytes, static_cast<unsigned long long>(budget_ - used_),
                 static_cast<unsigned long long>(budget_));
    }
  }
  Block b;
  b.bytes = n;
  void* p = nullptr;
  if (n >= kHugePageBytes) {
    b.region = HugeRegion(n);
    p = b.region.data();
  } else {
    p = os::aligned_alloc(64, n);
    if (p != nullptr) std::memset(p, 0, n);
  }
  if (p == nullptr) {
    return err("%s: out of memory allocating %s: %zu bytes requested (the system refused)", device,
               what, bytes);
  }
  std::lock_guard<std::mutex> lock(mu_);
  used_ += n;
  peak_ = std::max(peak_, used_);
  blocks_.emplace(p, std::move(b));
  return p;
}

void HostMemory::release(void* p) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(p);
  if (it == blocks_.end()) return;
  used_ -= it->second.bytes;
  if (!it->second.region.ok()) os::aligned_free(p);
  blocks_.erase(it);
}

uint64_t HostMemory::used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

uint64_t HostMemory::peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

}  // namespace pi::backend
