#include "core/bandwidth_probe.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

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

ProbeIsa best_isa() {
  if (probe_isa_available(ProbeIsa::Avx512)) return ProbeIsa::Avx512;
  if (probe_isa_available(ProbeIsa::Avx2)) return ProbeIsa::Avx2;
  return ProbeIsa::Scalar;
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
  void* p = std::aligned_alloc(kPage, size);
  if (p == nullptr) return err("bandwidth probe: cannot allocate %zu MiB", size >> 20);
  std::unique_ptr<BandwidthProbe> probe(new BandwidthProbe());
  probe->data_ = static_cast<uint64_t*>(p);
  probe->bytes_ = size;
  probe->isa_ = isa == ProbeIsa::Auto ? best_isa() : isa;
  const size_t n = size / sizeof(uint64_t);
  for (size_t i = 0; i < n; ++i) probe->data_[i] = probe_word(i);
  return probe;
}

BandwidthProbe::~BandwidthProbe() { std::free(data_); }

ProbePass BandwidthProbe::pass(ThreadPool& pool) const {
  const SumFn fn = sum_fn(isa_);
  const size_t lines = bytes_ / kLine, words_per_line = kLine / sizeof(uint64_t);
  const int n_threads = pool.size();
  std::vector<uint64_t> partial(static_cast<size_t>(n_threads));
  const auto t0 = std::chrono::steady_clock::now();
  pool.parallel_for(
      n_threads,
      [&](int64_t task, int) {
        const size_t t = static_cast<size_t>(task), T = static_cast<size_t>(n_threads);
        const size_t begin = lines * t / T, end = lines * (t + 1) / T;
        partial[t] = fn(data_ + begin * words_per_line, (end - begin) * words_per_line);
      },
      Schedule::Static);
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ProbePass r;
  for (uint64_t s : partial) r.sum += s;
  r.gbps = dt > 0 ? static_cast<double>(bytes_) / dt / 1e9 : 0.0;
  return r;
}

std::vector<double> BandwidthProbe::measure(ThreadPool& pool, int passes) const {
  std::vector<double> rates;
  for (int i = 0; i < passes; ++i) rates.push_back(pass(pool).gbps);
  return rates;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace pi
