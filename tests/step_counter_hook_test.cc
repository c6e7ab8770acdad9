// StepCounterHook: TensorFlow's StepCounterHookTest cases (trigger steps,
// the value, the warning when the global step does not advance), run through
// a MonitoredSession with a ManualClock; values read back from the file.
#include "cosession/hooks/step_counter_hook.h"

#include <gtest/gtest.h>

#include <boost/asio/use_awaitable.hpp>

#include "tests/co_test.h"
#include "tests/event_test_util.h"

namespace cosession::step_counter_hook_test {
namespace {

namespace asio = boost::asio;
using testing::CreateMonitoredSession;
using testing::FreshTempDir;
using testing::ReadEventsForTest;
using testing::ScalarsTagged;
using testing::TrainGraph;

struct Fixture {
  explicit Fixture(int64_t increment = 1) : graph(increment) {
    auto created =
        SummaryWriter::Create(FreshTempDir("step_counter"), {.clock = &clock});
    EXPECT_TRUE(created.ok()) << created.status();
    writer = *created;
  }
  StepCounterHookOptions Options() {
    StepCounterHookOptions options;
    options.summary_writer = writer;
    options.clock = &clock;
    options.log = [lines = lines](const std::string& line) {
      lines->push_back(line);
    };
    return options;
  }
  std::vector<std::pair<int64_t, float>> Written() {
    EXPECT_TRUE(writer->Flush().ok());
    return ScalarsTagged(ReadEventsForTest(writer->path()), "global_step/sec");
  }
  TrainGraph graph;
  ManualClock clock;
  std::shared_ptr<SummaryWriter> writer;
  std::shared_ptr<std::vector<std::string>> lines =
      std::make_shared<std::vector<std::string>>();
};

std::shared_ptr<StepCounterHook> MakeHook(StepCounterHookOptions options) {
  auto hook = StepCounterHook::Create(std::move(options));
  EXPECT_TRUE(hook.ok()) << hook.status();
  return hook.ok() ? *hook : nullptr;
}

// Runs `steps` train steps, advancing the clock by `tick` before each.
asio::awaitable<absl::Status> Train(Fixture* f,
                                    std::shared_ptr<SessionRunHook> hook,
                                    int steps, absl::Duration tick) {
  MonitoredSession::Hooks hooks{hook};
  auto ms = co_await CreateMonitoredSession(&f->graph.g, std::move(hooks));
  if (!ms.ok()) co_return ms.status();
  for (int i = 0; i < steps; ++i) {
    f->clock.Advance(tick);
    auto ran = co_await (*ms)->Run(f->graph.Train(), asio::use_awaitable);
    if (!ran.ok()) co_return ran.status();
  }
  co_return co_await (*ms)->Close(asio::use_awaitable);
}

TEST(StepCounterHook, RejectsNeitherOrBothPeriods) {
  auto both = StepCounterHook::Create(
      {.every_n_steps = 10, .every_n_secs = absl::Seconds(1)});
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(both.status().message().find("every_n_secs"), std::string::npos);
  auto neither = StepCounterHook::Create({.every_n_steps = std::nullopt});
  EXPECT_EQ(neither.status().code(), absl::StatusCode::kInvalidArgument);
  auto zero = StepCounterHook::Create({.every_n_steps = 0});
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(zero.status().message().find("every_steps"), std::string::npos);
}

TEST(StepCounterHook, DefaultsToEvery100Steps) {
  StepCounterHookOptions defaults;
  EXPECT_EQ(defaults.every_n_steps, 100);
  EXPECT_FALSE(defaults.every_n_secs.has_value());
}

CO_TEST(StepCounterHook, EveryTenStepsWritesAtGlobalSteps11And21) {
  Fixture f;
  auto options = f.Options();
  options.every_n_steps = 10;
  CO_ASSERT_OK(
      co_await Train(&f, MakeHook(options), 30, absl::Milliseconds(10)));
  auto written = f.Written();
  CO_ASSERT_TRUE(written.size() == 2u);
  EXPECT_EQ(written[0].first, 11);
  EXPECT_EQ(written[1].first, 21);
  // 10 steps in 10 ticks of 10 ms.
  EXPECT_FLOAT_EQ(written[0].second, 100.0f);
  EXPECT_FLOAT_EQ(written[1].second, 100.0f);
}

CO_TEST(StepCounterHook, EveryTenthOfASecondWritesAtGlobalSteps2And3) {
  Fixture f;
  auto options = f.Options();
  options.every_n_steps = std::nullopt;
  options.every_n_secs = absl::Milliseconds(100);
  CO_ASSERT_OK(
      co_await Train(&f, MakeHook(options), 3, absl::Milliseconds(200)));
  auto written = f.Written();
  CO_ASSERT_TRUE(written.size() == 2u);
  EXPECT_EQ(written[0].first, 2);
  EXPECT_EQ(written[1].first, 3);
  EXPECT_FLOAT_EQ(written[0].second, 5.0f);  // 1 step in 0.2 s
}

CO_TEST(StepCounterHook, ValueIsElapsedGlobalStepsOverElapsedSeconds) {
  Fixture f(/*increment=*/3);  // three global steps a run
  auto options = f.Options();
  options.every_n_steps = 6;
  options.steps_per_run = 3;
  CO_ASSERT_OK(
      co_await Train(&f, MakeHook(options), 5, absl::Milliseconds(500)));
  auto written = f.Written();
  // Triggers at 3 (first: recorded only), 9 and 15.
  CO_ASSERT_TRUE(written.size() == 2u);
  EXPECT_EQ(written[0].first, 9);
  EXPECT_FLOAT_EQ(written[0].second, 6.0f);  // 6 steps in 1 s
  EXPECT_EQ(written[1].first, 15);
}

CO_TEST(StepCounterHook, LogsTheRateAsGlobalStepPerSec) {
  Fixture f;
  auto options = f.Options();
  options.every_n_steps = 1;
  CO_ASSERT_OK(
      co_await Train(&f, MakeHook(options), 2, absl::Milliseconds(250)));
  CO_ASSERT_TRUE(f.lines->size() == 1u);
  EXPECT_EQ((*f.lines)[0], "global_step/sec: 4");
}

CO_TEST(StepCounterHook, WarnsFiveTimesWhenTheGlobalStepDoesNotIncrease) {
  Fixture f(/*increment=*/0);
  auto options = f.Options();
  options.every_n_steps = 1;
  CO_ASSERT_OK(
      co_await Train(&f, MakeHook(options), 30, absl::Milliseconds(10)));
  int warnings = 0;
  for (const std::string& line : *f.lines) {
    if (line.find("global step has not been increased") != std::string::npos) {
      ++warnings;
    }
  }
  EXPECT_EQ(warnings, 5);
  EXPECT_TRUE(f.Written().empty());
}

CO_TEST(StepCounterHook, DoesNotWarnWhileTheGlobalStepIncreases) {
  Fixture f;
  auto options = f.Options();
  options.every_n_steps = 10;
  CO_ASSERT_OK(
      co_await Train(&f, MakeHook(options), 30, absl::Milliseconds(10)));
  for (const std::string& line : *f.lines) {
    EXPECT_EQ(line.find("WARNING"), std::string::npos) << line;
  }
}

CO_TEST(StepCounterHook, BeginWithoutAGlobalStepFailsCreate) {
  Graph g;
  ops::Const(g, 1.0f, "c");
  auto hook = MakeHook({});
  MonitoredSession::Hooks hooks{hook};
  auto ms = co_await CreateMonitoredSession(&g, std::move(hooks));
  EXPECT_EQ(ms.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(ms.status().message().find("global_step"), std::string::npos)
      << ms.status();
}

CO_TEST(StepCounterHook, OutputDirWritesThroughTheCachedWriterAndEndFlushes) {
  Fixture f;
  const std::string dir = FreshTempDir("step_counter_cache");
  auto options = f.Options();
  options.summary_writer = nullptr;
  options.output_dir = dir;
  options.every_n_steps = 1;
  CO_ASSERT_OK(co_await Train(&f, MakeHook(options), 3, absl::Seconds(1)));
  auto cached = SummaryWriterCache::Get(dir);
  CO_ASSERT_TRUE(cached.ok());
  // Close's End flushed: the values are on disk without another flush.
  auto written =
      ScalarsTagged(ReadEventsForTest((*cached)->path()), "global_step/sec");
  EXPECT_EQ(written.size(), 2u);
  EXPECT_EQ(testing::EventFiles(dir).size(), 1u);
  SummaryWriterCache::Clear();
}

}  // namespace
}  // namespace cosession::step_counter_hook_test
