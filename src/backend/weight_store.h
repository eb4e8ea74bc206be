// Weights placed on a device: views of host weights (the model file's mapping) made usable by
// the device's ops. On a host-addressable device a placed view is the host view itself (no
// copy, no device memory); elsewhere the bytes are allocated from the device and uploaded,
// and the store owns those buffers. Move-only; views it returned stay valid while it lives.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/device.h"
#include "tensor/view.h"

namespace pi::backend {

class WeightStore {
 public:
  explicit WeightStore(Device& dev) : dev_(&dev) {}

  // An absent view (data == nullptr) stays absent.
  Result<Matrix> place(const Matrix& host);
  Result<Vector> place(const Vector& host);

  // Device bytes this store owns.
  uint64_t bytes() const { return bytes_; }
  Device& device() const { return *dev_; }

  // Device bytes place() would allocate for a view of `bytes` bytes on `dev`.
  static uint64_t cost(const Device& dev, uint64_t bytes) {
    return dev.host_addressable() ? 0 : bytes;
  }

 private:
  Result<const void*> copy_in(const void* host, size_t bytes, const std::string& what);

  Device* dev_;
  std::vector<Buffer> buffers_;
  uint64_t bytes_ = 0;
};

}  // namespace pi::backend
