#include "cosession/pipeline/detail/result_buffer.h"

#include <algorithm>
#include <vector>

namespace cosession::detail {
namespace {

bool IsFinal(const ElementIterator::Result& result) {
  return !result.ok() || !result->has_value();
}

// A hint to the CPU that this thread is spinning (x86's pause): the
// sibling hyperthread, or the VM's other vCPU, gets the pipeline.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Locks `mu` as std::lock_guard would, after trying for a short while
// without sleeping: the producer and a consumer take it around each result
// (a few dozen instructions held), and a spinning consumer tends to ask
// for it the moment the producer publishes a result, while the producer
// still holds it. Sleeping on the lock then costs a futex wait and wake
// (microseconds on a VM) for a wait of nanoseconds.
class SpinThenLock {
 public:
  explicit SpinThenLock(std::mutex& mu) : mu_(mu) {
    for (int i = 0; i < kTries; ++i) {
      if (mu_.try_lock()) return;
      CpuRelax();
    }
    mu_.lock();
  }
  ~SpinThenLock() { mu_.unlock(); }
  SpinThenLock(const SpinThenLock&) = delete;
  SpinThenLock& operator=(const SpinThenLock&) = delete;

 private:
  static constexpr int kTries = 100;
  std::mutex& mu_;
};

// How long one side spins for the other, whose recent interval between
// results (or between takes) is `interval_ns` (negative: not known yet):
// twice that, up to ResultBuffer::kMaxSpin; nothing when it is longer --
// then sleeping and being woken costs less than the spin.
std::chrono::nanoseconds ShortSpinBudget(int64_t interval_ns) {
  const int64_t max_spin = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               ResultBuffer::kMaxSpin)
                               .count();
  if (interval_ns < 0 || interval_ns > max_spin) {
    return std::chrono::nanoseconds::zero();
  }
  return std::chrono::nanoseconds(std::min(2 * interval_ns, max_spin));
}

// Spins until ready() or `budget` has passed; ready()'s last answer.
template <typename Ready>
bool SpinUntil(Ready ready, std::chrono::nanoseconds budget) {
  if (ready()) return true;
  if (budget <= std::chrono::nanoseconds::zero()) return false;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 1;; ++i) {
    if (ready()) return true;
    CpuRelax();
    if (i % 64 == 0 && std::chrono::steady_clock::now() - start > budget) {
      return ready();
    }
  }
}

}  // namespace

ResultBuffer::ResultBuffer(size_t capacity)
    : capacity_(std::max<size_t>(capacity, 1)), low_water_(capacity_ / 2) {}

ResultBuffer::PushOutcome ResultBuffer::TryPush(Result& result) {
  std::vector<Waiter> finished;  // the other waiters, when `result` is final
  Waiter taker;
  {
    SpinThenLock lock(mu_);
    if (closed_) return PushOutcome::kClosed;
    if (waiters_.empty() && results_.size() >= capacity_) {
      last_push_ = {};  // a wait for space is not the producer's pace
      return PushOutcome::kFull;
    }
    if (waiters_.empty()) {
      results_.push_back(std::move(result));
      available_.store(results_.size() + (final_.has_value() ? 1 : 0),
                       std::memory_order_release);
    } else {
      // Waiters only wait on an empty buffer: the oldest takes it.
      consumer_waking_.store(true, std::memory_order_relaxed);
      taker = std::move(waiters_.front().second);
      waiters_.pop_front();
      if (IsFinal(result)) {
        if (!final_.has_value()) final_ = result;
        available_.store(1, std::memory_order_release);
        for (auto& [id, waiter] : waiters_)
          finished.push_back(std::move(waiter));
        waiters_.clear();
      }
    }
  }
  const auto now = std::chrono::steady_clock::now();
  if (last_push_ != std::chrono::steady_clock::time_point{}) {
    const int64_t interval =
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_push_)
            .count();
    const int64_t average = push_interval_ns_.load(std::memory_order_relaxed);
    push_interval_ns_.store(
        average < 0 ? interval : (3 * average + interval) / 4,
        std::memory_order_relaxed);
  }
  last_push_ = now;
  if (taker) {
    for (Waiter& waiter : finished) waiter(result);
    taker(std::move(result));
  }
  return PushOutcome::kDone;
}

std::optional<ResultBuffer::Result> ResultBuffer::PopLocked(
    absl::AnyInvocable<void(boost::system::error_code)>* wake) {
  if (results_.empty()) {
    if (final_.has_value()) return final_;
    return std::nullopt;
  }
  Result result = std::move(results_.front());
  results_.pop_front();
  if (IsFinal(result) && !final_.has_value()) final_ = result;
  available_.store(results_.size() + (final_.has_value() ? 1 : 0),
                   std::memory_order_release);
  if (parked_producer_ && results_.size() <= low_water_) {
    *wake = std::move(parked_producer_);
    parked_producer_ = nullptr;
    producer_parked_or_closed_.store(closed_, std::memory_order_relaxed);
  }
  return result;
}

bool ResultBuffer::SpinForSpace() {
  // A producer only calls this (and only it parks), so the flag means
  // closed here.
  auto room_or_closed = [this] {
    return available_.load(std::memory_order_acquire) < capacity_ ||
           producer_parked_or_closed_.load(std::memory_order_acquire);
  };
  if (room_or_closed()) return true;
  return SpinUntil(
      room_or_closed,
      SpaceSpinBudget(take_gap_ns_.load(std::memory_order_relaxed),
                      consumer_waking_.load(std::memory_order_relaxed)));
}

