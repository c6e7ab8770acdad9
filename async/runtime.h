// Runtime: owns the thread pool on which sessions run expensive kernels,
// independent branches of a graph, and asynchronous kernels.
//
// Sessions borrow a Runtime; it must outlive them and every run they
// started. The destructor stops accepting work, then joins the pool's
// threads (work already queued runs first).
//
// The pool is an io_context run by num_threads() threads of the Runtime's
// own. A thread that runs out of work may spin for new work for a while
// (RuntimeOptions::spin_before_sleep, off by default) before it sleeps in
// the io_context: work handed to a spinning thread starts without a
// wake-up, which costs tens of microseconds on a VM (see the README's
// performance section, which also shows what it costs others).
//
// Thread safety: thread-safe.
#ifndef COSESSION_ASYNC_RUNTIME_H_
#define COSESSION_ASYNC_RUNTIME_H_

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "cosession/async/pool_executor.h"
#include "cosession/graph/kernel.h"

namespace cosession {

struct RuntimeOptions {
  // Pool threads; 0 = one per CPU this process may run on
  // (sched_getaffinity: a cpuset or taskset narrows it; at least 1).
  int num_threads = 0;
  // Ops whose estimated cost (see graph/kernel.h CostFn) is below this many
  // element operations run inline on the thread that made them ready; bigger
  // ones go to the pool. Measured on these machines: a round trip to the pool
  // costs ~9 µs, about 30,000 float adds, on one VM, and 30-32 µs on
  // another whose hypervisor makes a wake-up across CPUs dear (8.5 µs there
  // with both threads on one CPU).
  int64_t inline_cost_threshold = 32 * 1024;
  // Intra-op parallelism (ParallelFor): each piece of a split kernel must be
  // worth at least this many element operations (~30 µs here), so that
  // waking a pool thread (several µs, more when the threads already run
  // independent ops) stays small next to it. 0 = never split.
  int64_t min_parallel_piece_cost = 256 * 1024;
  // Binds pool thread i to the i-th of the CPUs this process may run on
  // (sched_getaffinity; wrapping around when there are more threads), so
  // that the kernel cannot pack the pool onto fewer cores than it has
  // threads. The project's VMs boot with sched_vcpu_pack, and there a
  // process whose two pool threads share one vCPU runs a 64-product fan-out
  // 30-45 % slower for its whole life. Off here; Runtime::Default() binds
  // (see there). The caller's threads are never bound.
  bool pin_threads = false;
  // How long a pool thread that ran out of work watches for more before it
  // sleeps (0: it sleeps at once); one thread at a time watches, the others
  // sleep. Work handed to a watching thread starts without a wake-up, which
  // pays where the pool's work comes in quick succession from one caller
  // (the split products of a training step: BM_Train_MLP 1.34 -> 1.20 x its
  // two-thread baseline). Off by default, because the sleeping threads are
  // still woken by the io_context for each hand-off and then meet the
  // watching one on its lock: where a producer and a consumer trade work
  // (a Prefetch stage, the batcher) it costs more than it saves
  // (BM_Pipeline_Stages +62 -> +128 ns an element). Runtime::Default()
  // takes it from COSESSION_POOL_SPIN_US when that is set.
  std::chrono::microseconds spin_before_sleep{0};
};

// The longest spin_before_sleep COSESSION_POOL_SPIN_US may ask for (1 s).
inline constexpr int64_t kMaxPoolSpinMicroseconds = 1'000'000;

// Runtime::Default()'s spin_before_sleep, from the environment variable
// COSESSION_POOL_SPIN_US (nullptr when unset): unset gives the default of
// RuntimeOptions; otherwise microseconds, an integer from 0 to
// kMaxPoolSpinMicroseconds. Anything else is InvalidArgument naming the
// variable and the value.
absl::StatusOr<std::chrono::microseconds> PoolSpinFromEnvironment(
    const char* value);

// Whether Runtime::Default() binds its pool threads, from the value of the
// environment variable COSESSION_PIN_THREADS (nullptr when unset): unset or
// "1" binds, "0" does not; anything else is InvalidArgument naming the
// variable and the value.
absl::StatusOr<bool> PinThreadsFromEnvironment(const char* value);

class Runtime : public ParallelRunner {
 public:
  explicit Runtime(RuntimeOptions options = {});
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
  ~Runtime() override;

