// The executor, observed through Session: pruning, ordering, parallelism,
// errors, cancellation, deadlines and tracing.
#include "cosession/async/executor.h"

#include <gtest/gtest.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "cosession/async/session.h"
#include "cosession/graph/ops.h"
#include "tests/co_test.h"
#include "tests/test_ops.h"
#include "tests/test_util.h"

namespace cosession::executor_test {
namespace {

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;
using testing::TestEvents;
using testing::TestRuntime;

// Receives `n` "started" notifications from TestWait/TestNever kernels.
asio::awaitable<void> AwaitStarted(TestEvents& events, int n) {
  for (int i = 0; i < n; ++i) {
    co_await events.started.async_receive(asio::use_awaitable);
  }
}

// Waits until `n` kernels started, then releases them all.
asio::awaitable<void> ReleaseWhenAllStarted(TestEvents& events, int n) {
  co_await AwaitStarted(events, n);
  for (int i = 0; i < n; ++i) {
    co_await events.trigger.async_send({}, asio::use_awaitable);
  }
}

TEST(Executor, UnneededFailingOpDoesNotRun) {
  TestEvents events;
  Graph g;
  testing::TestFail(g, {}, "unneeded");
  Output wanted = testing::TestCount(g, {}, {}, "wanted");
  auto values = testing::Eval(g, {wanted});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(events.runs("wanted"), 1);
}

TEST(Executor, SharedInputRunsOnceForTwoConsumers) {
  TestEvents events;
  Graph g;
  Output root = testing::TestCount(g, {}, {}, "root");
  Output left = testing::TestCount(g, {root}, {}, "left");
  Output right = testing::TestCount(g, {root}, {}, "right");
  Output join = testing::TestCount(g, {left, right}, {}, "join");
  auto values = testing::Eval(g, {join, left});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(events.runs("root"), 1);
  EXPECT_EQ(events.runs("left"), 1);
  EXPECT_EQ(events.runs("join"), 1);
}

// A small tensor whose only reader ran is dropped before the run ends (a
// long chain of small ops keeps a few buffers, not one per op); one that is
// also fetched, or read by another op, is kept. `sum` (a buffer of the
// run's own) is read by `keep`; `sole` runs after it and says whether the
// run still holds sum's buffer.
struct KeptTensorGraph {
  KeptTensorGraph() {
    Output c = ops::Const(g, 2.0f);
    sum = ops::Add(g, c, c);
    Output keep = testing::TestKeep(g, sum, "keep");
    sole = testing::TestKeptIsSole(g, {Operation(keep.node())}, "sole");
  }
  Graph g;
  Output sum, sole;
};

TEST(Executor, ASmallTensorIsDroppedOnceItsOnlyReaderRan) {
  TestEvents events;
  KeptTensorGraph k;
  auto values = testing::Eval(k.g, {k.sole});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ((*values)[0].scalar<float>(), 1.0f);
}

TEST(Executor, ASmallTensorThatIsFetchedIsKeptToTheEnd) {
  TestEvents events;
  KeptTensorGraph k;
  auto values = testing::Eval(k.g, {k.sole, k.sum});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ((*values)[0].scalar<float>(), 0.0f);
  EXPECT_EQ((*values)[1].scalar<float>(), 4.0f);
}

TEST(Executor, ASmallTensorWithTwoReadersIsKept) {
  TestEvents events;
  KeptTensorGraph k;
  Output other_reader = ops::Add(k.g, k.sum, ops::Const(k.g, 1.0f));
  auto values = testing::Eval(k.g, {k.sole, other_reader});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ((*values)[0].scalar<float>(), 0.0f);
  EXPECT_EQ((*values)[1].scalar<float>(), 5.0f);
}

TEST(Executor, ControlInputsRunFirst) {
  TestEvents events;
  Graph g;
  Output first = testing::TestCount(g, {}, {}, "first");
  Output second =
      testing::TestCount(g, {}, {Operation(first.node())}, "second");
  Output third = testing::TestCount(g, {}, {Operation(second.node())}, "third");
  ASSERT_TRUE(testing::Eval(g, {third}).ok());
  EXPECT_EQ(events.order_snapshot(),
            (std::vector<std::string>{"first", "second", "third"}));
}

TEST(Executor, FeedingATensorCutsOffItsProducer) {
  TestEvents events;
  Graph g;
  Output broken = testing::TestFail(g, {}, "broken");
  Output after = ops::Add(g, broken, ops::Const(g, 2.0f));
  auto value = testing::EvalOne(g, after, {{broken, Tensor::Scalar(5.0f)}});
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(value->scalar<float>(), 7.0f);
}

// TensorFlow replaces a fed placeholder by the feed (subgraph::FeedInputs
// moves its control edges too): an op with a control input on it runs
// without the placeholder running.
TEST(Executor, AControlInputOnAFedPlaceholderIsSatisfiedByTheFeed) {
  Graph g;
  Output p = ops::Placeholder(g, DType::kFloat, TensorShape{}, "p");
  Output c = ops::Const(g, 5.0f);
  Output y(g.AddNode({.op = "Identity",
                      .inputs = {c},
                      .control_inputs = {Operation(p.node())}}),
           0);
  auto values = testing::Eval(g, {y}, {{p, Tensor::Scalar(1.0f)}});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ((*values)[0].scalar<float>(), 5.0f);
  // Not fed, it is still a placeholder that must be fed.
  EXPECT_EQ(testing::Eval(g, {y}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Executor, FetchingAFedTensorReturnsTheFeed) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kInt32);
  auto value = testing::EvalOne(g, x, {{x, Tensor::Scalar<int32_t>(42)}});
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(value->scalar<int32_t>(), 42);
}

// The run hands its last fetch of a tensor the tensor itself; every other
// fetch of it must still get the value (a copy), not an empty tensor.
TEST(Executor, ATensorFetchedSeveralTimesIsInEveryResult) {
  Graph g;
  Output x = ops::Placeholder(g, DType::kInt32);
  Output sum = ops::Add(g, x, ops::Const(g, int32_t{1}));
  auto values = testing::Eval(g, {sum, x, sum, x, sum},
                              {{x, Tensor::Scalar<int32_t>(41)}});
  ASSERT_TRUE(values.ok()) << values.status();
  ASSERT_EQ(values->size(), 5u);
  for (int i : {0, 2, 4}) {
    ASSERT_TRUE((*values)[i].IsInitialized()) << "fetch " << i;
    EXPECT_EQ((*values)[i].scalar<int32_t>(), 42) << "fetch " << i;
  }
  for (int i : {1, 3}) {
    ASSERT_TRUE((*values)[i].IsInitialized()) << "fetch " << i;
    EXPECT_EQ((*values)[i].scalar<int32_t>(), 41) << "fetch " << i;
  }
}

TEST(Executor, FirstErrorIsReturnedAndItsSuccessorsDoNotRun) {
  TestEvents events;
  Graph g;
  Output bad = testing::TestFail(g, {}, "bad");
  Output after = testing::TestCount(g, {bad}, {}, "after");
  auto value = testing::EvalOne(g, after);
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(value.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(value.status().message().find("TestFail 'bad' failed"),
            absl::string_view::npos);
  EXPECT_EQ(events.runs("after"), 0);
}

TEST(Executor, KernelExceptionBecomesInternalErrorNamingTheOp) {
  Graph g;
  Output boom = testing::TestThrow(g, "boom");
  auto value = testing::EvalOne(g, boom);
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(value.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(value.status().message().find("'boom'"), absl::string_view::npos);
  EXPECT_NE(value.status().message().find("kernel exploded"),
            absl::string_view::npos);
}

TEST(Executor, AsyncKernelErrorIsReturned) {
  Graph g;
  Output bad = testing::TestAsyncFail(g, "flaky");
  auto value = testing::EvalOne(g, bad);
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(value.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(value.status().message().find("'flaky'"), absl::string_view::npos);
}

// An async kernel whose synchronous attempt can finish it
// (async/async_kernel.h) runs like a plain kernel: on the thread that
// started the run, without its coroutine.
CO_TEST(Executor, AnAsyncKernelThatNeedNotWaitFinishesOnTheStartingThread) {
  TestEvents events;
  {
    std::lock_guard lock(events.mu);
    events.ready_now = true;
  }
  Graph g;
  Output x = testing::TestMaybeReady(g, "x");
  Session session(g, TestRuntime());
  RunArgs args{.fetches = {x}};
  auto values = co_await session.Run(args, asio::use_awaitable);
  CO_ASSERT_OK(values.status());
  EXPECT_EQ(values->at(0).scalar<float>(), 2.0f);  // the attempt's output
  std::lock_guard lock(events.mu);
  EXPECT_EQ(events.attempt_thread, std::this_thread::get_id());
}

CO_TEST(Executor, AnAsyncKernelThatMustWaitRunsItsCoroutine) {
  TestEvents events;  // ready_now unset: the attempt declines
  Graph g;
  Output x = testing::TestMaybeReady(g, "x");
  Output y = ops::Add(g, x, x);
  Session session(g, TestRuntime());
  RunArgs args{.fetches = {y}};
  auto values = co_await session.Run(args, asio::use_awaitable);
  CO_ASSERT_OK(values.status());
  EXPECT_EQ(values->at(0).scalar<float>(), 2.0f);  // 1 + 1: the coroutine's
}

CO_TEST(Executor, AnAsyncKernelsSynchronousErrorStopsTheRun) {
  TestEvents events;
  {
    std::lock_guard lock(events.mu);
    events.ready_now = true;
    events.attempt_fails = true;
  }
  Graph g;
  Output x = testing::TestMaybeReady(g, "flaky");
  Output after = testing::TestCount(g, {x}, {}, "after");
  Session session(g, TestRuntime());
  RunArgs args{.fetches = {after}};
  auto values = co_await session.Run(args, asio::use_awaitable);
  CO_ASSERT_TRUE(!values.ok());
  EXPECT_EQ(values.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(values.status().message().find("'flaky'"), absl::string_view::npos);
  EXPECT_EQ(events.runs("after"), 0);
}

// Each kernel waits for a trigger that the test sends only after both have
// started: run one after the other, they would never finish.
CO_TEST(Executor, IndependentAsyncKernelsOverlap) {
  TestEvents events;
  Graph g;
  Output a = testing::TestWait(g, "a");
  Output b = testing::TestWait(g, "b");
  Output sum = ops::Add(g, a, b);
  Session session(g, TestRuntime());
  RunArgs args{.fetches = {sum}};
  auto values = co_await (session.Run(args, asio::use_awaitable) &&
                          ReleaseWhenAllStarted(events, 2));
  CO_ASSERT_OK(values.status());
  EXPECT_EQ(values->at(0).scalar<float>(), 2.0f);
}

CO_TEST(Executor, CancellationStopsAWaitingAsyncKernel) {
  TestEvents events;
  Graph g;
  Output stuck = testing::TestNever(g, "stuck");
  Session session(g, TestRuntime());
  // The run loses the race as soon as its kernel is waiting.
  RunArgs args{.fetches = {stuck}};
  auto winner = co_await (session.Run(args, asio::use_awaitable) ||
                          AwaitStarted(events, 1));
  EXPECT_EQ(winner.index(), 1u);
}

CO_TEST(Executor, RunRacedWithATimerIsCancelledWhenTheTimerWins) {
  TestEvents events;
  Graph g;
  Output stuck = testing::TestNever(g, "stuck");
  Session session(g, TestRuntime());
  asio::steady_timer timer(co_await asio::this_coro::executor,
                           std::chrono::milliseconds(20));
  RunArgs args{.fetches = {stuck}};
  auto winner = co_await (session.Run(args, asio::use_awaitable) ||
                          timer.async_wait(asio::use_awaitable));
  EXPECT_EQ(winner.index(), 1u);
}

asio::awaitable<void> CancelWhenStarted(TestEvents& events,
                                        asio::cancellation_signal& signal) {
  co_await AwaitStarted(events, 1);
  signal.emit(asio::cancellation_type::terminal);
}

CO_TEST(Executor, CancelledRunCompletesWithCancelled) {
  TestEvents events;
  Graph g;
  Output stuck = testing::TestNever(g, "stuck");
  Session session(g, TestRuntime());
  asio::cancellation_signal signal;
  RunArgs args{.fetches = {stuck}};
  auto result =
      co_await (session.Run(args, asio::bind_cancellation_slot(
                                      signal.slot(), asio::use_awaitable)) &&
                CancelWhenStarted(events, signal));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
}

CO_TEST(Executor, TimeoutCompletesWithDeadlineExceeded) {
  TestEvents events;
  Graph g;
  Output stuck = testing::TestNever(g, "stuck");
  Session session(g, TestRuntime());
  RunArgs args{.fetches = {stuck}};
  args.options.timeout = std::chrono::milliseconds(10);
  auto result = co_await session.Run(args, asio::use_awaitable);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded);
}

CO_TEST(Executor, FailingOpCancelsAWaitingAsyncKernel) {
  TestEvents events;
  Graph g;
  Output stuck = testing::TestNever(g, "stuck");
  Output bad = testing::TestAsyncFail(g, "bad");
  Session session(g, TestRuntime());
  RunArgs args{.fetches = {stuck, bad}};
  auto result = co_await session.Run(args, asio::use_awaitable);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
}

// Runs `args` with its metadata and waits for the result; DeadlineExceeded
// when it has not completed within 20 s, so that a hang fails the test. The
// handler's state is shared with it, so a late completion finds it alive.
absl::StatusOr<RunOutputs> RunWithMetadataAndWait(Session& session,
                                                  const RunArgs& args) {
  struct Completion {
    testing::Latch done;
    absl::StatusOr<RunOutputs> outputs;
  };
  auto completion = std::make_shared<Completion>();
  session.RunWithMetadata(args, [completion](absl::StatusOr<RunOutputs> r) {
    completion->outputs = std::move(r);
    completion->done.Notify();
  });
  if (!completion->done.WaitFor(std::chrono::seconds(20))) {
    return absl::DeadlineExceededError("the run did not complete in 20 s");
  }
  return std::move(completion->outputs);
}

TEST(Executor, FullTraceRecordsEveryOp) {
  Graph g;
  Output a = ops::Const(g, 1.0f, "a");
  Output b = ops::Add(g, a, a, "b");
  Session session(g, TestRuntime());
  RunArgs args{.fetches = {b}};
  args.options.trace_level = RunOptions::kFullTrace;
  absl::StatusOr<RunOutputs> outputs = RunWithMetadataAndWait(session, args);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  const auto& stats = outputs->metadata.step_stats.node_stats;
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].node_name, "a");
  EXPECT_EQ(stats[1].node_name, "b");
  EXPECT_EQ(stats[1].op, "Add");
  for (const NodeExecStats& s : stats) {
    EXPECT_LE(s.start, s.end);
    EXPECT_NE(s.thread_id, 0u);
  }
}

TEST(Executor, NoTraceLeavesStepStatsEmpty) {
  Graph g;
  Output a = ops::Const(g, 1.0f);
  Session session(g, TestRuntime());
  absl::StatusOr<RunOutputs> outputs =
      RunWithMetadataAndWait(session, {.fetches = {a}});
  ASSERT_TRUE(outputs.ok());
  EXPECT_TRUE(outputs->metadata.step_stats.node_stats.empty());
}

// This thread's id in traces (NodeExecStats::thread_id), learnt from a
// cheap traced run (its one op runs on the caller's thread); 0 on failure.
uint64_t CallersTraceThreadId() {
  Graph probe;
  Output c = ops::Const(probe, 1.0f);
  Session probe_session(probe, TestRuntime());
  RunArgs probe_args{.fetches = {c}};
  probe_args.options.trace_level = RunOptions::kFullTrace;
  absl::StatusOr<RunOutputs> r =
      RunWithMetadataAndWait(probe_session, probe_args);
  if (!r.ok() || r->metadata.step_stats.node_stats.size() != 1) return 0;
  return r->metadata.step_stats.node_stats[0].thread_id;
}

// Two MatMuls big enough to exceed the inline threshold run on the pool, in
// parallel: their traced intervals come from pool threads, not the caller.
TEST(Executor, ExpensiveOpsRunOnThePool) {
  Graph g;
  Tensor m(DType::kFloat, TensorShape{64, 64});
  Output a =
      ops::MatMul(g, ops::Const(g, m), ops::Const(g, m), false, false, "mm1");
  Output b =
      ops::MatMul(g, ops::Const(g, m), ops::Const(g, m), false, false, "mm2");
  Session session(g, TestRuntime());
  RunArgs args{.fetches = {a, b}};
  args.options.trace_level = RunOptions::kFullTrace;
  const uint64_t caller_thread = CallersTraceThreadId();
  ASSERT_NE(caller_thread, 0u);
  absl::StatusOr<RunOutputs> outputs = RunWithMetadataAndWait(session, args);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  int matmuls = 0;
  for (const NodeExecStats& s : outputs->metadata.step_stats.node_stats) {
    if (s.op != "MatMul") continue;
    ++matmuls;
    EXPECT_NE(s.thread_id, caller_thread) << s.node_name;
  }
  EXPECT_EQ(matmuls, 2);
}

// RunOptions::inter_op_thread_pool = -1, TensorFlow's "use the caller
// thread": the same expensive MatMuls, and a chain after them, all run on
// the thread that started the run, and their results are the products.
TEST(Executor, InterOpThreadPoolMinusOneRunsEveryOpOnTheCallersThread) {
  Graph g;
  Tensor twos(DType::kFloat, TensorShape{64, 64});
  for (float& v : twos.mutable_flat<float>()) v = 2.0f;
  Output m = ops::Const(g, twos);
  Output a = ops::MatMul(g, m, m, false, false, "mm1");
  Output b = ops::MatMul(g, m, m, false, false, "mm2");
  Output c = ops::MatMul(g, a, b, false, false, "mm3");
  Session session(g, TestRuntime());
  const uint64_t caller_thread = CallersTraceThreadId();
  ASSERT_NE(caller_thread, 0u);
  RunArgs args{.fetches = {c}};
  args.options.trace_level = RunOptions::kFullTrace;
  args.options.inter_op_thread_pool = -1;
  for (int repeat = 0; repeat < 5; ++repeat) {
    absl::StatusOr<RunOutputs> outputs = RunWithMetadataAndWait(session, args);
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    // a and b are 64 * 4 = 256 everywhere; c is 64 * 256 * 256.
    for (float v : outputs->values.at(0).flat<float>()) {
      ASSERT_EQ(v, 64.0f * 256.0f * 256.0f);
    }
    int matmuls = 0;
    for (const NodeExecStats& s : outputs->metadata.step_stats.node_stats) {
      EXPECT_EQ(s.thread_id, caller_thread) << s.node_name;
      if (s.op == "MatMul") ++matmuls;
    }
    EXPECT_EQ(matmuls, 3);
  }
}

// Any other value than 0 or -1 is refused, naming the field and the value.
TEST(Executor, AnInterOpThreadPoolOtherThanZeroOrMinusOneIsInvalid) {
  Graph g;
  Output c = ops::Const(g, 1.0f);
  Session session(g, TestRuntime());
  for (int32_t pool : {1, -2}) {
    RunArgs args{.fetches = {c}};
    args.options.inter_op_thread_pool = pool;
    Session::RunResult result = session.RunBlocking(args);
    ASSERT_FALSE(result.ok()) << pool;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(result.status().message().find(
                  absl::StrCat("RunOptions.inter_op_thread_pool is ", pool)),
              absl::string_view::npos)
        << result.status();
  }
}

// 40 expensive ops and a pool of 2: they wait in the run's queue, which the
// pool's threads drain. Each runs exactly once, on the pool, and the sum of
// their products is exact.
TEST(Executor, AFanOutWiderThanThePoolRunsEveryOpOnceOnThePool) {
  constexpr int kWidth = 40;
  Graph g;
  Tensor ones(DType::kFloat, TensorShape{64, 64});
  for (float& v : ones.mutable_flat<float>()) v = 1.0f;
  Output rhs = ops::Const(g, ones);
  std::vector<Output> products;
  for (int i = 1; i <= kWidth; ++i) {
    Tensor lhs(DType::kFloat, TensorShape{64, 64});
    for (float& v : lhs.mutable_flat<float>()) v = static_cast<float>(i);
    products.push_back(ops::MatMul(g, ops::Const(g, lhs), rhs));
  }
  Output sum = ops::AddN(g, products);
  g.Finalize();
  Session session(g, TestRuntime());
  RunArgs args{.fetches = {sum}};
  args.options.trace_level = RunOptions::kFullTrace;
  for (int repeat = 0; repeat < 20; ++repeat) {
    absl::StatusOr<RunOutputs> outputs = RunWithMetadataAndWait(session, args);
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    // Each product element is 64 * i; the sum of i over 1..40 is 820.
    for (float v : outputs->values.at(0).flat<float>()) {
      ASSERT_EQ(v, 64.0f * 820.0f);
    }
    absl::flat_hash_map<std::string, int> runs;
    for (const NodeExecStats& s : outputs->metadata.step_stats.node_stats) {
      if (s.op == "MatMul") ++runs[s.node_name];
    }
    ASSERT_EQ(runs.size(), static_cast<size_t>(kWidth));
    for (const auto& [name, count] : runs) EXPECT_EQ(count, 1) << name;
  }
}

// One pool thread drains the queue oldest first: the failing op was queued
// first, so the expensive ops queued after it are skipped, not run.
TEST(Executor, AnErrorSkipsTheExpensiveOpsStillQueued) {
  TestEvents events;
  Graph g;
  // 256 x 256 inputs make each op cost 65,536, over the inline threshold.
  Output big = ops::Const(g, Tensor(DType::kFloat, TensorShape{256, 256}));
  Output bad = testing::TestFail(g, {big}, "bad");
  std::vector<Output> fetches = {bad};
  for (int i = 0; i < 8; ++i) {
    fetches.push_back(
        testing::TestCount(g, {big}, {}, "queued_" + std::to_string(i)));
  }
  Runtime runtime({.num_threads = 1});
  Session session(g, runtime);
  Session::RunResult result = session.RunBlocking({.fetches = fetches});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(result.status().message().find("TestFail 'bad' failed"),
            absl::string_view::npos)
      << result.status();
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(events.runs("queued_" + std::to_string(i)), 0) << i;
  }
}

// A pool thread runs cheap ops that each release an expensive one. It keeps
// one of those for itself and queues the rest for the other thread, so two
// of them run at once: each TestPair waits for a partner and fails alone.
// Keeping one per finished op would run all four in series on one thread.
TEST(Executor, APoolThreadKeepsOneExpensiveOpAndQueuesTheRest) {
  TestEvents events;
  Graph g;
  // 256 x 256 make an op that reads it cost 65,536: over the inline
  // threshold. The scalars TestCount outputs make an op that reads only
  // them cheap.
  Output big = ops::Const(g, Tensor(DType::kFloat, TensorShape{256, 256}));
  Output first = testing::TestCount(g, {big}, {}, "first");  // on the pool
  std::vector<Output> pairs;
  for (int i = 0; i < 4; ++i) {
    Output cheap =
        testing::TestCount(g, {first}, {}, "cheap_" + std::to_string(i));
    pairs.push_back(
        testing::TestPair(g, {big, cheap}, "pair_" + std::to_string(i)));
  }
  g.Finalize();
  Runtime runtime({.num_threads = 2});
  Session session(g, runtime);
  testing::Latch done;
  absl::StatusOr<std::vector<Tensor>> result;
  session.Run({.fetches = pairs}, [&](absl::StatusOr<std::vector<Tensor>> r) {
    result = std::move(r);
    done.Notify();
  });
  ASSERT_TRUE(done.WaitFor(std::chrono::seconds(60)));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(events.runs("cheap_" + std::to_string(i)), 1) << i;
  }
}

// ---- A plan of 8 ops or more keeps the state of its last finished run for
// its next run (async/executor.h): each run must start as if it were the
// plan's first. The graphs below pad their fetches with Identity ops to
// reach that size.

// `x` through `n` Identity ops.
Output ThroughIdentities(Graph& g, Output x, int n) {
  for (int i = 0; i < n; ++i) x = ops::Identity(g, x);
  return x;
}

// The failed run left a status, a stop flag and the trace of the op that
// failed; the next run of the same plan sees none of them. Every op runs on
// this thread and nothing else holds the failed run's state, so the second
// run is given that state.
TEST(Executor, ARunAfterAFailedTracedRunOfTheSamePlanStartsClean) {
  TestEvents events;
  Graph g;
  Output p = ops::Placeholder(g, DType::kFloat, TensorShape{}, "p");
  Output checked = ops::CheckNumerics(g, p, "p is not finite", "checked");
  Output after = testing::TestCount(g, {checked}, {}, "after");
  Output fetched = ThroughIdentities(g, after, 6);
  Session session(g, TestRuntime());
  RunArgs args{.fetches = {fetched}};
  args.options.trace_level = RunOptions::kFullTrace;
  args.feeds = {{p, Tensor::Scalar(std::numeric_limits<float>::quiet_NaN())}};
  absl::StatusOr<RunOutputs> failed = RunWithMetadataAndWait(session, args);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("p is not finite"),
            absl::string_view::npos)
      << failed.status();
  args.feeds = {{p, Tensor::Scalar(1.0f)}};
  absl::StatusOr<RunOutputs> outputs = RunWithMetadataAndWait(session, args);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  ASSERT_TRUE(outputs->values.at(0).IsInitialized());  // its ops all ran
  EXPECT_EQ(outputs->values.at(0).scalar<float>(), 1.0f);
  EXPECT_EQ(events.runs("after"), 1);
  const auto& stats = outputs->metadata.step_stats.node_stats;
  ASSERT_EQ(stats.size(), 8u);  // this run's eight ops, nothing older
  EXPECT_EQ(stats[0].node_name, "checked");
  EXPECT_EQ(stats[1].node_name, "after");
}

