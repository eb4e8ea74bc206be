// bench_q4_layout: the Q4_0 axpy of calibrated (activation-sparse) files on the file's row
// layout against Q4_0_SPLIT, the layout the CPU repacks transposed Q4_0 weights into for its
// AVX-512 leaf (tensor/dtype.h, cpu::axpy_layout).
//
// Transposed Q4_0 rows (ffn_down_t, attn_q_t, ...) interleave each block's f16 scale with its
// 16 quant bytes (18-byte blocks), so the Q4_0 leaf reads two blocks of a row with one 64-byte
// load that nearly always spans two cache lines, and gathers the scales with byte permutes.
// Q4_0_SPLIT rows hold the same bytes as [nb f16 scales][nb x 16 quant bytes], each four
// blocks' quants transposed by 4-byte words: four blocks' quants are one aligned 64-byte load
// whose byte and word unpacks give each block's columns in order. Both leaves compute
// q4_groups.h's sums, so the tool first checks that their results are bit-identical, then
// times both alternately on one matrix shape (interleaved rounds, medians).
//
//   bench_q4_layout [--rows N] [--copies C] [--keep 0.5] [--rounds R] [--threads T]
//
// Defaults: 11008 x 4096 (ffn_down_t of Llama-2-7B), 20 copies rotated so the kept rows come
// from DRAM (~500 MB), rows kept 0.5, 9 rounds, 1 thread. --rows 256 --copies 1: L2-resident.
// Threads split the work as the engine does (cpu::Kernels::axpy_rows). Not a test:
// docs/BENCHMARKS.md ("A scales-apart layout").
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/kernels.h"
#include "tensor/quant.h"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buf = std::unique_ptr<uint8_t, FreeDeleter>;
Buf alloc(size_t n) { return Buf(static_cast<uint8_t*>(std::aligned_alloc(64, (n + 63) / 64 * 64))); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int usage() {
  std::fprintf(stderr, "usage: bench_q4_layout [--rows N] [--copies C] [--keep F] [--rounds R] [--threads 1|2]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 11008;
  int copies = 20, rounds = 9, threads = 1;
  double keep = 0.5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    const char* v = argv[++i];
    if (a == "--rows") rows = std::atoll(v);
    else if (a == "--copies") copies = std::atoi(v);
    else if (a == "--keep") keep = std::atof(v);
    else if (a == "--rounds") rounds = std::atoi(v);
    else if (a == "--threads") threads = std::atoi(v);
    else return usage();
  }
  if (!pi::cpu::isa_available(pi::cpu::Isa::Avx512)) {
    std::fprintf(stderr, "bench_q4_layout: needs the AVX-512 kernels (the only ones that read Q4_0_SPLIT fast)\n");
    return 1;
  }
  if (rows < 16 || copies < 1 || rounds < 1 || keep <= 0 || keep > 1 || threads < 1 || threads > 64) return usage();
  constexpr int64_t cols = 4096;
  constexpr size_t rb = cols / 32 * 18;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<Buf> file(static_cast<size_t>(copies)), apart(static_cast<size_t>(copies));
  std::vector<float> x(cols);
  Buf first = alloc(static_cast<size_t>(rows) * rb);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : x) v = normal(rng);
    if (!pi::quantize_row(pi::DType::Q4_0, x.data(), first.get() + r * rb, cols).ok()) return 1;
  }
  for (int c = 0; c < copies; ++c) {
    file[c] = alloc(static_cast<size_t>(rows) * rb);
    apart[c] = alloc(static_cast<size_t>(rows) * rb);
    std::memcpy(file[c].get(), first.get(), static_cast<size_t>(rows) * rb);
    for (int64_t r = 0; r < rows; ++r) pi::split_q4_0_row(first.get() + r * rb, apart[c].get() + r * rb, cols);
  }
  // Lists of kept rows (ascending, random), rotated with the copies; coefficients per row.
  constexpr int kLists = 17;
  std::vector<std::vector<int32_t>> lists(kLists);
  std::vector<float> coef(static_cast<size_t>(rows));
  for (auto& c : coef) c = normal(rng);
  for (int l = 0; l < kLists; ++l) {
    std::vector<int32_t> all(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) all[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    std::mt19937 lr(static_cast<uint32_t>(50 + l));
    std::shuffle(all.begin(), all.end(), lr);
    all.resize(static_cast<size_t>(static_cast<double>(rows) * keep));
    std::sort(all.begin(), all.end());
    lists[l] = all;
  }
  pi::ThreadPool pool(threads);
  const pi::cpu::Kernels k(pi::cpu::Isa::Avx512);
  // Outputs 64-byte aligned, as the engine's activations are.
  Buf y_bufs[2] = {alloc(cols * sizeof(float)), alloc(cols * sizeof(float))};
  float* y[2] = {reinterpret_cast<float*>(y_bufs[0].get()), reinterpret_cast<float*>(y_bufs[1].get())};
  auto call = [&](int which, const uint8_t* D, int l) {
    const auto& idx = lists[static_cast<size_t>(l)];
    k.axpy_rows(pool, which == 1 ? pi::DType::Q4_0_SPLIT : pi::DType::Q4_0, D, rows, cols, idx.data(),
                static_cast<int64_t>(idx.size()), coef.data(), y[which]);
  };
  for (int l = 0; l < 3; ++l) {
    std::fill(y[0], y[0] + cols, 0.5f);
    std::fill(y[1], y[1] + cols, 0.5f);
    call(0, file[0].get(), l);
    call(1, apart[0].get(), l);
    if (std::memcmp(y[0], y[1], cols * sizeof(float)) != 0) {
      std::fprintf(stderr, "bench_q4_layout: Q4_0_SPLIT differs from Q4_0 (list %d)\n", l);
      return 1;
    }
  }
  const double bytes = static_cast<double>(lists[0].size() * rb);
  const int calls = std::max(4, static_cast<int>(400e6 / bytes));
  std::vector<double> rate[2];
  int n = 0;
  for (int round = 0; round < rounds; ++round) {
    for (int which = 0; which < 2; ++which) {
      const double t0 = now();
      for (int i = 0; i < calls; ++i, ++n)
        call(which, (which == 1 ? apart : file)[n % copies].get(), n % kLists);
      rate[which].push_back(bytes * calls / (now() - t0) / 1e9);
    }
  }
  const double a = median(rate[0]), b = median(rate[1]);
  std::printf("bench_q4_layout: %lld x %lld Q4_0, %d copies, %.0f%% of rows kept, %d thread(s), medians of %d rounds: "
              "q4_0 %.1f GB/s, q4_0_split %.1f GB/s (%.2fx); results bit-identical\n",
              static_cast<long long>(rows), static_cast<long long>(cols), copies, 100.0 * keep, threads, rounds, a, b, b / a);
  return 0;
}
