#include "backend/cuda/cuda_staging.h"

#include <cstring>

namespace pi::backend::cuda {
namespace {

constexpr size_t kAlign = 256;

size_t align_up(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

}  // namespace

Stager::Stager(uint8_t* host, uint8_t* dev, size_t bytes, cudaStream_t stream)
    : host_(host), dev_(dev), bytes_(bytes), stream_(stream) {}

Stager::~Stager() {
  for (InFlight& f : in_flight_) {
    cudaEventSynchronize(f.done);
    cudaEventDestroy(f.done);
  }
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
}

size_t Stager::packed_bytes(std::initializer_list<HostArray> arrays) {
  size_t n = 0;
  for (const HostArray& a : arrays) n += align_up(a.bytes);
  return n;
}

Status Stager::stage(const char* op, StageKey key, std::initializer_list<HostArray> arrays,
                     void** out) {
  const size_t need = packed_bytes(arrays);
  if (need > bytes_) {
    return err("cuda: %s: index arrays of %zu bytes do not fit the staging ring (%zu bytes)", op,
               need, bytes_);
  }
  Cached* c = key == StageKey::kNone ? nullptr : &cache_[static_cast<int>(key)];
  if (c != nullptr && c->valid && c->begin + bytes_ >= head_ &&
      c->offsets.size() == arrays.size()) {
    // Still in the ring: the same contents?
    bool same = true;
    size_t i = 0;
    for (const HostArray& a : arrays) {
      const size_t end = i + 1 < c->offsets.size() ? c->offsets[i + 1] : c->contents.size();
      if (end - c->offsets[i] != align_up(a.bytes) ||
          (a.bytes > 0 && std::memcmp(c->contents.data() + c->offsets[i], a.data, a.bytes) != 0)) {
        same = false;
        break;
      }
      ++i;
    }
    if (same) {
      const size_t at = c->begin % bytes_;
      for (size_t k = 0; k < c->offsets.size(); ++k) out[k] = dev_ + at + c->offsets[k];
      return {};
    }
  }
  // A region that does not wrap: skip the ring's tail when it is too short.
  uint64_t begin = head_;
  if (begin % bytes_ + need > bytes_) begin = (begin / bytes_ + 1) * bytes_;
  const uint64_t end = begin + need;
  // Wait for the copies out of the pinned bytes this region rewrites.
  while (!in_flight_.empty() && in_flight_.front().begin + bytes_ < end) {
    InFlight f = in_flight_.front();
    in_flight_.pop_front();
    if (cudaError_t e = cudaEventSynchronize(f.done); e != cudaSuccess)
      return err("cuda: %s: cudaEventSynchronize (staging): %s", op, cudaGetErrorString(e));
    free_events_.push_back(f.done);
  }
  head_ = end;
  const size_t at = begin % bytes_;
  size_t off = 0, k = 0;
  if (c != nullptr) {
    c->valid = false;
    c->contents.assign(need, 0);
    c->offsets.clear();
  }
  for (const HostArray& a : arrays) {
    if (a.bytes > 0) std::memcpy(host_ + at + off, a.data, a.bytes);
    if (c != nullptr) {
      if (a.bytes > 0) std::memcpy(c->contents.data() + off, a.data, a.bytes);
      c->offsets.push_back(off);
    }
    out[k++] = dev_ + at + off;
    off += align_up(a.bytes);
  }
  if (cudaError_t e = cudaMemcpyAsync(dev_ + at, host_ + at, need, cudaMemcpyHostToDevice, stream_);
      e != cudaSuccess)
    return err("cuda: %s: cudaMemcpyAsync (staging %zu bytes): %s", op, need,
               cudaGetErrorString(e));
  ++copies_;
  copied_bytes_ += need;
  cudaEvent_t ev = nullptr;
  if (!free_events_.empty()) {
    ev = free_events_.back();
    free_events_.pop_back();
  } else if (cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
             e != cudaSuccess) {
    return err("cuda: %s: cudaEventCreate (staging): %s", op, cudaGetErrorString(e));
  }
  if (cudaError_t e = cudaEventRecord(ev, stream_); e != cudaSuccess)
    return err("cuda: %s: cudaEventRecord (staging): %s", op, cudaGetErrorString(e));
  in_flight_.push_back(InFlight{begin, end, ev});
  if (c != nullptr) {
    c->valid = true;
    c->begin = begin;
  }
  return {};
}

}  // namespace pi::backend::cuda
