// Internal: per-calling-thread scratch memory for the kernel front ends (prepared
// activations, compacted index lists, attention scores). A Scratch object hands out
// 64-byte-aligned buffers that stay valid until it is destroyed; the memory behind it is a
// thread-local set of chunks that only grows, so after warm-up no call allocates.
// Not for use across threads except by passing the returned pointers to pool tasks of the
// same call.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pi::cpu::detail {

class Scratch {
 public:
  Scratch();
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  void* alloc_bytes(size_t bytes);
  template <typename T>
  T* alloc(int64_t n) {
    return static_cast<T*>(alloc_bytes(static_cast<size_t>(n) * sizeof(T)));
  }

 private:
  size_t chunk_;   // chunk index at construction
  size_t offset_;  // offset in that chunk at construction
};

}  // namespace pi::cpu::detail
