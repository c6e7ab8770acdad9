// ResultBuffer: the bounded buffer between a Prefetcher's producer and its
// consumers (pipeline/detail/prefetcher.h): results in order, each taken by
// exactly one consumer, then the final result -- the end of the stream, an
// error, or a stop -- which every later take returns again.
//
// Producer (one at a time): TryPush hands a result to the oldest waiting
// consumer or buffers it, and says kFull when `capacity` results wait
// (the result is then left with the caller) or kClosed once Close was
// called (the result is dropped). On kFull the producer first calls
// SpinForSpace, and pushes again when it returns true; otherwise it awaits
// AsyncWaitForSpace, which completes once consumers have brought the
// buffer down to its low-water mark -- half of capacity, rounded down --
// so that a slow consumer wakes the producer once per capacity/2 results,
// not once per result. It completes with operation_aborted when the buffer
// is closed or the wait is cancelled (its handler's cancellation slot).
//
// SpinForSpace spins, without sleeping, while consumers that keep taking
// results every few microseconds are about to make room (it returns true
// as soon as there is room or the buffer is closed, false when the spin
// was not worth it or ran out). Without it, a consumer faster than its
// producer falls into a convoy once it has slept for any reason: the
// producer fills the buffer and sleeps, the consumer wakes it and drains
// the buffer before it is up, sleeps in turn, and each result then costs
// two wake-ups of tens of microseconds (BM_Pipeline_Stages: one push in 20
// slept, and the stages ran at a third of their speed). The spin lasts
// SpaceSpinBudget: twice the consumers' recent gap between a take and the
// next, when that gap is short; up to kMaxWakeSpin while a consumer the
// producer handed a result to is still waking up; never for consumers that
// take slowly (a training step), whose producer sleeps as before.
//
// Consumers (any thread, concurrently): TryPop takes a buffered result, or
// the final one, without waiting. AsyncPop waits for one; before it
// registers as a waiter, it spins for a short while when the producer has
// recently been producing a result every few microseconds: a consumer that
// would otherwise sleep and be woken for every result -- a wake-up costs
// tens of microseconds on a virtual machine -- takes it as it arrives. The
// spin is bounded by twice the producer's recent interval between results
// and never exceeds kMaxSpin; a producer waiting on I/O (long intervals)
// gets no spin. A cancelled AsyncPop (its handler's cancellation slot)
// completes with Cancelled and leaves the queue of waiters; a result is
// never lost to a cancelled waiter.
//
// Close(final, drop_buffered) records the final result (the first call
// wins; a popped end or error is recorded the same way), completes every
// waiting consumer with it and the waiting producer with
// operation_aborted. Buffered results stay to be taken unless
// `drop_buffered`.
//
// Completions are posted through each handler's executor
// (async/completion.h), never run inline.
//
// Thread safety: every method is thread-safe. Held by shared_ptr: a
// cancellation slot keeps only a weak reference.
#ifndef COSESSION_PIPELINE_DETAIL_RESULT_BUFFER_H_
#define COSESSION_PIPELINE_DETAIL_RESULT_BUFFER_H_

#include <atomic>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/error.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "cosession/async/completion.h"
#include "cosession/pipeline/dataset.h"

namespace cosession::detail {

class ResultBuffer : public std::enable_shared_from_this<ResultBuffer> {
 public:
  using Result = ElementIterator::Result;
  // The longest a consumer spins before it waits; a producer spins only
  // for consumers whose gap between takes is shorter.
  static constexpr std::chrono::microseconds kMaxSpin{20};
  // The longest a producer spins for a consumer it woke (a sleeping
  // thread's wake-up takes 40-50 us on the project's 2-core VMs).
  static constexpr std::chrono::microseconds kMaxWakeSpin{100};

  explicit ResultBuffer(size_t capacity);
  ResultBuffer(const ResultBuffer&) = delete;
  ResultBuffer& operator=(const ResultBuffer&) = delete;

  // ---- Producer.
  enum class PushOutcome { kDone, kFull, kClosed };
  PushOutcome TryPush(Result& result);
  bool SpinForSpace();
  // How long SpinForSpace spins: `take_gap_ns` is the consumers' recent
  // gap between a take and the next request (negative: not known yet),
  // `consumer_waking` whether the last result went to a waiting consumer
  // that has not come back since.
  static std::chrono::nanoseconds SpaceSpinBudget(int64_t take_gap_ns,
                                                  bool consumer_waking);

  template <typename CompletionToken>
  auto AsyncWaitForSpace(CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken,
                                       void(boost::system::error_code)>(
        [this](auto handler) {
          boost::asio::cancellation_slot slot =
              boost::asio::get_associated_cancellation_slot(handler);
          ParkProducer(PostToHandler<boost::system::error_code>(
                           std::move(handler),
                           [](boost::system::error_code ec) { return ec; }),
                       slot);
        },
        token);
  }

  // ---- Consumers.
  std::optional<Result> TryPop();

  template <typename CompletionToken>
  auto AsyncPop(CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(Result)>(
        [this](auto handler) {
          boost::asio::cancellation_slot slot =
              boost::asio::get_associated_cancellation_slot(handler);
          SpinForResult();
          AddWaiterOrComplete(PostToHandler<Result>(std::move(handler),
                                                    [](Result r) { return r; }),
                              slot);
        },
        token);
  }

  void Close(Result final_result, bool drop_buffered);
  std::optional<Result> final_result() const;

 private:
  using Waiter = absl::AnyInvocable<void(Result)>;

  // What a consumer takes, under mu_: the oldest result, or the final one;
  // records a taken end or error as final. Sets *wake to the producer to
  // wake when the buffer fell to its low-water mark.
  std::optional<Result> PopLocked(
      absl::AnyInvocable<void(boost::system::error_code)>* wake)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SpinForResult();
  // At each take request: the gap since the last take that did not wait.
  void NoteTakeRequestLocked(std::chrono::steady_clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes `done` when a result is there; else queues it, its
  // cancellation assigned to `slot` before another thread can see it.
  void AddWaiterOrComplete(Waiter done, boost::asio::cancellation_slot slot);
  void CancelWaiter(uint64_t id);
  void ParkProducer(absl::AnyInvocable<void(boost::system::error_code)> done,
                    boost::asio::cancellation_slot slot);
  void WakeProducer(boost::system::error_code ec);

  const size_t capacity_;
  const size_t low_water_;

  mutable std::mutex mu_;
  std::deque<Result> results_ ABSL_GUARDED_BY(mu_);
  std::optional<Result> final_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<uint64_t, Waiter>> waiters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_waiter_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::AnyInvocable<void(boost::system::error_code)> parked_producer_
      ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;

  // Read without the lock by spinning consumers; written under it.
  std::atomic<size_t> available_{0};  // results_.size(), or 1 once final
  std::atomic<bool> producer_parked_or_closed_{false};
  // The producer's recent interval between pushes (exponential average,
  // nanoseconds), written by the producer only.
  std::atomic<int64_t> push_interval_ns_{-1};
  std::chrono::steady_clock::time_point last_push_{};
  // The consumers' recent gap between a take that did not wait and the
  // next take request (exponential average, nanoseconds; -1: none yet).
  std::atomic<int64_t> take_gap_ns_{-1};
  std::chrono::steady_clock::time_point last_take_ ABSL_GUARDED_BY(mu_){};
  // Set when TryPush hands a result to a waiting consumer, cleared at the
  // next take request: the consumer is still waking up.
  std::atomic<bool> consumer_waking_{false};
};

}  // namespace cosession::detail

#endif  // COSESSION_PIPELINE_DETAIL_RESULT_BUFFER_H_
