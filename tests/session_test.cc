// Session: every completion token style, completion on the handler's
// executor, bad input, variables, concurrency, the blocking wrapper.
#include "cosession/async/session.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <future>
#include <thread>

#include "absl/synchronization/notification.h"
#include "cosession/graph/ops.h"
#include "tests/co_test.h"
#include "tests/test_util.h"

namespace cosession::session_test {
namespace {

namespace asio = boost::asio;
using testing::TestRuntime;

// x * 2 + 1 with x a float placeholder of shape [2].
struct AffineGraph {
  AffineGraph() {
    x = ops::Placeholder(g, DType::kFloat, TensorShape{2}, "x");
    y = ops::Add(g, ops::Mul(g, x, ops::Const(g, 2.0f)), ops::Const(g, 1.0f),
                 "y");
  }
  RunArgs Args() const {
    return {.fetches = {y}, .feeds = {{x, Tensor::FromVector<float>({1, 2})}}};
  }
  Graph g;
  Output x, y;
};

void ExpectAffineResult(const Session::RunResult& result) {
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->size(), 1u);
  EXPECT_TRUE(result->at(0).IsSameAs(Tensor::FromVector<float>({3, 5})));
}

CO_TEST(Session, RunWorksWithUseAwaitable) {
  AffineGraph graph;
  Session session(graph.g, TestRuntime());
  auto result = co_await session.Run(graph.Args(), asio::use_awaitable);
  ExpectAffineResult(result);
}

TEST(Session, RunWorksWithUseFuture) {
  AffineGraph graph;
  Session session(graph.g, TestRuntime());
  std::future<Session::RunResult> future =
      session.Run(graph.Args(), asio::use_future);
  ASSERT_EQ(future.wait_for(std::chrono::seconds(20)),
            std::future_status::ready);
  ExpectAffineResult(future.get());
}

TEST(Session, RunWorksWithDeferred) {
  AffineGraph graph;
  Session session(graph.g, TestRuntime());
  asio::io_context& io = testing::TestIo();
  io.restart();
  auto op = session.Run(graph.Args(), asio::deferred);
  Session::RunResult result = absl::UnknownError("not completed");
  std::move(op)(asio::bind_executor(
      io, [&](Session::RunResult r) { result = std::move(r); }));
  io.run_for(std::chrono::seconds(20));
  ExpectAffineResult(result);
}

TEST(Session, CallbackRunsOnTheHandlersExecutorAndNeverInline) {
  AffineGraph graph;
  Session session(graph.g, TestRuntime());
  asio::io_context& io = testing::TestIo();
  io.restart();
  auto strand = asio::make_strand(io);
  bool called = false;
  bool on_strand = false;
  session.Run(graph.Args(),
              asio::bind_executor(strand, [&](Session::RunResult r) {
                called = true;
                on_strand = strand.running_in_this_thread();
                ExpectAffineResult(r);
              }));
  // Everything in this graph is cheap and ran inline, yet the handler must
  // wait for its executor.
  EXPECT_FALSE(called);
  io.run_for(std::chrono::seconds(20));
  EXPECT_TRUE(called);
  EXPECT_TRUE(on_strand);
}

TEST(Session, ErrorsAlsoCompleteOnTheHandlersExecutor) {
  AffineGraph graph;
  Session session(graph.g, TestRuntime());
  asio::io_context& io = testing::TestIo();
  io.restart();
  bool called = false;
  session.Run({.fetches = {graph.y}},  // x not fed
              asio::bind_executor(io, [&](Session::RunResult r) {
                called = true;
                EXPECT_EQ(r.status().code(),
                          absl::StatusCode::kInvalidArgument);
              }));
  EXPECT_FALSE(called);
  io.run_for(std::chrono::seconds(20));
  EXPECT_TRUE(called);
}

TEST(Session, RunCompletesExactlyOnce) {
  AffineGraph graph;
  Session session(graph.g, TestRuntime());
  asio::io_context& io = testing::TestIo();
  io.restart();
  int calls = 0;
  for (int i = 0; i < 10; ++i) {
    session.Run(graph.Args(),
                asio::bind_executor(io, [&](Session::RunResult) { ++calls; }));
  }
  io.run_for(std::chrono::seconds(20));
  EXPECT_EQ(calls, 10);
}

// ---- bad input: InvalidArgument naming the tensor, never a crash

absl::Status RunStatus(Session& session, RunArgs args) {
  return session.RunBlocking(std::move(args)).status();
}

void ExpectInvalidNaming(const absl::Status& status, absl::string_view name) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find(name), absl::string_view::npos) << status;
}

