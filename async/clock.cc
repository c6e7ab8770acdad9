#include "cosession/async/clock.h"

namespace cosession {

Clock& SystemClock() {
  class RealClock : public Clock {
   public:
    absl::Time Now() const override { return absl::Now(); }
  };
  static RealClock* clock = new RealClock;
  return *clock;
}

}  // namespace cosession
