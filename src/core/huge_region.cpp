#include "core/huge_region.h"

#include <cstdint>

#include "core/os.h"

namespace pi {

HugeRegion::HugeRegion(size_t bytes) {
  if (bytes == 0) return;
  // One extra huge page so that the data can start on a 2 MiB boundary.
  const size_t n = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes + kHugePageBytes;
  void* p = os::map_anonymous(n, /*accessible=*/true, /*overcommit=*/false);
  if (p == nullptr) return;
  mapping_ = p;
  mapping_size_ = n;
  data_ = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(p) + kHugePageBytes - 1) /
                                       kHugePageBytes * kHugePageBytes);
  size_ = bytes;
  os::advise_huge(data_, n - static_cast<size_t>(data_ - static_cast<std::byte*>(p)));
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
  if (mapping_ != nullptr) os::unmap(mapping_, mapping_size_);
  release();
}

AddressRange::AddressRange(size_t bytes, bool accessible) {
  void* p = os::map_anonymous(bytes, accessible, /*overcommit=*/true);
  if (p == nullptr) return;
  data_ = static_cast<std::byte*>(p);
  size_ = bytes;
}

AddressRange::~AddressRange() {
  if (data_ != nullptr) os::unmap(data_, size_);
}

AddressRange::AddressRange(AddressRange&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

AddressRange& AddressRange::operator=(AddressRange&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) os::unmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace pi
