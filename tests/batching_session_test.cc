// BatchingSession: the batcher's rules, each driven by manual triggers (a
// TestWait op holds a batch's run until the test releases it), never by
// sleeps: full batches, the timeout, padding, a full queue, deadlines and
// cancellation in the queue and during a batch, the early close for a
// deadline, bad requests, and exactly-once completion under a seeded storm
// of cancellations and deadlines.
#include "cosession/serving/batching_session.h"

#include <gtest/gtest.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/channel.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "cosession/graph/ops.h"
#include "tests/co_test.h"
#include "tests/test_ops.h"
#include "tests/test_util.h"

namespace cosession::batching_session_test {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using testing::TestEvents;
using testing::TestRuntime;
using Result = BatchingSession::Result;

// How a run of the model is held before it answers.
enum class Hold {
  kNone,
  kUntilReleased,  // until the test sends a trigger token (TestWait)
  kUntilPaired,    // until another run's kernel runs beside it (TestPair)
};

// y = 2 x, x float [?, 2], each run held as `hold` says (`gated`: until
// released).
struct Model {
  explicit Model(bool gated)
      : Model(gated ? Hold::kUntilReleased : Hold::kNone) {}
  explicit Model(Hold hold) {
    x = ops::Placeholder(g, DType::kFloat, TensorShape{-1, 2}, "x");
    y = ops::Mul(g, x, ops::Const(g, 2.0f), "doubled");
    if (hold == Hold::kUntilReleased) {
      y = ops::Mul(g, y, testing::TestWait(g, "gate"), "y");
    } else if (hold == Hold::kUntilPaired) {
      y = ops::Mul(g, y, testing::TestPair(g, {x}, "pair"), "y");
    }
    g.Finalize();
    signature.inputs["x"] = {
        .tensor = x, .dtype = DType::kFloat, .shape = x.shape()};
    signature.outputs["y"] = {
        .tensor = y, .dtype = DType::kFloat, .shape = y.shape()};
    session = std::make_unique<Session>(g, TestRuntime());
  }
  Graph g;
  Output x, y;
  Signature signature;
  std::unique_ptr<Session> session;
};

// `n` rows [v, v + 0.5] with v = first, first + 1, ...
NamedTensors Rows(int n, float first) {
  std::vector<float> values;
  for (int i = 0; i < n; ++i) {
    values.push_back(first + static_cast<float>(i));
    values.push_back(first + static_cast<float>(i) + 0.5f);
  }
  return {{"x", Tensor::FromVector(values, TensorShape{n, 2})}};
}

// What the model answers for Rows(n, first).
std::string Doubled(int n, float first) {
  Tensor want = Rows(n, first).at("x");
  for (float& v : want.mutable_flat<float>()) v *= 2;
  return want.DebugString(100);
}

// Requests whose completions are recorded (and counted) on the test's
// io_context; `done` says which one completed.
struct Calls {
  explicit Calls(int n) : results(n), completions(n, 0) {}
  std::vector<Result> results;
  std::vector<int> completions;
  int off_thread = 0;  // completions not on the handler's executor
  asio::experimental::channel<void(boost::system::error_code, int)> done{
      co_test::Io(), 4096};

