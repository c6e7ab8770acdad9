// GlobalStepWaiterHook: TensorFlow's GlobalStepWaiterHookTest cases (no wait
// for step 0, waits until the step arrives) driven by log lines and manual
// steps instead of sleeps, and the cancellation paths. Tests whose wait must
// end by cancellation use a one-hour poll interval: only a prompt
// cancellation lets them finish within CO_TEST's bound.
#include "cosession/hooks/global_step_waiter_hook.h"

#include <gtest/gtest.h>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>

#include "tests/co_test.h"
#include "tests/hook_test_util.h"

namespace cosession::global_step_waiter_hook_test {
namespace {

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;
using testing::CreateSessionOrFail;
using testing::HookList;
using testing::RawRun;
using testing::StepGraph;
using LineChannel = asio::experimental::concurrent_channel<void(
    boost::system::error_code, std::string)>;
using RunResult = MonitoredSession::RunResult;

constexpr std::chrono::hours kForever{1};

std::shared_ptr<GlobalStepWaiterHook> MakeHook(
    GlobalStepWaiterHookOptions options) {
  auto hook = GlobalStepWaiterHook::Create(std::move(options));
  EXPECT_TRUE(hook.ok()) << hook.status();
  return hook.ok() ? *hook : nullptr;
}

// A sink that hands each line to the test through a channel.
LogSink ToChannel(LineChannel& lines) {
  return [&lines](std::string line) {
    lines.try_send(boost::system::error_code(), std::move(line));
  };
}

TEST(GlobalStepWaiterHook, CreateRejectsANonPositivePollInterval) {
  auto hook = GlobalStepWaiterHook::Create(
      {.wait_until_step = 5, .poll_interval = std::chrono::seconds(0)});
  EXPECT_EQ(hook.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hook.status().message().find("poll_interval"), std::string::npos);
}

CO_TEST(GlobalStepWaiterHook, BeginFailsWithoutAGlobalStepNamingTheHook) {
  Graph g;
  ops::NoOp(g);
  auto hook = MakeHook({.wait_until_step = 3});
  auto created = co_await MonitoredSession::Create(g, HookList(hook), nullptr,
                                                   testing::HookTestOptions(),
                                                   asio::use_awaitable);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(created.status().message().find("GlobalStepWaiterHook"),
            std::string::npos);
}

// TF: test_not_wait_for_step_zero.
CO_TEST(GlobalStepWaiterHook, DoesNotWaitWhenWaitUntilStepIsNotPositive) {
  StepGraph graph;
  auto hook = MakeHook({.wait_until_step = 0, .poll_interval = kForever});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  CO_ASSERT_OK((co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
  EXPECT_TRUE(hook->started());
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(GlobalStepWaiterHook, DoesNotWaitWhenTheStepWasAlreadyReached) {
  StepGraph graph;
  auto hook = MakeHook({.wait_until_step = 10, .poll_interval = kForever});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  co_await RawRun(ms->raw_session(), graph.SetStep(10));
  CO_ASSERT_OK((co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
  EXPECT_TRUE(hook->started());
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

// TF: test_wait_for_step: another writer moves the step to 2000 (still
// short: the hook keeps waiting and says where it is), then to 5000.
CO_TEST(GlobalStepWaiterHook, WaitsUntilAnotherWriterAdvancesTheGlobalStep) {
  StepGraph graph;
  LineChannel lines(co_await asio::this_coro::executor, 16);
  auto hook = MakeHook({.wait_until_step = 5000,
                        .poll_interval = std::chrono::milliseconds(1),
                        .sink = ToChannel(lines)});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  std::vector<std::string> seen;
  auto train = [&]() -> asio::awaitable<RunResult> {
    co_return co_await ms->Run(graph.Train(), asio::use_awaitable);
  };
  auto other_writer = [&]() -> asio::awaitable<void> {
    seen.push_back(co_await lines.async_receive(asio::use_awaitable));
    EXPECT_FALSE(hook->started());
    co_await RawRun(ms->raw_session(), graph.SetStep(2000));
    seen.push_back(co_await lines.async_receive(asio::use_awaitable));
    EXPECT_FALSE(hook->started());
    co_await RawRun(ms->raw_session(), graph.SetStep(5000));
  };
  RunResult result = co_await (train() && other_writer());
  CO_ASSERT_OK(result.status());
  EXPECT_TRUE(hook->started());
  CO_ASSERT_TRUE(seen.size() == 2);
  EXPECT_EQ(seen[0], "Waiting for global step 5000 before starting training.");
  EXPECT_EQ(seen[1],
            "Waiting for global step 5000 before starting training. Current "
            "step is 2000.");
  // The step then ran: 5000 + 1.
  auto step = co_await RawRun(ms->raw_session(), graph.ReadStep());
  CO_ASSERT_TRUE(step.size() == 1);
  EXPECT_EQ(step[0].scalar<int64_t>(), 5001);
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(GlobalStepWaiterHook, OnlyTheFirstStepWaits) {
  StepGraph graph;
  auto hook = MakeHook({.wait_until_step = 3, .poll_interval = kForever});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  co_await RawRun(ms->raw_session(), graph.SetStep(3));
  CO_ASSERT_OK((co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
  co_await RawRun(ms->raw_session(), graph.SetStep(0));
  CO_ASSERT_OK((co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

// The caller's Run raced with `||` against a trigger: the wait is
// cancelled promptly (the poll interval is an hour), nothing runs.
CO_TEST(GlobalStepWaiterHook, CancellingTheCallersRunEndsTheWaitPromptly) {
  StepGraph graph;
  LineChannel lines(co_await asio::this_coro::executor, 16);
  auto hook = MakeHook({.wait_until_step = 1000,
                        .poll_interval = kForever,
                        .sink = ToChannel(lines)});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  const auto started = std::chrono::steady_clock::now();
  auto winner = co_await (ms->Run(graph.Train(), asio::use_awaitable) ||
                          lines.async_receive(asio::use_awaitable));
  EXPECT_EQ(winner.index(), 1u) << "the trigger (the waiting line) wins";
  EXPECT_LT(std::chrono::steady_clock::now() - started,
            std::chrono::seconds(10));
  EXPECT_FALSE(hook->started());
  EXPECT_TRUE(ms->ShouldStop());
  EXPECT_EQ(ms->stop_reason(), "cancelled");
  auto step = co_await RawRun(ms->raw_session(), graph.ReadStep());
  CO_ASSERT_TRUE(step.size() == 1);
  EXPECT_EQ(step[0].scalar<int64_t>(), 0) << "the train op never ran";
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

// With a second hook that may suspend, the hooks run as coroutines of their
// own, awaited together: the cancellation reaches the waiter all the same.
CO_TEST(GlobalStepWaiterHook, CancellationReachesTheWaitAmongConcurrentHooks) {
  StepGraph graph;
  LineChannel lines(co_await asio::this_coro::executor, 16);
  auto hook = MakeHook({.wait_until_step = 1000,
                        .poll_interval = kForever,
                        .sink = ToChannel(lines)});
  auto other = std::make_shared<SessionRunHook>();  // MaySuspend() is true
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook, other));
  CO_ASSERT_TRUE(ms != nullptr);
  auto winner = co_await (ms->Run(graph.Train(), asio::use_awaitable) ||
                          lines.async_receive(asio::use_awaitable));
  EXPECT_EQ(winner.index(), 1u);
  EXPECT_TRUE(ms->ShouldStop());
  EXPECT_EQ(ms->stop_reason(), "cancelled");
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

// A stop requested elsewhere (here: on the coordinator) ends the wait too,
// and the step completes with Cancelled.
CO_TEST(GlobalStepWaiterHook, AStopRequestEndsTheWaitWithCancelled) {
  StepGraph graph;
  LineChannel lines(co_await asio::this_coro::executor, 16);
  auto hook = MakeHook({.wait_until_step = 1000,
                        .poll_interval = kForever,
                        .sink = ToChannel(lines)});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  auto train = [&]() -> asio::awaitable<RunResult> {
    co_return co_await ms->Run(graph.Train(), asio::use_awaitable);
  };
  auto stopper = [&]() -> asio::awaitable<void> {
    (void)co_await lines.async_receive(asio::use_awaitable);
    ms->coordinator().RequestStop().IgnoreError();
  };
  RunResult result = co_await (train() && stopper());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled)
      << result.status();
  EXPECT_TRUE(ms->ShouldStop());
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

}  // namespace
}  // namespace cosession::global_step_waiter_hook_test
