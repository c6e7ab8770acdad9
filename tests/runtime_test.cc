// Runtime::ParallelFor (intra-op parallelism for kernels): the pieces cover
// the range exactly once, small loops stay on the caller, big ones use the
// pool, and a pool whose threads are all busy makes the loop serial, never
// stuck. RuntimeOptions::pin_threads binds each pool thread to its own CPU;
// the default runtime binds unless COSESSION_PIN_THREADS=0. A pool thread
// that ran out of work spins for more (spin_before_sleep) rather than
// sleeping, and the destructor does not wait for that spin to end.
#include "cosession/async/runtime.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/test_util.h"

namespace cosession::runtime_test {
namespace {

using testing::Latch;

// Records the ranges fn was called with, and on which threads.
struct Calls {
  void Add(int64_t begin, int64_t end) {
    std::lock_guard lock(mu);
    ranges.emplace_back(begin, end);
    threads.insert(std::this_thread::get_id());
  }
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  std::set<std::thread::id> threads;
};

void ExpectExactCover(std::vector<std::pair<int64_t, int64_t>> ranges,
                      int64_t n) {
  std::sort(ranges.begin(), ranges.end());
  int64_t next = 0;
  for (const auto& [begin, end] : ranges) {
    EXPECT_EQ(begin, next);
    EXPECT_LT(begin, end);
    next = end;
  }
  EXPECT_EQ(next, n);
}

TEST(RuntimeParallelFor, SmallLoopsRunAsOneCallOnTheCaller) {
  Runtime runtime({.num_threads = 2, .min_parallel_piece_cost = 1000});
  Calls calls;
  runtime.ParallelFor(100, 5, [&](int64_t b, int64_t e) { calls.Add(b, e); });
  ASSERT_EQ(calls.ranges.size(), 1u);
  EXPECT_EQ(calls.ranges[0], std::make_pair(int64_t{0}, int64_t{100}));
  EXPECT_EQ(calls.threads.count(std::this_thread::get_id()), 1u);

  // Nothing to do: no call at all.
  runtime.ParallelFor(0, 1000000,
                      [&](int64_t b, int64_t e) { calls.Add(b, e); });
  EXPECT_EQ(calls.ranges.size(), 1u);
}

TEST(RuntimeParallelFor, AZeroMinimumPieceCostTurnsItOff) {
  Runtime runtime({.num_threads = 2, .min_parallel_piece_cost = 0});
  Calls calls;
  runtime.ParallelFor(1 << 20, 1 << 20,
                      [&](int64_t b, int64_t e) { calls.Add(b, e); });
  ASSERT_EQ(calls.ranges.size(), 1u);
  EXPECT_EQ(calls.ranges[0], std::make_pair(int64_t{0}, int64_t{1} << 20));
}

TEST(RuntimeParallelFor, BigLoopsAreSplitIntoDisjointPiecesCoveringAll) {
  Runtime runtime({.num_threads = 4, .min_parallel_piece_cost = 1000});
  for (int64_t n : {2, 3, 7, 1000, 12345}) {
    Calls calls;
    runtime.ParallelFor(n, 100000,
                        [&](int64_t b, int64_t e) { calls.Add(b, e); });
    SCOPED_TRACE(n);
    EXPECT_EQ(calls.ranges.size(),
              static_cast<size_t>(std::min<int64_t>(n, 4)));
    ExpectExactCover(calls.ranges, n);
  }
}

TEST(RuntimeParallelFor, PiecesRunOnPoolThreadsWhenTheyAreFree) {
  Runtime runtime({.num_threads = 2, .min_parallel_piece_cost = 1});
  // The first piece (claimed by the caller) waits until another thread ran
  // the second: that proves the pool took part. Bounded, so a serial run
  // fails instead of hanging.
  Latch second_piece_ran;
  std::atomic<bool> waited_ok{false};
  runtime.ParallelFor(2, 1000, [&](int64_t begin, int64_t) {
    if (begin == 0) {
      waited_ok = second_piece_ran.WaitFor(std::chrono::seconds(20));
    } else {
      second_piece_ran.Notify();
    }
  });
  EXPECT_TRUE(waited_ok.load());
}

// The caller waits for the pieces other threads run (spinning, then
// sleeping) and returns only once they finished. The two pieces run on two
// threads (each waits for the other to have started) and the second
// finishes only after the first did, so a caller that returned after its
// own piece would find the second unfinished.
TEST(RuntimeParallelFor, ReturnsOnlyOnceEveryPieceFinished) {
  Runtime runtime({.num_threads = 2, .min_parallel_piece_cost = 1});
  for (int trial = 0; trial < 100; ++trial) {
    Latch second_piece_started, first_piece_done;
    std::atomic<bool> second_piece_done{false};
    runtime.ParallelFor(2, 1000, [&](int64_t begin, int64_t) {
      if (begin == 0) {
        second_piece_started.WaitFor(std::chrono::seconds(20));
        first_piece_done.Notify();
        return;
      }
      second_piece_started.Notify();
      if (first_piece_done.WaitFor(std::chrono::seconds(20))) {
        second_piece_done.store(true, std::memory_order_relaxed);
      }
    });
    ASSERT_TRUE(second_piece_done.load(std::memory_order_relaxed))
        << "trial " << trial;
  }
}

TEST(RuntimeParallelFor, ABusyPoolMakesTheLoopSerialNotStuck) {
  Runtime runtime({.num_threads = 2, .min_parallel_piece_cost = 1});
  // Occupy both pool threads until the loop is done.
  Latch release, both_busy_a, both_busy_b;
  boost::asio::post(runtime.executor(), [&] {
    both_busy_a.Notify();
    release.WaitFor(std::chrono::seconds(20));
  });
  boost::asio::post(runtime.executor(), [&] {
    both_busy_b.Notify();
    release.WaitFor(std::chrono::seconds(20));
  });
  ASSERT_TRUE(both_busy_a.WaitFor(std::chrono::seconds(20)));
  ASSERT_TRUE(both_busy_b.WaitFor(std::chrono::seconds(20)));
  Calls calls;
  runtime.ParallelFor(1000, 1000,
                      [&](int64_t b, int64_t e) { calls.Add(b, e); });
  release.Notify();
  ExpectExactCover(calls.ranges, 1000);
  // Every piece ran on this thread: the pool never got to them.
  EXPECT_EQ(calls.threads.size(), 1u);
  EXPECT_EQ(calls.threads.count(std::this_thread::get_id()), 1u);
}

std::set<int> CpusOf(const cpu_set_t& set) {
  std::set<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.insert(cpu);
  }
  return cpus;
}

std::set<int> ProcessCpus() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  EXPECT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  return CpusOf(allowed);
}

