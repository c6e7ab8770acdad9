// MonitoredSession: the hook semantics of docs/design.md, with recording fake
// hooks. Each numbered point of "What the hooks can rely on" and its tests:
//   1  BeginIsCalledOnceInOrderThenTheGraphIsFinalized,
//      BeginAddingToAFinalizedGraphFailsCreateNamingTheOp,
//      ASecondSessionOnTheSameGraphFindsWhatBeginAddedBefore
//   2  AbortedRecreatesTheSessionAndRetriesTheRun (AfterCreateSession again,
//      no Begin, no End)
//   3  HookFetchesAndTargetsRunInTheSameStep, TwoHooksFeedingTheSameTensor-
//      IsInvalid, OptionsMergeToTheHighestTraceLevel,
//      OptionsMergeToTheLargestTimeoutAndLeaveTheCallersFeeds
//   4  HookFetchesAndTargetsRunInTheSameStep (and the test after it),
//      MonitoredSessionInline.HookFetchesReachOnlyThatHook
//   5  RequestStopInAfterRunFinishesTheStepThenStops,
//      StopReasonNamesTheHookThatAskedForStop
//   6  FailingBeforeRunSkipsTheGraphAndAfterRun, FailingGraphSkipsAfterRun-
//      AndTellsHooksOnError, FailingAfterRunIsWhatTheStepReturns
//   7  CloseCallsEndInOrderAfterANormalRun, OutOfRangeStopsCleanlyAndClose-
//      CallsEnd, EndIsNotCalledAfterANonRecoverableError,
//      ASecondCloseIsFailedPreconditionAndCallsNothing
//   8  AbortedRecreatesTheSessionAndRetriesTheRun,
//      RecoveryStopsAfterTheConfiguredAttempts, MonitoredSessionInline.*
//   9  ATaskErrorCancelsTheStepAndIsWhatRunReturns,
//      CloseNamesATaskStillRunningAfterTheGracePeriod (and
//      tests/coordinator_test.cc)
//   10 CancellingTheCallerStopsAHookWaitAndRequestsStop,
//      ATaskErrorCancelsTheStepAndIsWhatRunReturns,
//      ThousandStepsWithRandomCancellationsNeverHang,
//      MonitoredSessionInline.*Cancel*, MonitoredSessionInline.AStopFrom-
//      AnotherThreadCancelsTheKernelWait
//   11 HooksAreCalledInTheOrderGiven, ConcurrentHooksAreStartedInOrderAnd-
//      AwaitedTogether, SequentialHooksStartOnlyAfterThePreviousFinished,
//      AFailingConcurrentHookCancelsTheOthersAndWins
//   12 RunStepFnGivesRawSessionHooksAndStop,
//      CancellingRunStepFnStopsItsWaitAndRequestsStop
//   13 tests/monitored_training_session_test.cc
#include "cosession/async/monitored_session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cosession/graph/op_registry.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/status.h"
#include "tests/co_test.h"
#include "tests/test_ops.h"
#include "tests/test_util.h"

namespace cosession::monitored_session_test {
namespace {

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;
using testing::TestEvents;
using testing::TestRuntime;
using Log = std::vector<std::string>;

// A hook that records its calls as "<name>.<Method>" and does what the test
// configures.
class RecordingHook : public SessionRunHook {
 public:
  RecordingHook(std::string name, std::shared_ptr<Log> log)
      : name_(std::move(name)), log_(std::move(log)) {}

  // Configuration.
  RunArgs before_run_args;
  absl::Status before_run_error;
  int before_run_error_times = 0;  // how many calls fail (then succeed)
  absl::Status after_run_error;
  bool request_stop_in_after_run = false;
  bool request_stop_in_before_run = false;
  // When set, BeforeRun waits for a token on it.
  testing::TokenChannel* wait_in_before_run = nullptr;
  // When set, End waits for a token on it.
  testing::TokenChannel* wait_in_end = nullptr;
  // What MaySuspend() says: false lets MonitoredSession run the step inside
  // the awaiting coroutine (the inline path).
  bool may_suspend = true;
  // BeforeRun and AfterRun each yield to the executor this many times.
  int yields = 0;
  std::function<void(Graph&)> on_begin;
  // Called at the start of BeforeRun, before any wait.
  std::function<void()> on_before_run;

  // Observations.
  std::vector<SessionRunValues> values_seen;
  std::vector<absl::Status> errors_seen;

  absl::Status Begin(Graph& graph) override {
    Record("Begin");
    if (on_begin) on_begin(graph);
    return absl::OkStatus();
  }
  asio::awaitable<absl::Status> AfterCreateSession(Session&,
                                                   Coordinator&) override {
    Record("AfterCreateSession");
    co_return absl::OkStatus();
  }
  asio::awaitable<absl::StatusOr<SessionRunArgs>> BeforeRun(
      SessionRunContext& context) override {
    Record("BeforeRun");
    if (on_before_run) on_before_run();
    if (wait_in_before_run != nullptr) {
      co_await wait_in_before_run->async_receive(asio::use_awaitable);
    }
    co_await Yield();
    if (before_run_error_times > 0) {
      --before_run_error_times;
      co_return before_run_error;
    }
    if (request_stop_in_before_run) context.RequestStop();
    co_return before_run_args;
  }
  asio::awaitable<absl::Status> AfterRun(
      SessionRunContext& context, const SessionRunValues& values) override {
    Record("AfterRun");
    co_await Yield();
    values_seen.push_back(values);
    if (request_stop_in_after_run) context.RequestStop();
    co_return after_run_error;
  }
  asio::awaitable<absl::Status> End(Session&) override {
    Record("End");
    if (wait_in_end != nullptr) {
      co_await wait_in_end->async_receive(asio::use_awaitable);
    }
    co_return absl::OkStatus();
  }
  void OnError(const absl::Status& error) override {
    Record("OnError");
    errors_seen.push_back(error);
  }
  bool MaySuspend() const override { return may_suspend; }
  std::string name() const override { return name_; }