// The timed-out run left a deadline timer, a strand and a cancelled async
// kernel (its state is given back once its last handler on the strand ran,
// so the next run may or may not take it); the next run of the same plan
// waits for its kernel again and completes.
CO_TEST(Executor, ARunAfterATimedOutRunOfTheSamePlanCompletes) {
  TestEvents events;
  Graph g;
  Output waiting = testing::TestWait(g, "waiting");
  Session session(g, TestRuntime());
  RunArgs args{.fetches = {ThroughIdentities(g, waiting, 7)}};
  args.options.timeout = std::chrono::milliseconds(10);
  auto timed_out = co_await session.Run(args, asio::use_awaitable);
  EXPECT_EQ(timed_out.status().code(), absl::StatusCode::kDeadlineExceeded);
  args.options.timeout.reset();
  // The one trigger is sent on the first "started" received: the second
  // run's kernel's, or the first's when it started before its deadline
  // (which then finished without taking a trigger). Either way the second
  // kernel gets it.
  auto values = co_await (session.Run(args, asio::use_awaitable) &&
                          ReleaseWhenAllStarted(events, 1));
  CO_ASSERT_OK(values.status());
  EXPECT_EQ(values->at(0).scalar<float>(), 1.0f);
}

// A fed tensor that no op of the run reads stays in its slot to the end of
// the run; the finished run's state, kept by the plan, must not keep it:
// the caller's tensor is the buffer's sole owner again after each run.
TEST(Executor, AFinishedRunKeepsNoReferenceToItsFeeds) {
  Graph g;
  Output p = ops::Placeholder(g, DType::kFloat, TensorShape{4}, "p");
  Output c = ThroughIdentities(g, ops::Const(g, 2.0f, "c"), 7);
  Session session(g, TestRuntime());
  Tensor fed = Tensor::FromVector<float>({0, 1, 2, 3});
  for (int run = 0; run < 2; ++run) {  // a new state, then the plan's spare
    {
      absl::StatusOr<RunOutputs> outputs = RunWithMetadataAndWait(
          session, {.fetches = {c}, .feeds = {{p, fed}}});
      ASSERT_TRUE(outputs.ok()) << outputs.status();
      EXPECT_EQ(outputs->values.at(0).scalar<float>(), 2.0f);
    }
    EXPECT_TRUE(fed.RefCountIsOne()) << "run " << run;
  }
}