  // A process-wide runtime, created on first use: one pool thread per CPU
  // the process may run on, each bound to its own CPU (pin_threads) unless
  // COSESSION_PIN_THREADS=0. Binding by default is measured: on the
  // project's 2-core VMs an unbound pool ran BM_Executor_FanOut/64 at
  // 0.72-1.05 x the serial loop over 8 processes, a bound one at
  // 0.67-0.79 x in all 8. With one thread per CPU, binding gives every CPU
  // exactly one pool thread of each process, so processes that share CPUs
  // share them evenly; set COSESSION_PIN_THREADS=0 where bound threads of
  // other programs, or latency-critical work, share this process's CPUs. A
  // value other than 0 or 1 is reported on stderr once, and binds. Its
  // threads spin for work as RuntimeOptions' default says (they do not), or
  // for COSESSION_POOL_SPIN_US microseconds (for a training process with
  // CPUs of its own); an invalid value is reported on stderr once and the
  // default is kept.
  static Runtime& Default();

  using executor_type = PoolExecutor;
  executor_type executor() {
    // Without a spin nobody watches the count: hand-offs skip it.
    return PoolExecutor(
        context_.get_executor(),
        options_.spin_before_sleep.count() > 0 ? &handed_ : nullptr);
  }
  int num_threads() const { return num_threads_; }
  int64_t inline_cost_threshold() const {
    return options_.inline_cost_threshold;
  }
  // Intra-op parallelism for kernels (graph/kernel.h): up to num_threads()
  // pieces, each worth at least min_parallel_piece_cost element operations;
  // the calling thread runs pieces too, and pieces nobody has started yet
  // when it runs out are its own, so a busy pool only makes it serial,
  // never stuck. It then waits for the pieces other threads run, spinning
  // for as long as its own took (at most 200 µs) before it sleeps.
  void ParallelFor(
      int64_t n, int64_t cost_per_unit,
      absl::FunctionRef<void(int64_t begin, int64_t end)> fn) override;

  // The CPU each pool thread is bound to, in no particular order; empty
  // unless RuntimeOptions::pin_threads. A thread the kernel refused to bind
  // (the CPU left the process's set meanwhile) is left out and runs
  // unbound.
  const std::vector<int>& pinned_cpus() const { return pinned_cpus_; }

  // How many pool threads are spinning for work at this moment (see
  // RuntimeOptions::spin_before_sleep): for monitoring and tests; it may
  // change as soon as it is read.
  int spinning_threads() const {
    return spinning_.load(std::memory_order_relaxed);
  }

  // True on one of this runtime's pool threads.
  bool InPoolThread() const {
    return context_.get_executor().running_in_this_thread();
  }

  // True when `context` is a Runtime's pool: for code that keeps Asio's
  // reactor out of the pools (async/timer_executor.h).
  static bool IsPoolContext(const boost::asio::execution_context& context);

 private:
  // Binds each pool thread to its CPU; see RuntimeOptions::pin_threads.
  void PinThreads();
  // What each pool thread runs until the io_context stops.
  void RunPoolThread();
  // Spins until the work counter moves past `seen` (true) or
  // spin_before_sleep passed (false).
  bool SpinForWork(uint64_t seen);

  RuntimeOptions options_;
  int num_threads_;
  std::vector<int> pinned_cpus_;  // written by the constructor only
  PoolWorkCounter handed_;
  std::atomic<int> spinning_{0};
  mutable boost::asio::io_context
      context_;  // mutable: executor queries are const in spirit
  // Keeps the pool threads running while idle; reset by the destructor.
  std::optional<
      boost::asio::executor_work_guard<boost::asio::io_context::executor_type>>
      keep_running_;
  std::vector<std::thread> threads_;
};

}  // namespace cosession

#endif  // COSESSION_ASYNC_RUNTIME_H_