  void Submit(BatchingSession& batcher, int i, NamedTensors inputs,
              RunOptions options = {}, asio::cancellation_slot slot = {}) {
    batcher.Run(
        std::move(inputs), options,
        asio::bind_cancellation_slot(
            slot, asio::bind_executor(co_test::Io(), [this, i](Result r) {
              if (!co_test::Io().get_executor().running_in_this_thread()) {
                ++off_thread;
              }
              results[i] = std::move(r);
              ++completions[i];
              done.try_send(boost::system::error_code{}, i);
            })));
  }
  // The index of the next request to complete.
  asio::awaitable<int> Next() {
    co_return co_await done.async_receive(asio::use_awaitable);
  }
  asio::awaitable<void> Expect(int i) {
    const int got = co_await Next();
    EXPECT_EQ(got, i) << "request " << got << " completed before " << i;
  }
};

std::unique_ptr<BatchingSession> MakeBatcher(Model& m, BatchingOptions o) {
  auto created = BatchingSession::Create(*m.session, m.signature, o);
  EXPECT_TRUE(created.ok()) << created.status();
  return created.ok() ? *std::move(created) : nullptr;
}

// The gate op of a running batch started (its run holds until Release).
asio::awaitable<void> Started(TestEvents& events) {
  (void)co_await events.started.async_receive(asio::use_awaitable);
}
asio::awaitable<void> Release(TestEvents& events) {
  co_await events.trigger.async_send({}, asio::use_awaitable);
}

CO_TEST(BatchingSession, AFullBatchRunsAtOnceAndEachCallerGetsItsRows) {
  Model m(false);
  auto batcher = MakeBatcher(m, {.max_batch_size = 4, .batch_timeout = 1h});
  CO_ASSERT_TRUE(batcher != nullptr);
  Calls calls(3);
  calls.Submit(*batcher, 0, Rows(1, 10));
  calls.Submit(*batcher, 1, Rows(2, 20));
  calls.Submit(*batcher, 2, Rows(1, 30));  // 4 rows: full, no waiting
  for (int i = 0; i < 3; ++i) (void)co_await calls.Next();
  CO_ASSERT_TRUE(calls.results[1].ok());
  EXPECT_EQ(calls.results[0]->at("y").DebugString(100), Doubled(1, 10));
  EXPECT_EQ(calls.results[1]->at("y").DebugString(100), Doubled(2, 20));
  EXPECT_EQ(calls.results[2]->at("y").DebugString(100), Doubled(1, 30));
  const BatchingStats stats = batcher->stats();
  EXPECT_EQ(stats.batches, 1);
  EXPECT_EQ(stats.batch_sizes, (std::map<int64_t, int64_t>{{4, 1}}));
  EXPECT_EQ(stats.batched_requests, 3);
  EXPECT_EQ(calls.off_thread, 0);
}

CO_TEST(BatchingSession,
        APartialBatchRunsWhenItsOldestRequestWaitedTheTimeout) {
  Model m(false);
  auto batcher = MakeBatcher(m, {.max_batch_size = 8, .batch_timeout = 2ms});
  CO_ASSERT_TRUE(batcher != nullptr);
  Calls calls(1);
  calls.Submit(*batcher, 0, Rows(3, 1));
  co_await calls.Expect(0);
  CO_ASSERT_OK(calls.results[0].status());
  EXPECT_EQ(calls.results[0]->at("y").DebugString(100), Doubled(3, 1));
  const BatchingStats stats = batcher->stats();
  EXPECT_EQ(stats.batch_sizes, (std::map<int64_t, int64_t>{{3, 1}}));
  EXPECT_GE(stats.max_queue_delay, 2ms);
}

CO_TEST(BatchingSession, ABatchIsPaddedUpToTheNextAllowedSize) {
  TestEvents events;
  Model m(true);
  auto batcher = MakeBatcher(m, {.max_batch_size = 4,
                                 .batch_timeout = 0us,
                                 .allowed_batch_sizes = {2, 4}});
  CO_ASSERT_TRUE(batcher != nullptr);
  Calls calls(4);
  calls.Submit(*batcher, 0, Rows(1, 0));
  co_await Started(events);  // request 0 runs alone: one batch thread
  calls.Submit(*batcher, 1, Rows(1, 10));
  calls.Submit(*batcher, 2, Rows(1, 20));
  calls.Submit(*batcher, 3, Rows(1, 30));
  co_await Release(events);
  co_await calls.Expect(0);
  co_await Started(events);  // 1, 2 and 3 together
  co_await Release(events);
  for (int i = 1; i < 4; ++i) co_await calls.Expect(i);
  for (int i = 1; i < 4; ++i) {
    CO_ASSERT_OK(calls.results[i].status());
    EXPECT_EQ(calls.results[i]->at("y").DebugString(100),
              Doubled(1, static_cast<float>(10 * i)));
    EXPECT_EQ(calls.results[i]->at("y").shape().dim_size(0), 1);
  }
  const BatchingStats stats = batcher->stats();
  EXPECT_EQ(stats.batch_sizes, (std::map<int64_t, int64_t>{{2, 1}, {4, 1}}));
  EXPECT_EQ(stats.padding_rows, 2);
}

CO_TEST(BatchingSession, AFullQueueAnswersUnavailableAtOnce) {
  TestEvents events;
  Model m(true);
  auto batcher = MakeBatcher(
      m,
      {.max_batch_size = 2, .batch_timeout = 0us, .max_enqueued_batches = 1});
  CO_ASSERT_TRUE(batcher != nullptr);
  Calls calls(3);
  calls.Submit(*batcher, 0, Rows(1, 0));
  co_await Started(events);
  calls.Submit(*batcher, 1, Rows(2, 10));  // fills the queue (2 rows)
  calls.Submit(*batcher, 2, Rows(1, 20));
  co_await calls.Expect(2);  // while request 0's batch still runs
  EXPECT_EQ(calls.results[2].status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(calls.results[2].status().message(), "full"));
  EXPECT_EQ(batcher->stats().queued_rows, 2);
  co_await Release(events);
  co_await calls.Expect(0);
  co_await Started(events);
  co_await Release(events);
  co_await calls.Expect(1);
  EXPECT_TRUE(calls.results[1].ok());
  EXPECT_EQ(batcher->stats().rejected_full, 1);
}

CO_TEST(BatchingSession, ADeadlineRemovesAQueuedRequestWhileAnotherBatchRuns) {
  TestEvents events;
  Model m(true);
  auto batcher = MakeBatcher(m, {.max_batch_size = 4, .batch_timeout = 0us});
  CO_ASSERT_TRUE(batcher != nullptr);
  Calls calls(2);
  calls.Submit(*batcher, 0, Rows(1, 0));
  co_await Started(events);
  calls.Submit(*batcher, 1, Rows(1, 10), {.timeout = 20ms});
  co_await calls.Expect(1);
  EXPECT_EQ(calls.results[1].status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(calls.completions[0], 0);  // the running batch is still held
  EXPECT_EQ(batcher->stats().queued_requests, 0);
  co_await Release(events);
  co_await calls.Expect(0);
  EXPECT_TRUE(calls.results[0].ok());
  EXPECT_EQ(batcher->stats().batches, 1);  // request 1 never ran
  EXPECT_EQ(batcher->stats().deadline_exceeded, 1);
}

CO_TEST(BatchingSession, ADeadlineDuringItsBatchDiscardsOnlyItsSlice) {
  TestEvents events;
  Model m(true);
  auto batcher = MakeBatcher(m, {.max_batch_size = 2, .batch_timeout = 1h});
  CO_ASSERT_TRUE(batcher != nullptr);
  Calls calls(2);
  calls.Submit(*batcher, 0, Rows(1, 0), {.timeout = 30ms});
  calls.Submit(*batcher, 1, Rows(1, 10));
  co_await Started(events);  // one batch of both
  co_await calls.Expect(0);
  EXPECT_EQ(calls.results[0].status().code(),
            absl::StatusCode::kDeadlineExceeded);
  co_await Release(events);
  co_await calls.Expect(1);
  CO_ASSERT_OK(calls.results[1].status());
  EXPECT_EQ(calls.results[1]->at("y").DebugString(100), Doubled(1, 10));
  EXPECT_EQ(calls.completions[0], 1);
}

CO_TEST(BatchingSession, CancellingACallerRemovesItsQueuedRequest) {
  TestEvents events;
  Model m(true);
  auto batcher = MakeBatcher(m, {.max_batch_size = 4, .batch_timeout = 0us});
  CO_ASSERT_TRUE(batcher != nullptr);
  Calls calls(2);
  asio::cancellation_signal hang_up;
  calls.Submit(*batcher, 0, Rows(1, 0));
  co_await Started(events);
  calls.Submit(*batcher, 1, Rows(1, 10), {}, hang_up.slot());
  // Through the io_context, as a client's disconnect would arrive.
  co_await asio::post(co_test::Io(), asio::use_awaitable);
  hang_up.emit(asio::cancellation_type::terminal);
  co_await calls.Expect(1);
  EXPECT_EQ(calls.results[1].status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(calls.completions[0], 0);
  co_await Release(events);
  co_await calls.Expect(0);
  EXPECT_TRUE(calls.results[0].ok());
  const BatchingStats stats = batcher->stats();
  EXPECT_EQ(stats.batches, 1);
  EXPECT_EQ(stats.cancelled, 1);
  EXPECT_EQ(stats.queued_requests, 0);
}

// A request cancelled while it waits leaves the queue with its rows: the
// batch formed after it gives every other caller its own rows.
CO_TEST(BatchingSession, ACancelledRequestsRowsReachNoOtherCaller) {
  TestEvents events;
  Model m(true);
  auto batcher = MakeBatcher(m, {.max_batch_size = 4, .batch_timeout = 0us});
  CO_ASSERT_TRUE(batcher != nullptr);
  Calls calls(5);
  calls.Submit(*batcher, 0, Rows(1, 0));
  co_await Started(events);  // one batch thread: the others wait
  asio::cancellation_signal hang_up;
  calls.Submit(*batcher, 1, Rows(1, 10));
  calls.Submit(*batcher, 2, Rows(1, 20), {}, hang_up.slot());
  calls.Submit(*batcher, 3, Rows(1, 30));
  co_await asio::post(co_test::Io(), asio::use_awaitable);
  hang_up.emit(asio::cancellation_type::terminal);
  co_await calls.Expect(2);
  EXPECT_EQ(calls.results[2].status().code(), absl::StatusCode::kCancelled);
  calls.Submit(*batcher, 4, Rows(1, 40));
  co_await Release(events);
  co_await calls.Expect(0);
  co_await Started(events);  // 1, 3 and 4 together
  co_await Release(events);
  for (int k = 0; k < 3; ++k) (void)co_await calls.Next();
  for (int i : {0, 1, 3, 4}) {
    CO_ASSERT_OK(calls.results[i].status());
    EXPECT_EQ(calls.results[i]->at("y").DebugString(100),
              Doubled(1, static_cast<float>(10 * i)))
        << "request " << i;
  }
  EXPECT_EQ(batcher->stats().batch_sizes,
            (std::map<int64_t, int64_t>{{1, 1}, {3, 1}}));
}

CO_TEST(BatchingSession, CancellingACallerDuringItsBatchLeavesTheOthersWhole) {
  TestEvents events;
  Model m(true);
  auto batcher = MakeBatcher(m, {.max_batch_size = 3, .batch_timeout = 1h});
  CO_ASSERT_TRUE(batcher != nullptr);
  Calls calls(3);
  asio::cancellation_signal hang_up;
  calls.Submit(*batcher, 0, Rows(1, 0));
  calls.Submit(*batcher, 1, Rows(1, 10), {}, hang_up.slot());
  calls.Submit(*batcher, 2, Rows(1, 20));
  co_await Started(events);
  hang_up.emit(asio::cancellation_type::terminal);
  co_await calls.Expect(1);
  EXPECT_EQ(calls.results[1].status().code(), absl::StatusCode::kCancelled);
  co_await Release(events);
  co_await calls.Next();
  co_await calls.Next();
  CO_ASSERT_TRUE(calls.results[0].ok() && calls.results[2].ok());
  EXPECT_EQ(calls.results[0]->at("y").DebugString(100), Doubled(1, 0));
  EXPECT_EQ(calls.results[2]->at("y").DebugString(100), Doubled(1, 20));
  EXPECT_EQ(calls.completions, (std::vector<int>{1, 1, 1}));
}

// Request 0, alone in its batch, is cancelled -- once its run started
// (`after_start`), or at once, so that its cancellation reaches the batcher
// before the run was started off the strand -- and its run must stop
// without its gate being released: with one batch thread, request 1 starts
// only if it did.
asio::awaitable<void> ExpectALeftBatchToStop(bool after_start) {
  TestEvents events;
  Model m(true);
  auto batcher = MakeBatcher(m, {.max_batch_size = 1, .batch_timeout = 0us});
  CO_ASSERT_TRUE(batcher != nullptr);
  Calls calls(2);
  asio::cancellation_signal hang_up;
  calls.Submit(*batcher, 0, Rows(1, 0), {}, hang_up.slot());
  if (after_start) co_await Started(events);
  hang_up.emit(asio::cancellation_type::terminal);
  co_await calls.Expect(0);
  EXPECT_EQ(calls.results[0].status().code(), absl::StatusCode::kCancelled);
  if (!after_start) co_await Started(events);  // request 0's run
  calls.Submit(*batcher, 1, Rows(1, 10));
  co_await Started(events);
  co_await Release(events);
  co_await calls.Expect(1);
  EXPECT_TRUE(calls.results[1].ok());
}

CO_TEST(BatchingSession, ABatchWhoseEveryCallerLeftStopsRunning) {
  co_await ExpectALeftBatchToStop(/*after_start=*/true);
}

CO_TEST(BatchingSession, ABatchLeftBeforeItsRunStartedStopsRunning) {
  co_await ExpectALeftBatchToStop(/*after_start=*/false);
}

CO_TEST(BatchingSession,
        ABatchClosesEarlyRatherThanLetARequestMissItsDeadline) {
  Model m(false);
  auto batcher = MakeBatcher(m, {.max_batch_size = 8, .batch_timeout = 1h});
  CO_ASSERT_TRUE(batcher != nullptr);
  Calls calls(1);
  calls.Submit(*batcher, 0, Rows(2, 5), {.timeout = 300ms});
  co_await calls.Expect(0);
  CO_ASSERT_OK(calls.results[0].status());
  EXPECT_EQ(calls.results[0]->at("y").DebugString(100), Doubled(2, 5));
}

// A batch held until its requests' deadlines passed says nothing of how
// long a run takes: a later request with a deadline still waits for a
// partner, as it would before any batch ran.
CO_TEST(BatchingSession, ACancelledBatchsWaitIsNotTakenForARunTime) {
  TestEvents events;
  Model m(true);
  auto batcher = MakeBatcher(m, {.max_batch_size = 2, .batch_timeout = 1h});
  CO_ASSERT_TRUE(batcher != nullptr);
  Calls calls(4);
  calls.Submit(*batcher, 0, Rows(1, 0), {.timeout = 200ms});
  calls.Submit(*batcher, 1, Rows(1, 10), {.timeout = 200ms});
  co_await Started(events);  // held past both deadlines
  for (int k = 0; k < 2; ++k) {
    const int i = co_await calls.Next();
    EXPECT_EQ(calls.results[i].status().code(),
              absl::StatusCode::kDeadlineExceeded);
  }
  // The cancelled run returns (its gate's wait is cancelled).
  while (batcher->stats().running_batches > 0) {
    co_await asio::post(co_test::Io(), asio::use_awaitable);
  }
  // Had the 200 ms counted as a run, request 2 (300 ms) would run alone.
  calls.Submit(*batcher, 2, Rows(1, 20), {.timeout = 300ms});
  BatchingStats scheduled = batcher->stats();
  while (scheduled.queued_requests + scheduled.running_batches == 0) {
    co_await asio::post(co_test::Io(), asio::use_awaitable);
    scheduled = batcher->stats();
  }
  EXPECT_EQ(scheduled.queued_requests, 1) << "request 2 did not wait";
  calls.Submit(*batcher, 3, Rows(1, 30), {.timeout = 300ms});
  co_await Started(events);
  co_await Release(events);
  (void)co_await calls.Next();
  if (calls.completions[3] == 0) {  // request 2 ran alone
    co_await Started(events);
    co_await Release(events);
    (void)co_await calls.Next();
  }
  for (int i : {2, 3}) {
    CO_ASSERT_OK(calls.results[i].status());
    EXPECT_EQ(calls.results[i]->at("y").DebugString(100),
              Doubled(1, static_cast<float>(10 * i)));
  }
  EXPECT_EQ(batcher->stats().batch_sizes, (std::map<int64_t, int64_t>{{2, 2}}));
}

// A request's outputs are taken out of its batch's when its handler runs
// (on the caller's thread), which may be after the batcher and its state
// are gone: the answer must still name and hold its outputs.
TEST(BatchingSession, AnswersDeliveredAfterTheBatcherIsGoneAreWhole) {
  Model m(false);
  std::promise<void> state_gone;
  std::shared_ptr<const void> owner(new int(0), [&state_gone](const int* p) {
    delete p;
    state_gone.set_value();
  });
  auto created = BatchingSession::Create(
      *m.session, m.signature, {.max_batch_size = 3, .batch_timeout = 1h},
      owner);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<BatchingSession> batcher = *std::move(created);
  owner.reset();
  // Requests 0 and 1 answer on `late`, run only at the end; request 2, the
  // batch's last (its handlers are posted in order), on `signal`.
  asio::io_context late, signal;
  std::vector<Result> results(2);
  for (int i = 0; i < 2; ++i) {
    batcher->Run(Rows(1, 10.0f * static_cast<float>(i)), {},
                 asio::bind_executor(late, [&results, i](Result r) {
                   results[i] = std::move(r);
                 }));
  }
  bool signalled = false;
  batcher->Run(Rows(1, 20), {}, asio::bind_executor(signal, [&](Result r) {
                 EXPECT_TRUE(r.ok()) << r.status();
                 signalled = true;
               }));
  signal.run_for(std::chrono::seconds(20));
  ASSERT_TRUE(signalled) << "the batch did not complete within 20 s";
  batcher.reset();
  ASSERT_EQ(state_gone.get_future().wait_for(std::chrono::seconds(20)),
            std::future_status::ready)
      << "the batcher's state outlived its last work";
  late.run_for(std::chrono::seconds(20));
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].status();
    ASSERT_EQ(results[i]->size(), 1u);
    EXPECT_EQ(results[i]->at("y").DebugString(100),
              Doubled(1, 10.0f * static_cast<float>(i)));
  }
}

// Batches run outside the batcher's strand: while one runs (here blocked
// in a synchronous kernel until a second batch's kernel runs beside it),
// the strand goes on queueing and starting others. Run on the strand, the
// first batch would hold it, the second would never start, and TestPair
// would fail after 10 s alone.
CO_TEST(BatchingSession, ARunningBatchDoesNotHoldUpTheNextOne) {
  TestEvents events;
  Model m(Hold::kUntilPaired);
  auto batcher = MakeBatcher(
      m, {.max_batch_size = 1, .batch_timeout = 0us, .num_batch_threads = 2});
  CO_ASSERT_TRUE(batcher != nullptr);
  Calls calls(2);
  calls.Submit(*batcher, 0, Rows(1, 1));
  calls.Submit(*batcher, 1, Rows(1, 2));
  for (int i = 0; i < 2; ++i) (void)co_await calls.Next();
  for (int i = 0; i < 2; ++i) {
    CO_ASSERT_OK(calls.results[i].status());
    EXPECT_EQ(calls.results[i]->at("y").DebugString(100),
              Doubled(1, static_cast<float>(i + 1)));
  }
}

CO_TEST(BatchingSession, BadRequestsFailAtOnceNamingTheInput) {
  Model m(false);
  auto batcher = MakeBatcher(m, {.max_batch_size = 4, .batch_timeout = 1h});
  CO_ASSERT_TRUE(batcher != nullptr);
  struct Bad {
    NamedTensors inputs;
    std::string message_part;
    RunOptions options{};
  };
  std::vector<Bad> cases;
  NamedTensors unknown = Rows(1, 0);
  unknown["z"] = Tensor::Scalar<float>(1);
  cases.push_back({unknown, "unknown input 'z'"});
  // As many inputs as the signature has, one of them misnamed.
  cases.push_back(
      {{{"w", Tensor(DType::kFloat, TensorShape{1, 2})}}, "unknown input 'w'"});
  cases.push_back({{}, "missing input 'x'"});
  cases.push_back({{{"x", Tensor(DType::kInt32, TensorShape{1, 2})}},
                   "input 'x' has dtype int32"});
  cases.push_back({{{"x", Tensor(DType::kFloat, TensorShape{1, 3})}},
                   "input 'x' has shape [1,3]"});
  cases.push_back(
      {{{"x", Tensor::Scalar<float>(1)}}, "input 'x' has shape []"});
  cases.push_back({{{"x", Tensor(DType::kFloat, TensorShape{0, 2})}},
                   "input 'x' has no rows"});
  cases.push_back({Rows(5, 0), "5 rows, more than max_batch_size 4"});
  cases.push_back({Rows(1, 0),
                   "RunOptions.inter_op_thread_pool is 2",
                   {.inter_op_thread_pool = 2}});
  Calls calls(static_cast<int>(cases.size()));
  for (size_t i = 0; i < cases.size(); ++i) {
    bool returned = false;
    batcher->Run(
        cases[i].inputs, cases[i].options,
        asio::bind_executor(co_test::Io(), [&calls, &returned, i](Result r) {
          EXPECT_TRUE(returned) << "completed inside Run";
          calls.results[i] = std::move(r);
          ++calls.completions[i];
          calls.done.try_send(boost::system::error_code{}, static_cast<int>(i));
        }));
    returned = true;
    co_await calls.Expect(static_cast<int>(i));
    EXPECT_EQ(calls.results[i].status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(calls.results[i].status().message(),
                                  cases[i].message_part))
        << calls.results[i].status();
  }
  EXPECT_EQ(batcher->stats().rejected_invalid,
            static_cast<int64_t>(cases.size()));
  EXPECT_EQ(batcher->stats().requests, 0);
}

TEST(BatchingSession, BadOptionsAreRefusedNamingThem) {
  Model m(false);
  struct Bad {
    BatchingOptions options;
    std::string message_part;
  };
  const std::vector<Bad> cases = {
      {{.max_batch_size = 0}, "max_batch_size"},
      {{.batch_timeout = -1us}, "batch_timeout"},
      {{.max_enqueued_batches = 0}, "max_enqueued_batches"},
      {{.num_batch_threads = 0}, "num_batch_threads"},
      {{.max_batch_size = 8, .allowed_batch_sizes = {4, 2, 8}},
       "allowed_batch_sizes"},
      {{.max_batch_size = 8, .allowed_batch_sizes = {2, 4}},
       "must equal max_batch_size"},
  };
  for (const Bad& c : cases) {
    auto created = BatchingSession::Create(*m.session, m.signature, c.options);
    EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(created.status().message(), c.message_part))
        << created.status();
  }
}

