#include "backend/sim/sim_device.h"


#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/host_device.h"
#include "backend/sim/sim_impl.h"

namespace pi::backend {
namespace {

constexpr uint64_t kAlign = 256;
constexpr int kHost = kNumQueues;
const char* const kQueueNames[kNumQueues] = {"compute", "copy"};

void merge(Clock& into, const Clock& from) {
  for (size_t i = 0; i < into.size(); ++i) into[i] = std::max(into[i], from[i]);
}

}  // namespace

// ---- Queue ---------------------------------------------------------------------------

SimQueue::SimQueue(std::string name) : name_(std::move(name)), worker_([this] { run(); }) {}

SimQueue::~SimQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

uint64_t SimQueue::submit(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(fn));
    ++submitted_;
  }
  cv_.notify_one();
  return submitted_;
}

void SimQueue::wait_for(uint64_t n) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return completed_ >= n; });
}

void SimQueue::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stop_ with nothing left
    std::function<void()> fn = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    fn();
    lock.lock();
    ++completed_;
    done_cv_.notify_all();
  }
}

// ---- Impl ----------------------------------------------------------------------------

SimDevice::Impl::Impl(const SimOptions& o, int n_threads, cpu::Isa isa)
    : opt(o), pool(n_threads), cpu(pool, isa) {
  capacity = (o.capacity + kAlign - 1) / kAlign * kAlign;
  for (Clock& c : clocks) c.assign(kNumQueues + 1, 0);
  for (int q = 0; q < kNumQueues; ++q) queues[q] = std::make_unique<SimQueue>(kQueueNames[q]);
}

SimDevice::Impl::~Impl() {
  for (auto& q : queues) q.reset();  // drains and joins the workers
}

void SimDevice::Impl::fatal_not_device(const void* p) const {
  std::fprintf(stderr,
               "sim: device op given address %p, which is not sim device memory (host memory "
               "must be copied in first)\n",
               p);
  std::abort();
}

void SimDevice::Impl::submit(int q, const char* what, std::initializer_list<Access> acc,
                             std::function<void()> fn) {
  const uint64_t seq = queues[q]->submitted() + 1;
  Clock& c = clocks[q];
  merge(c, clocks[kHost]);  // what the host has seen completed is ordered before this work
  c[static_cast<size_t>(q)] = seq;
  {
    std::lock_guard<std::mutex> lock(mem_mu);
    for (const Access& a : acc) {
      if (a.p == nullptr || !is_handle(a.p)) continue;
      const auto off = static_cast<uint64_t>(static_cast<const std::byte*>(a.p) - hbase);
      auto it = allocs.upper_bound(off);
      if (it == allocs.begin()) continue;
      --it;
      if (off >= it->first + it->second.size) continue;
      Alloc& A = it->second;
      std::string found;
      if (A.w_queue >= 0 && A.w_queue != q && c[static_cast<size_t>(A.w_queue)] < A.w_seq) {
        found = std::string(what) + " on queue " + kQueueNames[q] +
                (a.write ? " writes" : " reads") + " buffer '" + A.what + "' while queue " +
                kQueueNames[A.w_queue] + " writes it, with no event between them";
      }
      if (a.write && found.empty()) {
        for (int r = 0; r < kNumQueues; ++r) {
          if (r != q && A.r_seq[r] > c[static_cast<size_t>(r)]) {
            found = std::string(what) + " on queue " + kQueueNames[q] + " writes buffer '" +
                    A.what + "' while queue " + kQueueNames[r] +
                    " reads it, with no event between them";
            break;
          }
        }
      }
      if (!found.empty()) {
        std::lock_guard<std::mutex> l2(check_mu);
        hazard_log.push_back("sim: hazard: " + found);
        if (opt.abort_on_hazard) {
          std::fprintf(stderr, "%s\n", hazard_log.back().c_str());
          std::abort();
        }
      }
      if (a.write) {
        A.w_queue = q;
        A.w_seq = seq;
        std::memset(A.r_seq, 0, sizeof A.r_seq);
      } else {
        A.r_seq[q] = std::max(A.r_seq[q], seq);
      }
    }
  }
  queues[q]->submit(std::move(fn));
}

