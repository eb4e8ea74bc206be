// Kernel microbenchmarks at Llama-2-7B shapes. Token generation is memory-bound, so the
// figure of merit is the effective bandwidth over the weight bytes a kernel actually reads,
// compared with a STREAM-style read probe (a sum over a 2 GiB buffer) run on the same pool,
// alternating with the kernel (see run_bandwidth): `probe_pct` = kernel GB/s / probe GB/s,
// the median over rounds.
//
// Weights rotate over enough copies that the total exceeds the L3 cache many times, so every
// call streams from DRAM. Sparse kernels run at 10% active rows (random, sorted) and count
// only the rows they read. Matmul reports GFLOP/s at 64 and 512 tokens.
//
// Usage: bench_kernels [google-benchmark flags], e.g. --benchmark_filter=matvec/q4_0
// The environment variable PI_KERNELS_ISA selects the kernel ISA as for the CLI.
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "tensor/quant.h"

namespace {

using pi::DType;
using pi::ThreadPool;
namespace cpu = pi::cpu;

// The kernels every benchmark runs: the default ISA (PI_KERNELS_ISA picks another).
const cpu::Kernels& kernels() {
  static const cpu::Kernels k(cpu::default_isa());
  return k;
}

constexpr size_t kProbeBytes = size_t{2} << 30;
// Weight copies rotate over at least this many bytes: 16x the 32 MiB L3 of the test machine.
// PI_BENCH_ROTATE_MB overrides it (e.g. 1 keeps one copy, cache-resident for small shapes).
size_t rotate_bytes() {
  static const size_t bytes = [] {
    const char* env = std::getenv("PI_BENCH_ROTATE_MB");
    return (env != nullptr ? std::strtoull(env, nullptr, 10) : 512ull) << 20;
  }();
  return bytes;
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;

// PI_BENCH_HUGEPAGES=1 backs weights and the probe with transparent huge pages (fewer TLB
// misses for sparse row gathers); the default is ordinary 4 KiB pages, as for a mapped file.
bool huge_pages() {
  static const bool on = [] {
    const char* env = std::getenv("PI_BENCH_HUGEPAGES");
    return env != nullptr && std::strcmp(env, "1") == 0;
  }();
  return on;
}

Buffer alloc(size_t bytes) {
  const size_t align = huge_pages() ? (size_t{2} << 20) : 64;
  const size_t size = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, size);
  if (p == nullptr) std::abort();
  if (huge_pages()) madvise(p, size, MADV_HUGEPAGE);
  return Buffer(static_cast<uint8_t*>(p));
}

ThreadPool& pool(int threads) {
  static ThreadPool p1(1), p2(2);
  return threads == 1 ? p1 : p2;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU time of the calling thread. On a shared machine a 1-thread pool's bandwidth over CPU
// time approximates what an idle machine gives (time-slicing removed); reported alongside.
double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// ---- read probe -------------------------------------------------------------------------
const uint64_t* probe_data() {
  static Buffer buf = [] {
    Buffer b = alloc(kProbeBytes);
    std::memset(b.get(), 1, kProbeBytes);
    return b;
  }();
  return reinterpret_cast<const uint64_t*>(buf.get());
}

uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i + 4 <= n; i += 4) {
    s0 += p[i];
    s1 += p[i + 1];
    s2 += p[i + 2];
    s3 += p[i + 3];
  }
  return s0 + s1 + s2 + s3;
}

struct Rate {
  double wall = 0.0;  // GB/s over wall time
  double cpu = 0.0;   // GB/s over the calling thread's CPU time (1-thread pools only)
};

