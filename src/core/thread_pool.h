// A persistent fork/join thread pool for data-parallel kernels.
//
// A pool of size N owns N-1 worker threads; the thread that calls parallel_for is thread 0
// and works too. Workers are created once and wait between jobs on a spin-then-sleep
// barrier: they spin for a short while (so back-to-back kernel calls in a token step see no
// system call) and then sleep on a futex (std::atomic::wait), so an idle pool costs nothing.
//
// Determinism contract for users: which thread runs a task is not fixed (dynamic schedules
// hand out tasks in arrival order), so a task's result must depend only on its task index.
// Kernels split outputs between tasks and never reduce partial sums across threads.
//
// Thread-safety: parallel_for may be called from several threads; calls are serialized.
// A parallel_for issued from inside a task (nesting) runs inline on the calling thread and
// reports thread 0, so per-thread scratch indexed by `thread` must not be used in nested
// calls (the kernels never nest). Task functions must not throw.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace pi {

enum class Schedule {
  // Thread t runs the contiguous task range [t*n/T, (t+1)*n/T): best locality, no atomics.
  Static,
  // Threads take `chunk` consecutive tasks at a time from a shared counter: balances load
  // when tasks differ in cost or a core is shared with other processes.
  Dynamic,
};

class ThreadPool {
 public:
  // n_threads >= 1 is the total number of threads, including the caller. Values below 1
  // are treated as 1.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(task, thread) for every task in [0, n_tasks) and returns when all have
  // finished. `thread` in [0, size()) identifies the executing thread (for per-thread
  // scratch); two tasks with the same `thread` never run concurrently.
  // chunk (Dynamic only) is the number of consecutive tasks taken at a time.
  template <typename F>
  void parallel_for(int64_t n_tasks, F&& fn, Schedule schedule = Schedule::Static,
                    int64_t chunk = 1) {
    using Fn = std::remove_reference_t<F>;
    run(n_tasks, schedule, chunk,
        [](void* ctx, int64_t task, int thread) { (*static_cast<Fn*>(ctx))(task, thread); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

  // Runs fn(thread) once on each of the size() threads (thread == task).
  template <typename F>
  void run_on_all(F&& fn) {
    parallel_for(n_threads_, [&fn](int64_t, int thread) { fn(thread); }, Schedule::Static);
  }

  // Number of parallel_for calls that woke sleeping workers (diagnostics for tests and
  // benchmarks: back-to-back calls should find workers still spinning).
  uint64_t wakeups() const { return wakeups_.load(std::memory_order_relaxed); }

 private:
  using TaskFn = void (*)(void* ctx, int64_t task, int thread);
  struct Job {
    TaskFn fn = nullptr;
    void* ctx = nullptr;
    int64_t n_tasks = 0;
    int64_t chunk = 1;
    Schedule schedule = Schedule::Static;
  };

  void run(int64_t n_tasks, Schedule schedule, int64_t chunk, TaskFn fn, void* ctx);
  void work(int thread);
  void worker_main(int thread);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // serializes parallel_for callers

  Job job_;  // written by the caller before the generation bump, read by workers after
  alignas(64) std::atomic<int64_t> next_task_{0};
  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int32_t> pending_{0};  // workers still running the current job
  alignas(64) std::atomic<int32_t> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> wakeups_{0};
};

}  // namespace pi