// Runs of one plan from two threads at once, each checking that its result
// is its own feed's: states handed between runs on different threads carry
// nothing from one run into another (and ThreadSanitizer sees the hand-off).
TEST(Executor, ConcurrentRunsOfOnePlanEachGetTheirOwnResult) {
  Graph g;
  Output p = ops::Placeholder(g, DType::kFloat, TensorShape{}, "p");
  Output doubled = ThroughIdentities(g, ops::Add(g, p, p, "doubled"), 7);
  Session session(g, TestRuntime());
  constexpr int kRunsPerThread = 200;
  auto run_many = [&](float base, int& wrong) {
    for (int i = 0; i < kRunsPerThread; ++i) {
      const float value = base + static_cast<float>(i);
      absl::StatusOr<RunOutputs> outputs = RunWithMetadataAndWait(
          session,
          {.fetches = {doubled}, .feeds = {{p, Tensor::Scalar(value)}}});
      if (!outputs.ok() || outputs->values.at(0).scalar<float>() != 2 * value) {
        ++wrong;
      }
    }
  };
  int wrong_a = 0;
  int wrong_b = 0;
  std::thread a([&] { run_many(0.0f, wrong_a); });
  std::thread b([&] { run_many(1000.0f, wrong_b); });
  a.join();
  b.join();
  EXPECT_EQ(wrong_a, 0);
  EXPECT_EQ(wrong_b, 0);
}

