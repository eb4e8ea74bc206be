#include "core/bandwidth_probe.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <cstdint>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define PI_PROBE_X86 1
#endif

namespace pi {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kLine = 64;

// Each summing loop reads [p, p + n) words and returns their wrapping sum. n is any count;
// p is 64-byte aligned. The vector loops keep four independent accumulators so that the
// adds never limit the load rate.
uint64_t sum_scalar(const uint64_t* p, size_t n) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += p[i];
    s1 += p[i + 1];
    s2 += p[i + 2];
    s3 += p[i + 3];
  }
  for (; i < n; ++i) s0 += p[i];
  return s0 + s1 + s2 + s3;
}

#if defined(PI_PROBE_X86)
__attribute__((target("avx2"))) uint64_t sum_avx2(const uint64_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {  // 128 bytes: two cache lines
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3] + sum_scalar(p + i, n - i);
}

__attribute__((target("avx512f"))) uint64_t sum_avx512(const uint64_t* p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {  // 256 bytes: four cache lines
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 8));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 16));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 24));
  }
  const __m512i s = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, s);
  uint64_t t = 0;
  for (uint64_t v : lanes) t += v;
  return t + sum_scalar(p + i, n - i);
}
#endif

using SumFn = uint64_t (*)(const uint64_t*, size_t);

SumFn sum_fn(ProbeIsa isa) {
#if defined(PI_PROBE_X86)
  if (isa == ProbeIsa::Avx512) return sum_avx512;
  if (isa == ProbeIsa::Avx2) return sum_avx2;
#endif
  return sum_scalar;
}

// Scattered reads: groups of kGroup chunks read line by line in step (kGroup streams in
// flight), each line load paired with a prefetch of the same line of the chunk kGroup on: the
// scheme of the sparse row kernels (unrolled, 4, 8 and 16 chunks in step read alike here). A
// group function reads one whole group (rows[i], `words` words each, a whole number of lines)
// and returns the wrapping sum of its words. The loop over the group's rows is unrolled, so
// that a line costs a load, an add and a prefetch: with the rows in a loop (and, as GCC
// compiled the portable form, eight scalar adds per line) the same reads measured 7-10%
// slower here, which set the roofline below what the machine reaches (docs/BENCHMARKS.md,
// "The scattered probe read slower than the machine can").
constexpr size_t kGroup = 8;
constexpr size_t kLineWords = kLine / sizeof(uint64_t);
using GroupFn = uint64_t (*)(const uint64_t* const* rows, const char* const* next, size_t words);

uint64_t group_scalar(const uint64_t* const* rows, const char* const* next, size_t words) {
  uint64_t acc[kLineWords] = {};
  for (size_t w = 0; w < words; w += kLineWords) {
#pragma GCC unroll 8
    for (size_t i = 0; i < kGroup; ++i) {
      __builtin_prefetch(next[i] + w * sizeof(uint64_t));
      for (size_t j = 0; j < kLineWords; ++j) acc[j] += rows[i][w + j];
    }
  }
  uint64_t t = 0;
  for (uint64_t v : acc) t += v;
  return t;
}

#if defined(PI_PROBE_X86)
__attribute__((target("avx2"))) uint64_t group_avx2(const uint64_t* const* rows, const char* const* next,
                                                    size_t words) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0;
  for (size_t w = 0; w < words; w += kLineWords) {
#pragma GCC unroll 8
    for (size_t i = 0; i < kGroup; ++i) {
      _mm_prefetch(next[i] + w * sizeof(uint64_t), _MM_HINT_T0);
      a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(rows[i] + w)));
      a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(rows[i] + w + 4)));
    }
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_add_epi64(a0, a1));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

__attribute__((target("avx512f"))) uint64_t group_avx512(const uint64_t* const* rows, const char* const* next,
                                                        size_t words) {
  __m512i a = _mm512_setzero_si512();
  for (size_t w = 0; w < words; w += kLineWords) {
#pragma GCC unroll 8
    for (size_t i = 0; i < kGroup; ++i) {
      _mm_prefetch(next[i] + w * sizeof(uint64_t), _MM_HINT_T0);
      a = _mm512_add_epi64(a, _mm512_load_si512(rows[i] + w));
    }
  }
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, a);
  uint64_t t = 0;
  for (uint64_t v : lanes) t += v;
  return t;
}
#endif

GroupFn group_fn(ProbeIsa isa) {
#if defined(PI_PROBE_X86)
  if (isa == ProbeIsa::Avx512) return group_avx512;
  if (isa == ProbeIsa::Avx2) return group_avx2;
#endif
  return group_scalar;
}

ProbeIsa best_isa() {
  if (probe_isa_available(ProbeIsa::Avx512)) return ProbeIsa::Avx512;
  if (probe_isa_available(ProbeIsa::Avx2)) return ProbeIsa::Avx2;
  return ProbeIsa::Scalar;
}

// Splits items [0, n) into one contiguous slice per pool thread, runs sum_slice(begin, end) on
// each (returning the slice's word sum) and times the whole: gbps = bytes / wall seconds.
template <typename SumSlice>
ProbePass timed_slices(ThreadPool& pool, size_t n, size_t bytes, SumSlice sum_slice) {
  const int n_threads = pool.size();
  std::vector<uint64_t> partial(static_cast<size_t>(n_threads));
  const auto t0 = std::chrono::steady_clock::now();
  pool.parallel_for(
      n_threads,
      [&](int64_t task, int) {
        const size_t t = static_cast<size_t>(task), T = static_cast<size_t>(n_threads);
        partial[t] = sum_slice(n * t / T, n * (t + 1) / T);
      },
      Schedule::Static);
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ProbePass r;
  for (uint64_t v : partial) r.sum += v;
  r.gbps = dt > 0 ? static_cast<double>(bytes) / dt / 1e9 : 0.0;
  return r;
}

}  // namespace

