#include "backend/cuda/cuda_device.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>

#include "backend/cuda/cuda_impl.h"
#include "core/log.h"
#include "kernels/cuda/hd_blocks.h"

namespace pi::backend {
namespace {

constexpr uint64_t kSmallAlloc = uint64_t{1} << 20;
constexpr uint64_t kSmallAlign = 512;
constexpr uint64_t kPage = uint64_t{2} << 20;

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

Error cuda_err(const char* call, cudaError_t e) {
  return err("cuda: %s: %s", call, cudaGetErrorString(e));
}

}  // namespace

// ---- Impl ----------------------------------------------------------------------------

CudaDevice::Impl::~Impl() {
  ops.reset();
  stager.reset();
  for (auto& s : streams)
    if (s != nullptr) cudaStreamSynchronize(s);
  for (int q = 0; q < kNumQueues; ++q)
    for (auto& [v, e] : live[q]) cudaEventDestroy(e);
  for (cudaEvent_t e : event_pool) cudaEventDestroy(e);
  for (auto& [p, n] : mirrors) cudaFreeHost(p);
  for (auto& [p, n] : device_allocs) cudaFree(p);
  for (auto& [p, n] : host_allocs) cudaFreeHost(p);
  if (cublas != nullptr) cublasDestroy(cublas);
  if (arena.base != nullptr) cudaFree(arena.base);
  if (arena.cublas_ws != nullptr) cudaFree(arena.cublas_ws);
  if (staging_host != nullptr) cudaFreeHost(staging_host);
  for (auto& s : streams)
    if (s != nullptr) cudaStreamDestroy(s);
}

bool CudaDevice::Impl::check(cudaError_t e, const char* what, const char* call) {
  if (e == cudaSuccess) return true;
  if (first_error.ok()) {
    first_error = err("cuda: %s: %s: %s", what, call, cudaGetErrorString(e));
    log_error("%s", first_error.error().message.c_str());
  }
  return false;
}

bool CudaDevice::Impl::check(const Status& s) {
  if (s.ok()) return true;
  if (first_error.ok()) {
    first_error = s;
    log_error("%s", s.error().message.c_str());
  }
  return false;
}

void CudaDevice::Impl::retire(int q, uint64_t v) {
  while (!live[q].empty() && live[q].front().first <= v) {
    event_pool.push_back(live[q].front().second);
    live[q].pop_front();
  }
  if (v > completed[q]) completed[q] = v;
}

// ---- Creation ------------------------------------------------------------------------

int cuda_device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why != nullptr) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    cudaGetLastError();  // clear it
    return 0;
  }
  if (n == 0 && why != nullptr) *why = "cudaGetDeviceCount: 0 devices";
  return n;
}

