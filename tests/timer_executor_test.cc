// TimerExecutor (async/timer_executor.h): a timer waiting there completes
// on its handler's executor, which counts the wait as outstanding work;
// cancelling it from another thread completes it once, aborted; a timer
// leaves its handler's context for it only when that is a pool; and the
// library's own timers -- a run's deadline, a Coordinator's loop and join,
// the batcher's batch timeout and request deadlines -- leave a Runtime's
// pool without Asio's reactor, whose presence slows every hand-off to the
// pool from then on.
#include "cosession/async/timer_executor.h"

#include <gtest/gtest.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/detail/reactor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "cosession/async/coordinator.h"
#include "cosession/async/runtime.h"
#include "cosession/async/session.h"
#include "cosession/graph/ops.h"
#include "cosession/serving/batching_session.h"
#include "tests/co_test.h"

namespace cosession::timer_executor_test {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

TEST(TimerExecutor, ATimerCompletesOnItsHandlersExecutorWhichWaitsForIt) {
  asio::io_context io;
  asio::steady_timer timer(TimerExecutor(), 1ms);
  int calls = 0;
  bool on_io_thread = false;
  boost::system::error_code result = asio::error::would_block;
  timer.async_wait(asio::bind_executor(io, [&](boost::system::error_code ec) {
    ++calls;
    on_io_thread = io.get_executor().running_in_this_thread();
    result = ec;
  }));
  // run() returns only once the handler ran: the pending wait is work of
  // `io`'s although the timer waits elsewhere. (Bounded, so that a wait
  // that never completes fails the test.)
  io.run_for(co_test::kTimeLimit);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(on_io_thread);
  EXPECT_FALSE(result) << result.message();
}

TEST(TimerExecutor, CancellingFromAnotherThreadAbortsTheWaitOnce) {
  asio::io_context io;
  asio::steady_timer timer(TimerExecutor(),
                           asio::steady_timer::time_point::max());
  int calls = 0;
  boost::system::error_code result;
  timer.async_wait(asio::bind_executor(io, [&](boost::system::error_code ec) {
    ++calls;
    result = ec;
  }));
  std::thread([&] { timer.cancel(); }).join();
  io.run_for(co_test::kTimeLimit);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(result, asio::error::operation_aborted);
}

TEST(TimerExecutor, ATimerLeavesItsHandlersContextOnlyForAPool) {
  Runtime runtime({.num_threads = 1});
  const asio::any_io_executor timers = TimerExecutor();
  EXPECT_EQ(TimerExecutorFor(runtime.executor()), timers);
  EXPECT_EQ(TimerExecutorFor(asio::make_strand(runtime.executor())), timers);
  // The caller's own context keeps its timers: they go with it when it is
  // destroyed.
  asio::io_context io;
  EXPECT_EQ(TimerExecutorFor(io.get_executor()),
            asio::any_io_executor(io.get_executor()));
  const asio::any_io_executor strand = asio::make_strand(io);
  EXPECT_EQ(TimerExecutorFor(strand), strand);
}

bool HasReactor(Runtime& runtime) {
  return asio::has_service<asio::detail::reactor>(
      asio::query(runtime.executor(), asio::execution::context));
}

CO_TEST(TimerExecutor, TheLibrarysTimersLeaveThePoolWithoutAReactor) {
  Runtime runtime({.num_threads = 2});
  CO_ASSERT_TRUE(!HasReactor(runtime));

  Graph g;
  Output x = ops::Placeholder(g, DType::kFloat, TensorShape{-1, 2}, "x");
  Output y = ops::Mul(g, x, ops::Const(g, 2.0f), "y");
  g.Finalize();
  Session session(g, runtime);
  const Tensor row =
      Tensor::FromVector(std::vector<float>{1.0f, 2.0f}, TensorShape{1, 2});

  // A run with a deadline.
  RunArgs args{.fetches = {y}, .feeds = {{x, row}}};
  args.options.timeout = 1h;
  auto ran = co_await session.Run(args, asio::use_awaitable);
  CO_ASSERT_OK(ran.status());

  // A Coordinator's loop (its interval timer), stopped from the loop, and
  // its Join.
  Coordinator coordinator(runtime.executor());
  int ticks = 0;
  coordinator.Loop("tick", 1ms, [&] {
    if (++ticks == 3) (void)coordinator.RequestStop();
    return absl::OkStatus();
  });
  absl::Status joined = co_await coordinator.Join(1s, asio::use_awaitable);
  EXPECT_TRUE(joined.ok()) << joined;
  EXPECT_EQ(ticks, 3);

  // A batcher's batch timeout and a request's deadline.
  Signature signature;
  signature.inputs["x"] = {
      .tensor = x, .dtype = DType::kFloat, .shape = x.shape()};
  signature.outputs["y"] = {
      .tensor = y, .dtype = DType::kFloat, .shape = y.shape()};
  auto batcher = BatchingSession::Create(
      session, signature, {.max_batch_size = 8, .batch_timeout = 1ms});
  CO_ASSERT_OK(batcher.status());
  RunOptions with_deadline;
  with_deadline.timeout = 1h;
  // Built before the co_await: g++ 12 rejects this braced list inside one.
  NamedTensors inputs{{"x", row}};
  auto answered = co_await (*batcher)->Run(std::move(inputs), with_deadline,
                                           asio::use_awaitable);
  CO_ASSERT_OK(answered.status());

  EXPECT_FALSE(HasReactor(runtime));
}

}  // namespace
}  // namespace cosession::timer_executor_test
