// Internal to the simulated device: its arena, queues and race checker, shared by
// sim_device.cpp (memory, copies, events) and sim_ops.cpp (the ops).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/host_memory.h"
#include "backend/sim/sim_device.h"
#include "core/huge_region.h"
#include "core/thread_pool.h"

namespace pi::backend {

// One buffer access of a submission: the device address it touches and whether it writes.
struct Access {
  const void* p;
  bool write;
};

// Vector clock over the queues and the host (index kNumQueues).
using Clock = std::vector<uint64_t>;

class SimQueue {
 public:
  explicit SimQueue(std::string name);
  ~SimQueue();
  // Runs fn on the worker after everything submitted before; returns its submission number.
  uint64_t submit(std::function<void()> fn);
  uint64_t submitted() const { return submitted_; }  // host thread only
  void wait_for(uint64_t n);                         // blocks until n submissions completed
  const std::string& name() const { return name_; }

 private:
  void run();
  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::function<void()>> tasks_;
  uint64_t submitted_ = 0, completed_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

struct SimDevice::Impl {
  SimOptions opt;
  // Memory: handles hbase + off map to abase + off.
  AddressRange handles, storage;  // capacity bytes each: no access, and the backing arena
  std::byte* hbase = nullptr;     // handles.data()
  std::byte* abase = nullptr;     // storage.data()
  uint64_t capacity = 0;
  mutable std::mutex mem_mu;
  std::map<uint64_t, uint64_t> free_blocks;  // offset -> size
  struct Alloc {
    uint64_t size;
    std::string what;
    // Race checker state: last write (queue, submission) and last read per queue.
    int w_queue = -1;
    uint64_t w_seq = 0;
    uint64_t r_seq[kNumQueues] = {};
  };
  std::map<uint64_t, Alloc> allocs;  // offset -> allocation
  uint64_t used = 0, peak = 0;
  HostMemory pinned{~uint64_t{0}};

  // Queues and the clocks of the checker (host thread only, under check_mu for hazards()).
  std::unique_ptr<SimQueue> queues[kNumQueues];
  Clock clocks[kNumQueues + 1];  // last: the host
  std::map<std::pair<int, uint64_t>, Clock> event_clocks;
  mutable std::mutex check_mu;
  std::vector<std::string> hazard_log;

  std::atomic<uint64_t> bytes_in{0}, bytes_out{0}, copies_in{0}, copies_out{0}, n_ops{0};

  ThreadPool pool;
  CpuOps cpu;
  std::unique_ptr<Ops> ops;  // SimOps over this

  Impl(const SimOptions& o, int n_threads, cpu::Isa isa);
  ~Impl();

  bool is_handle(const void* p) const {
    auto* b = static_cast<const std::byte*>(p);
    return b >= hbase && b < hbase + capacity;
  }
  // The arena address of a handle (nullptr stays nullptr). A non-null address outside the
  // device's range is a programming error (host memory passed to a device op): it aborts.
  template <typename T>
  T* real(T* handle) const {
    if (handle == nullptr) return nullptr;
    auto* b = reinterpret_cast<const std::byte*>(handle);
    if (!is_handle(handle)) fatal_not_device(handle);
    return reinterpret_cast<T*>(const_cast<std::byte*>(abase + (b - hbase)));
  }
  [[noreturn]] void fatal_not_device(const void* p) const;

  // Checks and records the accesses of the next submission on queue q (host thread), then
  // submits fn. Every op and copy goes through here.
  void submit(int q, const char* what, std::initializer_list<Access> acc, std::function<void()> fn);
  void sync(int q);
  void sync_all() {
    for (int q = 0; q < kNumQueues; ++q) sync(q);
  }
};

std::unique_ptr<Ops> make_sim_ops(SimDevice::Impl& impl);

}  // namespace pi::backend
