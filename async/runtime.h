// Runtime: owns the thread pool on which sessions run expensive kernels,
// independent branches of a graph, and asynchronous kernels.
//
// Sessions borrow a Runtime; it must outlive them and every run they
// started. The destructor stops accepting work, then joins the pool's
// threads (work already queued runs first).
//
// Thread safety: thread-safe.
#ifndef COSESSION_ASYNC_RUNTIME_H_
#define COSESSION_ASYNC_RUNTIME_H_

#include <boost/asio/thread_pool.hpp>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
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
};

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
  // value other than 0 or 1 is reported on stderr once, and binds.
  static Runtime& Default();

  using executor_type = boost::asio::thread_pool::executor_type;
  executor_type executor() { return pool_.get_executor(); }
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

  // True on one of this runtime's pool threads.
  bool InPoolThread() const {
    return pool_.get_executor().running_in_this_thread();
  }

 private:
  // Binds each pool thread to its CPU; see RuntimeOptions::pin_threads.
  void PinThreads();

  RuntimeOptions options_;
  int num_threads_;
  std::vector<int> pinned_cpus_;  // written by the constructor only
  mutable boost::asio::thread_pool
      pool_;  // mutable: executor queries are const in spirit
};

}  // namespace cosession

#endif  // COSESSION_ASYNC_RUNTIME_H_
