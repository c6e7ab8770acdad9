// Clock: where hooks and timers read the time, so tests can drive time by
// hand.
//
// SystemClock() is the real clock: Now() reads CLOCK_REALTIME, NowCoarse()
// CLOCK_REALTIME_COARSE (the time of the kernel's last tick: it lags Now()
// by up to the tick, 4 ms on these machines, and costs a fraction of it --
// measured here 6 ns against 24 ns, and absl::Now() 50 ns). NowCoarse is for
// checks made every step against periods of a second or more (a
// SecondOrStepTimer's every_secs). ManualClock is a test clock that moves
// only when told to; for it, as for any clock that does not override it,
// NowCoarse() is Now(). Thread safety: Now() and NowCoarse() may be called
// from any thread; ManualClock::Advance/Set are atomic with respect to them.
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
  // Never later than Now(); earlier by at most the clock's coarse
  // resolution.
  virtual absl::Time NowCoarse() const { return Now(); }
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