// One pass over `bytes` of the probe buffer starting at `start`, split evenly over the
// pool's threads.
Rate probe_pass(ThreadPool& tp, size_t start, size_t bytes) {
  const uint64_t* data = probe_data() + start / 8;
  const size_t words = bytes / 8;
  std::vector<uint64_t> partial(static_cast<size_t>(tp.size()));
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = thread_cpu_seconds();
  tp.parallel_for(
      tp.size(),
      [&](int64_t t, int) {
        const size_t begin = words * static_cast<size_t>(t) / static_cast<size_t>(tp.size());
        const size_t end = words * static_cast<size_t>(t + 1) / static_cast<size_t>(tp.size());
        partial[static_cast<size_t>(t)] = sum_words(data + begin, end - begin);
      },
      pi::Schedule::Static);
  const double dt = seconds_since(t0), dc = thread_cpu_seconds() - c0;
  benchmark::DoNotOptimize(partial.data());
  return {static_cast<double>(bytes) / dt / 1e9, static_cast<double>(bytes) / dc / 1e9};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void BM_ReadProbe(benchmark::State& state) {
  ThreadPool& tp = pool(static_cast<int>(state.range(0)));
  double total = 0.0;
  int n = 0;
  for (auto _ : state) {
    total += probe_pass(tp, 0, kProbeBytes).wall;
    ++n;
  }
  state.counters["GB/s"] = total / n;
}

// ---- weights ------------------------------------------------------------------------------
// Random but valid weights: random quant bytes with sane block scales, finite f16/bf16/f32.
struct Matrix {
  DType type;
  int64_t rows, cols;
  size_t bytes;  // one copy
  std::vector<Buffer> copies;
  const void* copy(size_t i) const { return copies[i % copies.size()].get(); }
};

void fill_random(DType t, uint8_t* p, int64_t rows, int64_t cols, uint32_t seed) {
  if (pi::is_r16(t)) {  // a matrix of the file type's bytes, interleaved
    const DType base = pi::r16_file_type(t);
    std::vector<uint8_t> file(pi::row_bytes(base, cols) * static_cast<size_t>(rows));
    fill_random(base, file.data(), rows, cols, seed);
    pi::interleave_rows(t, file.data(), p, rows, cols);
    return;
  }
  std::mt19937 rng(seed);
  const size_t bytes = pi::row_bytes(t, cols) * static_cast<size_t>(rows);
  for (size_t i = 0; i + 4 <= bytes; i += 4) {
    const uint32_t v = rng();
    std::memcpy(p + i, &v, 4);
  }
  const uint16_t scale = pi::f32_to_f16(0.01f), minimum = pi::f32_to_f16(-0.05f);
  const pi::DTypeInfo& info = pi::dtype_info(t);
  const size_t n = bytes / info.type_size;
  for (size_t b = 0; b < n; ++b) {
    uint8_t* blk = p + b * info.type_size;
    switch (t) {
      case DType::F32: {
        const float v = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) * 1e-3f;
        std::memcpy(blk, &v, 4);
        break;
      }
      case DType::F16: {
        const uint16_t h = pi::f32_to_f16(static_cast<float>(static_cast<int>(rng() % 2001) - 1000) * 1e-3f);
        std::memcpy(blk, &h, 2);
        break;
      }
      case DType::BF16: {
        const uint16_t h = pi::f32_to_bf16(static_cast<float>(static_cast<int>(rng() % 2001) - 1000) * 1e-3f);
        std::memcpy(blk, &h, 2);
        break;
      }
      case DType::Q6_K:
        std::memcpy(blk + 208, &scale, 2);
        break;
      case DType::Q3_K:
        std::memcpy(blk + 108, &scale, 2);
        break;
      case DType::Q2_K:
        std::memcpy(blk + 80, &scale, 2);
        std::memcpy(blk + 82, &scale, 2);
        break;
      case DType::Q4_K:
      case DType::Q5_K:
        std::memcpy(blk, &scale, 2);
        std::memcpy(blk + 2, &scale, 2);
        break;
      case DType::Q4_1:
      case DType::Q5_1:
        std::memcpy(blk, &scale, 2);
        std::memcpy(blk + 2, &minimum, 2);
        break;
      case DType::MXFP4:
        blk[0] = 120;  // 2^-8: an exponent byte, not an f16
        break;
      default:
        std::memcpy(blk, &scale, 2);
    }
  }
}

