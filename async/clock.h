// Clock: where hooks and timers read the time, so tests can drive time by
// hand.
//
// SystemClock() is the real clock (absl::Now()). ManualClock is a test clock
// that moves only when told to. Thread safety: Now() may be called from any
// thread; ManualClock::Advance/Set are atomic with respect to Now().
#ifndef COSESSION_ASYNC_CLOCK_H_
#define COSESSION_ASYNC_CLOCK_H_

#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace cosession {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// The process-wide real clock; never destroyed.
Clock& SystemClock();

class ManualClock : public Clock {
 public:
  explicit ManualClock(absl::Time start = absl::UnixEpoch() + absl::Hours(1))
      : now_(start) {}
  absl::Time Now() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }
  void Advance(absl::Duration by) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += by;
  }
  void Set(absl::Time to) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ = to;
  }

 private:
  mutable std::mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cosession

#endif  // COSESSION_ASYNC_CLOCK_H_