TEST(SessionBadInput, FeedOfTheWrongDTypeNamesTheTensor) {
  AffineGraph graph;
  Session session(graph.g, TestRuntime());
  ExpectInvalidNaming(
      RunStatus(session,
                {.fetches = {graph.y},
                 .feeds = {{graph.x, Tensor::FromVector<int32_t>({1, 2})}}}),
      "x:0");
}

TEST(SessionBadInput, FeedOfAnIncompatibleShapeNamesTheTensor) {
  AffineGraph graph;
  Session session(graph.g, TestRuntime());
  ExpectInvalidNaming(
      RunStatus(session,
                {.fetches = {graph.y},
                 .feeds = {{graph.x, Tensor::FromVector<float>({1, 2, 3})}}}),
      "x:0");
}

TEST(SessionBadInput, FeedOfAnUnknownNameNamesIt) {
  AffineGraph graph;
  Session session(graph.g, TestRuntime());
  RunArgs args = graph.Args();
  args.feeds_by_name = {{"nope:0", Tensor::Scalar(1.0f)}};
  ExpectInvalidNaming(RunStatus(session, args), "nope:0");
}

TEST(SessionBadInput, FetchOfAnUnknownNameNamesIt) {
  AffineGraph graph;
  Session session(graph.g, TestRuntime());
  RunArgs args = graph.Args();
  args.fetch_names = {"missing"};
  ExpectInvalidNaming(RunStatus(session, args), "missing");
}

TEST(SessionBadInput, FetchOfAnOutputIndexOutOfRangeNamesIt) {
  AffineGraph graph;
  Session session(graph.g, TestRuntime());
  RunArgs args = graph.Args();
  args.fetch_names = {"y:3"};
  ExpectInvalidNaming(RunStatus(session, args), "y:3");
}

TEST(SessionBadInput, TargetOfAnUnknownNameNamesIt) {
  AffineGraph graph;
  Session session(graph.g, TestRuntime());
  RunArgs args = graph.Args();
  args.target_names = {"no_such_op"};
  ExpectInvalidNaming(RunStatus(session, args), "no_such_op");
}

TEST(SessionBadInput, FetchThatNeedsAnUnfedPlaceholderNamesIt) {
  AffineGraph graph;
  Session session(graph.g, TestRuntime());
  absl::Status status = RunStatus(session, {.fetches = {graph.y}});
  ExpectInvalidNaming(status, "x:0");
  EXPECT_NE(status.message().find("y:0"), absl::string_view::npos) << status;
}

// Of several fetches and targets that need the placeholder, the message
// names the first one given, whichever of them depends on the others.
TEST(SessionBadInput, AnUnfedPlaceholderIsNamedWithTheFirstFetchNeedingIt) {
  AffineGraph graph;
  Output z = ops::Neg(graph.g, graph.y, "z");
  Output x_negated = ops::Neg(graph.g, graph.x, "x_negated");
  Operation target = ops::NoOp(graph.g, {Operation(z.node())}, "after_z");
  Session session(graph.g, TestRuntime());
  struct Case {
    RunArgs args;
    std::string named;
  };
  const Case cases[] = {
      {{.fetches = {graph.y, z}}, "needed by 'y:0'"},
      {{.fetches = {z, graph.y}}, "needed by 'z:0'"},
      {{.targets = {target}}, "needed by 'after_z'"},
      {{.fetches = {z}, .targets = {target}}, "needed by 'z:0'"},
      {{.fetches = {graph.y, x_negated}}, "needed by 'y:0'"},
      {{.fetches = {x_negated, graph.y}}, "needed by 'x_negated:0'"},
  };
  for (const Case& c : cases) {
    absl::Status status = RunStatus(session, c.args);
    ExpectInvalidNaming(status, "placeholder tensor 'x:0'");
    EXPECT_NE(status.message().find(c.named), absl::string_view::npos)
        << status;
  }
}

