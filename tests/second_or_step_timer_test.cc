#include "cosession/hooks/second_or_step_timer.h"

#include <gtest/gtest.h>

#include "cosession/async/clock.h"

namespace cosession::second_or_step_timer_test {
namespace {

TEST(SecondOrStepTimer, RejectsNeitherOrBothPeriods) {
  ManualClock clock;
  auto neither = SecondOrStepTimer::Create(std::nullopt, std::nullopt, clock);
  EXPECT_EQ(neither.status().code(), absl::StatusCode::kInvalidArgument);
  auto both = SecondOrStepTimer::Create(absl::Seconds(1), 10, clock);
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
  auto zero_steps = SecondOrStepTimer::Create(std::nullopt, 0, clock);
  EXPECT_EQ(zero_steps.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(zero_steps.status().message().find("every_steps"),
            std::string::npos);
  auto negative_secs =
      SecondOrStepTimer::Create(absl::Seconds(-1), std::nullopt, clock);
  EXPECT_EQ(negative_secs.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SecondOrStepTimer, TriggersForTheFirstStepWhateverItIs) {
  ManualClock clock;
  auto timer = SecondOrStepTimer::Create(std::nullopt, 10, clock);
  ASSERT_TRUE(timer.ok());
  EXPECT_TRUE(timer->ShouldTriggerForStep(7));
  EXPECT_FALSE(timer->UpdateLastTriggeredStep(7).has_value());
  EXPECT_EQ(timer->last_triggered_step(), 7);
}

TEST(SecondOrStepTimer, EveryStepsTriggersAtLastPlusN) {
  ManualClock clock;
  auto timer = SecondOrStepTimer::Create(std::nullopt, 10, clock);
  ASSERT_TRUE(timer.ok());
  timer->UpdateLastTriggeredStep(1);
  EXPECT_FALSE(timer->ShouldTriggerForStep(1));
  EXPECT_FALSE(timer->ShouldTriggerForStep(10));
  EXPECT_TRUE(timer->ShouldTriggerForStep(11));
  EXPECT_TRUE(timer->ShouldTriggerForStep(15));
  clock.Advance(absl::Hours(5));  // time does not matter in step mode
  EXPECT_FALSE(timer->ShouldTriggerForStep(10));
  auto elapsed = timer->UpdateLastTriggeredStep(15);
  ASSERT_TRUE(elapsed.has_value());
  EXPECT_EQ(elapsed->steps, 14);
  EXPECT_EQ(elapsed->time, absl::Hours(5));
}

TEST(SecondOrStepTimer, EverySecsTriggersOnceThePeriodPassed) {
  ManualClock clock;
  auto timer = SecondOrStepTimer::Create(absl::Seconds(1), std::nullopt, clock);
  ASSERT_TRUE(timer.ok());
  timer->UpdateLastTriggeredStep(1);
  EXPECT_FALSE(timer->ShouldTriggerForStep(1000));
  clock.Advance(absl::Milliseconds(999));
  EXPECT_FALSE(timer->ShouldTriggerForStep(2));
  clock.Advance(absl::Milliseconds(1));
  EXPECT_TRUE(timer->ShouldTriggerForStep(2));
  EXPECT_FALSE(timer->ShouldTriggerForStep(1));  // never twice for a step
}

TEST(SecondOrStepTimer, ResetMakesTheNextStepTrigger) {
  ManualClock clock;
  auto timer = SecondOrStepTimer::Create(std::nullopt, 100, clock);
  ASSERT_TRUE(timer.ok());
  timer->UpdateLastTriggeredStep(5);
  EXPECT_FALSE(timer->ShouldTriggerForStep(6));
  timer->Reset();
  EXPECT_TRUE(timer->ShouldTriggerForStep(6));
  EXPECT_FALSE(timer->last_triggered_step().has_value());
}

// A clock whose coarse reading lags its precise one by a set amount, as the
// system clock's does by up to a tick.
class LaggingCoarseClock : public ManualClock {
 public:
  absl::Time NowCoarse() const override { return Now() - lag; }
  absl::Duration lag = absl::ZeroDuration();
};

TEST(SecondOrStepTimer, EverySecsAsksTheCoarseClockAndRecordsThePreciseOne) {
  LaggingCoarseClock clock;
  auto timer = SecondOrStepTimer::Create(absl::Seconds(1), std::nullopt, clock);
  ASSERT_TRUE(timer.ok());
  timer->UpdateLastTriggeredStep(1);
  clock.Advance(absl::Seconds(1));
  clock.lag = absl::Milliseconds(4);
  // The period has passed by Now(), not yet by NowCoarse(): late, not early.
  EXPECT_FALSE(timer->ShouldTriggerForStep(2));
  clock.lag = absl::ZeroDuration();
  EXPECT_TRUE(timer->ShouldTriggerForStep(2));
  clock.lag = absl::Milliseconds(4);
  auto elapsed = timer->UpdateLastTriggeredStep(2);
  ASSERT_TRUE(elapsed.has_value());
  EXPECT_EQ(elapsed->time, absl::Seconds(1));  // measured with Now()
}

TEST(SystemClock, TheCoarseReadingIsNeverAheadAndLagsLessThanASecond) {
  Clock& clock = SystemClock();
  for (int i = 0; i < 1000; ++i) {
    const absl::Time coarse = clock.NowCoarse();
    const absl::Time precise = clock.Now();
    ASSERT_LE(coarse, precise) << "reading " << i;
    ASSERT_LT(precise - coarse, absl::Seconds(1)) << "reading " << i;
  }
}

}  // namespace
}  // namespace cosession::second_or_step_timer_test
