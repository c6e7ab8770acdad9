// PoolExecutor: the executor of a Runtime's thread pool. It is the pool's
// io_context executor, with one addition: when the pool's threads spin for
// work (RuntimeOptions::spin_before_sleep), after it hands a function to
// the pool it bumps a counter (PoolWorkCounter), so that a spinning thread
// sees it by reading one atomic, without taking the scheduler's lock and
// without being woken through a futex (see runtime.cc). Without a spin the
// counter is null and it is the io_context executor.
//
// It is an Asio standard executor: every property the io_context executor
// supports (blocking, relationship, outstanding_work, allocator, context) is
// forwarded to it, so strands, co_spawn, any_io_executor and
// executor_work_guard accept it as they accept the io_context executor.
//
// Thread safety: copies may be used from any thread; the Runtime that made
// it must outlive every use.
#ifndef COSESSION_ASYNC_POOL_EXECUTOR_H_
#define COSESSION_ASYNC_POOL_EXECUTOR_H_

#include <atomic>
#include <boost/asio/execution.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/require.hpp>
#include <cstdint>
#include <utility>

namespace cosession {

// Counts the functions handed to a pool. Spinning threads compare it with
// the value they last saw; its own cache line, because every hand-off
// writes it while the pool's threads read it.
struct alignas(64) PoolWorkCounter {
  std::atomic<uint64_t> handed{0};
};

template <typename Inner>
class BasicPoolExecutor {
 public:
  BasicPoolExecutor(Inner inner, PoolWorkCounter* counter) noexcept
      : inner_(std::move(inner)), counter_(counter) {}

  // Queues f (or, when blocking.possibly and called on a pool thread, runs
  // it at once), then tells spinning pool threads about it. The count goes
  // up only after f is queued, so a thread that sees it finds f.
  template <typename Function>
  void execute(Function&& f) const {
    inner_.execute(std::forward<Function>(f));
    if (counter_ != nullptr) {  // null: the pool's threads do not spin
      counter_->handed.fetch_add(1, std::memory_order_release);
    }
  }

  template <typename Property>
  auto require(const Property& p) const -> BasicPoolExecutor<std::decay_t<
      decltype(boost::asio::require(std::declval<const Inner&>(), p))>> {
    return {boost::asio::require(inner_, p), counter_};
  }

  template <typename Property>
  auto prefer(const Property& p) const -> BasicPoolExecutor<std::decay_t<
      decltype(boost::asio::prefer(std::declval<const Inner&>(), p))>> {
    return {boost::asio::prefer(inner_, p), counter_};
  }

  template <typename Property>
  auto query(const Property& p) const
      -> decltype(boost::asio::query(std::declval<const Inner&>(), p)) {
    return boost::asio::query(inner_, p);
  }

  bool running_in_this_thread() const noexcept {
    return inner_.running_in_this_thread();
  }

  friend bool operator==(const BasicPoolExecutor& a,
                         const BasicPoolExecutor& b) noexcept {
    return a.inner_ == b.inner_ && a.counter_ == b.counter_;
  }
  friend bool operator!=(const BasicPoolExecutor& a,
                         const BasicPoolExecutor& b) noexcept {
    return !(a == b);
  }

 private:
  Inner inner_;
  PoolWorkCounter* counter_;
};

using PoolExecutor = BasicPoolExecutor<boost::asio::io_context::executor_type>;

}  // namespace cosession

#endif  // COSESSION_ASYNC_POOL_EXECUTOR_H_