// Small tensors pass their slots on once their only reader ran
// (ExecutionPlan::ShareSmallSlots): a chain of scalar adds cycles through a
// few slots, while big tensors and multiply read ones keep their own.
TEST(Executor, AChainOfSmallOpsUsesAFewSlots) {
  Graph g;
  Output one = ops::Const(g, 1.0f);
  Output x = ops::Const(g, 0.0f);
  for (int i = 0; i < 1000; ++i) x = ops::Add(g, x, one);
  auto plan = ExecutionPlan::Build(g, {}, {x}, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->num_ops(), 1002);
  // `one`'s, and two that the chain's values take turns on: each add
  // writes where the value two before it was.
  EXPECT_EQ((*plan)->num_slots(), 3);
  auto values = testing::Eval(g, {x});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ((*values)[0].scalar<float>(), 1000.0f);
}

TEST(Executor, BigTensorsAndTensorsReadTwiceKeepTheirSlots) {
  Graph g;
  Output big = ops::Const(g, Tensor(DType::kFloat, TensorShape{64, 64}));
  for (int i = 0; i < 10; ++i) big = ops::Neg(g, big);
  Output small = ops::Const(g, 1.0f);
  for (int i = 0; i < 10; ++i) small = ops::Add(g, small, small);
  auto plan = ExecutionPlan::Build(g, {}, {big, small}, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->num_slots(), 22);
}