 private:
  asio::awaitable<void> Yield() {
    for (int i = 0; i < yields; ++i) {
      co_await asio::post(co_await asio::this_coro::executor,
                          asio::use_awaitable);
    }
  }
  void Record(absl::string_view method) {
    log_->push_back(absl::StrCat(name_, ".", method));
  }
  std::string name_;
  std::shared_ptr<Log> log_;
};

// A counter variable, its increment, and y = 2x for a fed x.
struct CounterGraph {
  CounterGraph() {
    counter = ops::Variable(g, Tensor::Scalar<int64_t>(0), "counter");
    increment =
        ops::AssignAdd(g, counter, ops::Const(g, int64_t{1}), "increment");
    x = ops::Placeholder(g, DType::kFloat, TensorShape{}, "x");
    y = ops::Mul(g, x, ops::Const(g, 2.0f), "y");
  }
  RunArgs Double(float value) const {
    return {.fetches = {y}, .feeds = {{x, Tensor::Scalar(value)}}};
  }
  RunArgs Increment() const { return {.fetches = {increment}}; }
  Graph g;
  Output counter, increment, x, y;
};

MonitoredSessionOptions TestOptions() {
  MonitoredSessionOptions options;
  options.runtime = &TestRuntime();
  options.stop_grace_period = std::chrono::seconds(5);
  return options;
}

asio::awaitable<std::unique_ptr<MonitoredSession>> CreateOrFail(
    Graph& g, MonitoredSession::Hooks hooks, MonitoredSessionOptions options) {
  auto created = co_await MonitoredSession::Create(
      g, std::move(hooks), std::make_shared<ChiefSessionCreator>(),
      std::move(options), asio::use_awaitable);
  if (!created.ok()) {
    ADD_FAILURE() << "Create failed: " << created.status();
    co_return nullptr;
  }
  co_return std::move(created).value();
}

// A hook list built outside co_await expressions (g++ 12 rejects braced
// lists inside them: docs/async_pitfalls.md, 8).
template <typename... H>
MonitoredSession::Hooks HookList(H... hooks) {
  return MonitoredSession::Hooks{hooks...};
}

std::shared_ptr<RecordingHook> Hook(const std::string& name,
                                    std::shared_ptr<Log> log) {
  return std::make_shared<RecordingHook>(name, std::move(log));
}

// ---- 1. Begin

CO_TEST(MonitoredSession, BeginIsCalledOnceInOrderThenTheGraphIsFinalized) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto ms = co_await CreateOrFail(
      graph.g, HookList(Hook("a", log), Hook("b", log)), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  EXPECT_TRUE(graph.g.finalized());
  EXPECT_EQ(*log, (Log{"a.Begin", "b.Begin", "a.AfterCreateSession",
                       "b.AfterCreateSession"}));
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(MonitoredSession, BeginAddingToAFinalizedGraphFailsCreateNamingTheOp) {
  CounterGraph graph;
  graph.g.Finalize();
  auto log = std::make_shared<Log>();
  auto late = Hook("late", log);
  late->on_begin = [](Graph& g) { ops::Const(g, 1.0f, "too_late"); };
  auto created = co_await MonitoredSession::Create(
      graph.g, HookList(late), nullptr, TestOptions(), asio::use_awaitable);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(created.status().message().find("too_late"),
            absl::string_view::npos)
      << created.status();
}

CO_TEST(MonitoredSession,
        ASecondSessionOnTheSameGraphFindsWhatBeginAddedBefore) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto make_hook = [&] {
    auto hook = Hook("stepper", log);
    // As hooks do: find or create the global step in Begin.
    hook->on_begin = [](Graph& g) { GetOrCreateGlobalStep(g); };
    return hook;
  };
  auto first =
      co_await CreateOrFail(graph.g, HookList(make_hook()), TestOptions());
  CO_ASSERT_TRUE(first != nullptr);
  CO_ASSERT_OK(co_await first->Close(asio::use_awaitable));
  const int nodes = graph.g.num_nodes();
  auto second =
      co_await CreateOrFail(graph.g, HookList(make_hook()), TestOptions());
  CO_ASSERT_TRUE(second != nullptr);
  EXPECT_EQ(graph.g.num_nodes(), nodes);  // the second Begin added nothing
  CO_ASSERT_OK(co_await second->Close(asio::use_awaitable));
}

// ---- 3/4. merging and per-hook results

CO_TEST(MonitoredSession, HookFetchesAndTargetsRunInTheSameStep) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto watcher = Hook("watcher", log);
  watcher->before_run_args = {.fetches = {graph.counter},
                              .targets = {Operation(graph.increment.node())}};
  auto quiet = Hook("quiet", log);
  auto ms =
      co_await CreateOrFail(graph.g, HookList(watcher, quiet), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  auto values = co_await ms->Run(graph.Double(3.0f), asio::use_awaitable);
  CO_ASSERT_OK(values.status());
  // The caller gets only its own fetch.
  CO_ASSERT_TRUE(values->size() == 1);
  EXPECT_EQ(values->at(0).scalar<float>(), 6.0f);
  // Each hook gets only its own fetches.
  CO_ASSERT_TRUE(watcher->values_seen.size() == 1);
  CO_ASSERT_TRUE(watcher->values_seen[0].results.size() == 1);
  CO_ASSERT_TRUE(quiet->values_seen.size() == 1);
  EXPECT_TRUE(quiet->values_seen[0].results.empty());
  // The hook's target ran: the counter moved.
  RunArgs read{.fetches = {graph.counter}};
  auto counter = co_await ms->raw_session().Run(read, asio::use_awaitable);
  CO_ASSERT_OK(counter.status());
  EXPECT_EQ(counter->at(0).scalar<int64_t>(), 1);
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(MonitoredSession,
        AHookFeedingWhatTheCallerFeedsIsInvalidAndNothingRuns) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto feeder = Hook("feeder", log);
  feeder->before_run_args = {.feeds = {{graph.x, Tensor::Scalar(1.0f)}}};
  auto ms = co_await CreateOrFail(graph.g, HookList(feeder), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  RunArgs args = graph.Double(3.0f);
  args.targets = {Operation(graph.increment.node())};
  auto values = co_await ms->Run(args, asio::use_awaitable);
  EXPECT_EQ(values.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(values.status().message().find("x:0"), absl::string_view::npos);
  EXPECT_TRUE(feeder->values_seen.empty());
  RunArgs read{.fetches = {graph.counter}};
  auto counter = co_await ms->raw_session().Run(read, asio::use_awaitable);
  EXPECT_EQ(counter->at(0).scalar<int64_t>(), 0);
}

CO_TEST(MonitoredSession, TwoHooksFeedingTheSameTensorIsInvalid) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto a = Hook("a", log), b = Hook("b", log);
  a->before_run_args = {.fetches = {graph.y},
                        .feeds = {{graph.x, Tensor::Scalar(1.0f)}}};
  b->before_run_args = {.feeds = {{graph.x, Tensor::Scalar(2.0f)}}};
  auto ms = co_await CreateOrFail(graph.g, HookList(a, b), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  RunArgs none;
  auto values = co_await ms->Run(none, asio::use_awaitable);
  EXPECT_EQ(values.status().code(), absl::StatusCode::kInvalidArgument);
}

CO_TEST(MonitoredSession, OptionsMergeToTheHighestTraceLevel) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto tracer = Hook("tracer", log), other = Hook("other", log);
  tracer->before_run_args.options.trace_level = RunOptions::kFullTrace;
  auto ms =
      co_await CreateOrFail(graph.g, HookList(tracer, other), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  CO_ASSERT_OK(
      (co_await ms->Run(graph.Double(1), asio::use_awaitable)).status());
  CO_ASSERT_TRUE(other->values_seen.size() == 1);
  EXPECT_EQ(other->values_seen[0].options.trace_level, RunOptions::kFullTrace);
  EXPECT_FALSE(
      other->values_seen[0].run_metadata.step_stats.node_stats.empty());
}

CO_TEST(MonitoredSession,
        OptionsMergeToTheLargestTimeoutAndLeaveTheCallersFeeds) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto short_wait = Hook("short", log), long_wait = Hook("long", log),
       other = Hook("other", log);
  short_wait->before_run_args.options.timeout = std::chrono::seconds(5);
  long_wait->before_run_args.options.timeout = std::chrono::seconds(9);
  auto ms = co_await CreateOrFail(
      graph.g, HookList(short_wait, long_wait, other), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  RunArgs args = graph.Double(3);
  args.options.timeout = std::chrono::seconds(7);
  CO_ASSERT_OK((co_await ms->Run(args, asio::use_awaitable)).status());
  CO_ASSERT_TRUE(other->values_seen.size() == 1);
  EXPECT_EQ(other->values_seen[0].options.timeout, std::chrono::seconds(9));
  // The caller's arguments are what they were.
  CO_ASSERT_TRUE(args.feeds.size() == 1);
  EXPECT_EQ(args.feeds[0].second.scalar<float>(), 3.0f);
  EXPECT_EQ(args.options.timeout, std::chrono::seconds(7));
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

// ---- 5. RequestStop from a hook

CO_TEST(MonitoredSession, RequestStopInAfterRunFinishesTheStepThenStops) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto stopper = Hook("stopper", log), after = Hook("after", log);
  stopper->request_stop_in_after_run = true;
  auto ms =
      co_await CreateOrFail(graph.g, HookList(stopper, after), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  log->clear();
  auto values = co_await ms->Run(graph.Double(2), asio::use_awaitable);
  CO_ASSERT_OK(values.status());
  EXPECT_EQ(*log, (Log{"stopper.BeforeRun", "after.BeforeRun",
                       "stopper.AfterRun", "after.AfterRun"}));
  EXPECT_TRUE(ms->ShouldStop());
  log->clear();
  auto again = co_await ms->Run(graph.Double(2), asio::use_awaitable);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(log->empty());  // no hook called
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

// ---- 6. failures

CO_TEST(MonitoredSession, FailingBeforeRunSkipsTheGraphAndAfterRun) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto bad = Hook("bad", log);
  bad->before_run_error = absl::InternalError("no");
  bad->before_run_error_times = 1;
  auto ms = co_await CreateOrFail(graph.g, HookList(bad), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  auto values = co_await ms->Run(graph.Increment(), asio::use_awaitable);
  EXPECT_EQ(values.status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(bad->values_seen.empty());
  RunArgs read{.fetches = {graph.counter}};
  auto counter = co_await ms->raw_session().Run(read, asio::use_awaitable);
  EXPECT_EQ(counter->at(0).scalar<int64_t>(), 0);
}

CO_TEST(MonitoredSession, FailingGraphSkipsAfterRunAndTellsHooksOnError) {
  CounterGraph graph;
  Output broken = testing::TestFail(graph.g, {}, "broken");
  auto log = std::make_shared<Log>();
  auto hook = Hook("hook", log);
  auto ms = co_await CreateOrFail(graph.g, HookList(hook), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  RunArgs args{.fetches = {broken}};
  auto values = co_await ms->Run(args, asio::use_awaitable);
  EXPECT_EQ(values.status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(hook->values_seen.empty());
  CO_ASSERT_TRUE(hook->errors_seen.size() == 1);
  EXPECT_EQ(hook->errors_seen[0].code(), absl::StatusCode::kInternal);
  // A non-recoverable error does not stop the session.
  EXPECT_FALSE(ms->ShouldStop());
}

CO_TEST(MonitoredSession, FailingAfterRunIsWhatTheStepReturns) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto hook = Hook("hook", log);
  hook->after_run_error = absl::DataLossError("corrupt");
  auto ms = co_await CreateOrFail(graph.g, HookList(hook), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  auto values = co_await ms->Run(graph.Double(1), asio::use_awaitable);
  EXPECT_EQ(values.status().code(), absl::StatusCode::kDataLoss);
}

// ---- 7. End

CO_TEST(MonitoredSession, CloseCallsEndInOrderAfterANormalRun) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto ms = co_await CreateOrFail(
      graph.g, HookList(Hook("a", log), Hook("b", log)), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  CO_ASSERT_OK(
      (co_await ms->Run(graph.Double(1), asio::use_awaitable)).status());
  log->clear();
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  EXPECT_EQ(*log, (Log{"a.End", "b.End"}));
}

CO_TEST(MonitoredSession, OutOfRangeStopsCleanlyAndCloseCallsEnd) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto input = Hook("input", log);
  input->before_run_error = absl::OutOfRangeError("end of input");
  input->before_run_error_times = 1;
  auto ms = co_await CreateOrFail(graph.g, HookList(input), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  auto values = co_await ms->Run(graph.Double(1), asio::use_awaitable);
  EXPECT_EQ(values.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(ms->ShouldStop());
  EXPECT_EQ(ms->stop_reason(), "input exhausted");
  log->clear();
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  EXPECT_EQ(*log, (Log{"input.End"}));
}

CO_TEST(MonitoredSession, EndIsNotCalledAfterANonRecoverableError) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto hook = Hook("hook", log);
  hook->before_run_error = absl::InternalError("boom");
  hook->before_run_error_times = 1;
  auto ms = co_await CreateOrFail(graph.g, HookList(hook), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  (void)co_await ms->Run(graph.Double(1), asio::use_awaitable);
  log->clear();
  // Close returns the join result, not the Run error again.
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  EXPECT_TRUE(log->empty());
}

CO_TEST(MonitoredSession, ASecondCloseIsFailedPreconditionAndCallsNothing) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto ms =
      co_await CreateOrFail(graph.g, HookList(Hook("a", log)), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  log->clear();
  absl::Status second = co_await ms->Close(asio::use_awaitable);
  EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(log->empty());
}

// ---- 8. recovery

CO_TEST(MonitoredSession, AbortedRecreatesTheSessionAndRetriesTheRun) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto flaky = Hook("flaky", log);
  flaky->before_run_error = absl::AbortedError("preempted");
  flaky->before_run_error_times = 1;
  auto ms = co_await CreateOrFail(graph.g, HookList(flaky), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  Coordinator* first_coordinator = &ms->coordinator();
  log->clear();
  auto values = co_await ms->Run(graph.Double(4), asio::use_awaitable);
  CO_ASSERT_OK(values.status());
  EXPECT_EQ(values->at(0).scalar<float>(), 8.0f);
  EXPECT_EQ(ms->recoveries(), 1);
  EXPECT_NE(&ms->coordinator(), first_coordinator);
  EXPECT_EQ(*log, (Log{"flaky.BeforeRun", "flaky.AfterCreateSession",
                       "flaky.BeforeRun", "flaky.AfterRun"}));
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(MonitoredSession, RecoveryStopsAfterTheConfiguredAttempts) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto flaky = Hook("flaky", log);
  flaky->before_run_error = absl::UnavailableError("down");
  flaky->before_run_error_times = 100;
  MonitoredSessionOptions options = TestOptions();
  options.max_recovery_attempts = 2;
  auto ms = co_await CreateOrFail(graph.g, HookList(flaky), options);
  CO_ASSERT_TRUE(ms != nullptr);
  auto values = co_await ms->Run(graph.Double(4), asio::use_awaitable);
  EXPECT_EQ(values.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ms->recoveries(), 2);
}

// ---- 9/10. the coordinator and cancellation

asio::awaitable<absl::Status> FailingTask(testing::TokenChannel& go) {
  co_await go.async_receive(asio::use_awaitable);
  co_return absl::InternalError("task failed");
}

asio::awaitable<void> ReleaseAfterStarted(TestEvents& events,
                                          testing::TokenChannel& go) {
  co_await events.started.async_receive(asio::use_awaitable);
  co_await go.async_send({}, asio::use_awaitable);
}

CO_TEST(MonitoredSession, ATaskErrorCancelsTheStepAndIsWhatRunReturns) {
  TestEvents events;
  CounterGraph graph;
  Output stuck = testing::TestNever(graph.g, "stuck");
  auto ms = co_await CreateOrFail(graph.g, HookList(), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  testing::TokenChannel go(co_await asio::this_coro::executor, 1);
  ms->coordinator().Spawn("failing_task", FailingTask(go));
  RunArgs args{.fetches = {stuck}};
  auto result = co_await (ms->Run(args, asio::use_awaitable) &&
                          ReleaseAfterStarted(events, go));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal)
      << result.status();
  EXPECT_TRUE(ms->ShouldStop());
  absl::Status closed = co_await ms->Close(asio::use_awaitable);
  EXPECT_EQ(closed.code(), absl::StatusCode::kInternal);
}

CO_TEST(MonitoredSession, CancellingTheCallerStopsAHookWaitAndRequestsStop) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto waiter = Hook("waiter", log);
  testing::TokenChannel never(co_await asio::this_coro::executor, 1);
  waiter->wait_in_before_run = &never;
  auto ms = co_await CreateOrFail(graph.g, HookList(waiter), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  asio::steady_timer timer(co_await asio::this_coro::executor,
                           std::chrono::milliseconds(5));
  const auto start = std::chrono::steady_clock::now();
  auto winner = co_await (ms->Run(graph.Double(1), asio::use_awaitable) ||
                          timer.async_wait(asio::use_awaitable));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(winner.index(), 1u);
  EXPECT_LT(elapsed, std::chrono::milliseconds(100));
  EXPECT_TRUE(ms->ShouldStop());
  EXPECT_EQ(ms->stop_reason(), "cancelled");
  log->clear();
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  EXPECT_EQ(*log, (Log{"waiter.End"}));  // a clean stop: End runs
}

// The caller's cancellation lands after one concurrent hook finished and
// before the step took that hook's result: the step must still cancel the
// hook that waits. Here the second hook emits the caller's cancellation and
// returns at once, so the cancellation reaches the step between its two
// waits for a hook's result, with no wait in progress to cancel.
CO_TEST(MonitoredSession, ACancellationBetweenTwoHookResultsStillEndsTheStep) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto waiter = Hook("waiter", log);
  testing::TokenChannel never(co_await asio::this_coro::executor, 1);
  waiter->wait_in_before_run = &never;
  auto canceller = Hook("canceller", log);
  asio::cancellation_signal caller;
  canceller->on_before_run = [&caller] {
    caller.emit(asio::cancellation_type::terminal);
  };
  auto ms = co_await CreateOrFail(graph.g, HookList(waiter, canceller),
                                  TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  auto values = co_await ms->Run(
      graph.Double(1),
      asio::bind_cancellation_slot(caller.slot(), asio::use_awaitable));
  EXPECT_EQ(values.status().code(), absl::StatusCode::kCancelled)
      << values.status();
  EXPECT_TRUE(ms->ShouldStop());
  EXPECT_EQ(ms->stop_reason(), "cancelled");
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

// A coordinated task that does not let a stop cancel its wait.
asio::awaitable<absl::Status> Straggler(testing::TokenChannel& started,
                                        testing::TokenChannel& release) {
  co_await asio::this_coro::reset_cancellation_state(
      [](asio::cancellation_type) { return asio::cancellation_type::none; });
  started.try_send(boost::system::error_code());
  // as_tuple: the wait reports, rather than throws, whatever ends it.
  auto [ec] =
      co_await release.async_receive(asio::as_tuple(asio::use_awaitable));
  co_return ec ? absl::InternalError(ec.message()) : absl::OkStatus();
}

CO_TEST(MonitoredSession, CloseNamesATaskStillRunningAfterTheGracePeriod) {
  CounterGraph graph;
  MonitoredSessionOptions options = TestOptions();
  options.stop_grace_period = std::chrono::milliseconds(1);
  auto ms = co_await CreateOrFail(graph.g, HookList(), options);
  CO_ASSERT_TRUE(ms != nullptr);
  testing::TokenChannel started(co_await asio::this_coro::executor, 1);
  testing::TokenChannel release(co_await asio::this_coro::executor, 1);
  ms->coordinator().Spawn("slow_reader", Straggler(started, release));
  co_await started.async_receive(asio::use_awaitable);
  absl::Status closed = co_await ms->Close(asio::use_awaitable);
  EXPECT_EQ(closed.code(), absl::StatusCode::kDeadlineExceeded) << closed;
  EXPECT_NE(closed.message().find("slow_reader"), std::string::npos) << closed;
  // Let the straggler finish before the test's context is torn down.
  release.try_send(boost::system::error_code());
}

// ---- 11. order

CO_TEST(MonitoredSession, HooksAreCalledInTheOrderGiven) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto ms = co_await CreateOrFail(
      graph.g, HookList(Hook("1", log), Hook("2", log), Hook("3", log)),
      TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  log->clear();
  CO_ASSERT_OK(
      (co_await ms->Run(graph.Double(1), asio::use_awaitable)).status());
  EXPECT_EQ(*log, (Log{"1.BeforeRun", "2.BeforeRun", "3.BeforeRun",
                       "1.AfterRun", "2.AfterRun", "3.AfterRun"}));
}

// ---- 11. hook concurrency

// BeforeRun announces itself on TestEvents::started, then waits for a token
// on TestEvents::trigger (or fails after one yield when `fail` is set).
class GateHook : public SessionRunHook {
 public:
  GateHook(std::string name, std::shared_ptr<Log> log, bool fail = false)
      : name_(std::move(name)), log_(std::move(log)), fail_(fail) {}
  asio::awaitable<absl::StatusOr<SessionRunArgs>> BeforeRun(
      SessionRunContext&) override {
    log_->push_back(name_ + ".start");
    if (fail_) {
      co_await asio::post(co_await asio::this_coro::executor,
                          asio::use_awaitable);
      co_return absl::DataLossError(name_ + " failed");
    }
    TestEvents& events = TestEvents::Current();
    co_await events.started.async_send({}, name_, asio::use_awaitable);
    co_await events.trigger.async_receive(asio::use_awaitable);
    log_->push_back(name_ + ".end");
    co_return SessionRunArgs{};
  }

 private:
  std::string name_;
  std::shared_ptr<Log> log_;
  bool fail_;
};

asio::awaitable<void> ReleaseEachWhenStarted(TestEvents& events, int n,
                                             bool all_first) {
  if (all_first) {
    for (int i = 0; i < n; ++i) {
      co_await events.started.async_receive(asio::use_awaitable);
    }
    for (int i = 0; i < n; ++i) {
      co_await events.trigger.async_send({}, asio::use_awaitable);
    }
  } else {
    for (int i = 0; i < n; ++i) {
      co_await events.started.async_receive(asio::use_awaitable);
      co_await events.trigger.async_send({}, asio::use_awaitable);
    }
  }
}

// Each hook waits for a token the test sends only once both started: run
// one after the other they would never finish.
CO_TEST(MonitoredSession, ConcurrentHooksAreStartedInOrderAndAwaitedTogether) {
  TestEvents events;
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto a = std::make_shared<GateHook>("a", log);
  auto b = std::make_shared<GateHook>("b", log);
  auto ms = co_await CreateOrFail(graph.g, HookList(a, b), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  auto values = co_await (ms->Run(graph.Double(1), asio::use_awaitable) &&
                          ReleaseEachWhenStarted(events, 2, true));
  CO_ASSERT_OK(values.status());
  CO_ASSERT_TRUE(log->size() == 4);
  EXPECT_EQ((*log)[0], "a.start");
  EXPECT_EQ((*log)[1], "b.start");
}

CO_TEST(MonitoredSession, SequentialHooksStartOnlyAfterThePreviousFinished) {
  TestEvents events;
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto a = std::make_shared<GateHook>("a", log);
  auto b = std::make_shared<GateHook>("b", log);
  MonitoredSessionOptions options = TestOptions();
  options.hook_concurrency = HookConcurrency::kSequential;
  auto ms = co_await CreateOrFail(graph.g, HookList(a, b), options);
  CO_ASSERT_TRUE(ms != nullptr);
  auto values = co_await (ms->Run(graph.Double(1), asio::use_awaitable) &&
                          ReleaseEachWhenStarted(events, 2, false));
  CO_ASSERT_OK(values.status());
  EXPECT_EQ(*log, (Log{"a.start", "a.end", "b.start", "b.end"}));
}

CO_TEST(MonitoredSession, AFailingConcurrentHookCancelsTheOthersAndWins) {
  TestEvents events;
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto waiter = std::make_shared<GateHook>("waiter", log);
  auto failer = std::make_shared<GateHook>("failer", log, /*fail=*/true);
  auto ms =
      co_await CreateOrFail(graph.g, HookList(waiter, failer), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  // Nobody triggers the waiter: only the failure's cancellation ends it.
  auto values = co_await ms->Run(graph.Double(1), asio::use_awaitable);
  EXPECT_EQ(values.status().code(), absl::StatusCode::kDataLoss)
      << values.status();
  EXPECT_EQ(std::count(log->begin(), log->end(), "waiter.end"), 0);
}

// ---- 12. RunStepFn

CO_TEST(MonitoredSession, RunStepFnGivesRawSessionHooksAndStop) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto ms =
      co_await CreateOrFail(graph.g, HookList(Hook("h", log)), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  log->clear();
  auto fn = [&graph](MonitoredSession::StepContext& step)
      -> asio::awaitable<absl::Status> {
    RunArgs raw = graph.Increment();
    auto r1 = co_await step.session().Run(raw, asio::use_awaitable);
    if (!r1.ok()) co_return r1.status();
    auto r2 = co_await step.RunWithHooks(graph.Double(1), asio::use_awaitable);
    if (!r2.ok()) co_return r2.status();
    step.RequestStop();
    co_return absl::OkStatus();
  };
  CO_ASSERT_OK(co_await ms->RunStepFn(fn, asio::use_awaitable));
  EXPECT_EQ(*log, (Log{"h.BeforeRun", "h.AfterRun"}));  // only RunWithHooks
  EXPECT_TRUE(ms->ShouldStop());
}

CO_TEST(MonitoredSession, CancellingRunStepFnStopsItsWaitAndRequestsStop) {
  CounterGraph graph;
  auto ms = co_await CreateOrFail(graph.g, HookList(), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  testing::TokenChannel never(co_await asio::this_coro::executor, 1);
  auto fn =
      [&never](
          MonitoredSession::StepContext&) -> asio::awaitable<absl::Status> {
    co_await never.async_receive(asio::use_awaitable);
    co_return absl::InternalError("never released");
  };
  asio::steady_timer timer(co_await asio::this_coro::executor,
                           std::chrono::milliseconds(5));
  auto winner = co_await (ms->RunStepFn(fn, asio::use_awaitable) ||
                          timer.async_wait(asio::use_awaitable));
  EXPECT_EQ(winner.index(), 1u);
  EXPECT_TRUE(ms->ShouldStop());
  EXPECT_EQ(ms->stop_reason(), "cancelled");
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

// ---- stress: many steps, cancellations at random points

asio::awaitable<void> CancelAfterPosts(asio::cancellation_signal& signal,
                                       int posts) {
  for (int i = 0; i < posts; ++i) {
    co_await asio::post(co_await asio::this_coro::executor,
                        asio::use_awaitable);
  }
  signal.emit(asio::cancellation_type::terminal);
}

CO_TEST(MonitoredSession, ThousandStepsWithRandomCancellationsNeverHang) {
  CounterGraph graph;
  std::mt19937 rng(20261130);
  std::uniform_int_distribution<int> cancel_at(0, 12);
  std::bernoulli_distribution cancel(0.2);
  auto log = std::make_shared<Log>();
  auto yielder = Hook("yielder", log);
  yielder->yields = 3;  // cancellations land in BeforeRun, the run or AfterRun
  int steps = 0, completed = 0, cancelled = 0, sessions = 0;
  while (steps < 1000) {
    auto ms = co_await CreateOrFail(graph.g, HookList(yielder), TestOptions());
    CO_ASSERT_TRUE(ms != nullptr);
    ++sessions;
    while (steps < 1000 && !ms->ShouldStop()) {
      ++steps;
      log->clear();
      RunArgs args = graph.Increment();
      MonitoredSession::RunResult r = absl::UnknownError("not run");
      if (cancel(rng)) {
        asio::cancellation_signal signal;
        r = co_await (ms->Run(args, asio::bind_cancellation_slot(
                                        signal.slot(), asio::use_awaitable)) &&
                      CancelAfterPosts(signal, cancel_at(rng)));
        // A cancellation that reached the step stops the session, whether
        // or not its graph ran; one emitted after it completed does nothing.
        if (!r.ok() || ms->ShouldStop()) {
          EXPECT_TRUE(ms->ShouldStop());
          EXPECT_EQ(ms->stop_reason(), "cancelled");
        }
      } else {
        r = co_await ms->Run(args, asio::use_awaitable);
      }
      if (r.ok()) {
        ++completed;
      } else {
        EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled)
            << r.status();
        ++cancelled;
      }
    }
    CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  }
  EXPECT_EQ(steps, 1000);
  EXPECT_EQ(completed + cancelled, 1000);
  EXPECT_GT(cancelled, 0);
  EXPECT_GT(completed, 0);
  EXPECT_GT(sessions, 1);
}

// ---- skippable hooks (run without hooks)

CO_TEST(MonitoredSession, ARunWithoutSkippableHooksCallsOnlyTheOthers) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto kept = Hook("kept", log);
  auto skipped = Hook("skipped", log);
  MonitoredSessionOptions options = TestOptions();
  options.skippable_hooks = {skipped};
  auto ms = co_await CreateOrFail(graph.g, HookList(kept, skipped), options);
  CO_ASSERT_TRUE(ms != nullptr);
  log->clear();
  auto values = co_await ms->Run(
      graph.Double(3), RunMode::kWithoutSkippableHooks, asio::use_awaitable);
  CO_ASSERT_OK(values.status());
  EXPECT_EQ(values->front().scalar<float>(), 6.0f);
  EXPECT_EQ(*log, (Log{"kept.BeforeRun", "kept.AfterRun"}));
  log->clear();
  CO_ASSERT_OK(
      (co_await ms->Run(graph.Double(1), asio::use_awaitable)).status());
  EXPECT_EQ(*log, (Log{"kept.BeforeRun", "skipped.BeforeRun", "kept.AfterRun",
                       "skipped.AfterRun"}));
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(MonitoredSession, ASkippableHookThatIsNotASessionHookFailsCreate) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  MonitoredSessionOptions options = TestOptions();
  options.skippable_hooks = {Hook("stranger", log)};
  auto hooks = HookList(Hook("member", log));
  auto created = co_await MonitoredSession::Create(
      graph.g, hooks, std::make_shared<ChiefSessionCreator>(), options,
      asio::use_awaitable);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(created.status().message().find("skippable_hooks[0]"),
            std::string::npos);
}

// ---- Close cancellation

CO_TEST(MonitoredSession, CancellingCloseStopsAWaitingEndAndClosesTheSession) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto stuck = Hook("stuck", log);
  auto later = Hook("later", log);
  testing::TokenChannel never(co_await asio::this_coro::executor, 1);
  stuck->wait_in_end = &never;
  auto ms =
      co_await CreateOrFail(graph.g, HookList(stuck, later), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  log->clear();
  asio::steady_timer timer(co_await asio::this_coro::executor,
                           std::chrono::milliseconds(5));
  const auto start = std::chrono::steady_clock::now();
  auto winner = co_await (ms->Close(asio::use_awaitable) ||
                          timer.async_wait(asio::use_awaitable));
  EXPECT_EQ(winner.index(), 1u);
  EXPECT_LT(std::chrono::steady_clock::now() - start,
            std::chrono::milliseconds(100));
  EXPECT_EQ(*log, (Log{"stuck.End"}));  // the later End is not called
  absl::Status again = co_await ms->Close(asio::use_awaitable);
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
}

CO_TEST(MonitoredSession, CloseCancelledThroughItsSlotCompletesWithCancelled) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto stuck = Hook("stuck", log);
  testing::TokenChannel never(co_await asio::this_coro::executor, 1);
  stuck->wait_in_end = &never;
  auto ms = co_await CreateOrFail(graph.g, HookList(stuck), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  asio::cancellation_signal cancel;
  testing::TokenChannel closed(co_await asio::this_coro::executor, 1);
  absl::Status result;
  ms->Close(asio::bind_cancellation_slot(cancel.slot(), [&](absl::Status s) {
    result = s;
    closed.try_send(boost::system::error_code());
  }));
  // Let Close reach the waiting End, then cancel it.
  co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
  cancel.emit(asio::cancellation_type::terminal);
  co_await closed.async_receive(asio::use_awaitable);
  EXPECT_EQ(result.code(), absl::StatusCode::kCancelled);
}

// ---- WorkerSessionCreator

// The chief and its worker share variables, as sessions of one server do.
struct ChiefAndWorker {
  std::shared_ptr<ResourceManager> resources =
      std::make_shared<ResourceManager>();
};

CO_TEST(WorkerSessionCreator, WaitsUntilTheChiefInitialisedTheVariables) {
  TestEvents events;
  CounterGraph graph;
  ChiefAndWorker cluster;
  // The ready op reports through TestWait, so the test sees each poll and
  // decides when it completes.
  Scaffold worker_scaffold;
  worker_scaffold.ready_op = ops::WithControlDependencies(
      graph.g, {Operation(testing::TestWait(graph.g, "poll").node())},
      ReportUninitializedVariables(graph.g));
  WorkerSessionOptions worker_options;
  worker_options.poll_interval = std::chrono::milliseconds(1);
  worker_options.max_wait = std::chrono::seconds(15);
  auto worker_creator = std::make_shared<WorkerSessionCreator>(
      worker_scaffold, cluster.resources, worker_options);
  auto chief_creator =
      std::make_shared<ChiefSessionCreator>(Scaffold{}, cluster.resources);
  chief_creator->Prepare(graph.g);
  graph.g.Finalize();

  auto executor = co_await asio::this_coro::executor;
  testing::TokenChannel worker_done(executor, 1);
  absl::StatusOr<std::unique_ptr<Session>> worker = nullptr;
  auto create_worker = [&]() -> asio::awaitable<void> {
    worker = co_await worker_creator->CreateSession(graph.g, TestRuntime());
    worker_done.try_send(boost::system::error_code());
  };
  asio::co_spawn(executor, create_worker(), asio::detached);

  // First poll: nothing initialised yet; the worker polls again.
  co_await events.started.async_receive(asio::use_awaitable);
  co_await events.trigger.async_send(boost::system::error_code(),
                                     asio::use_awaitable);
  co_await events.started.async_receive(asio::use_awaitable);
  EXPECT_FALSE(worker_done.ready());
  // The chief initialises. The pending poll's report may have been taken
  // before that (it does not wait for TestWait), so allow it and one more
  // poll, which certainly finds the session ready.
  auto chief = co_await chief_creator->CreateSession(graph.g, TestRuntime());
  CO_ASSERT_OK(chief.status());
  for (int poll = 0; poll < 2; ++poll) {
    co_await events.trigger.async_send(boost::system::error_code(),
                                       asio::use_awaitable);
  }
  co_await worker_done.async_receive(asio::use_awaitable);
  CO_ASSERT_OK(worker.status());
  // Both sessions see one variable.
  RunArgs increment = graph.Increment();
  CO_ASSERT_OK(
      (co_await (*chief)->Run(increment, asio::use_awaitable)).status());
  RunArgs read{.fetches = {graph.counter}};
  auto seen = co_await (*worker)->Run(read, asio::use_awaitable);
  CO_ASSERT_OK(seen.status());
  EXPECT_EQ(seen->front().scalar<int64_t>(), 1);
}

CO_TEST(WorkerSessionCreator,
        GivesUpAfterMaxWaitNamingTheUninitialisedVariable) {
  CounterGraph graph;
  ChiefAndWorker cluster;
  WorkerSessionOptions worker_options;
  worker_options.max_wait = std::chrono::nanoseconds(0);
  WorkerSessionCreator worker(Scaffold{}, cluster.resources, worker_options);
  worker.Prepare(graph.g);
  graph.g.Finalize();
  auto created = co_await worker.CreateSession(graph.g, TestRuntime());
  EXPECT_EQ(created.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(created.status().message().find("counter"), std::string::npos);
}

CO_TEST(WorkerSessionCreator, WithoutSharedVariablesIsInvalid) {
  CounterGraph graph;
  WorkerSessionCreator worker(Scaffold{}, nullptr);
  worker.Prepare(graph.g);
  graph.g.Finalize();
  auto created = co_await worker.CreateSession(graph.g, TestRuntime());
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);
}

CO_TEST(WorkerSessionCreator, CancellingCreateEndsTheWaitPromptly) {
  CounterGraph graph;
  ChiefAndWorker cluster;
  WorkerSessionOptions worker_options;
  worker_options.poll_interval = std::chrono::hours(1);
  auto worker = std::make_shared<WorkerSessionCreator>(
      Scaffold{}, cluster.resources, worker_options);
  MonitoredSessionOptions options = TestOptions();
  asio::steady_timer timer(co_await asio::this_coro::executor,
                           std::chrono::milliseconds(5));
  auto hooks = HookList();
  auto winner =
      co_await (MonitoredSession::Create(graph.g, hooks, worker, options,
                                         asio::use_awaitable) ||
                timer.async_wait(asio::use_awaitable));
  EXPECT_EQ(winner.index(), 1u);
  // `||` returns once the cancelled Create completed: the worker's wait,
  // due to poll again in an hour, ended at the cancellation (time from the
  // timer's expiry: what a loaded machine adds, never the poll interval).
  EXPECT_LT(std::chrono::steady_clock::now() - timer.expiry(),
            std::chrono::seconds(5));
}

TEST(ReportUninitializedVariables, FlagsEachVariableUntilItIsAssigned) {
  Graph g;
  Output a = ops::Variable(g, Tensor::Scalar<float>(1), "a");
  Output b = ops::Variable(g, Tensor::Scalar<int64_t>(2), "b");
  Output report = ReportUninitializedVariables(g);
  EXPECT_EQ(report.shape().DebugString(), TensorShape({2}).DebugString());
  g.Finalize();
  Session session(g, TestRuntime());
  RunArgs args{.fetches = {report}};
  auto before = session.RunBlocking(args);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(UninitializedVariableNames(g, before->front()),
            (std::vector<std::string>{"a", "b"}));
  ASSERT_TRUE(
      session.RunBlocking({.targets = {ops::VariableInitializer(b)}}).ok());
  auto after = session.RunBlocking(args);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(UninitializedVariableNames(g, after->front()),
            (std::vector<std::string>{"a"}));
  (void)a;
}

// ---- the inline path: co_await Run(args, use_awaitable) with hooks that
// never suspend runs the step inside the caller's coroutine; it keeps every
// guarantee of the spawned path.

std::shared_ptr<RecordingHook> SyncHook(const std::string& name,
                                        std::shared_ptr<Log> log) {
  auto hook = Hook(name, std::move(log));
  hook->may_suspend = false;
  return hook;
}

CO_TEST(MonitoredSessionInline, CancellingTheCallerCancelsTheKernelAndStops) {
  TestEvents events;
  CounterGraph graph;
  Output stuck = testing::TestNever(graph.g, "stuck");
  auto log = std::make_shared<Log>();
  auto ms = co_await CreateOrFail(graph.g, HookList(SyncHook("a", log)),
                                  TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  asio::steady_timer timer(co_await asio::this_coro::executor,
                           std::chrono::milliseconds(5));
  RunArgs args{.fetches = {stuck}};
  const auto start = std::chrono::steady_clock::now();
  auto winner = co_await (ms->Run(args, asio::use_awaitable) ||
                          timer.async_wait(asio::use_awaitable));
  EXPECT_EQ(winner.index(), 1u);
  EXPECT_LT(std::chrono::steady_clock::now() - start,
            std::chrono::milliseconds(100));
  EXPECT_TRUE(ms->ShouldStop());
  EXPECT_EQ(ms->stop_reason(), "cancelled");
  log->clear();
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  EXPECT_EQ(*log, (Log{"a.End"}));  // a clean stop: End runs
}

CO_TEST(MonitoredSessionInline, AStopFromAnotherThreadCancelsTheKernelWait) {
  TestEvents events;
  CounterGraph graph;
  Output stuck = testing::TestNever(graph.g, "stuck");
  auto ms = co_await CreateOrFail(graph.g, HookList(), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  auto stop_when_started = [&]() -> asio::awaitable<void> {
    co_await events.started.async_receive(asio::use_awaitable);
    // From a pool thread, as another thread of the program would.
    co_await asio::post(
        asio::bind_executor(TestRuntime().executor(), asio::use_awaitable));
    ms->coordinator()
        .RequestStop(absl::InternalError("input reader crashed"))
        .IgnoreError();
  };
  RunArgs args{.fetches = {stuck}};
  auto result =
      co_await (ms->Run(args, asio::use_awaitable) && stop_when_started());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal)
      << result.status();
  EXPECT_TRUE(ms->ShouldStop());
  absl::Status closed = co_await ms->Close(asio::use_awaitable);
  EXPECT_EQ(closed.code(), absl::StatusCode::kInternal);
}

CO_TEST(MonitoredSessionInline, AbortedRecreatesTheSessionAndRetries) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto flaky = SyncHook("flaky", log);
  flaky->before_run_error = absl::AbortedError("preempted");
  flaky->before_run_error_times = 1;
  auto ms = co_await CreateOrFail(graph.g, HookList(flaky), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  log->clear();
  auto values = co_await ms->Run(graph.Double(4), asio::use_awaitable);
  CO_ASSERT_OK(values.status());
  EXPECT_EQ(values->at(0).scalar<float>(), 8.0f);
  EXPECT_EQ(ms->recoveries(), 1);
  EXPECT_EQ(*log, (Log{"flaky.BeforeRun", "flaky.AfterCreateSession",
                       "flaky.BeforeRun", "flaky.AfterRun"}));
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(MonitoredSessionInline, WithoutRecoveryAbortedIsReturned) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto flaky = SyncHook("flaky", log);
  flaky->before_run_error = absl::AbortedError("preempted");
  flaky->before_run_error_times = 1;
  MonitoredSessionOptions options = TestOptions();
  options.max_recovery_attempts = 0;
  auto ms = co_await CreateOrFail(graph.g, HookList(flaky), options);
  CO_ASSERT_TRUE(ms != nullptr);
  auto values = co_await ms->Run(graph.Double(4), asio::use_awaitable);
  EXPECT_EQ(values.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(ms->recoveries(), 0);
}

CO_TEST(MonitoredSessionInline, HookFetchesReachOnlyThatHook) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto fetcher = SyncHook("fetcher", log);
  auto quiet = SyncHook("quiet", log);
  fetcher->before_run_args.fetches = {graph.increment};
  auto ms =
      co_await CreateOrFail(graph.g, HookList(fetcher, quiet), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  auto values = co_await ms->Run(graph.Double(2), asio::use_awaitable);
  CO_ASSERT_OK(values.status());
  CO_ASSERT_TRUE(values->size() == 1u);
  EXPECT_EQ(values->front().scalar<float>(), 4.0f);
  CO_ASSERT_TRUE(fetcher->values_seen.size() == 1);
  CO_ASSERT_TRUE(fetcher->values_seen[0].results.size() == 1u);
  EXPECT_EQ(fetcher->values_seen[0].results[0].scalar<int64_t>(), 1);
  CO_ASSERT_TRUE(quiet->values_seen.size() == 1);
  EXPECT_TRUE(quiet->values_seen[0].results.empty());
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

// ---- stop_reason names the hook

CO_TEST(MonitoredSession, StopReasonNamesTheHookThatAskedForStop) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto quiet = Hook("quiet", log);
  auto stopper = Hook("stopper", log);
  stopper->request_stop_in_after_run = true;
  auto ms =
      co_await CreateOrFail(graph.g, HookList(quiet, stopper), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  CO_ASSERT_OK(
      (co_await ms->Run(graph.Double(1), asio::use_awaitable)).status());
  EXPECT_TRUE(ms->ShouldStop());
  EXPECT_EQ(ms->stop_reason(), "hook 'stopper' requested stop");
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(MonitoredSessionInline, StopReasonNamesTheHookThatAskedForStop) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto quiet = SyncHook("quiet", log);
  auto stopper = SyncHook("stopper", log);
  stopper->request_stop_in_before_run = true;
  auto ms =
      co_await CreateOrFail(graph.g, HookList(quiet, stopper), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  CO_ASSERT_OK(
      (co_await ms->Run(graph.Double(1), asio::use_awaitable)).status());
  EXPECT_EQ(ms->stop_reason(), "hook 'stopper' requested stop");
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

// ---- SyncSessionRunHook: per-step methods called as plain functions

// Records "<name>.BeforeRunSync" / "<name>.AfterRunSync" and does what the
// test configures.
class RecordingSyncHook : public SyncSessionRunHook {
 public:
  RecordingSyncHook(std::string name, std::shared_ptr<Log> log)
      : name_(std::move(name)), log_(std::move(log)) {}

  RunArgs asks_for;
  absl::Status before_run_error;
  bool request_stop_in_after_run = false;
  std::vector<SessionRunValues> values_seen;
  std::vector<absl::Status> errors_seen;

  absl::Status BeforeRunSync(SessionRunContext&,
                             SessionRunArgs& args) override {
    log_->push_back(name_ + ".BeforeRunSync");
    EXPECT_TRUE(args.fetches.empty() && args.targets.empty() &&
                args.feeds.empty())
        << "the args a sync hook fills must arrive empty";
    if (!before_run_error.ok()) return before_run_error;
    args = asks_for;
    return absl::OkStatus();
  }
  absl::Status AfterRunSync(SessionRunContext& context,
                            const SessionRunValues& values) override {
    log_->push_back(name_ + ".AfterRunSync");
    values_seen.push_back(values);
    if (request_stop_in_after_run) context.RequestStop();
    return absl::OkStatus();
  }
  void OnError(const absl::Status& error) override {
    errors_seen.push_back(error);
  }
  std::string name() const override { return name_; }

 private:
  std::string name_;
  std::shared_ptr<Log> log_;
};

std::shared_ptr<RecordingSyncHook> Sync(const std::string& name,
                                        std::shared_ptr<Log> log) {
  return std::make_shared<RecordingSyncHook>(name, std::move(log));
}

// Sync hooks between awaited ones keep the order given, and each gets its
// own fetches, in the inline path (no hook may suspend) and the spawned one.
CO_TEST(SyncSessionRunHook, IsCalledInOrderWithItsOwnFetchesAmongOtherHooks) {
  for (bool with_a_suspending_hook : {false, true}) {
    SCOPED_TRACE(with_a_suspending_hook ? "spawned step" : "inline step");
    CounterGraph graph;
    auto log = std::make_shared<Log>();
    auto first = Sync("first", log);
    first->asks_for = {.fetches = {graph.counter},
                       .targets = {Operation(graph.increment.node())}};
    auto middle = Hook("middle", log);
    middle->may_suspend = with_a_suspending_hook;
    auto last = Sync("last", log);
    auto ms = co_await CreateOrFail(graph.g, HookList(first, middle, last),
                                    TestOptions());
    CO_ASSERT_TRUE(ms != nullptr);
    log->clear();
    auto values = co_await ms->Run(graph.Double(2.0f), asio::use_awaitable);
    CO_ASSERT_OK(values.status());
    CO_ASSERT_TRUE(values->size() == 1);
    EXPECT_EQ(values->at(0).scalar<float>(), 4.0f);
    EXPECT_EQ(*log, (Log{"first.BeforeRunSync", "middle.BeforeRun",
                         "last.BeforeRunSync", "first.AfterRunSync",
                         "middle.AfterRun", "last.AfterRunSync"}));
    CO_ASSERT_TRUE(first->values_seen.size() == 1);
    CO_ASSERT_TRUE(first->values_seen[0].results.size() == 1);
    // The fetch and the increment ran in one step: 0 or 1, never more.
    EXPECT_LE(first->values_seen[0].results[0].scalar<int64_t>(), 1);
    CO_ASSERT_TRUE(last->values_seen.size() == 1);
    EXPECT_TRUE(last->values_seen[0].results.empty());
    RunArgs read{.fetches = {graph.counter}};
    auto counter = co_await ms->raw_session().Run(read, asio::use_awaitable);
    CO_ASSERT_OK(counter.status());
    EXPECT_EQ(counter->at(0).scalar<int64_t>(), 1);
    CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  }
}

// With two suspending hooks the hooks are started together; a sync hook is
// then called through its awaitable form, with the same result.
CO_TEST(SyncSessionRunHook, GetsItsFetchesWhenTheHooksAreStartedTogether) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto a = Hook("a", log);
  auto b = Hook("b", log);
  auto sync = Sync("sync", log);
  sync->asks_for = {.fetches = {graph.y}};
  auto ms = co_await CreateOrFail(graph.g, HookList(a, sync, b), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  auto values = co_await ms->Run(graph.Double(5.0f), asio::use_awaitable);
  CO_ASSERT_OK(values.status());
  CO_ASSERT_TRUE(sync->values_seen.size() == 1);
  CO_ASSERT_TRUE(sync->values_seen[0].results.size() == 1);
  EXPECT_EQ(sync->values_seen[0].results[0].scalar<float>(), 10.0f);
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(SyncSessionRunHook, AFailingBeforeRunSyncSkipsTheGraphAndAfterRun) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto bad = Sync("bad", log);
  bad->before_run_error = absl::ResourceExhaustedError("no room");
  auto ms = co_await CreateOrFail(graph.g, HookList(bad), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  auto values = co_await ms->Run(graph.Increment(), asio::use_awaitable);
  EXPECT_EQ(values.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(bad->values_seen.empty());
  CO_ASSERT_TRUE(bad->errors_seen.size() == 1);
  EXPECT_EQ(bad->errors_seen[0].code(), absl::StatusCode::kResourceExhausted);
  RunArgs read{.fetches = {graph.counter}};
  auto counter = co_await ms->raw_session().Run(read, asio::use_awaitable);
  CO_ASSERT_OK(counter.status());
  EXPECT_EQ(counter->at(0).scalar<int64_t>(), 0);
}

CO_TEST(SyncSessionRunHook, RequestStopInAfterRunSyncStopsNamingTheHook) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto stopper = Sync("stopper", log);
  stopper->request_stop_in_after_run = true;
  auto ms = co_await CreateOrFail(graph.g, HookList(stopper), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  CO_ASSERT_OK(
      (co_await ms->Run(graph.Double(1), asio::use_awaitable)).status());
  EXPECT_TRUE(ms->ShouldStop());
  EXPECT_EQ(ms->stop_reason(), "hook 'stopper' requested stop");
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

// Code that awaits a hook (as the hooks' own tests do) sees the sync forms.
CO_TEST(SyncSessionRunHook, ItsAwaitableFormsCallTheSyncOnes) {
  CounterGraph graph;
  auto log = std::make_shared<Log>();
  auto hook = Sync("hook", log);
  hook->asks_for = {.fetches = {graph.y}};
  EXPECT_FALSE(hook->MaySuspend());
  Session session(graph.g, TestRuntime());
  RunArgs original;
  SessionRunContext context(original, session);
  SessionRunHook& base = *hook;
  auto asked = co_await base.BeforeRun(context);
  CO_ASSERT_OK(asked.status());
  CO_ASSERT_TRUE(asked->fetches.size() == 1);
  EXPECT_EQ(asked->fetches[0].name(), graph.y.name());
  SessionRunValues values;
  CO_ASSERT_OK(co_await base.AfterRun(context, values));
  EXPECT_EQ(*log, (Log{"hook.BeforeRunSync", "hook.AfterRunSync"}));
  hook->before_run_error = absl::InternalError("broken");
  auto failed = co_await base.BeforeRun(context);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
}

// A hook that may suspend only in the steps listed (1 = the first), and
// counts how often it is asked (SessionRunHook::MaySuspendInNextStep).
class AskedOncePerStepHook : public SessionRunHook {
 public:
  explicit AskedOncePerStepHook(std::set<int> suspending)
      : suspending_(std::move(suspending)) {}
  bool MaySuspendInNextStep() const override {
    ++asks;
    return suspending_.contains(steps + 1);
  }
  asio::awaitable<absl::StatusOr<SessionRunArgs>> BeforeRun(
      SessionRunContext&) override {
    ++steps;
    if (suspending_.contains(steps)) {  // a real suspension
      co_await asio::post(co_await asio::this_coro::executor,
                          asio::use_awaitable);
    }
    co_return SessionRunArgs{};
  }
  mutable int asks = 0;
  int steps = 0;

 private:
  std::set<int> suspending_;
};

// "Asked once per step, just before the step calls this hook's BeforeRun":
// also for a step that use_awaitable's inline path hands to a coroutine of
// its own because a hook may suspend in it (it was asked twice there).
CO_TEST(MonitoredSession, AHookIsAskedWhetherItMaySuspendOncePerStep) {
  CounterGraph graph;
  auto hook = std::make_shared<AskedOncePerStepHook>(std::set<int>{2, 3});
  auto ms = co_await CreateOrFail(graph.g, HookList(hook), TestOptions());
  CO_ASSERT_TRUE(ms != nullptr);
  for (int step = 1; step <= 4; ++step) {
    CO_ASSERT_OK(
        (co_await ms->Run(graph.Increment(), asio::use_awaitable)).status());
    EXPECT_EQ(hook->steps, step);
    EXPECT_EQ(hook->asks, step) << "after step " << step;
  }
  // Any other token (here as_tuple) runs the step as a coroutine of its
  // own, which asks once too.
  std::tuple<MonitoredSession::RunResult> done =
      co_await ms->Run(graph.Increment(), asio::as_tuple(asio::use_awaitable));
  CO_ASSERT_OK(std::get<0>(done).status());
  EXPECT_EQ(hook->asks, 5);
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

}  // namespace
}  // namespace cosession::monitored_session_test
