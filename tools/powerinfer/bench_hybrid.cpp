#include "bench_hybrid.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "backend/ops.h"
#include "backend/registry.h"
#include "tensor/quant.h"

namespace pi::cli {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

Result<DeviceRates> measure_device(const std::string& device, int n_threads, DType type) {
  backend::DeviceOptions o;
  o.name = device;
  o.n_threads = n_threads;
  auto dev = backend::make_device(o);
  if (!dev.ok()) return dev.error();
  backend::Device& d = **dev;
  if (!d.supports(backend::Op::Linear, type)) type = DType::F16;
  // A 128 MiB matrix of the model's type: beyond every cache, small enough for any device.
  constexpr int64_t kCols = 4096;
  const auto row = static_cast<int64_t>(row_bytes(type, kCols));
  const int64_t rows = (int64_t{128} << 20) / row;
  auto w = d.alloc(static_cast<size_t>(rows * row), "device probe weights");
  if (!w.ok()) return w.error();
  std::vector<std::byte> zeros(static_cast<size_t>(row) * 256, std::byte{0});
  for (int64_t r = 0; r < rows; r += 256) {
    const int64_t n = std::min<int64_t>(256, rows - r);
    d.upload(w->as<std::byte>() + r * row, zeros.data(), static_cast<size_t>(n * row));
  }
  auto x = d.alloc(kCols * sizeof(float), "device probe input");
  auto y = d.alloc(static_cast<size_t>(rows) * sizeof(float), "device probe output");
  if (!x.ok()) return x.error();
  if (!y.ok()) return y.error();
  std::vector<float> ones(kCols, 1.0f);
  d.upload(x->data(), ones.data(), ones.size() * sizeof(float));
  const pi::Matrix W{type, w->as<std::byte>(), rows, kCols, "device probe"};
  std::vector<double> times;
  for (int pass = 0; pass < 6; ++pass) {
    const auto t0 = Clock::now();
    d.ops().linear(W, x->as<float>(), 1, y->as<float>());
    d.sync_all();
    if (pass > 0) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  DeviceRates r;
  const double t = median(times);
  r.read_gbps = t > 0 ? static_cast<double>(rows * row) / t / 1e9 : 0.0;

  // A hand-off as the executor makes them: copy in, the compute queue waits for it, one small
  // op, the copy queue waits for that, copy out, the host waits.
  std::vector<float> host(4096, 0.5f);
  auto buf = d.alloc(host.size() * sizeof(float), "device probe hand-off");
  if (!buf.ok()) return buf.error();
  std::vector<double> trips;
  for (int i = 0; i < 41; ++i) {
    const auto t0 = Clock::now();
    d.copy_in(backend::kCopy, buf->data(), host.data(), host.size() * sizeof(float));
    d.wait(backend::kCompute, d.record(backend::kCopy));
    d.ops().add(buf->as<float>(), x->as<float>(), 4);
    d.wait(backend::kCopy, d.record(backend::kCompute));
    d.copy_out(backend::kCopy, host.data(), buf->data(), host.size() * sizeof(float));
    d.sync(backend::kCopy);
    if (i > 0) trips.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  r.handoff_us = median(trips) / 2;
  // Launches: a run of small ops, then one sync.
  constexpr int kOps = 200;
  std::vector<double> runs;
  for (int i = 0; i < 6; ++i) {
    const auto t0 = Clock::now();
    for (int k = 0; k < kOps; ++k) d.ops().add(buf->as<float>(), x->as<float>(), 4);
    d.sync_all();
    if (i > 0) runs.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  r.launch_us = median(runs) / kOps;
  return r;
}

double hybrid_model_seconds(const PlacementInfo& p, const CpuRates& cpu, const DeviceRates& dev,
                            double kv_cells, double ops_per_token) {
  const double r_cpu = cpu.seq_gbps * 1e9, r_scat = cpu.scattered_gbps * 1e9;
  const double r_dev = dev.read_gbps * 1e9, hand = dev.handoff_us * 1e-6;
  if (r_cpu <= 0 || r_scat <= 0 || r_dev <= 0) return 0;
  // Cold neurons are scattered rows; a cold expert (or a layer's experts kept on the CPU) is
  // whole matrices read in order.
  const double r_cold = p.experts || p.n_neurons == 0 ? r_cpu : r_scat;
  double t = 0;
  bool on_device = false;  // the residual stream starts on the CPU (the embedding)
  for (const LayerPlacement& L : p.layers) {
    const double dense = L.dense_bytes + L.kv_bytes_per_cell * kv_cells;
    if (L.attn_on_device != on_device) t += hand;
    on_device = L.attn_on_device;
    if (L.attn_on_device) {
      t += dense / r_dev;
      t += L.cold_bytes > 0 ? 2 * hand + std::max(L.cold_bytes / r_cold, L.hot_bytes / r_dev)
                            : L.hot_bytes / r_dev;
    } else {
      t += dense / r_cpu;
      t += L.hot_neurons > 0 ? std::max(L.cold_bytes / r_cold, 2 * hand + L.hot_bytes / r_dev)
                             : L.cold_bytes / r_cold;
    }
  }
  if (p.head_on_device != on_device) t += hand;
  t += p.head_bytes / (p.head_on_device ? r_dev : r_cpu);
  return t + ops_per_token * dev.launch_us * 1e-6;
}

}  // namespace pi::cli
