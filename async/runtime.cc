#include "cosession/async/runtime.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/post.hpp>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace cosession {
namespace {
int ResolveThreads(int requested) {
  if (requested > 0) return requested;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    return std::max(1, CPU_COUNT(&allowed));
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// A service that only the pools' io_contexts hold: what IsPoolContext
// looks for (an execution_context has no virtual functions to tell its
// kinds apart).
class PoolMarker : public boost::asio::execution_context::service {
 public:
  static inline boost::asio::execution_context::id id;
  explicit PoolMarker(boost::asio::execution_context& context)
      : service(context) {}

 private:
  void shutdown() override {}
};

}  // namespace

Runtime::Runtime(RuntimeOptions options)
    : options_(options),
      num_threads_(ResolveThreads(options.num_threads)),
      context_(num_threads_),
      keep_running_(context_.get_executor()) {
  boost::asio::make_service<PoolMarker>(context_);
  threads_.reserve(static_cast<size_t>(num_threads_));
  for (int i = 0; i < num_threads_; ++i) {
    threads_.emplace_back([this] { RunPoolThread(); });
  }
  if (options_.pin_threads) PinThreads();
}

void Runtime::PinThreads() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  }
  if (cpus.empty()) return;
  for (size_t i = 0; i < threads_.size(); ++i) {
    const int cpu = cpus[i % cpus.size()];
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (pthread_setaffinity_np(threads_[i].native_handle(), sizeof(one),
                               &one) == 0) {
      pinned_cpus_.push_back(cpu);
    }
  }
}

bool Runtime::IsPoolContext(const boost::asio::execution_context& context) {
  // has_service only reads the registry; it takes a non-const reference.
  return boost::asio::has_service<PoolMarker>(
      const_cast<boost::asio::execution_context&>(context));
}

Runtime::~Runtime() {
  // With the guard gone, the io_context stops once the queued work is done,
  // and every pool thread returns (a spinning one after its spin).
  keep_running_.reset();
  // Spinning threads look at the io_context again at once, rather than at
  // the end of their spin.
  handed_.handed.fetch_add(1, std::memory_order_release);
  for (std::thread& thread : threads_) thread.join();
}

namespace {
// The longest ParallelFor's caller spins for the pieces other threads run
// before it sleeps.
constexpr std::chrono::microseconds kMaxParallelForSpin{200};

// A hint to the CPU that this thread is spinning (x86's pause).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

void Runtime::RunPoolThread() {
  for (;;) {
    // Read before looking for work: whatever is handed over after this read
    // moves the counter, so the spin below cannot miss it.
    const uint64_t seen = handed_.handed.load(std::memory_order_acquire);
    if (context_.poll() > 0) continue;
    if (context_.stopped()) return;
    if (SpinForWork(seen)) continue;
    // Asleep until work arrives: the io_context wakes one sleeping thread
    // per hand-off that no awake thread takes.
    context_.run_one();
    if (context_.stopped()) return;
  }
}

bool Runtime::SpinForWork(uint64_t seen) {
  if (options_.spin_before_sleep.count() <= 0) return false;
  // One spinning thread at a time, as in Eigen's pool: it is enough to take
  // the next hand-off at once (while it runs that, the io_context wakes a
  // sleeping one for the next), and the CPUs the others would spin on stay
  // free for the callers' threads, which share them.
  int none = 0;
  if (!spinning_.compare_exchange_strong(none, 1, std::memory_order_relaxed)) {
    return false;
  }
  const auto deadline =
      std::chrono::steady_clock::now() + options_.spin_before_sleep;
  bool handed = false;
  for (int i = 1;; ++i) {
    if (handed_.handed.load(std::memory_order_acquire) != seen) {
      handed = true;
      break;
    }
    CpuRelax();
    if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) break;
  }
  spinning_.fetch_sub(1, std::memory_order_relaxed);
  return handed;
}

namespace {
// What the threads of one ParallelFor share. Helpers hold it by shared_ptr:
// one may start after every piece is done and the caller returned.
struct ParallelLoop {
  ParallelLoop(int64_t n, int64_t pieces,
               absl::FunctionRef<void(int64_t, int64_t)> fn)
      : n(n), pieces(pieces), fn(fn) {}

  // Claims and runs pieces until none is left unclaimed.
  void RunPieces() {
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < pieces;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      // fn is used only for claimed pieces, all finished before the caller
      // returns, so the callable it refers to is still alive.
      fn(i * n / pieces, (i + 1) * n / pieces);
      if (finished.fetch_add(1, std::memory_order_acq_rel) + 1 == pieces) {
        std::lock_guard lock(mu);
        all_done = true;
        cv.notify_one();
      }
    }
  }

