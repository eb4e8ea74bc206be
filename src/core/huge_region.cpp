#include "core/huge_region.h"

#include <sys/mman.h>

#include <cstdint>

namespace pi {

HugeRegion::HugeRegion(size_t bytes) {
  if (bytes == 0) return;
  // One extra huge page so that the data can start on a 2 MiB boundary.
  const size_t n = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes + kHugePageBytes;
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  mapping_ = p;
  mapping_size_ = n;
  data_ = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(p) + kHugePageBytes - 1) /
                                       kHugePageBytes * kHugePageBytes);
  size_ = bytes;
  madvise(data_, n - static_cast<size_t>(data_ - static_cast<std::byte*>(p)), MADV_HUGEPAGE);
}

HugeRegion::~HugeRegion() { reset(); }

HugeRegion::HugeRegion(HugeRegion&& other) noexcept { *this = std::move(other); }

HugeRegion& HugeRegion::operator=(HugeRegion&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_size_ = std::exchange(other.mapping_size_, 0);
  }
  return *this;
}

std::pair<void*, size_t> HugeRegion::release() {
  const std::pair<void*, size_t> out{mapping_, mapping_size_};
  data_ = nullptr;
  size_ = 0;
  mapping_ = nullptr;
  mapping_size_ = 0;
  return out;
}

void HugeRegion::reset() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_size_);
  release();
}

AddressRange::AddressRange(size_t bytes, bool accessible) {
  void* p = mmap(nullptr, bytes, accessible ? PROT_READ | PROT_WRITE : PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return;
  data_ = static_cast<std::byte*>(p);
  size_ = bytes;
}

AddressRange::~AddressRange() {
  if (data_ != nullptr) munmap(data_, size_);
}

AddressRange::AddressRange(AddressRange&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

AddressRange& AddressRange::operator=(AddressRange&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace pi