// Random graphs of scalar ops -- tensors read once, several times or not at
// all, fetched, fed, and ops with control inputs -- give the values computed
// by hand, run after run of one plan, with every op on the caller's thread
// and with every op on a pool of two threads. A slot given to an op that
// may run before the slot's last reader would show as a wrong value (and to
// TSan as a race).
TEST(Executor, RandomGraphsOfSmallOpsGiveTheirValuesWithSharedSlots) {
  Runtime everything_on_the_pool(
      RuntimeOptions{.num_threads = 2, .inline_cost_threshold = 0});
  std::mt19937 rng(20261206);
  auto below = [&](int n) {
    return std::uniform_int_distribution<int>(0, n - 1)(rng);
  };
  for (int trial = 0; trial < 100; ++trial) {
    SCOPED_TRACE(absl::StrCat("graph ", trial));
    Graph g;
    Output fed = ops::Placeholder(g, DType::kFloat, TensorShape{}, "fed");
    std::vector<Output> nodes = {fed};
    std::vector<float> values = {3.0f};
    // Mostly recent inputs, so that the graph has chains as well as joins.
    auto input = [&] {
      const int n = static_cast<int>(nodes.size());
      return below(4) == 0 ? below(n) : n - 1 - below(std::min(n, 3));
    };
    for (int i = 1; i < 40; ++i) {
      switch (below(5)) {
        case 0: {
          const float v = static_cast<float>(below(7));
          nodes.push_back(ops::Const(g, v));
          values.push_back(v);
          break;
        }
        case 1: {
          const int a = input(), b = input();
          nodes.push_back(ops::Add(g, nodes[a], nodes[b]));
          values.push_back(values[a] + values[b]);
          break;
        }
        case 2: {
          const int a = input(), b = input();
          nodes.push_back(ops::Sub(g, nodes[a], nodes[b]));
          values.push_back(values[a] - values[b]);
          break;
        }
        case 3: {
          const int a = input();
          nodes.push_back(ops::Neg(g, nodes[a]));
          values.push_back(-values[a]);
          break;
        }
        case 4: {
          // An op that must also wait for an earlier one it does not read.
          const int a = input(), after = below(static_cast<int>(nodes.size()));
          nodes.push_back(Output(
              g.AddNode({.op = "Identity",
                         .inputs = {nodes[a]},
                         .control_inputs = {Operation(nodes[after].node())}}),
              0));
          values.push_back(values[a]);
          break;
        }
      }
    }
    std::vector<int> fetched = {static_cast<int>(nodes.size()) - 1,
                                below(static_cast<int>(nodes.size())),
                                below(static_cast<int>(nodes.size()))};
    RunArgs args{.feeds = {{fed, Tensor::Scalar(values[0])}}};
    for (int f : fetched) args.fetches.push_back(nodes[f]);
    for (Runtime* runtime : {&TestRuntime(), &everything_on_the_pool}) {
      Session session(g, *runtime);
      for (int run = 0; run < 3; ++run) {
        absl::StatusOr<RunOutputs> outputs =
            RunWithMetadataAndWait(session, args);
        ASSERT_TRUE(outputs.ok()) << outputs.status();
        for (size_t f = 0; f < fetched.size(); ++f) {
          EXPECT_EQ(outputs->values.at(f).scalar<float>(), values[fetched[f]])
              << "fetch " << f << " (" << args.fetches[f].name() << "), run "
              << run << (runtime == &TestRuntime() ? "" : " on the pool");
        }
      }
    }
  }
}

}  // namespace
}  // namespace cosession::executor_test
