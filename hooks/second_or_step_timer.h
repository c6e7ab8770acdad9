// SecondOrStepTimer: decides when a periodic hook fires, by elapsed seconds
// or by elapsed global steps, with TensorFlow's trigger rules
// (tf.train.SecondOrStepTimer):
//
//   * it triggers for the first step it is asked about (nothing triggered
//     yet), whatever the step;
//   * never twice for the same step;
//   * otherwise when every_secs have passed since the last trigger, or the
//     step is at least every_steps past the last triggered step.
//
// ShouldTriggerForStep() only asks; UpdateLastTriggeredStep(step) records a
// trigger and returns the seconds and steps elapsed since the previous one
// (none for the first). Exactly one of every_secs / every_steps is set.
// Asked every step, ShouldTriggerForStep reads the clock's NowCoarse()
// (async/clock.h): with the system clock an every_secs trigger may come a
// few milliseconds late, never early; the elapsed time a trigger records
// is read with Now().
//
// Thread safety: none; a timer belongs to one hook, whose methods a session
// never calls concurrently.
#ifndef COSESSION_HOOKS_SECOND_OR_STEP_TIMER_H_
#define COSESSION_HOOKS_SECOND_OR_STEP_TIMER_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cosession/async/clock.h"

namespace cosession {

class SecondOrStepTimer {
 public:
  struct Elapsed {
    absl::Duration time{};
    int64_t steps = 0;
  };

  // InvalidArgument unless exactly one of the two is set and positive
  // (every_steps > 0, every_secs > 0). `clock` must outlive the timer.
  static absl::StatusOr<SecondOrStepTimer> Create(
      std::optional<absl::Duration> every_secs,
      std::optional<int64_t> every_steps, Clock& clock = SystemClock());

  bool ShouldTriggerForStep(int64_t step) const;
  // Records a trigger at `step` now; what elapsed since the last one
  // (nullopt the first time).
  std::optional<Elapsed> UpdateLastTriggeredStep(int64_t step);
  // Forgets every trigger: the next step triggers again.
  void Reset();
  std::optional<int64_t> last_triggered_step() const {
    return last_triggered_step_;
  }

 private:
  SecondOrStepTimer(std::optional<absl::Duration> every_secs,
                    std::optional<int64_t> every_steps, Clock& clock)
      : every_secs_(every_secs), every_steps_(every_steps), clock_(&clock) {}

  std::optional<absl::Duration> every_secs_;
  std::optional<int64_t> every_steps_;
  Clock* clock_;
  std::optional<int64_t> last_triggered_step_;
  absl::Time last_triggered_time_;
  // last_triggered_time_ + every_secs_, kept so that the check made every
  // step is a comparison (absl's Time + Duration is an out-of-line call).
  absl::Time due_time_ = absl::InfiniteFuture();
};

}  // namespace cosession

#endif  // COSESSION_HOOKS_SECOND_OR_STEP_TIMER_H_
