// Host index arrays of the ops (token ids, positions, cells, row lists: host memory the op
// reads before it returns) copied to the device at submission: packed into a pinned staging
// ring and sent by one asynchronous copy on the compute stream, into the same offsets of a
// device ring, where the op's kernels read them in stream order. A region of the pinned ring
// is rewritten only after the event recorded behind its copy has completed; a region of the
// device ring is rewritten only by a later copy on the same stream, so after every kernel
// that read it. Arrays staged under a key whose contents equal the last ones staged under it
// reuse that device copy while it is still in the ring: a decode step's positions, cells and
// attention lists, the same for every layer, cross once per step.
// Internal to the CUDA backend; driven by the device's one host thread.
#pragma once

#include <cstdint>
#include <deque>
#include <initializer_list>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/runtime.h"

namespace pi::backend::cuda {

// What a staged array is, for reuse across ops (kNone: never reused).
enum class StageKey { kNone, kTokens, kPositions, kCells, kAttention, kRows, kCount };

struct HostArray {
  const void* data;
  size_t bytes;
};

class Stager {
 public:
  // host: pinned memory, dev: device memory, both `bytes` long; copies go on `stream`.
  Stager(uint8_t* host, uint8_t* dev, size_t bytes, cudaStream_t stream);
  ~Stager();
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  // The device copies of `arrays` (each 256-byte aligned) in out[0..], in order. Fails (naming
  // `op` and the sizes) when they do not fit in the ring, or on a CUDA error.
  Status stage(const char* op, StageKey key, std::initializer_list<HostArray> arrays, void** out);
  size_t capacity() const { return bytes_; }
  // Host-to-device copies the ring made, and their bytes (DeviceActivity counts them).
  uint64_t copies() const { return copies_; }
  uint64_t copied_bytes() const { return copied_bytes_; }
  // Bytes the arrays take in the ring (what stage() needs to fit).
  static size_t packed_bytes(std::initializer_list<HostArray> arrays);

 private:
  struct InFlight {
    uint64_t begin, end;  // ring positions (monotonic)
    cudaEvent_t done;
  };
  struct Cached {
    bool valid = false;
    uint64_t begin = 0;
    std::vector<uint8_t> contents;  // the packed arrays
    std::vector<size_t> offsets;    // of each array within them
  };

  uint8_t* host_;
  uint8_t* dev_;
  size_t bytes_;
  cudaStream_t stream_;
  uint64_t head_ = 0;  // end of the latest region, monotonic
  uint64_t copies_ = 0, copied_bytes_ = 0;
  std::deque<InFlight> in_flight_;
  std::vector<cudaEvent_t> free_events_;
  Cached cache_[static_cast<int>(StageKey::kCount)];
};

}  // namespace pi::backend::cuda