Result<std::unique_ptr<CudaDevice>> CudaDevice::create(const CudaOptions& o) {
  std::string why;
  const int n = cuda_device_count(&why);
  if (n == 0) return err("cuda: no CUDA device (%s)", why.c_str());
  if (o.index < 0 || o.index >= n)
    return err("cuda: device index %d out of range (%d device%s)", o.index, n, n == 1 ? "" : "s");
  auto im = std::make_unique<Impl>();
  im->index = o.index;
  if (cudaError_t e = cudaSetDevice(o.index); e != cudaSuccess) return cuda_err("cudaSetDevice", e);
  if (cudaError_t e = cudaFree(nullptr); e != cudaSuccess)
    return cuda_err("cudaFree(0) (context creation)", e);
  cudaDeviceProp prop{};
  if (cudaError_t e = cudaGetDeviceProperties(&prop, o.index); e != cudaSuccess)
    return cuda_err("cudaGetDeviceProperties", e);
  im->gpu_name = prop.name;
  im->sm_count = prop.multiProcessorCount;
  size_t free0 = 0, total = 0;
  if (cudaError_t e = cudaMemGetInfo(&free0, &total); e != cudaSuccess)
    return cuda_err("cudaMemGetInfo", e);
  im->free0 = free0;
  im->total = total;

  for (auto& s : im->streams)
    if (cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); e != cudaSuccess)
      return cuda_err("cudaStreamCreateWithFlags", e);
  void* base = nullptr;
  if (cudaError_t e = cudaMalloc(&base, CudaArena::kTotal); e != cudaSuccess)
    return cuda_err("cudaMalloc (the device's 56 MiB scratch arena)", e);
  CudaArena& a = im->arena;
  a.base = static_cast<uint8_t*>(base);
  uint8_t* p = a.base;
  a.staging = p, p += CudaArena::kStaging;
  a.q8 = reinterpret_cast<int8_t*>(p), p += CudaArena::kQ8;
  a.tile = reinterpret_cast<float*>(p), p += CudaArena::kTile;
  a.gather = reinterpret_cast<float*>(p), p += CudaArena::kGather;
  a.partial = reinterpret_cast<float*>(p), p += CudaArena::kPartial;
  a.realign = p;
  if (cudaError_t e = cudaMalloc(&a.cublas_ws, CudaArena::kCublasWorkspace); e != cudaSuccess)
    return cuda_err("cudaMalloc (cuBLAS workspace)", e);
  if (cudaError_t e =
          cudaMallocHost(reinterpret_cast<void**>(&im->staging_host), CudaArena::kStaging);
      e != cudaSuccess)
    return cuda_err("cudaMallocHost (staging ring)", e);
  if (cublasStatus_t s = cublasCreate(&im->cublas); s != CUBLAS_STATUS_SUCCESS)
    return err("cuda: cublasCreate: status %d", static_cast<int>(s));
  if (cublasSetStream(im->cublas, im->streams[kCompute]) != CUBLAS_STATUS_SUCCESS ||
      cublasSetWorkspace(im->cublas, a.cublas_ws, CudaArena::kCublasWorkspace) !=
          CUBLAS_STATUS_SUCCESS ||
      cublasSetMathMode(im->cublas, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS)
    return err("cuda: cublasSetStream/cublasSetWorkspace/cublasSetMathMode failed");
  const size_t ring = o.staging_bytes > 0 && o.staging_bytes < CudaArena::kStaging
                          ? (o.staging_bytes + 255) / 256 * 256
                          : CudaArena::kStaging;
  im->stager =
      std::make_unique<cuda::Stager>(im->staging_host, a.staging, ring, im->streams[kCompute]);
  size_t free1 = 0;
  if (cudaError_t e = cudaMemGetInfo(&free1, &total); e != cudaSuccess)
    return cuda_err("cudaMemGetInfo", e);
  im->own = free0 > free1 ? free0 - free1 : 0;
  const uint64_t limit = o.budget != 0 && o.budget < free0 ? o.budget : free0;
  if (limit <= im->own) {
    return err("cuda: budget of %" PRIu64
               " bytes is below the device's own working memory (%" PRIu64
               " bytes: scratch arena, cuBLAS)",
               limit, im->own);
  }
  im->budget = limit - im->own;
  im->ops = make_cuda_ops(*im);
  return std::unique_ptr<CudaDevice>(new CudaDevice(std::move(im)));
}

CudaDevice::CudaDevice(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaDevice::~CudaDevice() = default;

std::string CudaDevice::describe() const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "cuda: %s (device %d, %d SMs), %.1f GiB, budget %.1f GiB",
                impl_->gpu_name.c_str(), impl_->index, impl_->sm_count,
                static_cast<double>(impl_->total) / (1 << 30),
                static_cast<double>(impl_->budget) / (1 << 30));
  return buf;
}

MemoryInfo CudaDevice::memory() const {
  return MemoryInfo{impl_->total, impl_->budget, impl_->used, impl_->peak};
}