const Matrix& matrix(DType t, int64_t rows, int64_t cols) {
  static std::vector<std::unique_ptr<Matrix>> cache;
  for (auto& m : cache)
    if (m->type == t && m->rows == rows && m->cols == cols) return *m;
  // Keep at most one shape's copies alive to bound memory.
  cache.clear();
  auto m = std::make_unique<Matrix>();
  m->type = t;
  m->rows = rows;
  m->cols = cols;
  m->bytes = pi::row_bytes(t, cols) * static_cast<size_t>(rows);
  const size_t n = std::max<size_t>(1, (rotate_bytes() + m->bytes - 1) / m->bytes);
  for (size_t i = 0; i < n; ++i) {
    m->copies.push_back(alloc(m->bytes));
    if (i == 0) {
      fill_random(t, m->copies[0].get(), rows, cols, 1234);
    } else {
      std::memcpy(m->copies[i].get(), m->copies[0].get(), m->bytes);
    }
  }
  cache.push_back(std::move(m));
  return *cache.back();
}

std::vector<float> random_vector(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& e : v) e = d(rng);
  return v;
}

// Lists of active rows for the sparse benchmarks: kLists different ones, used in turn (call i
// reads list i % kLists of copy i % copies). One list for every call let the L3 cache keep
// rows between calls (only ~10% of each copy is touched, so all copies' touched rows were
// ~50 MiB): 33 GB/s against 24 GB/s in the model for the same kernel.
constexpr size_t kLists = 17;