using DoneChannel =
    asio::experimental::channel<void(boost::system::error_code)>;

// Emits `signal` after `hops` trips through the io_context (a cancellation
// at a seeded point of the request's life), then says so on `finished`.
asio::awaitable<void> CancelAfter(asio::cancellation_signal* signal, int hops,
                                  DoneChannel* finished) {
  for (int i = 0; i < hops; ++i) {
    co_await asio::post(co_test::Io(), asio::use_awaitable);
  }
  signal->emit(asio::cancellation_type::terminal);
  finished->try_send(boost::system::error_code{});
}

CO_TEST(BatchingSession, EveryRequestCompletesExactlyOnceUnderAStorm) {
  Model m(false);
  auto batcher = MakeBatcher(m, {.max_batch_size = 8,
                                 .batch_timeout = 200us,
                                 .max_enqueued_batches = 4,
                                 .num_batch_threads = 2});
  CO_ASSERT_TRUE(batcher != nullptr);
  constexpr int kRequests = 400;
  std::mt19937 random(20261201);
  Calls calls(kRequests);
  std::vector<asio::cancellation_signal> hang_ups(kRequests);
  DoneChannel cancels_done(co_test::Io(), kRequests);
  int cancels = 0;
  for (int i = 0; i < kRequests; ++i) {
    RunOptions options;
    const int fate = static_cast<int>(random() % 3);
    if (fate == 1) {
      options.timeout = std::chrono::microseconds(random() % 2000);
    }
    calls.Submit(
        *batcher, i,
        Rows(1 + static_cast<int>(random() % 3), static_cast<float>(i)),
        options, hang_ups[i].slot());
    if (fate == 2) {
      ++cancels;
      asio::co_spawn(co_test::Io(),
                     CancelAfter(&hang_ups[i], static_cast<int>(random() % 40),
                                 &cancels_done),
                     asio::detached);
    }
    if (random() % 4 == 0)
      co_await asio::post(co_test::Io(), asio::use_awaitable);
  }
  for (int i = 0; i < kRequests; ++i) (void)co_await calls.Next();
  // The cancellers use `hang_ups`, which lives in this frame.
  for (int i = 0; i < cancels; ++i) {
    co_await cancels_done.async_receive(asio::use_awaitable);
  }
  int ok = 0;
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(calls.completions[i], 1) << "request " << i;
    const Result& r = calls.results[i];
    if (r.ok()) {
      ++ok;
      const int rows = static_cast<int>(r->at("y").shape().dim_size(0));
      EXPECT_EQ(r->at("y").DebugString(100),
                Doubled(rows, static_cast<float>(i)));
    } else {
      EXPECT_TRUE(absl::IsCancelled(r.status()) ||
                  absl::IsDeadlineExceeded(r.status()) ||
                  absl::IsUnavailable(r.status()))
          << r.status();
    }
  }
  EXPECT_GT(ok, 0);
  EXPECT_EQ(calls.off_thread, 0);
  const BatchingStats stats = batcher->stats();
  EXPECT_EQ(stats.queued_requests, 0);
  EXPECT_EQ(stats.queued_rows, 0);
  EXPECT_EQ(
      stats.cancelled + stats.deadline_exceeded + stats.rejected_full + ok,
      kRequests);
}

}  // namespace
}  // namespace cosession::batching_session_test