std::string_view probe_isa_name(ProbeIsa isa) {
  switch (isa) {
    case ProbeIsa::Auto:
      return "auto";
    case ProbeIsa::Scalar:
      return "scalar";
    case ProbeIsa::Avx2:
      return "avx2";
    case ProbeIsa::Avx512:
      return "avx512";
  }
  return "?";
}

bool probe_isa_available(ProbeIsa isa) {
  switch (isa) {
    case ProbeIsa::Auto:
    case ProbeIsa::Scalar:
      return true;
#if defined(PI_PROBE_X86)
    case ProbeIsa::Avx2:
      return __builtin_cpu_supports("avx2");
    case ProbeIsa::Avx512:
      return __builtin_cpu_supports("avx512f");
#else
    default:
      return false;
#endif
  }
  return false;
}

Result<std::unique_ptr<BandwidthProbe>> BandwidthProbe::create(size_t bytes, ProbeIsa isa) {
  if (!probe_isa_available(isa))
    return err("bandwidth probe: ISA %s is not available on this CPU/build",
               probe_isa_name(isa).data());
  const size_t size = std::max(kPage, (bytes + kPage - 1) / kPage * kPage);
  HugeRegion mem(size);
  if (!mem.ok()) return err("bandwidth probe: cannot allocate %zu MiB", size >> 20);
  std::unique_ptr<BandwidthProbe> probe(new BandwidthProbe());
  probe->data_ = reinterpret_cast<uint64_t*>(mem.data());
  probe->mem_ = std::move(mem);
  probe->bytes_ = size;
  probe->isa_ = isa == ProbeIsa::Auto ? best_isa() : isa;
  const size_t n = size / sizeof(uint64_t);
  for (size_t i = 0; i < n; ++i) probe->data_[i] = probe_word(i);
  return probe;
}

BandwidthProbe::~BandwidthProbe() = default;

ProbePass BandwidthProbe::pass(ThreadPool& pool) const {
  const SumFn fn = sum_fn(isa_);
  const size_t lines = bytes_ / kLine, words_per_line = kLine / sizeof(uint64_t);
  return timed_slices(pool, lines, bytes_, [&](size_t begin, size_t end) {
    return fn(data_ + begin * words_per_line, (end - begin) * words_per_line);
  });
}

std::vector<double> BandwidthProbe::measure(ThreadPool& pool, int passes) const {
  std::vector<double> rates;
  for (int i = 0; i < passes; ++i) rates.push_back(pass(pool).gbps);
  return rates;
}

std::vector<uint32_t> probe_chunks(size_t n_chunks, double fraction, uint64_t seed) {
  // splitmix64: fixed across platforms and standard libraries.
  uint64_t state = seed;
  auto next = [&state] {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  const double f = std::clamp(fraction, 0.0, 1.0);
  // f * 2^64 for f < 1 (below 2^64, so the conversion is defined); every draw for f == 1.
  const uint64_t threshold =
      f >= 1.0 ? UINT64_MAX : static_cast<uint64_t>(f * 18446744073709551616.0);
  std::vector<uint32_t> out;
  out.reserve(static_cast<size_t>(f * static_cast<double>(n_chunks)) + 16);
  for (size_t c = 0; c < n_chunks && c <= UINT32_MAX; ++c)
    if (next() <= threshold && f > 0.0) out.push_back(static_cast<uint32_t>(c));
  return out;
}

ProbePass BandwidthProbe::scattered_pass(ThreadPool& pool, size_t chunk_bytes, double fraction,
                                         uint64_t seed) const {
  ProbePass r;
  if (chunk_bytes == 0 || chunk_bytes % kLine != 0) return r;
  const std::vector<uint32_t> chunks = probe_chunks(bytes_ / chunk_bytes, fraction, seed);
  if (chunks.empty()) return r;
  const GroupFn group = group_fn(isa_);
  const SumFn sum = sum_fn(isa_);
  const size_t words = chunk_bytes / sizeof(uint64_t), n = chunks.size();
  return timed_slices(pool, n, n * chunk_bytes, [&](size_t begin, size_t end) {
    uint64_t total = 0;
    size_t k = begin;
    for (; k + kGroup <= end; k += kGroup) {
      const uint64_t* rows[kGroup];
      const char* next[kGroup];
      for (size_t i = 0; i < kGroup; ++i) {
        rows[i] = data_ + chunks[k + i] * words;
        const size_t ahead = k + kGroup + i;
        next[i] = reinterpret_cast<const char*>(ahead < end ? data_ + chunks[ahead] * words : rows[i]);
      }
      total += group(rows, next, words);
    }
    for (; k < end; ++k) total += sum(data_ + chunks[k] * words, words);  // the last few chunks
    return total;
  });
}

std::vector<double> BandwidthProbe::measure_scattered(ThreadPool& pool, int passes,
                                                      size_t chunk_bytes, double fraction) const {
  std::vector<double> rates;
  for (int i = 0; i < passes; ++i)
    rates.push_back(scattered_pass(pool, chunk_bytes, fraction, static_cast<uint64_t>(i + 1)).gbps);
  return rates;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace pi
