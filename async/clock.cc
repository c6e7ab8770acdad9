#include "cosession/async/clock.h"

#include <time.h>

namespace cosession {

Clock& SystemClock() {
  class RealClock : public Clock {
   public:
    absl::Time Now() const override { return Read(CLOCK_REALTIME); }
    absl::Time NowCoarse() const override {
      return Read(CLOCK_REALTIME_COARSE);
    }

   private:
    // clock_gettime rather than absl::Now(): the same clock, read by the
    // vDSO at half absl's cost on these machines (async/clock.h).
    static absl::Time Read(clockid_t id) {
      timespec now;
      clock_gettime(id, &now);
      // Not absl::TimeFromTimespec nor Time + Duration: out-of-line calls
      // of their own. Nanoseconds since 1970 fit an int64 until 2262.
      return absl::FromUnixNanos(int64_t{now.tv_sec} * 1'000'000'000 +
                                 now.tv_nsec);
    }
  };
  static RealClock* clock = new RealClock;
  return *clock;
}

}  // namespace cosession
