// Anonymous, zero-filled memory that starts on a 2 MiB boundary and is advised for
// transparent huge pages (best effort: without THP it is ordinary memory). Used where large
// buffers are read at random or with long strides - model weights read into memory, the KV
// cache - so that a TLB entry covers 2 MiB instead of 4 KiB.
// Move-only; unmaps itself unless release()d.
#pragma once

#include <cstddef>
#include <utility>

namespace pi {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

class HugeRegion {
 public:
  HugeRegion() = default;
  // At least `bytes` bytes; ok() is false when the mapping failed (os::last_error() says why).
  explicit HugeRegion(size_t bytes);
  ~HugeRegion();
  HugeRegion(const HugeRegion&) = delete;
  HugeRegion& operator=(const HugeRegion&) = delete;
  HugeRegion(HugeRegion&& other) noexcept;
  HugeRegion& operator=(HugeRegion&& other) noexcept;

  bool ok() const { return data_ != nullptr; }
  std::byte* data() const { return data_; }  // 2 MiB aligned
  size_t size() const { return size_; }      // as requested
  // The whole mapping (data() lies inside it): what os::unmap, os::protect and smaps see.
  void* mapping() const { return mapping_; }
  size_t mapping_size() const { return mapping_size_; }
  // Gives up ownership: the caller releases {mapping, mapping_size} with os::unmap.
  std::pair<void*, size_t> release();

 private:
  void reset();
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
};

// Address space reserved without committing memory: pages come when first written
// (`accessible`), or never, every access faulting (not accessible: addresses that stand for
// something else, such as the simulated device's buffer handles). Move-only; unmapped on
// destruction. ok() is false when the system refused the reservation.
class AddressRange {
 public:
  AddressRange() = default;
  AddressRange(size_t bytes, bool accessible);
  ~AddressRange();
  AddressRange(const AddressRange&) = delete;
  AddressRange& operator=(const AddressRange&) = delete;
  AddressRange(AddressRange&& other) noexcept;
  AddressRange& operator=(AddressRange&& other) noexcept;

  bool ok() const { return data_ != nullptr; }
  std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace pi
