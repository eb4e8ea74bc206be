// Internal: the software prefetch of a weight stream that a one-token (memory-bound) leaf reads
// front to back, in two levels: every line kStreamFar bytes ahead into L2 (prefetcht1) and again
// kStreamNear bytes ahead into L1 (prefetcht0).
//
// One level into L1 alone (every line 6 KiB ahead) left the 4-bit leaves at 85-88% of the read
// probe on one thread while the 8-bit ones, with half their work per byte, reached 97-100%: an
// L1 prefetch holds a line-fill buffer for the whole DRAM latency, so a leaf with more work per
// line has fewer misses in flight. With the far level bringing lines only into L2 (the L2's
// queue, deeper than the fill buffers, waits for DRAM) and the near one moving them from L2 to
// L1 in time, the same leaves read at 96-98% (docs/BENCHMARKS.md, "Prefetching in two levels").
//
// Portable (__builtin_prefetch: locality 2 is prefetcht1 on x86, a prefetch for L2 elsewhere),
// so every ISA's files may include it; everything here has internal linkage.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pi::cpu::detail {
namespace {

constexpr size_t kStreamFar = 12288;
constexpr size_t kStreamNear = 1536;

// The two cursors over [begin, end): upto(p) prefetches every line before p + kStreamFar into
// L2 and before p + kStreamNear into L1 that the earlier calls did not, never at or past end.
// Call it with p just past the bytes about to be read, in increasing order. The first call
// also asks for the stream's first kStreamFar bytes past the near level, at once: a short
// stream (an expert's 442 KiB share of a matrix on two threads) would otherwise start with
// 12 KiB read at the latency of demand loads (Qwen3-30B-A3B-shaped decode on 2 threads:
// +1-2%, about the run-to-run noise there).
class StreamAhead {
 public:
  StreamAhead(const uint8_t* begin, const uint8_t* end)
      : far_(reinterpret_cast<uintptr_t>(begin) + kStreamNear),
        near_(reinterpret_cast<uintptr_t>(begin) + kStreamNear),
        end_(reinterpret_cast<uintptr_t>(end)) {}
  void upto(const uint8_t* p) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(p);
    for (; far_ < at + kStreamFar && far_ < end_; far_ += 64) __builtin_prefetch(reinterpret_cast<const void*>(far_), 0, 2);
    for (; near_ < at + kStreamNear && near_ < end_; near_ += 64) __builtin_prefetch(reinterpret_cast<const void*>(near_), 0, 3);
  }

 private:
  uintptr_t far_, near_;
  const uintptr_t end_;
};

// The prefetches a row leaf issues for the line at p of the `next` row it was handed: into L1,
// and with kTwoLevel (consecutive rows through stream_rows, whose `next` is the stream
// kStreamNear bytes on) also the line kStreamFar bytes on in the stream into L2. Issued a line
// at a time as the leaf reads: the far level issued per row instead, a burst of a row's lines
// at its start, measured 5-25% slower than one level (f16 and Q4_K rows of 4096 columns).
template <bool kTwoLevel>
inline void prefetch_next(const uint8_t* p) {
  __builtin_prefetch(p, 0, 3);
  if constexpr (kTwoLevel) __builtin_prefetch(p + (kStreamFar - kStreamNear), 0, 2);
}

// Consecutive rows [first, last) of row_bytes each, one at a time, through a leaf built with
// prefetch_next<true>: leaf(row, next, k) with next the bytes kStreamNear on in the stream (the
// row itself near the end, where the stream has nothing left to prefetch).
template <typename Leaf>
inline void stream_rows(const uint8_t* W, size_t row_bytes, int64_t first, int64_t last, Leaf&& leaf) {
  const uint8_t* begin = W + static_cast<size_t>(first) * row_bytes;
  const uint8_t* end = W + static_cast<size_t>(last) * row_bytes;
  // The far level of the stream's start, which the leaves' prefetches begin past (StreamAhead).
  for (const uint8_t* p = begin + kStreamNear; p < begin + kStreamFar && p < end; p += 64) __builtin_prefetch(p, 0, 2);
  for (int64_t k = first; k < last; ++k) {
    const uint8_t* row = W + static_cast<size_t>(k) * row_bytes;
    const uint8_t* next = row + row_bytes + kStreamNear <= end ? row + kStreamNear : row;
    leaf(row, next, k);
  }
}

}  // namespace
}  // namespace pi::cpu::detail
