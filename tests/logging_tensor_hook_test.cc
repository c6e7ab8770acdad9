// LoggingTensorHook: TensorFlow's LoggingTensorHookTest cases (first step,
// every N local iterations, every N seconds, at end, formatter) under a
// MonitoredSession, with a captured sink and a ManualClock.
#include "cosession/hooks/logging_tensor_hook.h"

#include <gtest/gtest.h>

#include <boost/asio/use_awaitable.hpp>

#include "tests/co_test.h"
#include "tests/hook_test_util.h"

namespace cosession::logging_tensor_hook_test {
namespace {

namespace asio = boost::asio;
using testing::CapturedLog;
using testing::CreateSessionOrFail;
using testing::HookList;
using testing::StepGraph;

struct FooGraph : StepGraph {
  FooGraph() { foo = ops::Const(g, 42.0f, "foo"); }
  Output foo;
};

std::shared_ptr<LoggingTensorHook> MakeHook(LoggingTensorHookOptions options) {
  auto hook = LoggingTensorHook::Create(std::move(options));
  EXPECT_TRUE(hook.ok()) << hook.status();
  return hook.ok() ? *hook : nullptr;
}

bool Mentions(const std::vector<std::string>& lines, size_t index,
              const std::string& what) {
  return index < lines.size() && lines[index].find(what) != std::string::npos;
}

TEST(LoggingTensorHook, CreateRejectsANonPositiveEveryNIter) {
  Graph g;
  Output t = ops::Const(g, 1.0f, "t");
  for (int64_t n : {0, -10}) {
    auto hook = LoggingTensorHook::Create({.tensors = {t}, .every_n_iter = n});
    EXPECT_EQ(hook.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(hook.status().message().find("every_n_iter"), std::string::npos);
  }
}

TEST(LoggingTensorHook, CreateRejectsBothPeriods) {
  Graph g;
  Output t = ops::Const(g, 1.0f, "t");
  auto hook = LoggingTensorHook::Create(
      {.tensors = {t}, .every_n_iter = 5, .every_n_secs = absl::Seconds(5)});
  EXPECT_EQ(hook.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hook.status().message().find("exactly one of"), std::string::npos);
}

TEST(LoggingTensorHook, CreateRejectsNoPeriodWithoutAtEnd) {
  Graph g;
  Output t = ops::Const(g, 1.0f, "t");
  auto hook = LoggingTensorHook::Create({.tensors = {t}});
  EXPECT_EQ(hook.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hook.status().message().find("exactly one of"), std::string::npos);
}

TEST(LoggingTensorHook, CreateRejectsANonPositiveEveryNSecs) {
  Graph g;
  Output t = ops::Const(g, 1.0f, "t");
  auto hook = LoggingTensorHook::Create(
      {.tensors = {t}, .every_n_secs = absl::ZeroDuration()});
  EXPECT_EQ(hook.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hook.status().message().find("every_n_secs"), std::string::npos);
}

TEST(LoggingTensorHook, CreateRejectsNoTensors) {
  auto hook = LoggingTensorHook::Create({.every_n_iter = 1});
  EXPECT_EQ(hook.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hook.status().message().find("tensors"), std::string::npos);
}

CO_TEST(LoggingTensorHook, BeginFailsOnAnUnknownTensorNameNamingIt) {
  FooGraph graph;
  auto hook = MakeHook({.tensor_names = {"nope"}, .every_n_iter = 1});
  auto created = co_await MonitoredSession::Create(
      graph.g, HookList(hook), nullptr, testing::HookTestOptions(),
      asio::use_awaitable);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(created.status().message().find("nope"), std::string::npos);
}

// TF: test_print_at_end_only.
CO_TEST(LoggingTensorHook, AtEndOnlyLogsNothingDuringStepsAndTheValueAtEnd) {
  FooGraph graph;
  CapturedLog log;
  auto hook =
      MakeHook({.tensor_names = {"foo"}, .at_end = true, .sink = log.Sink()});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  for (int i = 0; i < 3; ++i) {
    CO_ASSERT_OK(
        (co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
  }
  EXPECT_TRUE(log.lines->empty()) << log.Joined();
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  CO_ASSERT_TRUE(log.lines->size() == 1);
  EXPECT_TRUE(Mentions(*log.lines, 0, "foo = ")) << log.Joined();
  EXPECT_TRUE(Mentions(*log.lines, 0, "42")) << log.Joined();
}

// TF: _validate_print_every_n_steps: local iterations 0, 10, 20, 30.
CO_TEST(LoggingTensorHook, EveryNIterLogsAtLocalIterationsZeroNTwoN) {
  FooGraph graph;
  CapturedLog log;
  auto hook = MakeHook(
      {.tensors = {graph.foo}, .every_n_iter = 10, .sink = log.Sink()});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  // The global step starts far away: the hook counts its own iterations.
  co_await testing::RawRun(ms->raw_session(), graph.SetStep(1234));
  std::vector<int> logged_at;
  for (int i = 0; i < 32; ++i) {
    const size_t before = log.lines->size();
    CO_ASSERT_OK(
        (co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
    if (log.lines->size() > before) logged_at.push_back(i);
  }
  EXPECT_EQ(logged_at, (std::vector<int>{0, 10, 20, 30}));
  EXPECT_TRUE(Mentions(*log.lines, 0, "foo:0 = ")) << log.Joined();
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  EXPECT_EQ(log.lines->size(), 4u) << "no log at end without at_end";
}

// TF calls _validate_print_every_n_steps twice to check the reset: Begin
// restarts the local iteration count, so a reused hook logs at 0 again.
CO_TEST(LoggingTensorHook, ReusedInASecondSessionItCountsFromZeroAgain) {
  CapturedLog log;
  std::shared_ptr<LoggingTensorHook> hook;
  for (int session = 0; session < 2; ++session) {
    FooGraph graph;
    if (!hook) {
      hook = MakeHook(
          {.tensor_names = {"foo"}, .every_n_iter = 10, .sink = log.Sink()});
    }
    auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
    CO_ASSERT_TRUE(ms != nullptr);
    for (int i = 0; i < 7; ++i) {
      CO_ASSERT_OK(
          (co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
    }
    CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
    EXPECT_EQ(log.lines->size(), static_cast<size_t>(session + 1));
  }
}

CO_TEST(LoggingTensorHook, EveryNIterWithAtEndAlsoLogsAtEnd) {
  FooGraph graph;
  CapturedLog log;
  auto hook = MakeHook({.tensors = {graph.foo},
                        .every_n_iter = 10,
                        .at_end = true,
                        .sink = log.Sink()});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  for (int i = 0; i < 5; ++i) {
    CO_ASSERT_OK(
        (co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
  }
  EXPECT_EQ(log.lines->size(), 1u);
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  EXPECT_EQ(log.lines->size(), 2u);
  EXPECT_TRUE(Mentions(*log.lines, 1, "foo:0 = ")) << log.Joined();
}

// TF: test_print_first_step: the first line has no elapsed time.
CO_TEST(LoggingTensorHook, TheFirstLineHasNoElapsedTimeAndLaterOnesDo) {
  FooGraph graph;
  CapturedLog log;
  ManualClock clock;
  auto hook = MakeHook({.tensors = {graph.foo},
                        .every_n_iter = 1,
                        .sink = log.Sink(),
                        .clock = &clock});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  CO_ASSERT_OK((co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
  clock.Advance(absl::Milliseconds(1500));
  CO_ASSERT_OK((co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
  CO_ASSERT_TRUE(log.lines->size() == 2);
  EXPECT_EQ(log.lines->at(0).find("sec"), std::string::npos) << log.Joined();
  EXPECT_TRUE(Mentions(*log.lines, 1, "(1.500 sec)")) << log.Joined();
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

// TF: _validate_print_every_n_secs.
CO_TEST(LoggingTensorHook, EveryNSecsLogsFirstThenOnlyAfterThePeriod) {
  FooGraph graph;
  CapturedLog log;
  ManualClock clock;
  auto hook = MakeHook({.tensors = {graph.foo},
                        .every_n_secs = absl::Seconds(1),
                        .sink = log.Sink(),
                        .clock = &clock});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  CO_ASSERT_OK((co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
  EXPECT_EQ(log.lines->size(), 1u);
  CO_ASSERT_OK((co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
  EXPECT_EQ(log.lines->size(), 1u);
  clock.Advance(absl::Seconds(1));
  CO_ASSERT_OK((co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
  EXPECT_EQ(log.lines->size(), 2u);
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  EXPECT_EQ(log.lines->size(), 2u);
}

// TF: test_print_formatter.
CO_TEST(LoggingTensorHook, AFormatterMakesTheWholeLineFromTheTagMap) {
  FooGraph graph;
  CapturedLog log;
  auto hook = MakeHook({.tensors = {graph.foo},
                        .tensor_names = {"global_step"},
                        .every_n_iter = 10,
                        .formatter =
                            [](const TensorValues& values) {
                              return absl::StrCat(
                                  "qqq=", values.at("foo:0").scalar<float>(),
                                  " n=", values.size());
                            },
                        .sink = log.Sink()});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  CO_ASSERT_OK((co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
  CO_ASSERT_TRUE(log.lines->size() == 1);
  EXPECT_EQ(log.lines->at(0), "qqq=42 n=2");
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(LoggingTensorHook, TheDefaultLineListsTagsInTheOrderGiven) {
  FooGraph graph;
  CapturedLog log;
  auto hook = MakeHook({.tensors = {graph.foo},
                        .tensor_names = {"global_step"},
                        .every_n_iter = 1,
                        .sink = log.Sink()});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  CO_ASSERT_OK(
      (co_await ms->Run(graph.Nothing(), asio::use_awaitable)).status());
  CO_ASSERT_TRUE(log.lines->size() == 1);
  EXPECT_EQ(log.lines->at(0),
            absl::StrCat(
                "foo:0 = ", Tensor::Scalar(42.0f).DebugString(),
                ", global_step = ", Tensor::Scalar<int64_t>(0).DebugString()));
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

}  // namespace
}  // namespace cosession::logging_tensor_hook_test
