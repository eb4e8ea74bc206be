// A STREAM-style read-bandwidth probe: the rate at which a pool of threads can sum a buffer
// much larger than the caches. Token generation streams the weights once per token, so this
// rate is the ceiling a memory-bound decode step is compared with (`powerinfer bench`).
//
// Each pass splits the buffer into one contiguous slice per pool thread (64-byte aligned) and
// sums the slice as 64-bit words with the widest vector loads the CPU has (AVX-512, AVX2, or
// scalar code elsewhere). The rate is bytes / wall time of the pass, in GB/s (1e9 bytes/s).
// The sum is returned too, so the reads cannot be optimised away and tests can check that
// every word was read exactly once.
//
// The scattered pass reads instead a random, ascending subset of fixed-size chunks of the
// buffer, as the neuron-sparse FFN reads its active rows (a Q4_0 row of 4096 columns is 2304
// bytes); each thread takes a contiguous share of the list, reads it eight chunks in step with
// the same loads as the sequential pass, and prefetches every line of the chunk eight on, as
// the kernels do. On the machines measured such reads
// reach well below the sequential rate (docs/BENCHMARKS.md), so a sparse decode step's
// roofline counts its scattered bytes at this rate.
//
// The buffer lives in 2 MiB-aligned memory advised for transparent huge pages, like weights
// loaded with --no-mmap (scattered reads over small pages would measure TLB misses too).
//
// Thread-safety: a BandwidthProbe is immutable after create(); passes on different pools may
// run concurrently (they then share the memory bus, which is rarely what one wants).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/huge_region.h"
#include "core/thread_pool.h"

namespace pi {

enum class ProbeIsa { Auto, Scalar, Avx2, Avx512 };

std::string_view probe_isa_name(ProbeIsa isa);
// True when this build and CPU can run the probe's loop for `isa` (Auto and Scalar: always).
bool probe_isa_available(ProbeIsa isa);

struct ProbePass {
  double gbps = 0;   // bytes / wall seconds / 1e9
  uint64_t sum = 0;  // wrapping sum of every 64-bit word of the buffer
};

class BandwidthProbe {
 public:
  // Allocates `bytes` (rounded up to a multiple of 4 KiB; at least 4 KiB) and writes every
  // word, word i = probe_word(i), so all pages are resident before the first pass.
  // `isa` Auto picks the widest available; an unavailable ISA is an error.
  static Result<std::unique_ptr<BandwidthProbe>> create(size_t bytes,
                                                        ProbeIsa isa = ProbeIsa::Auto);
  ~BandwidthProbe();
  BandwidthProbe(const BandwidthProbe&) = delete;
  BandwidthProbe& operator=(const BandwidthProbe&) = delete;

  size_t bytes() const { return bytes_; }
  ProbeIsa isa() const { return isa_; }  // never Auto
  const uint64_t* words() const { return data_; }

  // One pass over the whole buffer on `pool` (all of its threads).
  ProbePass pass(ThreadPool& pool) const;
  // `passes` passes; the rates in order.
  std::vector<double> measure(ThreadPool& pool, int passes) const;

  // One scattered pass over the chunks probe_chunks(bytes() / chunk_bytes, fraction, seed)
  // lists (chunk_bytes: a positive multiple of 64); gbps counts the bytes of those chunks,
  // sum their words. 0 GB/s when no chunk is chosen.
  ProbePass scattered_pass(ThreadPool& pool, size_t chunk_bytes, double fraction,
                           uint64_t seed) const;
  // `passes` scattered passes, each with its own chunk list (seeds 1, 2, ...).
  std::vector<double> measure_scattered(ThreadPool& pool, int passes, size_t chunk_bytes,
                                        double fraction) const;

 private:
  BandwidthProbe() = default;
  HugeRegion mem_;
  uint64_t* data_ = nullptr;  // in mem_
  size_t bytes_ = 0;
  ProbeIsa isa_ = ProbeIsa::Scalar;
};

// Chunks a scattered pass reads: each of [0, n_chunks) independently with probability
// `fraction` (a fixed generator seeded by `seed`), ascending.
std::vector<uint32_t> probe_chunks(size_t n_chunks, double fraction, uint64_t seed);

// Chunk size and fraction `powerinfer bench` uses: a Q4_0 row of 4096 columns, 10% of them.
inline constexpr size_t kScatterChunkBytes = 2304;
inline constexpr double kScatterFraction = 0.10;

// The fill pattern: a cheap mix of the word index (every word differs).
constexpr uint64_t probe_word(uint64_t i) { return (i * 0x9E3779B97F4A7C15ull) ^ (i >> 7); }

// The median of `v` (the mean of the middle two for even sizes); 0 for an empty vector.
double median_of(std::vector<double> v);

}  // namespace pi
