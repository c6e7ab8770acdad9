// The Coordinator: stop requests and the first error, waits for stop, stop
// callbacks, coordinated tasks and threads, and Join with a grace period.
#include "cosession/async/coordinator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/channel.hpp>
#include <boost/asio/experimental/channel_error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "cosession/async/runtime.h"
#include "tests/co_test.h"

namespace cosession::coordinator_test {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using boost::system::error_code;
// A one-shot event between coroutines on the test's io_context.
using Event = asio::experimental::channel<void(error_code)>;

constexpr std::chrono::seconds kBound{10};  // for waits that must not hang

asio::awaitable<absl::Status> ReturnStatus(absl::Status status) {
  co_return status;
}

asio::awaitable<absl::Status> ThrowRuntimeError() {
  throw std::runtime_error("boom");
  co_return absl::OkStatus();
}

bool IsCancellation(const error_code& ec) {
  return ec == asio::error::operation_aborted ||
         ec == asio::experimental::error::channel_cancelled;
}

// Tells `started`, then waits on `never`, which only a cancellation ends;
// records what the wait completed with.
asio::awaitable<absl::Status> WaitUntilCancelled(Event* started, Event* never,
                                                 error_code* seen) {
  error_code none;
  co_await started->async_send(none, asio::use_awaitable);
  auto [ec] =
      co_await never->async_receive(asio::as_tuple(asio::use_awaitable));
  *seen = ec;
  co_return absl::CancelledError("cancelled while waiting");
}

// Like WaitUntilCancelled, then ignores the cancellation: waits for
// `release`, and tells `finished`.
asio::awaitable<absl::Status> Straggle(Event* started, Event* never,
                                       Event* release, Event* finished) {
  error_code none;
  co_await started->async_send(none, asio::use_awaitable);
  co_await never->async_receive(asio::as_tuple(asio::use_awaitable));
  co_await asio::this_coro::reset_cancellation_state();
  co_await release->async_receive(asio::as_tuple(asio::use_awaitable));
  co_await finished->async_send(none, asio::use_awaitable);
  co_return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Stop requests and the recorded error.

TEST(CoordinatorStop, FirstErrorWins) {
  asio::io_context io;
  Coordinator coord(io.get_executor());
  EXPECT_EQ(coord.RequestStop(absl::InternalError("first")),
            absl::InternalError("first"));
  EXPECT_EQ(coord.RequestStop(absl::InvalidArgumentError("second")),
            absl::InternalError("first"));
  EXPECT_EQ(coord.status(), absl::InternalError("first"));
  EXPECT_TRUE(coord.ShouldStop());
}

TEST(CoordinatorStop, OutOfRangeStopsWithoutAnError) {
  asio::io_context io;
  Coordinator coord(io.get_executor());
  EXPECT_TRUE(coord.RequestStop(absl::OutOfRangeError("input exhausted")).ok());
  EXPECT_TRUE(coord.ShouldStop());
  EXPECT_TRUE(coord.status().ok());
}

// The natural first line of a coroutine that coordinates: the executor
// awaited in the constructor's own expression, with the default options
// (with a defaulted options argument, g++ 12 rejected this line: see
// Coordinator's constructors). The default clean-stop code is OutOfRange.
CO_TEST(CoordinatorStop, IsMadeFromTheAwaitedExecutorInOneExpression) {
  Coordinator coord(co_await asio::this_coro::executor);
  CO_ASSERT_TRUE(coord.RequestStop(absl::OutOfRangeError("end")).ok());
  CO_ASSERT_TRUE(coord.ShouldStop());
  absl::Status joined = co_await coord.Join(kBound, asio::use_awaitable);
  EXPECT_TRUE(joined.ok()) << joined;
}

TEST(CoordinatorStop, CustomCleanCodesReplaceTheDefault) {
  asio::io_context io;
  Coordinator coord(
      io.get_executor(),
      {.clean_stop_codes = {absl::StatusCode::kResourceExhausted}});
  EXPECT_TRUE(coord.RequestStop(absl::ResourceExhaustedError("full")).ok());
  EXPECT_EQ(coord.RequestStop(absl::OutOfRangeError("end")).code(),
            absl::StatusCode::kOutOfRange);
}

TEST(CoordinatorStop, CancelledAfterAStopRequestIsClean) {
  asio::io_context io;
  Coordinator coord(io.get_executor());
  coord.RequestStop().IgnoreError();
  EXPECT_TRUE(coord.RequestStop(absl::CancelledError("step cancelled")).ok());
  EXPECT_TRUE(coord.status().ok());
}

TEST(CoordinatorStop, CancelledAsTheFirstStopIsAnError) {
  asio::io_context io;
  Coordinator coord(io.get_executor());
  EXPECT_EQ(coord.RequestStop(absl::CancelledError("why")).code(),
            absl::StatusCode::kCancelled);
}

TEST(CoordinatorStop, ErrorAfterACleanStopIsStillRecorded) {
  asio::io_context io;
  Coordinator coord(io.get_executor());
  coord.RequestStop(absl::OutOfRangeError("end")).IgnoreError();
  EXPECT_EQ(coord.RequestStop(absl::DataLossError("corrupt")),
            absl::DataLossError("corrupt"));
  EXPECT_EQ(coord.status(), absl::DataLossError("corrupt"));
}

TEST(CoordinatorStop, ClearStopClearsTheFlagTheErrorAndTheReason) {
  asio::io_context io;
  Coordinator coord(io.get_executor());
  coord.RequestStop(absl::InternalError("x"), "broken").IgnoreError();
  coord.ClearStop();
  EXPECT_FALSE(coord.ShouldStop());
  EXPECT_TRUE(coord.status().ok());
  EXPECT_EQ(coord.stop_reason(), "");
}

TEST(CoordinatorStop, StopReasonIsTheReasonOfTheFirstRequest) {
  asio::io_context io;
  Coordinator coord(io.get_executor());
  EXPECT_EQ(coord.stop_reason(), "");
  coord.RequestStop(absl::OkStatus(), "input exhausted").IgnoreError();
  coord.RequestStop(absl::InternalError("x"), "hook X asked").IgnoreError();
  EXPECT_EQ(coord.stop_reason(), "input exhausted");
}

TEST(CoordinatorStop, StopReasonWithoutAReasonIsTheStatusText) {
  asio::io_context io;
  Coordinator coord(io.get_executor());
  coord.RequestStop(absl::InternalError("disk on fire")).IgnoreError();
  EXPECT_NE(coord.stop_reason().find("disk on fire"), std::string::npos);
}

TEST(CoordinatorStop, ConcurrentErrorsRecordExactlyOneOfThem) {
  asio::io_context io;
  Coordinator coord(io.get_executor());
  absl::Status seen_a, seen_b;
  std::thread a([&] { seen_a = coord.RequestStop(absl::InternalError("a")); });
  std::thread b([&] { seen_b = coord.RequestStop(absl::InternalError("b")); });
  a.join();
  b.join();
  EXPECT_TRUE(coord.status() == absl::InternalError("a") ||
              coord.status() == absl::InternalError("b"));
  // The later caller sees the earlier one's error.
  EXPECT_EQ(seen_a, coord.status());
  EXPECT_EQ(seen_b, coord.status());
}

// ---------------------------------------------------------------------------
// WaitForStop.

TEST(CoordinatorWaitForStop, CompletesWhenAnotherThreadRequestsStop) {
  asio::io_context io;
  Coordinator coord(io.get_executor());
  std::optional<absl::Status> result;
  coord.WaitForStop(
      asio::bind_executor(io, [&](absl::Status s) { result = std::move(s); }));
  io.poll();
  ASSERT_FALSE(result.has_value());
  std::thread([&] { coord.RequestStop().IgnoreError(); }).join();
  io.restart();
  io.run_for(kBound);
  ASSERT_TRUE(result.has_value());
  EXPECT_TRUE(result->ok());
}

TEST(CoordinatorWaitForStop,
     AlreadyStoppedCompletesThroughTheHandlersExecutor) {
  asio::io_context io;
  Coordinator coord(io.get_executor());
  coord.RequestStop().IgnoreError();
  std::optional<absl::Status> result;
  coord.WaitForStop(
      asio::bind_executor(io, [&](absl::Status s) { result = std::move(s); }));
  EXPECT_FALSE(result.has_value());  // not inline
  io.run_for(kBound);
  ASSERT_TRUE(result.has_value());
  EXPECT_TRUE(result->ok());
}

TEST(CoordinatorWaitForStop, CancelledWaitCompletesOnceWithCancelled) {
  asio::io_context io;
  Coordinator coord(io.get_executor());
  asio::cancellation_signal signal;
  int calls = 0;
  absl::Status result;
  coord.WaitForStop(asio::bind_cancellation_slot(
      signal.slot(), asio::bind_executor(io, [&](absl::Status s) {
        ++calls;
        result = std::move(s);
      })));
  io.poll();
  signal.emit(asio::cancellation_type::terminal);
  io.poll();
  coord.RequestStop().IgnoreError();  // must not complete it a second time
  io.restart();
  io.run_for(kBound);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(result.code(), absl::StatusCode::kCancelled);
}

TEST(CoordinatorWaitForStop, WaitsAgainAfterClearStop) {
  asio::io_context io;
  Coordinator coord(io.get_executor());
  coord.RequestStop().IgnoreError();
  coord.ClearStop();
  io.run_for(kBound);  // the stop is delivered and forgotten
  std::optional<absl::Status> result;
  coord.WaitForStop(
      asio::bind_executor(io, [&](absl::Status s) { result = std::move(s); }));
  io.restart();
  io.poll();
  EXPECT_FALSE(result.has_value());
  coord.RequestStop().IgnoreError();
  io.restart();
  io.run_for(kBound);
  ASSERT_TRUE(result.has_value());
  EXPECT_TRUE(result->ok());
}

CO_TEST(CoordinatorWaitForStop, AwaitableWaitResumesOnStop) {
  Coordinator coord(co_test::Io().get_executor());
  std::thread stopper([&coord] { coord.RequestStop().IgnoreError(); });
  absl::Status status = co_await coord.WaitForStop(asio::use_awaitable);
  stopper.join();
  EXPECT_TRUE(status.ok());
}

TEST(CoordinatorWaitForStop, BlockingWaitTimesOutWithoutAStop) {
  asio::io_context io;
  Coordinator coord(io.get_executor());
  EXPECT_FALSE(coord.WaitForStopBlocking(1ms));
}

TEST(CoordinatorWaitForStop, BlockingWaitReturnsTrueWhenStopped) {
  asio::io_context io;
  Coordinator coord(io.get_executor());
  std::thread stopper([&coord] { coord.RequestStop().IgnoreError(); });
  EXPECT_TRUE(coord.WaitForStopBlocking(kBound));
  stopper.join();
}

// ---------------------------------------------------------------------------
// Stop callbacks.

TEST(CoordinatorStopCallback, RunsOnStop) {
  asio::io_context io;
  Coordinator coord(io.get_executor());
  int calls = 0;
  coord.AddStopCallback([&] { ++calls; });
  io.poll();
  EXPECT_EQ(calls, 0);
  coord.RequestStop().IgnoreError();
  io.restart();
  io.run_for(kBound);
  EXPECT_EQ(calls, 1);
}

TEST(CoordinatorStopCallback, DoesNotRunAfterRemoval) {
  asio::io_context io;
  Coordinator coord(io.get_executor());
  int calls = 0;
  uint64_t id = coord.AddStopCallback([&] { ++calls; });
  coord.RemoveStopCallback(id);
  coord.RequestStop().IgnoreError();
  io.run_for(kBound);
  EXPECT_EQ(calls, 0);
}

TEST(CoordinatorStopCallback, AddedAfterAStopRunsSoonOnTheStrand) {
  asio::io_context io;
  Coordinator coord(io.get_executor());
  coord.RequestStop().IgnoreError();
  int calls = 0;
  bool on_strand = false;
  coord.AddStopCallback([&] {
    ++calls;
    on_strand = coord.strand().running_in_this_thread();
  });
  EXPECT_EQ(calls, 0);  // not inline
  io.run_for(kBound);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(on_strand);
}

TEST(CoordinatorStopCallback, RemoveWaitsForARunningCallbackToReturn) {
  asio::io_context io;
  auto work = asio::make_work_guard(io);
  std::thread runner([&io] { io.run_for(kBound); });
  {
    Coordinator coord(io.get_executor());
    std::promise<void> entered, release;
    std::future<void> entered_future = entered.get_future();
    std::future<void> release_future = release.get_future();
    std::atomic<bool> finished{false};
    uint64_t id = coord.AddStopCallback([&] {
      entered.set_value();
      release_future.wait();
      finished = true;
    });
    coord.RequestStop().IgnoreError();
    ASSERT_EQ(entered_future.wait_for(kBound), std::future_status::ready);
    // Both orders are fine: Remove starts before or after the release.
    auto removed = std::async(std::launch::async, [&] {
      coord.RemoveStopCallback(id);
      return finished.load();
    });
    release.set_value();
    ASSERT_EQ(removed.wait_for(kBound), std::future_status::ready);
    EXPECT_TRUE(removed.get());
  }
  work.reset();
  runner.join();
}

// Races a stop against the removal, many times, both orders.
TEST(CoordinatorStopCallback, NeverRunsAfterRemoveReturnedEvenWhenRacingAStop) {
  constexpr int kRounds = 200;
  asio::io_context io;
  auto work = asio::make_work_guard(io);
  std::thread runner([&io] { io.run_for(kBound); });
  std::atomic<int> late_runs{0};
  {
    Coordinator coord(io.get_executor());
    std::vector<std::atomic<bool>> removed(kRounds);
    for (int i = 0; i < kRounds; ++i) {
      uint64_t id = coord.AddStopCallback([&, i] {
        if (removed[i].load()) ++late_runs;
      });
      std::thread stopper([&coord] { coord.RequestStop().IgnoreError(); });
      std::thread remover([&, i, id] {
        coord.RemoveStopCallback(id);
        removed[i] = true;
      });
      stopper.join();
      remover.join();
      coord.ClearStop();
    }
  }
  work.reset();
  runner.join();
  EXPECT_EQ(late_runs.load(), 0);
}

// ---------------------------------------------------------------------------
// Tasks, threads and Join.

CO_TEST(CoordinatorJoin, TaskErrorRequestsStopAndJoinReturnsIt) {
  Coordinator coord(co_test::Io().get_executor());
  coord.Spawn("failing", ReturnStatus(absl::InternalError("task failed")));
  absl::Status status = co_await coord.Join(kBound, asio::use_awaitable);
  EXPECT_EQ(status, absl::InternalError("task failed"));
  EXPECT_TRUE(coord.ShouldStop());
  EXPECT_NE(coord.stop_reason().find("failing"), std::string::npos);
}

CO_TEST(CoordinatorJoin, TaskExceptionBecomesInternal) {
  Coordinator coord(co_test::Io().get_executor());
  coord.Spawn("thrower", ThrowRuntimeError());
  absl::Status status = co_await coord.Join(kBound, asio::use_awaitable);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_NE(status.message().find("boom"), absl::string_view::npos);
}

CO_TEST(CoordinatorJoin, CompletesWithoutAStopWhenEveryTaskFinished) {
  Coordinator coord(co_test::Io().get_executor());
  coord.Spawn("quick", ReturnStatus(absl::OkStatus()));
  absl::Status status = co_await coord.Join(kBound, asio::use_awaitable);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_FALSE(coord.ShouldStop());
  EXPECT_TRUE(coord.joined());
}

CO_TEST(CoordinatorJoin, StopCancelsATaskAwaitingAChannelThatNeverFires) {
  auto& io = co_test::Io();
  Coordinator coord(io.get_executor());
  Event started(io, 1), never(io);
  error_code seen;
  coord.Spawn("waiter", WaitUntilCancelled(&started, &never, &seen));
  co_await started.async_receive(asio::use_awaitable);
  coord.RequestStop().IgnoreError();
  absl::Status status = co_await coord.Join(kBound, asio::use_awaitable);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(IsCancellation(seen)) << seen.message();
}

CO_TEST(CoordinatorJoin, GraceExpiryNamesTheStraggler) {
  auto& io = co_test::Io();
  Coordinator coord(io.get_executor());
  Event started(io, 1), never(io), release(io, 1), finished(io, 1);
  coord.Spawn("straggler", Straggle(&started, &never, &release, &finished));
  co_await started.async_receive(asio::use_awaitable);
  coord.RequestStop().IgnoreError();
  absl::Status status = co_await coord.Join(1ms, asio::use_awaitable);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(status.message(),
            "Coordinator stopped with threads still running: straggler");
  error_code none;
  co_await release.async_send(none, asio::use_awaitable);
  co_await finished.async_receive(asio::use_awaitable);
}

CO_TEST(CoordinatorJoin, RecordedErrorWinsOverStragglers) {
  auto& io = co_test::Io();
  Coordinator coord(io.get_executor());
  Event started(io, 1), never(io), release(io, 1), finished(io, 1);
  coord.Spawn("straggler", Straggle(&started, &never, &release, &finished));
  co_await started.async_receive(asio::use_awaitable);
  coord.RequestStop(absl::UnavailableError("worker lost")).IgnoreError();
  absl::Status status = co_await coord.Join(1ms, asio::use_awaitable);
  EXPECT_EQ(status, absl::UnavailableError("worker lost"));
  error_code none;
  co_await release.async_send(none, asio::use_awaitable);
  co_await finished.async_receive(asio::use_awaitable);
}

CO_TEST(CoordinatorJoin, WaitsForRegisteredThreads) {
  Coordinator coord(co_test::Io().get_executor());
  std::atomic<bool> thread_saw_stop{false};
  std::thread worker([&coord, &thread_saw_stop,
                      registration = coord.RegisterThread("worker")]() mutable {
    thread_saw_stop = coord.WaitForStopBlocking(kBound);
    registration.Done();
  });
  coord.RequestStop().IgnoreError();
  absl::Status status = co_await coord.Join(kBound, asio::use_awaitable);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(thread_saw_stop);
  worker.join();
}

CO_TEST(CoordinatorJoin, ARegistrationDestroyedCountsAsDone) {
  Coordinator coord(co_test::Io().get_executor());
  { Coordinator::ThreadRegistration registration = coord.RegisterThread("t"); }
  absl::Status status = co_await coord.Join(kBound, asio::use_awaitable);
  EXPECT_TRUE(status.ok()) << status;
}

CO_TEST(CoordinatorJoin,
        RequestStopAfterJoinRecordsNothingAndReturnsItsArgument) {
  Coordinator coord(co_test::Io().get_executor());
  absl::Status joined = co_await coord.Join(kBound, asio::use_awaitable);
  EXPECT_TRUE(joined.ok());
  EXPECT_EQ(coord.RequestStop(absl::InternalError("late")),
            absl::InternalError("late"));
  EXPECT_TRUE(coord.status().ok());
}

CO_TEST(CoordinatorJoin, SecondJoinCompletesWithTheFirstResult) {
  Coordinator coord(co_test::Io().get_executor());
  coord.Spawn("failing", ReturnStatus(absl::InternalError("x")));
  absl::Status first = co_await coord.Join(kBound, asio::use_awaitable);
  absl::Status second = co_await coord.Join(kBound, asio::use_awaitable);
  EXPECT_EQ(first, absl::InternalError("x"));
  EXPECT_EQ(second, first);
}

TEST(CoordinatorJoin, CancelledJoinCompletesWithCancelledAndDoesNotJoin) {
  asio::io_context io;
  Event started(io, 1), never(io);
  error_code seen;
  {
    Coordinator coord(io.get_executor());
    coord.Spawn("waiter", WaitUntilCancelled(&started, &never, &seen));
    asio::cancellation_signal signal;
    std::optional<absl::Status> result;
    coord.Join(kBound,
               asio::bind_cancellation_slot(
                   signal.slot(), asio::bind_executor(io, [&](absl::Status s) {
                     result = std::move(s);
                   })));
    io.poll();
    ASSERT_FALSE(result.has_value());
    signal.emit(asio::cancellation_type::terminal);
    io.poll();
    ASSERT_TRUE(result.has_value());
    EXPECT_EQ(result->code(), absl::StatusCode::kCancelled);
    EXPECT_FALSE(coord.joined());
  }
  io.restart();
  io.run_for(kBound);  // the destructor's stop ends the task
  EXPECT_TRUE(IsCancellation(seen));
}

CO_TEST(CoordinatorJoin, JoinBlockingOnTheExecutorThreadIsRefused) {
  Coordinator coord(co_test::Io().get_executor());
  EXPECT_EQ(coord.JoinBlocking(kBound).code(),
            absl::StatusCode::kFailedPrecondition);
  co_return;
}

// The same on a Runtime's pool (whose executor is not io_context's own
// type), directly and through a strand of it: refused, not a deadlock.
TEST(CoordinatorJoin, JoinBlockingOnARuntimesPoolThreadIsRefused) {
  Runtime runtime({.num_threads = 1});
  auto on_pool = [](asio::any_io_executor ex) {
    auto refused = std::make_shared<std::promise<absl::StatusCode>>();
    std::future<absl::StatusCode> code = refused->get_future();
    asio::post(ex, [ex, refused] {
      Coordinator coord(ex);
      refused->set_value(coord.JoinBlocking(kBound).code());
    });
    return code;
  };
  for (asio::any_io_executor ex :
       {asio::any_io_executor(runtime.executor()),
        asio::any_io_executor(asio::make_strand(runtime.executor()))}) {
    std::future<absl::StatusCode> code = on_pool(ex);
    ASSERT_EQ(code.wait_for(kBound), std::future_status::ready);
    EXPECT_EQ(code.get(), absl::StatusCode::kFailedPrecondition);
  }
}

TEST(CoordinatorJoin, JoinBlockingFromAPlainThreadReturnsTheError) {
  asio::io_context io;
  auto work = asio::make_work_guard(io);
  std::thread runner([&io] { io.run_for(kBound); });
  {
    Coordinator coord(io.get_executor());
    coord.Spawn("failing", ReturnStatus(absl::AbortedError("x")));
    auto joined = std::async(std::launch::async,
                             [&coord] { return coord.JoinBlocking(kBound); });
    ASSERT_EQ(joined.wait_for(kBound), std::future_status::ready);
    EXPECT_EQ(joined.get(), absl::AbortedError("x"));
  }
  work.reset();
  runner.join();
}

TEST(CoordinatorJoin, DestructionCancelsRunningTasksWithoutWaiting) {
  asio::io_context io;
  Event started(io, 1), never(io);
  error_code seen;
  {
    Coordinator coord(io.get_executor());
    coord.Spawn("waiter", WaitUntilCancelled(&started, &never, &seen));
    io.poll();
  }
  io.restart();
  io.run_for(kBound);
  EXPECT_TRUE(IsCancellation(seen)) << seen.message();
}

// Records how its first wait (on `never`) ended, then ignores the stop:
// waits for `release` and tells `finished`.
asio::awaitable<absl::Status> RecordFirstWaitThenStraggle(error_code* seen,
                                                          Event* never,
                                                          Event* release,
                                                          Event* finished) {
  auto [ec] =
      co_await never->async_receive(asio::as_tuple(asio::use_awaitable));
  *seen = ec;
  co_await asio::this_coro::reset_cancellation_state();
  co_await release->async_receive(asio::as_tuple(asio::use_awaitable));
  error_code none;
  co_await finished->async_send(none, asio::use_awaitable);
  co_return absl::OkStatus();
}

// TensorFlow's threads started before a stop run; so does a task whose
// Spawn returned before RequestStop, although its start was still queued on
// the strand when the stop came: the stop reaches its first wait as a
// cancellation, and Join waits for it (and names it when it straggles).
CO_TEST(CoordinatorJoin, ATaskSpawnedBeforeAStopRunsAndSeesTheStop) {
  auto& io = co_test::Io();
  Coordinator coord(io.get_executor());
  Event never(io), release(io, 1), finished(io, 1);
  error_code seen;
  coord.Spawn("spawned before the stop",
              RecordFirstWaitThenStraggle(&seen, &never, &release, &finished));
  coord.RequestStop().IgnoreError();  // before the strand ran the start
  absl::Status status = co_await coord.Join(1ms, asio::use_awaitable);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_EQ(status.message(),
            "Coordinator stopped with threads still running: spawned before "
            "the stop");
  EXPECT_TRUE(IsCancellation(seen)) << seen.message();
  error_code none;
  co_await release.async_send(none, asio::use_awaitable);
  co_await finished.async_receive(asio::use_awaitable);
}

// Records how its one wait (on `never`) ended.
asio::awaitable<absl::Status> RecordWait(error_code* seen, Event* never) {
  auto [ec] =
      co_await never->async_receive(asio::as_tuple(asio::use_awaitable));
  *seen = ec;
  co_return absl::CancelledError("stopped");
}

// When such a task honours the stop, Join completes with OK once it
// finished.
CO_TEST(CoordinatorJoin, ATaskSpawnedBeforeAStopIsJoinedOnceItFinished) {
  auto& io = co_test::Io();
  Coordinator coord(io.get_executor());
  Event never(io);
  error_code seen;
  coord.Spawn("waiter", RecordWait(&seen, &never));
  coord.RequestStop().IgnoreError();
  absl::Status status = co_await coord.Join(kBound, asio::use_awaitable);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(IsCancellation(seen))
      << "the task did not run: " << seen.message();
}

CO_TEST(CoordinatorJoin, TaskSpawnedAfterAStopDoesNotRun) {
  Coordinator coord(co_test::Io().get_executor());
  coord.RequestStop().IgnoreError();
  coord.Spawn("late", ThrowRuntimeError());
  absl::Status status = co_await coord.Join(kBound, asio::use_awaitable);
  EXPECT_TRUE(status.ok()) << status;
}

// ---------------------------------------------------------------------------
// Loop.

CO_TEST(CoordinatorLoop, CallsFnRepeatedlyUntilStop) {
  Coordinator coord(co_test::Io().get_executor());
  int count = 0;
  coord.Loop("counter", 1ms, [&] {
    if (++count == 3) coord.RequestStop().IgnoreError();
    return absl::OkStatus();
  });
  absl::Status status = co_await coord.Join(kBound, asio::use_awaitable);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(count, 3);
}

CO_TEST(CoordinatorLoop, FnErrorRequestsStop) {
  Coordinator coord(co_test::Io().get_executor());
  int count = 0;
  coord.Loop("counter", 1ms, [&] {
    return ++count == 2 ? absl::InternalError("bad tick") : absl::OkStatus();
  });
  absl::Status status = co_await coord.Join(kBound, asio::use_awaitable);
  EXPECT_EQ(status, absl::InternalError("bad tick"));
  EXPECT_EQ(count, 2);
}

CO_TEST(CoordinatorLoop, StopCancelsTheWaitBetweenCalls) {
  auto& io = co_test::Io();
  Coordinator coord(io.get_executor());
  Event called(io, 1);
  int count = 0;
  coord.Loop("hourly", std::chrono::hours(1), [&] {
    ++count;
    called.try_send(error_code());
    return absl::OkStatus();
  });
  co_await called.async_receive(asio::use_awaitable);
  coord.RequestStop().IgnoreError();
  // Were the hour-long wait not cancelled, the grace period would expire.
  absl::Status status = co_await coord.Join(kBound, asio::use_awaitable);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(count, 1);
}

// The public contract's spelling, Loop(interval, fn), and a fn that
// returns nothing (TensorFlow's LooperThread target): both loop until a
// stop; an exception from a void fn is the stop's error, naming the task.
CO_TEST(CoordinatorLoop, TakesTheContractsUnnamedFormAndAVoidFunction) {
  Coordinator coord(co_test::Io().get_executor());
  int unnamed = 0;
  int returning_nothing = 0;
  coord.Loop(1ms, [&] {
    ++unnamed;
    return absl::OkStatus();
  });
  coord.Loop("void", 1ms, [&] {
    if (++returning_nothing == 3) throw std::runtime_error("third tick");
  });
  absl::Status status = co_await coord.Join(kBound, asio::use_awaitable);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_TRUE(
      absl::StrContains(status.message(), "task 'void' threw: third tick"))
      << status;
  EXPECT_EQ(returning_nothing, 3);
  EXPECT_GE(unnamed, 1);
}

}  // namespace
}  // namespace cosession::coordinator_test