std::vector<int32_t> active_rows(int64_t n, double frac, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> all(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(static_cast<size_t>(static_cast<double>(n) * frac));
  std::sort(all.begin(), all.end());
  return all;
}

// Alternates, kRounds times, a pass of the read probe over kWindow bytes and enough kernel
// calls to read about as many weight bytes, and reports medians: kernel GB/s (over the
// weight bytes one call reads, `bytes`), probe GB/s, and their ratio per round (probe_pct).
// Alternating keeps both under the same conditions on a shared machine. For 1-thread pools
// cpu_pct is the same ratio over thread CPU time (insensitive to time-slicing).
constexpr int kRounds = 15;
constexpr size_t kWindow = size_t{512} << 20;

template <typename Call>
void run_bandwidth(benchmark::State& state, ThreadPool& tp, double bytes, Call call) {
  const int64_t calls = std::max<int64_t>(2, static_cast<int64_t>(static_cast<double>(kWindow) / bytes));
  std::vector<double> kernel, probe, pct, cpu_pct;
  size_t copy = 0;
  call(copy++);  // warm-up: scratch buffers, page faults
  for (auto _ : state) {
    for (int round = 0; round < kRounds; ++round) {
      const Rate p = probe_pass(tp, (static_cast<size_t>(round) * kWindow) % kProbeBytes, kWindow);
      const auto t0 = std::chrono::steady_clock::now();
      const double c0 = thread_cpu_seconds();
      for (int64_t i = 0; i < calls; ++i) call(copy++);
      const double total = bytes * static_cast<double>(calls);
      const double k = total / seconds_since(t0) / 1e9;
      const double kc = total / (thread_cpu_seconds() - c0) / 1e9;
      kernel.push_back(k);
      probe.push_back(p.wall);
      pct.push_back(100.0 * k / p.wall);
      cpu_pct.push_back(100.0 * kc / p.cpu);
    }
  }
  state.counters["GB/s"] = median(kernel);
  state.counters["probe_GB/s"] = median(probe);
  state.counters["probe_pct"] = median(pct);
  if (tp.size() == 1) state.counters["cpu_pct"] = median(cpu_pct);
}

struct Shape {
  const char* name;
  int64_t rows, cols;
};
// Attention and FFN matrices of Llama-2-7B, then its predictor (rank 1024): fc1 and fc2.
constexpr Shape kShapes[] = {{"4096x4096", 4096, 4096},   {"11008x4096", 11008, 4096},
                             {"4096x11008", 4096, 11008}, {"1024x4096", 1024, 4096},
                             {"11008x1024", 11008, 1024}};
// gpt-oss's expert matrices (n_embd 2880, expert width 2880: 90 blocks per row), for MXFP4
// and Q4_0 alongside it.
constexpr Shape kExpertShape{"2880x2880", 2880, 2880};
const DType kTypes[] = {DType::Q4_0, DType::Q8_0, DType::F16,  DType::BF16, DType::F32,
                        DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q6_K, DType::Q4_K,
                        DType::Q5_K, DType::Q3_K, DType::Q2_K, DType::MXFP4};

void register_all() {
  benchmark::RegisterBenchmark("probe/read_2GiB", BM_ReadProbe)->Arg(1)->Arg(2)->UseRealTime()->Iterations(5);

  for (DType t : kTypes) {
    const std::string tn(pi::dtype_name(t));
    std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
    if (t == DType::MXFP4 || t == DType::Q4_0) shapes.push_back(kExpertShape);
    for (const Shape& s : shapes) {
      benchmark::RegisterBenchmark(("matvec/" + tn + "/" + s.name).c_str(), [t, s](benchmark::State& st) {
        ThreadPool& tp = pool(static_cast<int>(st.range(0)));
        const Matrix& w = matrix(t, s.rows, s.cols);
        const auto x = random_vector(s.cols, 1);
        std::vector<float> y(static_cast<size_t>(s.rows));
        run_bandwidth(st, tp, static_cast<double>(w.bytes), [&](size_t i) {
          kernels().matvec(tp, t, w.copy(i), s.rows, s.cols, x.data(), y.data());
        });
      })->Arg(1)->Arg(2)->UseRealTime()->Iterations(1);
    }
    if (t == DType::Q4_0 || t == DType::Q8_0 || t == DType::MXFP4 || t == DType::Q4_K) {
      // The dense layouts of Q4_0, Q8_0, MXFP4 and Q4_K (cpu::dot_layout): 16 rows side by side.
      const DType r16 = pi::cpu::dot_layout(pi::cpu::Isa::Avx512, t, 16);
      for (const Shape& s : shapes) {
        benchmark::RegisterBenchmark(("matvec/" + std::string(pi::dtype_name(r16)) + "/" + s.name).c_str(), [r16, s](benchmark::State& st) {
          ThreadPool& tp = pool(static_cast<int>(st.range(0)));
          const Matrix& w = matrix(r16, s.rows, s.cols);
          const auto x = random_vector(s.cols, 1);
          std::vector<float> y(static_cast<size_t>(s.rows));
          run_bandwidth(st, tp, static_cast<double>(w.bytes), [&](size_t i) {
            kernels().matvec(tp, r16, w.copy(i), s.rows, s.cols, x.data(), y.data());
          });
        })->Arg(1)->Arg(2)->UseRealTime()->Iterations(1);
      }
    }
    // Sparse gate/up ([n_ff, n_embd]) and down_t ([n_ff, n_embd]) at 10% active neurons; Q4_0
    // also at 50%, the up rows of calibrated files (the axpy's neighbour at that density).
    const Shape ff{"11008x4096", 11008, 4096};
    for (const int pct : t == DType::Q4_0 ? std::vector<int>{10, 50} : std::vector<int>{10}) {
      benchmark::RegisterBenchmark(("matvec_rows_" + std::to_string(pct) + "pct/" + tn + "/" + ff.name).c_str(), [t, ff, pct](benchmark::State& st) {
        ThreadPool& tp = pool(static_cast<int>(st.range(0)));
        const Matrix& w = matrix(t, ff.rows, ff.cols);
        const auto x = random_vector(ff.cols, 2);
        std::vector<std::vector<int32_t>> lists;
        for (size_t l = 0; l < kLists; ++l) lists.push_back(active_rows(ff.rows, pct / 100.0, static_cast<uint32_t>(3 + l)));
        std::vector<float> y(static_cast<size_t>(ff.rows));
        const double bytes = static_cast<double>(lists[0].size() * pi::row_bytes(t, ff.cols));
        run_bandwidth(st, tp, bytes, [&](size_t i) {
          const auto& idx = lists[i % kLists];
          kernels().matvec_rows(tp, t, w.copy(i), ff.cols, idx.data(), static_cast<int64_t>(idx.size()), x.data(), y.data());
        });
      })->Arg(1)->Arg(2)->UseRealTime()->Iterations(1);
    }
    // Activation-sparse files (powerinfer calibrate) keep 40-60% of the rows: Q4_0 at 50% too.
    for (const int pct : t == DType::Q4_0 ? std::vector<int>{10, 50} : std::vector<int>{10}) {
      benchmark::RegisterBenchmark(("axpy_rows_" + std::to_string(pct) + "pct/" + tn + "/" + ff.name).c_str(), [t, ff, pct](benchmark::State& st) {
        ThreadPool& tp = pool(static_cast<int>(st.range(0)));
        const Matrix& w = matrix(t, ff.rows, ff.cols);
        const auto a = random_vector(ff.rows, 4);
        std::vector<std::vector<int32_t>> lists;
        for (size_t l = 0; l < kLists; ++l)
          lists.push_back(active_rows(ff.rows, pct / 100.0, static_cast<uint32_t>(50 + l)));
        std::vector<float> y(static_cast<size_t>(ff.cols));
        const double bytes = static_cast<double>(lists[0].size() * pi::row_bytes(t, ff.cols));
        run_bandwidth(st, tp, bytes, [&](size_t i) {
          const auto& idx = lists[i % kLists];
          kernels().axpy_rows(tp, t, w.copy(i), ff.rows, ff.cols, idx.data(), static_cast<int64_t>(idx.size()), a.data(), y.data());
        });
      })->Arg(1)->Arg(2)->UseRealTime()->Iterations(1);
    }
    benchmark::RegisterBenchmark(("axpy_dense/" + tn + "/" + ff.name).c_str(), [t, ff](benchmark::State& st) {
      ThreadPool& tp = pool(static_cast<int>(st.range(0)));
      const Matrix& w = matrix(t, ff.rows, ff.cols);
      const auto a = random_vector(ff.rows, 6);
      std::vector<float> y(static_cast<size_t>(ff.cols));
      run_bandwidth(st, tp, static_cast<double>(w.bytes), [&](size_t i) {
        kernels().axpy_dense(tp, t, w.copy(i), ff.rows, ff.cols, a.data(), y.data());
      });
    })->Arg(1)->Arg(2)->UseRealTime()->Iterations(1);
  }

  // Compute ceiling: the same kernels on one L2-resident matrix (256 x 4096; MXFP4 and Q4_0 also
  // 256 x 2880, gpt-oss's rows). GB/s here far above the probe means the DRAM-sized runs are
  // bound by memory, not by the kernel.
  for (DType t : kTypes) {
    const std::string tn(pi::dtype_name(t));
    std::vector<int64_t> l2_cols{4096};
    if (t == DType::MXFP4 || t == DType::Q4_0) l2_cols.push_back(kExpertShape.cols);
    for (const int64_t cols : l2_cols) {
      benchmark::RegisterBenchmark(("matvec_l2/" + tn + "/256x" + std::to_string(cols)).c_str(), [t, cols](benchmark::State& st) {
        ThreadPool& tp = pool(1);
        Buffer w = alloc(pi::row_bytes(t, cols) * 256);
        fill_random(t, w.get(), 256, cols, 9);
        const auto x = random_vector(cols, 8);
        std::vector<float> y(256);
        int64_t n = 0;
        for (auto _ : st) {
          kernels().matvec(tp, t, w.get(), 256, cols, x.data(), y.data());
          ++n;
        }
        st.counters["GB/s"] = benchmark::Counter(static_cast<double>(pi::row_bytes(t, cols) * 256) * static_cast<double>(n),
                                                 benchmark::Counter::kIsRate);
      });
    }
    benchmark::RegisterBenchmark(("axpy_l2/" + tn + "/256x4096").c_str(), [t](benchmark::State& st) {
      ThreadPool& tp = pool(1);
      Buffer w = alloc(pi::row_bytes(t, 4096) * 256);
      fill_random(t, w.get(), 256, 4096, 9);
      const auto a = random_vector(256, 8);
      std::vector<float> y(4096);
      const auto t0 = std::chrono::steady_clock::now();
      int64_t n = 0;
      for (auto _ : st) {
        kernels().axpy_dense(tp, t, w.get(), 256, 4096, a.data(), y.data());
        ++n;
      }
      st.counters["GB/s"] = benchmark::Counter(static_cast<double>(pi::row_bytes(t, 4096) * 256) * static_cast<double>(n),
                                               benchmark::Counter::kIsRate);
      benchmark::DoNotOptimize(t0);
    });
    // The sparse axpy's compute ceiling at the densities activation sparsity runs (percent of
    // rows kept, random ascending lists): GB/s over the kept rows' bytes.
    benchmark::RegisterBenchmark(("axpy_rows_l2/" + tn + "/256x4096").c_str(), [t](benchmark::State& st) {
      ThreadPool& tp = pool(1);
      Buffer w = alloc(pi::row_bytes(t, 4096) * 256);
      fill_random(t, w.get(), 256, 4096, 9);
      const auto a = random_vector(256, 8);
      const auto idx = active_rows(256, static_cast<double>(st.range(0)) / 100.0, 11);
      std::vector<float> y(4096);
      int64_t n = 0;
      for (auto _ : st) {
        kernels().axpy_rows(tp, t, w.get(), 256, 4096, idx.data(), static_cast<int64_t>(idx.size()), a.data(), y.data());
        ++n;
      }
      st.counters["GB/s"] = benchmark::Counter(static_cast<double>(pi::row_bytes(t, 4096) * idx.size()) * static_cast<double>(n),
                                               benchmark::Counter::kIsRate);
    })->Arg(40)->Arg(50)->Arg(60)->Arg(100);
  }

  // Prompt processing: GFLOP/s of matmul over 64 and 512 tokens.
  for (DType t : {DType::Q4_0, DType::Q4_0_R16, DType::Q8_0, DType::Q8_0_R16, DType::Q4_K, DType::Q4_K_R16,
                  DType::Q6_K, DType::F16, DType::MXFP4}) {
    const std::string tn(pi::dtype_name(t));
    for (int64_t m : {1, 64, 512}) {
      benchmark::RegisterBenchmark(("matmul/" + tn + "/4096x4096/m" + std::to_string(m)).c_str(),
                                   [t, m](benchmark::State& st) {
        ThreadPool& tp = pool(static_cast<int>(st.range(0)));
        const Matrix& w = matrix(t, 4096, 4096);
        const auto X = random_vector(m * 4096, 7);
        std::vector<float> Y(static_cast<size_t>(m * 4096));
        size_t i = 0;
        const auto t0 = std::chrono::steady_clock::now();
        int64_t n = 0;
        for (auto _ : st) {
          kernels().matmul(tp, t, w.copy(i++), 4096, 4096, X.data(), m, Y.data());
          ++n;
        }
        st.counters["GFLOP/s"] = 2.0 * 4096 * 4096 * static_cast<double>(m) * static_cast<double>(n) /
                                 seconds_since(t0) / 1e9;
      })->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
    }
  }

  // Decode attention of Llama-2-7B (32 heads of 128, f16 cache) over 128 / 512 / 2048 cells:
  // GB/s over the K and V bytes read. Layers' caches rotate so that every call reads DRAM.
  // "cells": cell-major cache [cell, head, dim]; "heads": head-major [head, cell, dim].
  for (bool head_major : {false, true}) {
  for (int64_t n_ctx : {128, 512, 2048}) {
    const std::string name = std::string("attention/7b/") + (head_major ? "heads" : "cells") + "/ctx" + std::to_string(n_ctx);
    benchmark::RegisterBenchmark(name.c_str(), [n_ctx, head_major](benchmark::State& st) {
      ThreadPool& tp = pool(static_cast<int>(st.range(0)));
      cpu::AttentionDims dims{32, 32, 128, 1.0f / std::sqrt(128.0f)};
      if (head_major) {
        dims.head_stride = n_ctx * dims.head_dim;
        dims.cell_stride = dims.head_dim;
      }
      const int64_t row = dims.n_kv_head * dims.head_dim;
      const size_t cache_bytes = static_cast<size_t>(n_ctx * row) * 2;  // K or V
      const Matrix& kv = matrix(DType::F16, 2 * n_ctx, row);           // K rows, then V rows
      const auto q = random_vector(dims.n_head * dims.head_dim, 4);
      std::vector<float> out(static_cast<size_t>(dims.n_head * dims.head_dim));
      run_bandwidth(st, tp, 2.0 * static_cast<double>(cache_bytes), [&](size_t i) {
        const auto* k = static_cast<const uint16_t*>(kv.copy(i));
        kernels().attention(tp, dims, q.data(), k, k + n_ctx * row, n_ctx, out.data());
      });
    })->Arg(1)->Arg(2)->UseRealTime()->Iterations(1);
  }
  }

  // Prompt attention of Llama-2-7B: a causal batch of 64 queries at positions 1984..2047 over a
  // head-major cache of 2,048 cells stored as f16, q8_0 or q4_0 (-ctk/-ctv): queries per second.
  // Compute-bound (the batch reads each KV head's rows 64 times); the quantized caches' rows are
  // decoded once per KV head for the batch.
  for (DType kv_type : {DType::F16, DType::Q8_0, DType::Q4_0}) {
    const std::string name = std::string("attention/7b-prompt/") + std::string(pi::dtype_name(kv_type)) + "/ctx2048";
    benchmark::RegisterBenchmark(name.c_str(), [kv_type](benchmark::State& st) {
      ThreadPool& tp = pool(static_cast<int>(st.range(0)));
      constexpr int64_t n_ctx = 2048, n_q = 64;
      cpu::AttentionDims dims{32, 32, 128, 1.0f / std::sqrt(128.0f)};
      dims.head_stride = n_ctx * dims.head_dim;
      dims.cell_stride = dims.head_dim;
      dims.k_type = dims.v_type = kv_type;
      const int64_t n = dims.n_kv_head * n_ctx * dims.head_dim;
      std::vector<uint8_t> K(pi::row_bytes(kv_type, n)), V(pi::row_bytes(kv_type, n));
      for (auto [bytes, seed] : {std::pair{&K, 11u}, std::pair{&V, 12u}}) {
        const auto x = random_vector(n, seed);
        if (!pi::quantize_row(kv_type, x.data(), bytes->data(), n).ok()) st.SkipWithError("quantize");
      }
      const auto q = random_vector(n_q * dims.n_head * dims.head_dim, 4);
      std::vector<float> out(static_cast<size_t>(n_q * dims.n_head * dims.head_dim));
      const auto t0 = std::chrono::steady_clock::now();
      int64_t calls = 0;
      for (auto _ : st) {
        kernels().attention_batch(tp, dims, q.data(), n_q, n_ctx - n_q,
                                  reinterpret_cast<const uint16_t*>(K.data()),
                                  reinterpret_cast<const uint16_t*>(V.data()), out.data());
        ++calls;
      }
      st.counters["queries/s"] = static_cast<double>(calls * n_q) / seconds_since(t0);
    })->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
  }

  // Fork/join cost of the pool: an empty parallel_for over 2 tasks.
  benchmark::RegisterBenchmark("pool/fork_join", [](benchmark::State& st) {
    ThreadPool& tp = pool(2);
    for (auto _ : st) tp.parallel_for(2, [](int64_t, int) {});
  })->UseRealTime();
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* isa = std::getenv("PI_KERNELS_ISA"); isa != nullptr && *isa != '\0') {
    if (const std::string why = cpu::set_default_isa(isa); !why.empty()) std::fprintf(stderr, "PI_KERNELS_ISA=%s\n", why.c_str());
  }
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("kernel_isa", std::string(cpu::isa_name(cpu::default_isa())));
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