void SimDevice::Impl::sync(int q) {
  queues[q]->wait_for(queues[q]->submitted());
  merge(clocks[kHost], clocks[q]);
}

// ---- Device --------------------------------------------------------------------------

Result<std::unique_ptr<SimDevice>> SimDevice::create(const SimOptions& o, int n_threads,
                                                     cpu::Isa isa) {
  if (o.capacity == 0) return err("sim: capacity must be > 0 bytes");
  if (!(o.copy_latency_us >= 0) || !(o.copy_gbps >= 0))
    return err("sim: copy latency and bandwidth must be >= 0");
  auto impl = std::make_unique<Impl>(o, n_threads, isa);
  // Handles: addresses no host code may touch (any access faults); storage: committed as written.
  impl->handles = AddressRange(impl->capacity, /*accessible=*/false);
  impl->storage = AddressRange(impl->capacity, /*accessible=*/true);
  if (!impl->handles.ok() || !impl->storage.ok())
    return err("sim: cannot reserve %" PRIu64 " bytes of address space for the device", impl->capacity);
  impl->hbase = impl->handles.data();
  impl->abase = impl->storage.data();
  impl->free_blocks[0] = impl->capacity;
  impl->ops = make_sim_ops(*impl);
  return std::unique_ptr<SimDevice>(new SimDevice(std::move(impl)));
}

SimDevice::SimDevice(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SimDevice::~SimDevice() = default;

std::string SimDevice::describe() const {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "sim: simulated GPU, %.2f GiB, %s kernels on %d thread%s, copies +%.1f us at %s",
                static_cast<double>(impl_->capacity) / (1 << 30),
                std::string(cpu::isa_name(impl_->cpu.isa())).c_str(), impl_->pool.size(),
                impl_->pool.size() == 1 ? "" : "s", impl_->opt.copy_latency_us,
                impl_->opt.copy_gbps > 0 ? (std::to_string(impl_->opt.copy_gbps) + " GB/s").c_str()
                                         : "memcpy speed");
  return buf;
}

MemoryInfo SimDevice::memory() const {
  std::lock_guard<std::mutex> lock(impl_->mem_mu);
  return MemoryInfo{impl_->capacity, impl_->capacity, impl_->used, impl_->peak};
}

uint64_t SimDevice::alloc_footprint(size_t bytes) const {
  return (std::max<uint64_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
}

uint64_t SimDevice::runtime_margin() const { return impl_->opt.runtime_margin; }

bool SimDevice::supports(Op op, DType t) const { return host_kernels_support(op, t); }

Result<Buffer> SimDevice::alloc(size_t bytes, const char* what) {
  Impl& im = *impl_;
  const uint64_t size = alloc_footprint(bytes);
  uint64_t off = 0;
  {
    std::lock_guard<std::mutex> lock(im.mem_mu);
    auto it = im.free_blocks.begin();
    uint64_t largest = 0;
    for (; it != im.free_blocks.end(); ++it) {
      if (it->second >= size) break;
      largest = std::max(largest, it->second);
    }
    if (it == im.free_blocks.end()) {
      return err("sim: out of memory allocating %s: %zu bytes requested, %" PRIu64 " of %" PRIu64
                 " bytes free (largest free block %" PRIu64 ")",
                 what, bytes, im.capacity - im.used, im.capacity, largest);
    }
    off = it->first;
    const uint64_t rest = it->second - size;
    im.free_blocks.erase(it);
    if (rest > 0) im.free_blocks[off + size] = rest;
    im.allocs[off] = Impl::Alloc{size, what};
    im.used += size;
    im.peak = std::max(im.peak, im.used);
  }
  std::memset(im.abase + off, 0xFF, size);  // poison: NaN as f32 and as f16
  return Buffer(this, im.hbase + off, bytes);
}

Result<Buffer> SimDevice::alloc_host(size_t bytes, const char* what) {
  auto p = impl_->pinned.alloc(bytes, "sim (pinned host)", what);
  if (!p.ok()) return p.error();
  return Buffer(this, *p, bytes);
}

uint64_t SimDevice::pinned_bytes() const { return impl_->pinned.used(); }

void SimDevice::release(void* data, size_t) {
  Impl& im = *impl_;
  if (!im.is_handle(data)) {
    im.pinned.release(data);
    return;
  }
  im.sync_all();  // like cudaFree: no queued work may still touch it
  std::lock_guard<std::mutex> lock(im.mem_mu);
  const auto off = static_cast<uint64_t>(static_cast<std::byte*>(data) - im.hbase);
  auto it = im.allocs.find(off);
  if (it == im.allocs.end()) return;
  uint64_t start = off, size = it->second.size;
  im.used -= size;
  im.allocs.erase(it);
  // Coalesce with the free neighbours.
  auto next = im.free_blocks.lower_bound(start);
  if (next != im.free_blocks.end() && next->first == start + size) {
    size += next->second;
    next = im.free_blocks.erase(next);
  }
  if (next != im.free_blocks.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      im.free_blocks.erase(prev);
    }
  }
  im.free_blocks[start] = size;
}

