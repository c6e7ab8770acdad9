// MonitoredSession: TensorFlow semantics that depend on the order of
// concurrent events -- a recoverable error recorded while a step is in
// flight, RunStepFn's values -- each race made deterministic with channels.
// (The coordinator's own race, a task spawned just before a stop, is in
// tests/coordinator_test.cc.)
#include <gtest/gtest.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <memory>
#include <string>
#include <vector>

#include "cosession/async/monitored_session.h"
#include "cosession/graph/ops.h"
#include "tests/co_test.h"
#include "tests/test_ops.h"
#include "tests/test_util.h"

namespace cosession::monitored_session_races_test {
namespace {

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;
using testing::TestRuntime;
using testing::TokenChannel;

MonitoredSessionOptions TestOptions() {
  MonitoredSessionOptions options;
  options.runtime = &TestRuntime();
  options.stop_grace_period = std::chrono::seconds(5);
  return options;
}

// y = 2x for a fed x.
struct DoublingGraph {
  DoublingGraph() {
    x = ops::Placeholder(g, DType::kFloat, TensorShape{}, "x");
    y = ops::Mul(g, x, ops::Const(g, 2.0f), "y");
  }
  RunArgs Double(float value) const {
    RunArgs args;
    args.fetches.push_back(y);
    args.feeds.emplace_back(x, Tensor::Scalar(value));
    return args;
  }
  Graph g;
  Output x, y;
};

// Its first BeforeRun tells `started`, then waits on a channel nobody sends
// to: only a cancellation ends that wait. Every later BeforeRun returns at
// once. Counts its AfterCreateSession calls.
class WaitsOnceHook : public SessionRunHook {
 public:
  explicit WaitsOnceHook(TokenChannel* started) : started_(started) {}
  asio::awaitable<absl::Status> AfterCreateSession(Session&,
                                                   Coordinator&) override {
    ++sessions_created;
    co_return absl::OkStatus();
  }
  asio::awaitable<absl::StatusOr<SessionRunArgs>> BeforeRun(
      SessionRunContext&) override {
    if (waited_) co_return SessionRunArgs{};
    waited_ = true;
    TokenChannel never(co_await asio::this_coro::executor, 1);
    co_await started_->async_send({}, asio::use_awaitable);
    co_await never.async_receive(asio::use_awaitable);  // throws when cancelled
    co_return absl::InternalError("the wait was not cancelled");
  }
  int sessions_created = 0;