// The CPU mask of each of the runtime's `threads` pool threads, read on the
// threads themselves: `threads` tasks that each wait until all have started
// run on distinct threads. Empty if they did not all start within 20 s.
std::vector<std::set<int>> PoolThreadMasks(Runtime& runtime, int threads) {
  std::mutex mu;
  std::condition_variable changed;
  int started = 0;
  std::vector<std::set<int>> masks;
  for (int i = 0; i < threads; ++i) {
    boost::asio::post(runtime.executor(), [&] {
      std::unique_lock lock(mu);
      ++started;
      changed.notify_all();
      if (!changed.wait_for(lock, std::chrono::seconds(20),
                            [&] { return started == threads; })) {
        return;
      }
      cpu_set_t mask;
      CPU_ZERO(&mask);
      pthread_getaffinity_np(pthread_self(), sizeof(mask), &mask);
      masks.push_back(CpusOf(mask));
      changed.notify_all();
    });
  }
  std::unique_lock lock(mu);
  if (!changed.wait_for(lock, std::chrono::seconds(20), [&] {
        return static_cast<int>(masks.size()) == threads;
      })) {
    masks.clear();
  }
  return masks;
}

TEST(RuntimePinThreads, EachPoolThreadIsBoundToItsOwnCpuOfTheProcess) {
  const std::set<int> allowed = ProcessCpus();
  const int threads = std::min<int>(static_cast<int>(allowed.size()), 4);
  Runtime runtime({.num_threads = threads, .pin_threads = true});
  const std::vector<int>& pinned = runtime.pinned_cpus();
  ASSERT_EQ(pinned.size(), static_cast<size_t>(threads));
  const std::set<int> distinct(pinned.begin(), pinned.end());
  EXPECT_EQ(distinct.size(), pinned.size());
  for (int cpu : pinned) EXPECT_EQ(allowed.count(cpu), 1u) << cpu;

  std::vector<std::set<int>> masks = PoolThreadMasks(runtime, threads);
  ASSERT_EQ(masks.size(), static_cast<size_t>(threads));
  std::set<int> bound_to;
  for (const std::set<int>& mask : masks) {
    ASSERT_EQ(mask.size(), 1u);
    bound_to.insert(*mask.begin());
  }
  EXPECT_EQ(bound_to, distinct);

  // Still a working pool.
  Calls calls;
  runtime.ParallelFor(1000, 1000,
                      [&](int64_t b, int64_t e) { calls.Add(b, e); });
  ExpectExactCover(calls.ranges, 1000);
}

