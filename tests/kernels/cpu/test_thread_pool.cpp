// ThreadPool: every task runs exactly once under both schedules, thread ids are valid and
// exclusive, nesting runs inline, callers on several threads are serialized, and idle
// workers go to sleep and wake up again.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace pi {
namespace {

TEST(ThreadPool, EveryTaskRunsOnceBothSchedules) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (Schedule s : {Schedule::Static, Schedule::Dynamic}) {
      for (int64_t n : {0, 1, 2, 3, 7, 100, 1001}) {
        for (int64_t chunk : {1, 3, 64}) {
          std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
          std::atomic<bool> bad_thread{false};
          pool.parallel_for(
              n,
              [&](int64_t task, int thread) {
                if (thread < 0 || thread >= threads) bad_thread = true;
                hits[static_cast<size_t>(task)].fetch_add(1);
              },
              s, chunk);
          EXPECT_FALSE(bad_thread);
          for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
        }
      }
    }
  }
}

TEST(ThreadPool, StaticScheduleGivesContiguousRangesPerThread) {
  ThreadPool pool(3);
  std::vector<int> owner(30, -1);
  pool.parallel_for(30, [&](int64_t task, int thread) { owner[static_cast<size_t>(task)] = thread; },
                    Schedule::Static);
  for (int64_t i = 0; i < 30; ++i) EXPECT_EQ(owner[static_cast<size_t>(i)], i / 10);
}

TEST(ThreadPool, ThreadIdsAreExclusive) {
  // Two tasks with the same thread id never overlap: per-thread scratch is safe.
  ThreadPool pool(3);
  std::vector<std::atomic<int>> busy(3);
  std::atomic<bool> overlap{false};
  pool.parallel_for(
      300,
      [&](int64_t, int thread) {
        if (busy[static_cast<size_t>(thread)].fetch_add(1) != 0) overlap = true;
        std::this_thread::yield();
        busy[static_cast<size_t>(thread)].fetch_sub(1);
      },
      Schedule::Dynamic, 1);
  EXPECT_FALSE(overlap);
}

TEST(ThreadPool, UsesAllThreads) {
  ThreadPool pool(2);
  std::atomic<int> seen_mask{0};
  pool.parallel_for(
      2,
      [&](int64_t, int thread) {
        seen_mask |= 1 << thread;
        // Hold the task until the other thread has started (bounded wait).
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (seen_mask.load() != 3 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
      },
      Schedule::Static);
  EXPECT_EQ(seen_mask.load(), 3);
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  pool.parallel_for(4, [&](int64_t, int) {
    pool.parallel_for(10, [&](int64_t j, int) { total += j; });
  });
  EXPECT_EQ(total.load(), 4 * 45);
}

TEST(ThreadPool, ConcurrentCallersAreSerialized) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 200; ++rep)
        pool.parallel_for(16, [&](int64_t t, int) { total += t; }, Schedule::Dynamic, 2);
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 3 * 200 * 120);
}

TEST(ThreadPool, SleepingWorkersWakeUp) {
  ThreadPool pool(3);
  std::atomic<int> count{0};
  pool.parallel_for(3, [&](int64_t, int) { ++count; });
  // Longer than the spin phase: workers are asleep now.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  pool.parallel_for(30, [&](int64_t, int) { ++count; }, Schedule::Dynamic);
  EXPECT_EQ(count.load(), 33);
  EXPECT_GE(pool.wakeups(), 1u);
}

TEST(ThreadPool, ManySmallJobs) {
  ThreadPool pool(2);
  int64_t sum = 0;
  std::vector<int64_t> part(2);
  for (int rep = 0; rep < 2000; ++rep) {
    part[0] = part[1] = 0;
    pool.parallel_for(2, [&](int64_t t, int) { part[static_cast<size_t>(t)] = t + 1; });
    sum += part[0] + part[1];
  }
  EXPECT_EQ(sum, 2000 * 3);
}

}  // namespace
}  // namespace pi
