#include "cosession/hooks/second_or_step_timer.h"

#include "absl/strings/str_cat.h"

namespace cosession {

absl::StatusOr<SecondOrStepTimer> SecondOrStepTimer::Create(
    std::optional<absl::Duration> every_secs,
    std::optional<int64_t> every_steps, Clock& clock) {
  if (every_secs.has_value() == every_steps.has_value()) {
    return absl::InvalidArgumentError(
        "SecondOrStepTimer: exactly one of every_secs and every_steps must be "
        "set");
  }
  if (every_secs && *every_secs <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SecondOrStepTimer: every_secs must be positive, got ",
                     absl::FormatDuration(*every_secs)));
  }
  if (every_steps && *every_steps <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SecondOrStepTimer: every_steps must be positive, got ", *every_steps));
  }
  return SecondOrStepTimer(every_secs, every_steps, clock);
}

bool SecondOrStepTimer::ShouldTriggerForStep(int64_t step) const {
  if (!last_triggered_step_) return true;
  if (*last_triggered_step_ == step) return false;
  // Asked every step: the coarse clock (async/clock.h), which can only
  // make a trigger late by its resolution, milliseconds against seconds.
  if (every_secs_ && clock_->NowCoarse() >= due_time_) {
    return true;
  }
  if (every_steps_ && step >= *last_triggered_step_ + *every_steps_) {
    return true;
  }
  return false;
}

std::optional<SecondOrStepTimer::Elapsed>
SecondOrStepTimer::UpdateLastTriggeredStep(int64_t step) {
  absl::Time now = clock_->Now();
  std::optional<Elapsed> elapsed;
  if (last_triggered_step_) {
    elapsed = Elapsed{now - last_triggered_time_, step - *last_triggered_step_};
  }
  last_triggered_step_ = step;
  last_triggered_time_ = now;
  if (every_secs_) due_time_ = now + *every_secs_;
  return elapsed;
}

void SecondOrStepTimer::Reset() { last_triggered_step_.reset(); }

}  // namespace cosession