 private:
  TokenChannel* started_;
  bool waited_ = false;
};

// A coordinated task that records Aborted (a preemption) once the step's
// hook is waiting.
asio::awaitable<absl::Status> PreemptWhenStarted(TokenChannel* started) {
  co_await started->async_receive(asio::use_awaitable);
  co_return absl::AbortedError("preempted");
}

// TensorFlow's _RecoverableSession: a preemption while the step waits
// re-creates the session and retries the step on it. The old coordinator's
// stop cancelled the step's wait; that cancellation must not carry over
// into the retry on the new session.
CO_TEST(MonitoredSessionRaces,
        AnAbortedTaskDuringAStepRecoversAndTheRetryReturnsItsValues) {
  DoublingGraph graph;
  TokenChannel started(co_await asio::this_coro::executor, 1);
  auto hook = std::make_shared<WaitsOnceHook>(&started);
  MonitoredSession::Hooks hooks{hook};
  auto created = co_await MonitoredSession::Create(
      graph.g, hooks, nullptr, TestOptions(), asio::use_awaitable);
  CO_ASSERT_OK(created.status());
  MonitoredSession& ms = **created;
  ms.coordinator().Spawn("preemption", PreemptWhenStarted(&started));
  auto values = co_await ms.Run(graph.Double(3), asio::use_awaitable);
  CO_ASSERT_OK(values.status());
  EXPECT_EQ(values->at(0).scalar<float>(), 6.0f);
  EXPECT_EQ(ms.recoveries(), 1);
  EXPECT_EQ(hook->sessions_created, 2);
  EXPECT_FALSE(ms.ShouldStop());
  CO_ASSERT_OK(co_await ms.Close(asio::use_awaitable));
}

// The same preemption with RunStepFn: the whole function is retried on the
// new session.
CO_TEST(MonitoredSessionRaces, AnAbortedTaskDuringRunStepFnRetriesTheFunction) {
  DoublingGraph graph;
  TokenChannel started(co_await asio::this_coro::executor, 1);
  auto hook = std::make_shared<WaitsOnceHook>(&started);
  MonitoredSession::Hooks hooks{hook};
  auto created = co_await MonitoredSession::Create(
      graph.g, hooks, nullptr, TestOptions(), asio::use_awaitable);
  CO_ASSERT_OK(created.status());
  MonitoredSession& ms = **created;
  ms.coordinator().Spawn("preemption", PreemptWhenStarted(&started));
  int calls = 0;
  auto fn = [&](MonitoredSession::StepContext& step)
      -> asio::awaitable<absl::StatusOr<std::vector<Tensor>>> {
    ++calls;
    co_return co_await step.RunWithHooks(graph.Double(5), asio::use_awaitable);
  };
  absl::StatusOr<std::vector<Tensor>> values =
      co_await ms.RunStepFn(fn, asio::use_awaitable);
  CO_ASSERT_OK(values.status());
  EXPECT_EQ(values->at(0).scalar<float>(), 10.0f);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(ms.recoveries(), 1);
  CO_ASSERT_OK(co_await ms.Close(asio::use_awaitable));
}

// TensorFlow's run_step_fn returns what the function returns.
CO_TEST(MonitoredSessionRaces, RunStepFnCompletesWithTheFunctionsValue) {
  DoublingGraph graph;
  MonitoredSession::Hooks
      no_hooks;  // named: braces inside co_await trip g++ 12
  auto created = co_await MonitoredSession::Create(
      graph.g, no_hooks, nullptr, TestOptions(), asio::use_awaitable);
  CO_ASSERT_OK(created.status());
  MonitoredSession& ms = **created;
  auto fn = [&](MonitoredSession::StepContext& step)
      -> asio::awaitable<absl::StatusOr<float>> {
    auto raw =
        co_await step.session().Run(graph.Double(1.5f), asio::use_awaitable);
    if (!raw.ok()) co_return raw.status();
    auto hooked =
        co_await step.RunWithHooks(graph.Double(2), asio::use_awaitable);
    if (!hooked.ok()) co_return hooked.status();
    co_return raw->at(0).scalar<float>() + hooked->at(0).scalar<float>();
  };
  absl::StatusOr<float> sum = co_await ms.RunStepFn(fn, asio::use_awaitable);
  CO_ASSERT_OK(sum.status());
  EXPECT_EQ(*sum, 7.0f);
  CO_ASSERT_OK(co_await ms.Close(asio::use_awaitable));
}

// RunWithHooks with a token other than use_awaitable is an operation of its
// own: here a callback, which completes exactly once.
CO_TEST(MonitoredSessionRaces, RunWithHooksTakesAnyCompletionToken) {
  DoublingGraph graph;
  MonitoredSession::Hooks
      no_hooks;  // named: braces inside co_await trip g++ 12
  auto created = co_await MonitoredSession::Create(
      graph.g, no_hooks, nullptr, TestOptions(), asio::use_awaitable);
  CO_ASSERT_OK(created.status());
  MonitoredSession& ms = **created;
  auto fn = [&](MonitoredSession::StepContext& step)
      -> asio::awaitable<absl::Status> {
    TokenChannel done(co_await asio::this_coro::executor, 1);
    int completions = 0;
    float value = 0;
    auto callback = [&](MonitoredSession::RunResult r) {
      ++completions;
      if (r.ok()) value = r->at(0).scalar<float>();
      done.try_send(boost::system::error_code());
    };
    step.RunWithHooks(
        graph.Double(4),
        asio::bind_executor(co_await asio::this_coro::executor, callback));
    co_await done.async_receive(asio::use_awaitable);
    EXPECT_EQ(completions, 1);
    EXPECT_EQ(value, 8.0f);
    co_return absl::OkStatus();
  };
  CO_ASSERT_OK(co_await ms.RunStepFn(fn, asio::use_awaitable));
  CO_ASSERT_OK(co_await ms.Close(asio::use_awaitable));
}

}  // namespace
}  // namespace cosession::monitored_session_races_test