uint64_t CudaDevice::alloc_footprint(size_t bytes) const {
  const uint64_t b = bytes > 0 ? bytes : 1;
  return b < kSmallAlloc ? round_up(b, kSmallAlign) : round_up(b, kPage);
}

bool CudaDevice::supports(Op op, DType t) const {
  switch (op) {
    case Op::Embed:
    case Op::Linear:
    case Op::LinearT:
    case Op::LinearRows:
    case Op::LinearTRows:
    case Op::FfnRows:
      return gpu::decodable(t);
    case Op::Mask:
      return true;
    case Op::StoreKv:
    case Op::Attention:  // f32 activations over a cache of a KV type (op_params.h)
      return t == DType::F32 || kv_type_supported(t);
    default:
      return t == DType::F32;
  }
}

Status CudaDevice::status() const { return impl_->first_error; }

uint64_t CudaDevice::free_at_creation() const { return impl_->free0; }
uint64_t CudaDevice::own_bytes() const { return impl_->own; }

Result<uint64_t> CudaDevice::driver_free() const {
  size_t f = 0, t = 0;
  if (cudaError_t e = cudaMemGetInfo(&f, &t); e != cudaSuccess)
    return cuda_err("cudaMemGetInfo", e);
  return static_cast<uint64_t>(f);
}

// ---- Memory --------------------------------------------------------------------------

Result<Buffer> CudaDevice::alloc(size_t bytes, const char* what) {
  Impl& im = *impl_;
  const uint64_t fp = alloc_footprint(bytes);
  if (im.used + fp > im.budget) {
    return err("cuda: out of memory allocating %s: %zu bytes requested (%" PRIu64
               " with the driver's rounding), %" PRIu64 " of %" PRIu64 " budget bytes free",
               what, bytes, fp, im.budget - im.used, im.budget);
  }
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, bytes > 0 ? bytes : 1); e != cudaSuccess) {
    cudaGetLastError();
    return err("cuda: cudaMalloc of %zu bytes for %s: %s", bytes, what, cudaGetErrorString(e));
  }
  im.device_allocs[p] = fp;
  im.used += fp;
  if (im.used > im.peak) im.peak = im.used;
  return Buffer(this, p, bytes);
}

Result<Buffer> CudaDevice::alloc_host(size_t bytes, const char* what) {
  void* p = nullptr;
  if (cudaError_t e = cudaMallocHost(&p, bytes > 0 ? bytes : 1); e != cudaSuccess) {
    cudaGetLastError();
    return err("cuda: cudaMallocHost of %zu bytes for %s: %s", bytes, what, cudaGetErrorString(e));
  }
  impl_->host_allocs[p] = bytes;
  impl_->pinned_bytes += bytes;
  return Buffer(this, p, bytes);
}

void CudaDevice::release(void* data, size_t) {
  Impl& im = *impl_;
  if (auto h = im.host_allocs.find(data); h != im.host_allocs.end()) {
    sync_all();  // queued copies may still read or write it
    im.pinned_bytes -= h->second;
    im.host_allocs.erase(h);
    im.check(cudaFreeHost(data), "release", "cudaFreeHost");
    return;
  }
  auto d = im.device_allocs.find(data);
  if (d == im.device_allocs.end()) return;
  im.used -= d->second;
  im.device_allocs.erase(d);
  im.check(cudaFree(data), "release", "cudaFree");  // waits for work that may still use it
}

Result<const void*> CudaDevice::wrap_host(const void* p, size_t bytes) {
  return err("cuda: the device cannot address host memory (%zu bytes at %p): copy it in", bytes, p);
}

// ---- Queues --------------------------------------------------------------------------

void CudaDevice::copy_in(QueueId q, void* dst, const void* src, size_t bytes) {
  impl_->submitted();
  if (bytes == 0) return;
  impl_->bytes_in += bytes;
  ++impl_->copies_in;
  impl_->check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, impl_->stream(q)),
               "copy_in", "cudaMemcpyAsync");
}