TEST(SessionBadInput, TensorFedTwiceIsRejected) {
  AffineGraph graph;
  Session session(graph.g, TestRuntime());
  RunArgs args = graph.Args();
  args.feeds.push_back(args.feeds[0]);
  ExpectInvalidNaming(RunStatus(session, args), "x:0");
}

TEST(SessionBadInput, FetchFromAnotherGraphIsRejected) {
  AffineGraph graph;
  Graph other;
  Output foreign = ops::Const(other, 1.0f, "foreign");
  Session session(graph.g, TestRuntime());
  ExpectInvalidNaming(RunStatus(session, {.fetches = {foreign}}), "foreign");
}

TEST(SessionBadInput, EmptyFetchIsRejected) {
  AffineGraph graph;
  Session session(graph.g, TestRuntime());
  EXPECT_EQ(RunStatus(session, {.fetches = {Output()}}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SessionBadInput, UninitialisedFeedValueIsRejected) {
  AffineGraph graph;
  Session session(graph.g, TestRuntime());
  ExpectInvalidNaming(RunStatus(session, {.fetches = {graph.y},
                                          .feeds = {{graph.x, Tensor()}}}),
                      "x:0");
}

TEST(SessionBadInput, ReadingAnUninitialisedVariableIsFailedPrecondition) {
  Graph g;
  Output v = ops::Variable(g, Tensor::Scalar<int64_t>(3), "v");
  Session session(g, TestRuntime());
  absl::Status status = RunStatus(session, {.fetches = {v}});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find("v"), absl::string_view::npos);
}

// ---- variables and state

TEST(Session, VariablesKeepTheirValueAcrossRuns) {
  Graph g;
  Output v = ops::Variable(g, Tensor::Scalar<int64_t>(10), "v");
  Output inc = ops::AssignAdd(g, v, ops::Const(g, int64_t{5}));
  Operation init = GlobalVariablesInitializer(g);
  Session session(g, TestRuntime());
  ASSERT_TRUE(session.RunBlocking({.targets = {init}}).ok());
  ASSERT_TRUE(session.RunBlocking({.targets = {Operation(inc.node())}}).ok());
  auto value = session.RunBlocking({.fetches = {v}});
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(value->at(0).scalar<int64_t>(), 15);
}

TEST(Session,
     AssignAddWritesAnUnsharedVariableInPlaceAndKeepsOutputsAsTheyWere) {
  Graph g;
  Output v = ops::Variable(g, Tensor::FromVector<float>({1, 2, 3}), "v");
  Output inc = ops::AssignAdd(
      g, v, ops::Const(g, Tensor::FromVector<float>({10, 20, 30})));
  Operation init = GlobalVariablesInitializer(g);
  Session session(g, TestRuntime());
  ASSERT_TRUE(session.RunBlocking({.targets = {init}}).ok());
  // An output still held when the variable changes again keeps its value.
  auto first = session.RunBlocking({.fetches = {inc}});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = session.RunBlocking({.fetches = {inc}});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(first->at(0).IsSameAs(Tensor::FromVector<float>({11, 22, 33})))
      << first->at(0).DebugString();
  EXPECT_TRUE(second->at(0).IsSameAs(Tensor::FromVector<float>({21, 42, 63})))
      << second->at(0).DebugString();
  // Once nothing else holds the variable's buffer, the next update writes
  // into it rather than into a new one.
  const float* buffer = second->at(0).flat<float>().data();
  first = Session::RunResult();
  second = Session::RunResult();
  ASSERT_TRUE(session.RunBlocking({.targets = {Operation(inc.node())}}).ok());
  auto value = session.RunBlocking({.fetches = {v}});
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_TRUE(value->at(0).IsSameAs(Tensor::FromVector<float>({31, 62, 93})))
      << value->at(0).DebugString();
  EXPECT_EQ(value->at(0).flat<float>().data(), buffer);
}

TEST(Session, VariablesOfOpsWithHighIdsKeepTheirValues) {
  // ResourceManager finds the slots of ops below id 131,072 in a lock-free
  // table and the others under its lock: one variable on each side.
  Graph g;
  Output low = ops::Variable(g, Tensor::Scalar<int64_t>(1), "low");
  while (g.num_nodes() < 131'072) ops::NoOp(g, {});
  Output high = ops::Variable(g, Tensor::Scalar<int64_t>(100), "high");
  ASSERT_GE(high.node()->id(), 131'072);
  Operation bump = ops::Group(
      g,
      {Operation(ops::AssignAdd(g, low, ops::Const(g, int64_t{1})).node()),
       Operation(ops::AssignAdd(g, high, ops::Const(g, int64_t{2})).node())});
  Operation init = GlobalVariablesInitializer(g);
  Session session(g, TestRuntime());
  Session other(g, TestRuntime());
  ASSERT_TRUE(session.RunBlocking({.targets = {init}}).ok());
  ASSERT_TRUE(other.RunBlocking({.targets = {init}}).ok());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(session.RunBlocking({.targets = {bump}}).ok());
  }
  auto values = session.RunBlocking({.fetches = {low, high}});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(values->at(0).scalar<int64_t>(), 3);
  EXPECT_EQ(values->at(1).scalar<int64_t>(), 104);
  auto others = other.RunBlocking({.fetches = {low, high}});
  ASSERT_TRUE(others.ok()) << others.status();
  EXPECT_EQ(others->at(0).scalar<int64_t>(), 1);
  EXPECT_EQ(others->at(1).scalar<int64_t>(), 100);
}

TEST(Session, EachSessionHasItsOwnVariables) {
  Graph g;
  Output v = ops::Variable(g, Tensor::Scalar<int64_t>(1), "v");
  Output inc = ops::AssignAdd(g, v, ops::Const(g, int64_t{1}));
  Operation init = GlobalVariablesInitializer(g);
  Session a(g, TestRuntime());
  Session b(g, TestRuntime());
  ASSERT_TRUE(a.RunBlocking({.targets = {init}}).ok());
  ASSERT_TRUE(b.RunBlocking({.targets = {init}}).ok());
  ASSERT_TRUE(a.RunBlocking({.fetches = {inc}}).ok());
  EXPECT_EQ(a.RunBlocking({.fetches = {v}})->at(0).scalar<int64_t>(), 2);
  EXPECT_EQ(b.RunBlocking({.fetches = {v}})->at(0).scalar<int64_t>(), 1);
}

TEST(Session, ConcurrentRunsFromThreadsUpdateAVariableAtomically) {
  Graph g;
  Output v = ops::Variable(g, Tensor::Scalar<int64_t>(0), "v");
  Output inc = ops::AssignAdd(g, v, ops::Const(g, int64_t{1}));
  Operation init = GlobalVariablesInitializer(g);
  g.Finalize();
  Session session(g, TestRuntime());
  ASSERT_TRUE(session.RunBlocking({.targets = {init}}).ok());
  constexpr int kThreads = 4, kRunsPerThread = 250;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRunsPerThread; ++i) {
        if (!session.RunBlocking({.targets = {Operation(inc.node())}}).ok()) {
          ++failures;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(session.RunBlocking({.fetches = {v}})->at(0).scalar<int64_t>(),
            kThreads * kRunsPerThread);
}

asio::awaitable<void> IncrementMany(Session& session, Operation inc, int n,
                                    int& failures) {
  RunArgs args{.targets = {inc}};
  for (int i = 0; i < n; ++i) {
    auto r = co_await session.Run(args, asio::use_awaitable);
    if (!r.ok()) ++failures;
  }
}

CO_TEST(Session, ManyRunsInFlightFromCoroutinesAllApply) {
  Graph g;
  Output v = ops::Variable(g, Tensor::Scalar<int64_t>(0), "v");
  Output inc = ops::AssignAdd(g, v, ops::Const(g, int64_t{1}));
  Operation init = GlobalVariablesInitializer(g);
  Session session(g, TestRuntime());
  RunArgs init_args{.targets = {init}};
  CO_ASSERT_OK((co_await session.Run(init_args, asio::use_awaitable)).status());
  using namespace asio::experimental::awaitable_operators;
  int failures = 0;
  Operation inc_op(inc.node());
  co_await (IncrementMany(session, inc_op, 100, failures) &&
            IncrementMany(session, inc_op, 100, failures) &&
            IncrementMany(session, inc_op, 100, failures));
  EXPECT_EQ(failures, 0);
  RunArgs read{.fetches = {v}};
  auto value = co_await session.Run(read, asio::use_awaitable);
  CO_ASSERT_OK(value.status());
  EXPECT_EQ(value->at(0).scalar<int64_t>(), 300);
}

TEST(Session, RunBlockingOnAPoolThreadRefusesInsteadOfDeadlocking) {
  AffineGraph graph;
  Session session(graph.g, TestRuntime());
  std::promise<absl::Status> refused;
  asio::post(TestRuntime().executor(), [&] {
    refused.set_value(session.RunBlocking(graph.Args()).status());
  });
  auto future = refused.get_future();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(20)),
            std::future_status::ready);
  EXPECT_EQ(future.get().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(Session, RunsByNameLikeTensorFlow) {
  AffineGraph graph;
  Session session(graph.g, TestRuntime());
  RunArgs args;
  args.fetch_names = {"y:0"};
  args.feeds_by_name = {{"x", Tensor::FromVector<float>({1, 2})}};
  ExpectAffineResult(session.RunBlocking(args));
}

TEST(Session, TheSamePlanServesRepeatedRunsWithNewFeeds) {
  AffineGraph graph;
  Session session(graph.g, TestRuntime());
  for (float base = 0; base < 5; ++base) {
    auto r = session.RunBlocking(
        {.fetches = {graph.y},
         .feeds = {{graph.x, Tensor::FromVector<float>({base, base + 1})}}});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->at(0).IsSameAs(
        Tensor::FromVector<float>({2 * base + 1, 2 * base + 3})));
  }
}

// The session keeps the plan it found last for a lock-free lookup: runs
// whose arguments differ only at the end of the plan's key (one fetch more,
// a target more) must each still get their own plan, from any thread.
TEST(Session, RunsThatDifferOnlyInTrailingFetchesOrTargetsGetTheirOwnPlans) {
  AffineGraph graph;
  Output doubled = ops::Mul(graph.g, graph.y, ops::Const(graph.g, 2.0f));
  Output v = ops::Variable(graph.g, Tensor::Scalar<int64_t>(0), "v");
  Output inc = ops::AssignAdd(graph.g, v, ops::Const(graph.g, int64_t{1}));
  Operation init = GlobalVariablesInitializer(graph.g);
  graph.g.Finalize();
  Session session(graph.g, TestRuntime());
  ASSERT_TRUE(session.RunBlocking({.targets = {init}}).ok());
  const Tensor fed = Tensor::FromVector<float>({1, 2});
  const RunArgs y_only{.fetches = {graph.y}, .feeds = {{graph.x, fed}}};
  const RunArgs y_and_doubled{.fetches = {graph.y, doubled},
                              .feeds = {{graph.x, fed}}};
  const RunArgs y_and_increment{.fetches = {graph.y},
                                .targets = {Operation(inc.node())},
                                .feeds = {{graph.x, fed}}};
  constexpr int kThreads = 3, kRounds = 100;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        const int which = (i + t) % 3;
        const RunArgs& args = which == 0   ? y_only
                              : which == 1 ? y_and_doubled
                                           : y_and_increment;
        Session::RunResult r = session.RunBlocking(args);
        const size_t fetches = which == 1 ? 2 : 1;
        if (!r.ok() || r->size() != fetches ||
            !r->at(0).IsSameAs(Tensor::FromVector<float>({3, 5})) ||
            (which == 1 &&
             !r->at(1).IsSameAs(Tensor::FromVector<float>({6, 10})))) {
          ++wrong;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  // Only the runs with the target incremented: each of the kThreads threads
  // ran it in a third of its rounds.
  int64_t with_target = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kRounds; ++i) with_target += (i + t) % 3 == 2;
  }
  EXPECT_EQ(session.RunBlocking({.fetches = {v}})->at(0).scalar<int64_t>(),
            with_target);
}

}  // namespace
}  // namespace cosession::session_test
