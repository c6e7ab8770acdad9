// SummarySaverHook: TensorFlow's SummarySaverHookTest cases (save_steps,
// save_secs, several summaries) with a ManualClock, SessionLog START after
// the first step and after a restore, histograms, End's flush; values
// read back from the event file.
#include "cosession/hooks/summary_saver_hook.h"

#include <gtest/gtest.h>

#include <boost/asio/use_awaitable.hpp>
#include <map>

#include "tests/co_test.h"
#include "tests/event_test_util.h"

namespace cosession::summary_saver_hook_test {
namespace {

namespace asio = boost::asio;
using testing::CreateMonitoredSession;
using testing::DecodedEvent;
using testing::FreshTempDir;
using testing::ReadEventsForTest;
using testing::TrainGraph;

// TensorFlow's test graph: my_summary counts how often it was evaluated
// (an AssignAdd of 1 to a float variable), my_summary2 is twice that.
struct Fixture {
  Fixture() {
    counter = ops::Variable(graph.g, Tensor::Scalar(0.0f), "counter");
    my_summary = ops::AssignAdd(graph.g, counter, ops::Const(graph.g, 1.0f),
                                "my_summary");
    my_summary2 =
        ops::Mul(graph.g, my_summary, ops::Const(graph.g, 2.0f), "my_summary2");
    auto created = SummaryWriter::Create(FreshTempDir("summary_saver"),
                                         {.flush_every = absl::Hours(1)});
    EXPECT_TRUE(created.ok()) << created.status();
    writer = *created;
  }
  SummarySaverHookOptions Options() {
    SummarySaverHookOptions options;
    options.summary_writer = writer;
    options.clock = &clock;
    options.scalars = {{"my_summary", my_summary}};
    return options;
  }
  std::vector<DecodedEvent> Events() {
    return ReadEventsForTest(writer->path());
  }
  // step -> tag -> value, over every scalar written.
  std::map<int64_t, std::map<std::string, float>> Summaries() {
    std::map<int64_t, std::map<std::string, float>> out;
    for (const DecodedEvent& e : Events()) {
      for (const auto& v : e.summary) {
        if (v.simple_value) out[e.step][v.tag] = *v.simple_value;
      }
    }
    return out;
  }
  TrainGraph graph;
  Output counter, my_summary, my_summary2;
  ManualClock clock;
  std::shared_ptr<SummaryWriter> writer;
};

using Expected = std::map<int64_t, std::map<std::string, float>>;

std::shared_ptr<SummarySaverHook> MakeHook(SummarySaverHookOptions options) {
  auto hook = SummarySaverHook::Create(std::move(options));
  EXPECT_TRUE(hook.ok()) << hook.status();
  return hook.ok() ? *hook : nullptr;
}

// Runs `steps` train steps, advancing the clock by `tick` after each (as
// TensorFlow's tests do), then closes the session (End flushes).
asio::awaitable<absl::Status> Train(Fixture* f,
                                    std::shared_ptr<SessionRunHook> hook,
                                    int steps, absl::Duration tick,
                                    Scaffold scaffold) {
  MonitoredSession::Hooks hooks{hook};
  auto ms = co_await CreateMonitoredSession(&f->graph.g, std::move(hooks),
                                            std::move(scaffold));
  if (!ms.ok()) co_return ms.status();
  for (int i = 0; i < steps; ++i) {
    auto ran = co_await (*ms)->Run(f->graph.Train(), asio::use_awaitable);
    if (!ran.ok()) co_return ran.status();
    f->clock.Advance(tick);
  }
  co_return co_await (*ms)->Close(asio::use_awaitable);
}

asio::awaitable<absl::Status> Train(Fixture* f,
                                    std::shared_ptr<SessionRunHook> hook,
                                    int steps, absl::Duration tick) {
  co_return co_await Train(f, std::move(hook), steps, tick, Scaffold{});
}

// What a restore from a checkpoint at step 42 does: every variable gets a
// value, the global step 42.
asio::awaitable<absl::StatusOr<bool>> RestoreTo42(Session* session,
                                                  Operation init,
                                                  Output restore_step) {
  RunArgs initialize;
  initialize.targets.push_back(init);
  auto initialized =
      co_await session->Run(std::move(initialize), asio::use_awaitable);
  if (!initialized.ok()) co_return initialized.status();
  RunArgs restore;
  restore.targets.push_back(Operation(restore_step.node()));
  auto restored =
      co_await session->Run(std::move(restore), asio::use_awaitable);
  if (!restored.ok()) co_return restored.status();
  co_return true;
}

TEST(SummarySaverHook, RejectsBadOptionsNamingThem) {
  Fixture f;
  auto both = f.Options();
  both.save_steps = 1;
  both.save_secs = absl::Seconds(1);
  EXPECT_NE(SummarySaverHook::Create(both).status().message().find("save_secs"),
            std::string::npos);
  auto neither = f.Options();
  EXPECT_EQ(SummarySaverHook::Create(neither).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto nothing = f.Options();
  nothing.save_steps = 1;
  nothing.scalars.clear();
  EXPECT_NE(
      SummarySaverHook::Create(nothing).status().message().find("scalars"),
      std::string::npos);
  auto nowhere = f.Options();
  nowhere.save_steps = 1;
  nowhere.summary_writer = nullptr;
  EXPECT_NE(
      SummarySaverHook::Create(nowhere).status().message().find("output_dir"),
      std::string::npos);
  auto invalid = f.Options();
  invalid.save_steps = 1;
  invalid.histograms = {{"weights", Output()}};
  EXPECT_NE(
      SummarySaverHook::Create(invalid).status().message().find("weights"),
      std::string::npos);
}

CO_TEST(SummarySaverHook, SaveStepsEightWritesAtSteps1_9_17_25) {
  Fixture f;
  auto options = f.Options();
  options.save_steps = 8;
  CO_ASSERT_OK(co_await Train(&f, MakeHook(options), 30, absl::ZeroDuration()));
  EXPECT_EQ(f.Summaries(), (Expected{{1, {{"my_summary", 1.0f}}},
                                     {9, {{"my_summary", 2.0f}}},
                                     {17, {{"my_summary", 3.0f}}},
                                     {25, {{"my_summary", 4.0f}}}}));
}

CO_TEST(SummarySaverHook, WritesEverySummaryAtEachTrigger) {
  Fixture f;
  auto options = f.Options();
  options.save_steps = 8;
  options.scalars.emplace_back("my_summary2", f.my_summary2);
  CO_ASSERT_OK(co_await Train(&f, MakeHook(options), 30, absl::ZeroDuration()));
  EXPECT_EQ(f.Summaries(),
            (Expected{{1, {{"my_summary", 1.0f}, {"my_summary2", 2.0f}}},
                      {9, {{"my_summary", 2.0f}, {"my_summary2", 4.0f}}},
                      {17, {{"my_summary", 3.0f}, {"my_summary2", 6.0f}}},
                      {25, {{"my_summary", 4.0f}, {"my_summary2", 8.0f}}}}));
}

CO_TEST(SummarySaverHook, SaveSecsSavesOnceEveryStepWhenStepsAreSlow) {
  Fixture f;
  auto options = f.Options();
  options.save_secs = absl::Milliseconds(500);
  CO_ASSERT_OK(
      co_await Train(&f, MakeHook(options), 4, absl::Milliseconds(500)));
  EXPECT_EQ(f.Summaries(), (Expected{{1, {{"my_summary", 1.0f}}},
                                     {2, {{"my_summary", 2.0f}}},
                                     {3, {{"my_summary", 3.0f}}},
                                     {4, {{"my_summary", 4.0f}}}}));
}

CO_TEST(SummarySaverHook, SaveSecsSavesOnceEveryThreeSteps) {
  Fixture f;
  auto options = f.Options();
  options.save_secs = absl::Seconds(9);
  CO_ASSERT_OK(
      co_await Train(&f, MakeHook(options), 8, absl::Milliseconds(3100)));
  EXPECT_EQ(f.Summaries(), (Expected{{1, {{"my_summary", 1.0f}}},
                                     {4, {{"my_summary", 2.0f}}},
                                     {7, {{"my_summary", 3.0f}}}}));
}

// As TensorFlow's SummarySaverHook.after_run: START once, at the global
// step read after the first step, before that step's summaries.
CO_TEST(SummarySaverHook, WritesSessionLogStartAfterTheFirstStep) {
  Fixture f;
  auto options = f.Options();
  options.save_steps = 100;
  CO_ASSERT_OK(co_await Train(&f, MakeHook(options), 2, absl::ZeroDuration()));
  auto events = f.Events();
  CO_ASSERT_TRUE(events.size() >= 3);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[1].session_log_status, 1);  // START
  EXPECT_EQ(events[1].step, 1);
  EXPECT_EQ(events[2].step, 1);
  EXPECT_FALSE(events[2].summary.empty());  // the first step's summary
  int starts = 0;
  for (const auto& e : events) starts += e.session_log_status == 1;
  EXPECT_EQ(starts, 1);
}

// After a restore from the checkpoint of step 42, START is at 43: TensorBoard
// then drops what a crashed run wrote after step 42 and keeps step 42's own
// events (a START at 42 would drop those too).
CO_TEST(SummarySaverHook, AfterARestoreSessionLogStartIsAfterTheRestoredStep) {
  Fixture f;
  // A "restore" that sets the global step as a checkpoint would.
  Output restore_step =
      ops::Assign(f.graph.g, f.graph.global_step,
                  ops::Const(f.graph.g, int64_t{42}), "restore_step");
  Operation init = GlobalVariablesInitializer(f.graph.g);
  Scaffold scaffold;
  scaffold.restore = [init, restore_step](Session& session) {
    return RestoreTo42(&session, init, restore_step);
  };
  auto options = f.Options();
  options.save_steps = 100;
  CO_ASSERT_OK(co_await Train(&f, MakeHook(options), 1, absl::ZeroDuration(),
                              std::move(scaffold)));
  auto events = f.Events();
  CO_ASSERT_TRUE(events.size() >= 3);
  EXPECT_EQ(events[1].session_log_status, 1);
  EXPECT_EQ(events[1].step, 43);
  EXPECT_EQ(f.Summaries(), (Expected{{43, {{"my_summary", 1.0f}}}}));
}

CO_TEST(SummarySaverHook, WritesHistogramsOfTheChosenTensors) {
  Fixture f;
  Output weights =
      ops::Const(f.graph.g, Tensor::FromVector<float>({1, 2, 3, 4}), "weights");
  auto options = f.Options();
  options.save_steps = 2;
  options.scalars.clear();
  options.histograms = {{"weights", weights}};
  CO_ASSERT_OK(co_await Train(&f, MakeHook(options), 3, absl::ZeroDuration()));
  std::vector<int64_t> steps;
  for (const DecodedEvent& e : f.Events()) {
    for (const auto& v : e.summary) {
      if (!v.histo) continue;
      EXPECT_EQ(v.tag, "weights");
      EXPECT_EQ(v.histo->num, 4);
      EXPECT_EQ(v.histo->min, 1);
      EXPECT_EQ(v.histo->max, 4);
      EXPECT_EQ(v.histo->sum, 10);
      steps.push_back(e.step);
    }
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 3}));
}

CO_TEST(SummarySaverHook, EndFlushesTheWriter) {
  Fixture f;  // flush_every is an hour: only a flush writes
  auto options = f.Options();
  options.save_steps = 1;
  CO_ASSERT_OK(co_await Train(&f, MakeHook(options), 3, absl::ZeroDuration()));
  EXPECT_EQ(f.Summaries().size(), 3u);
}

CO_TEST(SummarySaverHook, ANonScalarScalarFailsTheStepNamingTheTag) {
  Fixture f;
  Output pair =
      ops::Const(f.graph.g, Tensor::FromVector<float>({1, 2}), "pair");
  auto options = f.Options();
  options.save_steps = 1;
  options.scalars = {{"not_scalar", pair}};
  absl::Status trained =
      co_await Train(&f, MakeHook(options), 1, absl::ZeroDuration());
  EXPECT_EQ(trained.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(trained.message().find("not_scalar"), std::string::npos) << trained;
}

}  // namespace
}  // namespace cosession::summary_saver_hook_test