TEST(RuntimePinThreads, MoreThreadsThanCpusWrapAround) {
  const std::set<int> allowed = ProcessCpus();
  const int threads = static_cast<int>(allowed.size()) + 1;
  Runtime runtime({.num_threads = threads, .pin_threads = true});
  const std::vector<int>& pinned = runtime.pinned_cpus();
  ASSERT_EQ(pinned.size(), static_cast<size_t>(threads));
  // Every CPU of the process got a thread, one of them two.
  EXPECT_EQ(std::set<int>(pinned.begin(), pinned.end()), allowed);
}

TEST(RuntimePinThreads, ByDefaultThereIsOneThreadPerCpuOfTheProcess) {
  const std::set<int> allowed = ProcessCpus();
  {
    Runtime runtime;
    EXPECT_EQ(static_cast<size_t>(runtime.num_threads()), allowed.size());
  }
  if (allowed.size() < 2) GTEST_SKIP() << "one CPU: nothing to narrow";
  // Narrowed as taskset narrows a process (the calling thread's mask is
  // what the runtime reads, and what its threads inherit).
  cpu_set_t saved;
  ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved), 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(*allowed.begin(), &one);
  ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(one), &one), 0);
  int narrowed_threads = 0;
  {
    Runtime narrowed;
    narrowed_threads = narrowed.num_threads();
  }
  ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved), 0);
  EXPECT_EQ(narrowed_threads, 1);
}

TEST(RuntimePinThreads, TheDefaultRuntimeBindsUnlessTheEnvironmentSays0) {
  EXPECT_EQ(PinThreadsFromEnvironment(nullptr).value_or(false), true);
  EXPECT_EQ(PinThreadsFromEnvironment("1").value_or(false), true);
  EXPECT_EQ(PinThreadsFromEnvironment("0").value_or(true), false);
  for (const char* bad : {"", "yes", "01", "true"}) {
    absl::StatusOr<bool> pin = PinThreadsFromEnvironment(bad);
    ASSERT_FALSE(pin.ok()) << bad;
    EXPECT_EQ(pin.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(
        absl::StrContains(pin.status().message(),
                          absl::StrCat("COSESSION_PIN_THREADS='", bad, "'")))
        << pin.status();
  }
  const bool expected =
      PinThreadsFromEnvironment(std::getenv("COSESSION_PIN_THREADS"))
          .value_or(true);
  Runtime& runtime = Runtime::Default();
  EXPECT_EQ(runtime.pinned_cpus().size(),
            expected ? static_cast<size_t>(runtime.num_threads()) : 0u);
}

TEST(RuntimePinThreads, AConstructedRuntimeIsNotBoundUnlessAsked) {
  const std::set<int> allowed = ProcessCpus();
  Runtime runtime({.num_threads = 2});
  EXPECT_TRUE(runtime.pinned_cpus().empty());
  std::vector<std::set<int>> masks = PoolThreadMasks(runtime, 2);
  ASSERT_EQ(masks.size(), 2u);
  for (const std::set<int>& mask : masks) EXPECT_EQ(mask, allowed);
}

// Times the calling thread gave up its CPU to wait (blocked in a futex,
// slept): what a spinning thread never does.
int64_t VoluntaryContextSwitchesOfThisThread() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_nvcsw;
}

