#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "core/os.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace pi {
namespace {

// True while this thread executes a task of some pool; nested parallel_for runs inline.
thread_local bool t_in_task = false;

// How long an idle thread spins before sleeping: long enough to bridge the serial code
// between two kernels of one token step, short enough not to burn a shared core for long.
// After kPauseTime the spin yields the core on every round, so that on an oversubscribed
// machine the thread being waited for can run.
constexpr auto kPauseTime = std::chrono::microseconds(20);
constexpr auto kSpinTime = std::chrono::microseconds(200);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until `pred()` holds or kSpinTime has passed; returns pred().
template <typename Pred>
bool spin_until(Pred pred) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (pred()) return true;
      cpu_relax();
    }
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited > kSpinTime) return pred();
    if (waited > kPauseTime) std::this_thread::yield();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_main(t); });
}

ThreadPool::~ThreadPool() {
  std::lock_guard lock(call_mutex_);
  stop_.store(true, std::memory_order_seq_cst);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  os::wake_all(generation_);
  for (auto& w : workers_) w.join();
}

void ThreadPool::run(int64_t n_tasks, Schedule schedule, int64_t chunk, TaskFn fn, void* ctx) {
  if (n_tasks <= 0) return;
  chunk = std::max<int64_t>(1, chunk);
  if (t_in_task || n_threads_ == 1 || n_tasks == 1) {
    // Inline: nested call, single thread, or nothing to share (see the header on thread ids
    // in nested calls).
    bool was = t_in_task;
    t_in_task = true;
    for (int64_t i = 0; i < n_tasks; ++i) fn(ctx, i, 0);
    t_in_task = was;
    return;
  }

  std::lock_guard lock(call_mutex_);
  job_ = Job{fn, ctx, n_tasks, chunk, schedule};
  next_task_.store(0, std::memory_order_relaxed);
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    wakeups_.fetch_add(1, std::memory_order_relaxed);
    os::wake_all(generation_);
  }

  t_in_task = true;
  work(0);
  t_in_task = false;

  auto done = [this] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(done)) {
    for (int32_t v; (v = pending_.load(std::memory_order_acquire)) != 0;)
      os::wait_while(pending_, v);
  }
}

void ThreadPool::work(int thread) {
  const Job& job = job_;
  if (job.schedule == Schedule::Static) {
    int64_t begin = job.n_tasks * thread / n_threads_;
    int64_t end = job.n_tasks * (thread + 1) / n_threads_;
    for (int64_t i = begin; i < end; ++i) job.fn(job.ctx, i, thread);
    return;
  }
  for (;;) {
    int64_t begin = next_task_.fetch_add(job.chunk, std::memory_order_relaxed);
    if (begin >= job.n_tasks) return;
    int64_t end = std::min(job.n_tasks, begin + job.chunk);
    for (int64_t i = begin; i < end; ++i) job.fn(job.ctx, i, thread);
  }
}

void ThreadPool::worker_main(int thread) {
  t_in_task = true;
  uint32_t seen = 0;
  for (;;) {
    auto changed = [&] { return generation_.load(std::memory_order_acquire) != seen; };
    if (!spin_until(changed)) {
      // Dekker-style handshake with run(): either run() sees sleepers_ > 0 and notifies,
      // or this thread sees the new generation before waiting.
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      while (generation_.load(std::memory_order_seq_cst) == seen)
        os::wait_while(generation_, seen);
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    work(thread);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) os::wake_one(pending_);
  }
}

}  // namespace pi
