#include "core/disk_probe.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/direct_file.h"
#include "core/os.h"

namespace pi {

Result<DiskProbe> probe_direct_read(const std::string& path, size_t chunk, uint64_t total, int depth, uint64_t seed) {
  constexpr size_t kAlign = kDirectAlign;
  DiskProbe p;
  p.chunk = std::max(kAlign, (chunk + kAlign - 1) / kAlign * kAlign);
  p.depth = std::max(1, depth);
  auto file = DirectFile::open(path, /*direct=*/true);
  if (!file.ok()) return file.error();
  p.direct = file->direct();
  const uint64_t size = file->size();
  if (size < p.chunk) return err("%s: smaller than one read of %zu bytes", path.c_str(), p.chunk);
  const uint64_t slots = (size - p.chunk) / kAlign + 1;
  const uint64_t n = std::max<uint64_t>(static_cast<uint64_t>(p.depth), std::min(total, size) / p.chunk);
  std::atomic<bool> failed{false};
  std::atomic<long long> failed_at{0};
  std::mutex why_mu;
  std::string why;
  // Thread t reads reads t, t + depth, ... of one random sequence (the same offsets for any depth).
  const auto work = [&](int t) {
    std::unique_ptr<void, decltype(&os::aligned_free)> buf(os::aligned_alloc(kAlign, p.chunk), &os::aligned_free);
    void* raw = buf.get();
    const auto fail = [&](uint64_t off, std::string reason) {
      std::lock_guard<std::mutex> lock(why_mu);
      if (!failed.exchange(true)) {
        failed_at = static_cast<long long>(off);
        why = std::move(reason);
      }
    };
    if (raw == nullptr) return fail(0, "out of memory");
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<uint64_t> at(0, slots - 1);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t off = at(rng) * kAlign;
      if (i % static_cast<uint64_t>(p.depth) != static_cast<uint64_t>(t)) continue;
      if (failed) return;
      if (!file->read_at(raw, p.chunk, off, p.chunk)) return fail(off, DirectFile::read_error());
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 1; t < p.depth; ++t) threads.emplace_back(work, t);
  work(0);
  for (std::thread& t : threads) t.join();
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (failed) return err("%s: read at offset %lld failed: %s", path.c_str(), failed_at.load(), why.c_str());
  p.bytes = n * p.chunk;
  p.mbps = p.seconds > 0 ? static_cast<double>(p.bytes) / p.seconds / 1e6 : 0.0;
  return p;
}

}  // namespace pi