// Waits, without sleeping (yielding, bounded in time), until `flag` reaches
// `value`: a mutex here could make the pool thread block on it, which is
// what the test below watches for.
bool AwaitCount(const std::atomic<int>& flag, int value) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (flag.load(std::memory_order_acquire) < value) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// Waits, as AwaitCount does, until `runtime` has `value` spinning threads.
bool AwaitSpinning(const Runtime& runtime, int value) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (runtime.spinning_threads() != value) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(RuntimePool, WorkHandedToASpinningThreadRunsWithoutItSleeping) {
  // A spin longer than the test: between the tasks the pool thread never
  // sleeps, so its count of voluntary context switches stays where it was.
  // Each task is handed over only once the thread spins again, so that the
  // hand-off never meets the thread inside the io_context's lock (where it
  // could block for a moment, which is no sleep for work but counts alike).
  Runtime runtime(
      {.num_threads = 1, .spin_before_sleep = std::chrono::seconds(60)});
  constexpr int kTasks = 20;
  std::vector<int64_t> switches(kTasks, -1);
  std::atomic<int> done{0};
  for (int i = 0; i < kTasks; ++i) {
    ASSERT_TRUE(AwaitSpinning(runtime, 1)) << "before task " << i;
    boost::asio::post(runtime.executor(), [&, i] {
      switches[static_cast<size_t>(i)] = VoluntaryContextSwitchesOfThisThread();
      done.fetch_add(1, std::memory_order_release);
    });
    ASSERT_TRUE(AwaitCount(done, i + 1)) << "task " << i;
  }
  // Under ThreadSanitizer, its runtime blocks threads on locks of its own,
  // even inside an atomic load of the spin (seen with perf's
  // sched_switch: __tsan_atomic64_load -> Mutex::ReadLock -> FutexWait), so
  // there the count says nothing of the pool; that the thread was spinning
  // before every task is checked above all the same.
#if !defined(__SANITIZE_THREAD__)
  for (int i = 1; i < kTasks; ++i) {
    EXPECT_EQ(switches[static_cast<size_t>(i)], switches[0])
        << "the pool thread slept before task " << i;
  }
#endif
}

TEST(RuntimePool, DestructionDoesNotWaitForASpinToEnd) {
  auto destroyed = std::async(std::launch::async, [] {
    Runtime runtime(
        {.num_threads = 2, .spin_before_sleep = std::chrono::seconds(60)});
    std::atomic<int> ran{0};
    // Work for both threads, so that both are spinning afterwards.
    for (int i = 0; i < 2; ++i) {
      boost::asio::post(runtime.executor(),
                        [&] { ran.fetch_add(1, std::memory_order_release); });
    }
    return AwaitCount(ran, 2);
  });
  ASSERT_EQ(destroyed.wait_for(std::chrono::seconds(20)),
            std::future_status::ready)
      << "~Runtime waited for its threads' spin";
  EXPECT_TRUE(destroyed.get());
}

TEST(RuntimePool, TheDefaultRuntimesSpinComesFromTheEnvironment) {
  EXPECT_EQ(PoolSpinFromEnvironment(nullptr).value_or(std::chrono::hours(1)),
            RuntimeOptions().spin_before_sleep);
  EXPECT_EQ(PoolSpinFromEnvironment("0").value_or(std::chrono::hours(1)),
            std::chrono::microseconds(0));
  EXPECT_EQ(PoolSpinFromEnvironment("250").value_or(std::chrono::hours(1)),
            std::chrono::microseconds(250));
  EXPECT_EQ(PoolSpinFromEnvironment("1000000").value_or(std::chrono::hours(1)),
            std::chrono::microseconds(kMaxPoolSpinMicroseconds));
  for (const char* bad :
       {"", "-1", "50us", " 50", "1000001", "1e3", "99999999999999999999"}) {
    absl::StatusOr<std::chrono::microseconds> spin =
        PoolSpinFromEnvironment(bad);
    ASSERT_FALSE(spin.ok()) << bad;
    EXPECT_EQ(spin.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(
        absl::StrContains(spin.status().message(),
                          absl::StrCat("COSESSION_POOL_SPIN_US='", bad, "'")))
        << spin.status();
  }
}

TEST(RuntimePool, QueuedWorkRunsBeforeTheDestructorReturns) {
  std::atomic<int> ran{0};
  {
    Runtime runtime({.num_threads = 1});
    std::atomic<bool> release{false};
    boost::asio::post(runtime.executor(), [&] {
      while (!release.load(std::memory_order_acquire)) {
        std::this_thread::yield();
      }
      ran.fetch_add(1);
    });
    for (int i = 0; i < 10; ++i) {
      boost::asio::post(runtime.executor(), [&] { ran.fetch_add(1); });
    }
    release.store(true, std::memory_order_release);
  }
  EXPECT_EQ(ran.load(), 11);
}

}  // namespace
}  // namespace cosession::runtime_test