std::chrono::nanoseconds ResultBuffer::SpaceSpinBudget(int64_t take_gap_ns,
                                                       bool consumer_waking) {
  const std::chrono::nanoseconds budget = ShortSpinBudget(take_gap_ns);
  if (budget == std::chrono::nanoseconds::zero()) return budget;
  return consumer_waking ? kMaxWakeSpin : budget;
}

void ResultBuffer::NoteTakeRequestLocked(
    std::chrono::steady_clock::time_point now) {
  consumer_waking_.store(false, std::memory_order_relaxed);
  if (last_take_ == std::chrono::steady_clock::time_point{}) return;
  const int64_t gap =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_take_)
          .count();
  const int64_t average = take_gap_ns_.load(std::memory_order_relaxed);
  take_gap_ns_.store(average < 0 ? gap : (3 * average + gap) / 4,
                     std::memory_order_relaxed);
  last_take_ = {};
}

std::optional<ResultBuffer::Result> ResultBuffer::TryPop() {
  absl::AnyInvocable<void(boost::system::error_code)> wake;
  std::optional<Result> result;
  const auto now = std::chrono::steady_clock::now();
  {
    SpinThenLock lock(mu_);
    NoteTakeRequestLocked(now);
    result = PopLocked(&wake);
    if (result.has_value()) last_take_ = now;
  }
  if (wake) wake(boost::system::error_code());
  return result;
}

void ResultBuffer::SpinForResult() {
  SpinUntil(
      [this] {
        return available_.load(std::memory_order_acquire) > 0 ||
               producer_parked_or_closed_.load(std::memory_order_relaxed);
      },
      ShortSpinBudget(push_interval_ns_.load(std::memory_order_relaxed)));
}

void ResultBuffer::AddWaiterOrComplete(Waiter done,
                                       boost::asio::cancellation_slot slot) {
  absl::AnyInvocable<void(boost::system::error_code)> wake;
  std::optional<Result> result;
  const auto now = std::chrono::steady_clock::now();
  {
    SpinThenLock lock(mu_);
    NoteTakeRequestLocked(now);
    result = PopLocked(&wake);
    if (result.has_value()) last_take_ = now;
    if (!result.has_value()) {
      const uint64_t id = next_waiter_id_++;
      if (slot.is_connected()) {
        slot.assign(
            [weak = weak_from_this(), id](boost::asio::cancellation_type) {
              if (auto self = weak.lock()) self->CancelWaiter(id);
            });
      }
      waiters_.emplace_back(id, std::move(done));
      return;
    }
  }
  if (wake) wake(boost::system::error_code());
  done(*std::move(result));
}

void ResultBuffer::CancelWaiter(uint64_t id) {
  Waiter cancelled;
  {
    std::lock_guard lock(mu_);
    auto it = std::find_if(waiters_.begin(), waiters_.end(),
                           [id](const auto& w) { return w.first == id; });
    if (it == waiters_.end()) return;  // already completed
    cancelled = std::move(it->second);
    waiters_.erase(it);
  }
  cancelled(Result(
      absl::CancelledError("the wait for the next element was cancelled")));
}

void ResultBuffer::ParkProducer(
    absl::AnyInvocable<void(boost::system::error_code)> done,
    boost::asio::cancellation_slot slot) {
  boost::system::error_code now;
  {
    std::lock_guard lock(mu_);
    if (closed_) {
      now = boost::asio::error::operation_aborted;
    } else if (results_.size() > low_water_) {
      if (slot.is_connected()) {
        slot.assign([weak = weak_from_this()](boost::asio::cancellation_type) {
          if (auto self = weak.lock()) {
            self->WakeProducer(boost::asio::error::operation_aborted);
          }
        });
      }
      parked_producer_ = std::move(done);
      producer_parked_or_closed_.store(true, std::memory_order_relaxed);
      return;
    }
  }
  done(now);  // closed, or consumers already made room
}

void ResultBuffer::WakeProducer(boost::system::error_code ec) {
  absl::AnyInvocable<void(boost::system::error_code)> producer;
  {
    std::lock_guard lock(mu_);
    producer = std::move(parked_producer_);
    parked_producer_ = nullptr;
    producer_parked_or_closed_.store(closed_, std::memory_order_relaxed);
  }
  if (producer) producer(ec);
}

void ResultBuffer::Close(Result final_result, bool drop_buffered) {
  std::deque<std::pair<uint64_t, Waiter>> waiters;
  absl::AnyInvocable<void(boost::system::error_code)> producer;
  Result final_copy = final_result;
  {
    std::lock_guard lock(mu_);
    if (!final_.has_value()) final_ = std::move(final_result);
    final_copy = *final_;
    closed_ = true;
    if (drop_buffered) results_.clear();
    available_.store(results_.size() + 1, std::memory_order_release);
    waiters.swap(waiters_);
    producer = std::move(parked_producer_);
    parked_producer_ = nullptr;
    producer_parked_or_closed_.store(true, std::memory_order_relaxed);
  }
  for (auto& [id, waiter] : waiters) waiter(final_copy);
  if (producer) producer(boost::asio::error::operation_aborted);
}

std::optional<ResultBuffer::Result> ResultBuffer::final_result() const {
  std::lock_guard lock(mu_);
  return final_;
}

}  // namespace cosession::detail