void CudaDevice::copy_out(QueueId q, void* dst, const void* src, size_t bytes) {
  impl_->submitted();
  if (bytes == 0) return;
  impl_->bytes_out += bytes;
  ++impl_->copies_out;
  impl_->check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, impl_->stream(q)),
               "copy_out", "cudaMemcpyAsync");
}

Event CudaDevice::record(QueueId q) {
  Impl& im = *impl_;
  // Recycle the events of q already complete. A pending one answers cudaErrorNotReady, which
  // is no error: it is cleared so that the next launch check does not read it.
  while (!im.live[q].empty()) {
    const cudaError_t e = cudaEventQuery(im.live[q].front().second);
    if (e != cudaSuccess) {
      if (e == cudaErrorNotReady) cudaGetLastError();
      break;
    }
    im.retire(q, im.live[q].front().first);
  }
  cudaEvent_t ev = nullptr;
  if (!im.event_pool.empty()) {
    ev = im.event_pool.back();
    im.event_pool.pop_back();
  } else if (!im.check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "record",
                       "cudaEventCreateWithFlags")) {
    return {};
  }
  if (!im.check(cudaEventRecord(ev, im.stream(q)), "record", "cudaEventRecord")) {
    im.event_pool.push_back(ev);
    return {};
  }
  const uint64_t v = ++im.recorded[q];
  im.live[q].emplace_back(v, ev);
  return Event{q, v};
}

void CudaDevice::wait(QueueId q, const Event& e) {
  Impl& im = *impl_;
  if (e.queue < 0 || e.queue >= kNumQueues || e.value == 0 || e.queue == q) return;
  if (e.value <= im.completed[e.queue]) return;  // already complete
  for (auto& [v, ev] : im.live[e.queue]) {
    if (v == e.value) {
      im.check(cudaStreamWaitEvent(im.stream(q), ev, 0), "wait", "cudaStreamWaitEvent");
      return;
    }
  }
}

void CudaDevice::sync(QueueId q) {
  Impl& im = *impl_;
  im.check(cudaStreamSynchronize(im.stream(q)), "sync", "cudaStreamSynchronize");
  im.retire(q, im.recorded[q]);
}

void* CudaDevice::map(const void* p, size_t bytes) {
  Impl& im = *impl_;
  sync_all();
  if (im.mirrors_used == im.mirrors.size()) im.mirrors.emplace_back(nullptr, 0);
  auto& [mp, mn] = im.mirrors[im.mirrors_used];
  if (mn < bytes) {
    if (mp != nullptr) cudaFreeHost(mp);
    mn = (bytes + (uint64_t{1} << 20) - 1) >> 20 << 20;
    if (!im.check(cudaMallocHost(&mp, mn), "map", "cudaMallocHost (mirror)")) {
      mp = nullptr;
      mn = 0;
      return nullptr;
    }
  }
  ++im.mirrors_used;
  im.bytes_out += bytes;
  ++im.copies_out;
  if (!im.check(cudaMemcpyAsync(mp, p, bytes, cudaMemcpyDeviceToHost, im.stream(kCopy)), "map",
                "cudaMemcpyAsync") ||
      !im.check(cudaStreamSynchronize(im.stream(kCopy)), "map", "cudaStreamSynchronize")) {
    // The host sees NaN rather than stale numbers.
    std::memset(mp, 0xff, bytes);
  }
  return mp;
}

DeviceActivity CudaDevice::activity() const {
  const Impl& im = *impl_;
  const uint64_t staged = im.stager ? im.stager->copied_bytes() : 0;
  const uint64_t staged_n = im.stager ? im.stager->copies() : 0;
  return DeviceActivity{im.bytes_in + staged, im.bytes_out, im.copies_in + staged_n, im.copies_out,
                        im.n_ops};
}

Ops& CudaDevice::ops() { return *impl_->ops; }

}  // namespace pi::backend