  const int64_t n;
  const int64_t pieces;
  const absl::FunctionRef<void(int64_t, int64_t)> fn;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> finished{0};
  std::mutex mu;
  std::condition_variable cv;
  bool all_done ABSL_GUARDED_BY(mu) = false;
};
}  // namespace

void Runtime::ParallelFor(int64_t n, int64_t cost_per_unit,
                          absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  const int64_t total = n * std::max<int64_t>(cost_per_unit, 1);
  const int64_t min_piece = options_.min_parallel_piece_cost;
  const int64_t pieces =
      min_piece <= 0 ? 1
                     : std::min<int64_t>({static_cast<int64_t>(num_threads_), n,
                                          total / min_piece});
  if (pieces <= 1) {
    fn(0, n);
    return;
  }
  auto loop = std::make_shared<ParallelLoop>(n, pieces, fn);
  for (int64_t i = 1; i < pieces; ++i) {
    boost::asio::post(executor(), [loop] { loop->RunPieces(); });
  }
  const auto start = std::chrono::steady_clock::now();
  loop->RunPieces();
  // Every piece is claimed; wait for those other threads are running. They
  // started at most a wake-up later than this thread and are no bigger than
  // its own pieces, so they end soon: spin for as long as this thread's
  // pieces took (bounded), rather than sleep and be woken -- a wake-up that
  // costs tens of microseconds on a VM, once per split kernel.
  const auto spin_budget = std::min<std::chrono::steady_clock::duration>(
      std::chrono::steady_clock::now() - start, kMaxParallelForSpin);
  const auto spin_start = std::chrono::steady_clock::now();
  for (int i = 1;; ++i) {
    if (loop->finished.load(std::memory_order_acquire) == pieces) return;
    CpuRelax();
    if (i % 64 == 0 &&
        std::chrono::steady_clock::now() - spin_start > spin_budget) {
      break;
    }
  }
  std::unique_lock lock(loop->mu);
  loop->cv.wait(lock, [&] { return loop->all_done; });
}

absl::StatusOr<bool> PinThreadsFromEnvironment(const char* value) {
  if (value == nullptr) return true;
  const absl::string_view v(value);
  if (v == "1") return true;
  if (v == "0") return false;
  return absl::InvalidArgumentError(absl::StrCat(
      "COSESSION_PIN_THREADS='", v, "': expected 0 (unbound) or 1 (bound)"));
}

absl::StatusOr<std::chrono::microseconds> PoolSpinFromEnvironment(
    const char* value) {
  if (value == nullptr) return RuntimeOptions().spin_before_sleep;
  const absl::string_view v(value);
  int64_t us = 0;
  const auto [end, error] = std::from_chars(v.data(), v.data() + v.size(), us);
  if (v.empty() || error != std::errc() || end != v.data() + v.size() ||
      us < 0 || us > kMaxPoolSpinMicroseconds) {
    return absl::InvalidArgumentError(absl::StrCat(
        "COSESSION_POOL_SPIN_US='", v,
        "': expected microseconds, an integer from 0 (sleep at once) to ",
        kMaxPoolSpinMicroseconds));
  }
  return std::chrono::microseconds(us);
}

namespace {
RuntimeOptions DefaultRuntimeOptions() {
  RuntimeOptions options;
  absl::StatusOr<std::chrono::microseconds> spin =
      PoolSpinFromEnvironment(std::getenv("COSESSION_POOL_SPIN_US"));
  if (!spin.ok()) {
    std::fprintf(stderr, "cosession: %s; spinning for %lld us\n",
                 std::string(spin.status().message()).c_str(),
                 static_cast<long long>(options.spin_before_sleep.count()));
  }
  options.spin_before_sleep = spin.value_or(options.spin_before_sleep);
  absl::StatusOr<bool> pin =
      PinThreadsFromEnvironment(std::getenv("COSESSION_PIN_THREADS"));
  if (!pin.ok()) {
    std::fprintf(stderr,
                 "cosession: %s; binding the default runtime's threads\n",
                 std::string(pin.status().message()).c_str());
  }
  options.pin_threads = pin.value_or(true);
  return options;
}
}  // namespace

Runtime& Runtime::Default() {
  static Runtime runtime(DefaultRuntimeOptions());
  return runtime;
}

}  // namespace cosession
