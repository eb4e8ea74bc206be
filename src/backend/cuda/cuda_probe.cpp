// CudaDevice::probe: device-memory bandwidth timed with CUDA events on the compute stream.
#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_impl.h"
#include "kernels/cuda/probe.cuh"

namespace pi::backend {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

Result<CudaProbe> CudaDevice::probe(size_t bytes, int passes) {
  Impl& im = *impl_;
  if (passes < 1) return err("cuda: probe: passes must be >= 1");
  bytes = std::max<size_t>(bytes / 256 * 256, 1 << 20);
  const int blocks = std::max(1, im.sm_count) * 4;
  auto a = alloc(bytes, "bandwidth probe source");
  if (!a.ok()) return a.error();
  auto b = alloc(bytes, "bandwidth probe destination");
  if (!b.ok()) return b.error();
  auto c = alloc(static_cast<size_t>(blocks) * 8, "bandwidth probe sums");
  if (!c.ok()) return c.error();
  Buffer src = std::move(*a), dst = std::move(*b), sink = std::move(*c);
  cudaStream_t s = im.stream(kCompute);
  cudaEvent_t t0 = nullptr, t1 = nullptr;
  if (cudaError_t e = cudaEventCreate(&t0); e != cudaSuccess)
    return err("cuda: probe: cudaEventCreate: %s", cudaGetErrorString(e));
  if (cudaError_t e = cudaEventCreate(&t1); e != cudaSuccess) {
    cudaEventDestroy(t0);
    return err("cuda: probe: cudaEventCreate: %s", cudaGetErrorString(e));
  }
  Status st;
  std::vector<double> copy, read;
  const auto timed = [&](auto&& work, std::vector<double>& out, double moved) {
    float ms = 0;
    cudaError_t e = cudaEventRecord(t0, s);
    if (e == cudaSuccess) e = work();
    if (e == cudaSuccess) e = cudaEventRecord(t1, s);
    if (e == cudaSuccess) e = cudaEventSynchronize(t1);
    if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, t0, t1);
    if (e != cudaSuccess) {
      st = err("cuda: probe: %s", cudaGetErrorString(e));
      return;
    }
    out.push_back(moved / (static_cast<double>(ms) * 1e-3) / 1e9);
  };
  const auto do_copy = [&] {
    return cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, s);
  };
  const auto do_read = [&] {
    return gpu::read_probe(src.as<uint64_t>(), static_cast<int64_t>(bytes / 8), blocks,
                           sink.as<uint64_t>(), s);
  };
  if (cudaError_t e = cudaMemsetAsync(src.data(), 0x5a, bytes, s); e != cudaSuccess)
    st = err("cuda: probe: cudaMemsetAsync: %s", cudaGetErrorString(e));
  // One untimed run of each, then the passes.
  for (int p = 0; st.ok() && p <= passes; ++p) {
    std::vector<double> discard;
    timed(do_copy, p == 0 ? discard : copy, 2.0 * static_cast<double>(bytes));
    if (st.ok()) timed(do_read, p == 0 ? discard : read, static_cast<double>(bytes));
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  if (!st.ok()) return st.error();
  return CudaProbe{bytes, median(copy), median(read)};
}

}  // namespace pi::backend