Result<const void*> SimDevice::wrap_host(const void* p, size_t bytes) {
  return err("sim: the device cannot address host memory (%zu bytes at %p): copy it in", bytes, p);
}

namespace {

void copy_delay(const SimOptions& o, size_t bytes) {
  double us = o.copy_latency_us;
  if (o.copy_gbps > 0) us += static_cast<double>(bytes) / (o.copy_gbps * 1e3);
  if (us > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(us));
}

}  // namespace

void SimDevice::copy_in(QueueId q, void* dst, const void* src, size_t bytes) {
  Impl& im = *impl_;
  std::byte* to = im.real(static_cast<std::byte*>(dst));
  im.submit(q, "copy_in", {{dst, true}}, [&im, to, src, bytes] {
    copy_delay(im.opt, bytes);
    std::memcpy(to, src, bytes);
    im.bytes_in += bytes;
    ++im.copies_in;
  });
}

void SimDevice::copy_out(QueueId q, void* dst, const void* src, size_t bytes) {
  Impl& im = *impl_;
  const std::byte* from = im.real(static_cast<const std::byte*>(src));
  im.submit(q, "copy_out", {{src, false}}, [&im, dst, from, bytes] {
    copy_delay(im.opt, bytes);
    std::memcpy(dst, from, bytes);
    im.bytes_out += bytes;
    ++im.copies_out;
  });
}

Event SimDevice::record(QueueId q) {
  Impl& im = *impl_;
  const Event e{q, im.queues[q]->submitted()};
  im.event_clocks[{e.queue, e.value}] = im.clocks[q];
  return e;
}

void SimDevice::wait(QueueId q, const Event& e) {
  Impl& im = *impl_;
  if (e.queue < 0 || e.queue >= kNumQueues || e.value == 0) return;
  SimQueue* other = im.queues[e.queue].get();
  const uint64_t v = e.value;
  im.queues[q]->submit([other, v] { other->wait_for(v); });
  auto it = im.event_clocks.find({e.queue, e.value});
  if (it != im.event_clocks.end()) merge(im.clocks[q], it->second);
}

void SimDevice::sync(QueueId q) { impl_->sync(q); }

void* SimDevice::map(const void* p, size_t) {
  impl_->sync_all();
  return impl_->real(const_cast<void*>(p));
}

Ops& SimDevice::ops() { return *impl_->ops; }

SimCounters SimDevice::counters() const {
  const Impl& im = *impl_;
  return SimCounters{im.bytes_in.load(), im.bytes_out.load(), im.copies_in.load(),
                     im.copies_out.load(), im.n_ops.load()};
}

DeviceActivity SimDevice::activity() const {
  const SimCounters c = counters();
  return DeviceActivity{c.bytes_in, c.bytes_out, c.copies_in, c.copies_out, c.ops};
}

std::vector<std::string> SimDevice::hazards() const {
  std::lock_guard<std::mutex> lock(impl_->check_mu);
  return impl_->hazard_log;
}

}  // namespace pi::backend
