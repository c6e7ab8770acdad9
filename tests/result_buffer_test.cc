// ResultBuffer (pipeline/detail/result_buffer.h): the prefetcher's bounded
// buffer -- order, the final result, the producer's low-water wake-up,
// consumers that wait, are cancelled, or race each other.
#include "cosession/pipeline/detail/result_buffer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <vector>

namespace cosession::detail {
namespace {

namespace asio = boost::asio;
using Result = ResultBuffer::Result;
using boost::system::error_code;

Result Number(int64_t n) {
  return Result(MakeElement({Tensor::Scalar<int64_t>(n)}));
}
Result End() { return Result(std::optional<Element>()); }

// -1 for the end, -2 for an error, else the element's number.
int64_t Value(const Result& r) {
  if (!r.ok()) return -2;
  if (!r->has_value()) return -1;
  return (*r)->tensor(0).scalar<int64_t>();
}

ResultBuffer::PushOutcome Push(ResultBuffer& buffer, Result r) {
  return buffer.TryPush(r);
}

TEST(ResultBuffer, ResultsComeOutInOrderThenTheEndForEveryLaterTake) {
  auto buffer = std::make_shared<ResultBuffer>(4);
  EXPECT_EQ(Push(*buffer, Number(1)), ResultBuffer::PushOutcome::kDone);
  EXPECT_EQ(Push(*buffer, Number(2)), ResultBuffer::PushOutcome::kDone);
  EXPECT_EQ(Push(*buffer, End()), ResultBuffer::PushOutcome::kDone);
  EXPECT_EQ(Value(*buffer->TryPop()), 1);
  EXPECT_EQ(Value(*buffer->TryPop()), 2);
  EXPECT_EQ(Value(*buffer->TryPop()), -1);
  EXPECT_EQ(Value(*buffer->TryPop()), -1);
  EXPECT_EQ(Value(*buffer->final_result()), -1);
}

TEST(ResultBuffer, AnEmptyBufferHasNothingToTake) {
  auto buffer = std::make_shared<ResultBuffer>(2);
  EXPECT_FALSE(buffer->TryPop().has_value());
  EXPECT_FALSE(buffer->final_result().has_value());
}

// The producer is woken once consumers took half of a full buffer, not
// after each take.
TEST(ResultBuffer, AFullBufferWakesItsProducerAtHalf) {
  asio::io_context io;
  auto buffer = std::make_shared<ResultBuffer>(4);
  for (int i = 0; i < 4; ++i) Push(*buffer, Number(i));
  Result fifth = Number(4);
  ASSERT_EQ(buffer->TryPush(fifth), ResultBuffer::PushOutcome::kFull);
  EXPECT_EQ(Value(fifth), 4);  // left with the producer
  std::optional<error_code> woken;
  buffer->AsyncWaitForSpace(
      asio::bind_executor(io, [&](error_code ec) { woken = ec; }));
  EXPECT_EQ(Value(*buffer->TryPop()), 0);  // 3 left
  io.poll();
  EXPECT_FALSE(woken.has_value());
  EXPECT_EQ(Value(*buffer->TryPop()), 1);  // 2 left: half of 4
  io.poll();
  ASSERT_TRUE(woken.has_value());
  EXPECT_FALSE(*woken);
  EXPECT_EQ(buffer->TryPush(fifth), ResultBuffer::PushOutcome::kDone);
}

TEST(ResultBuffer, AWaitForSpaceWithRoomAlreadyMadeCompletesAtOnce) {
  asio::io_context io;
  auto buffer = std::make_shared<ResultBuffer>(2);
  std::optional<error_code> woken;
  buffer->AsyncWaitForSpace(
      asio::bind_executor(io, [&](error_code ec) { woken = ec; }));
  EXPECT_FALSE(woken.has_value());  // posted, never inline
  io.poll();
  ASSERT_TRUE(woken.has_value());
  EXPECT_FALSE(*woken);
}

// A producer spins for room only for consumers that come back within
// microseconds: twice their gap between takes, or longer for one it just
// woke; never for slow consumers or before their pace is known.
TEST(ResultBuffer, AProducerSpinsForRoomOnlyForConsumersThatTakeQuickly) {
  using std::chrono::nanoseconds;
  const int64_t slow_ns = 2 * nanoseconds(ResultBuffer::kMaxSpin).count();
  EXPECT_EQ(ResultBuffer::SpaceSpinBudget(-1, false), nanoseconds(0));
  EXPECT_EQ(ResultBuffer::SpaceSpinBudget(-1, true), nanoseconds(0));
  EXPECT_EQ(ResultBuffer::SpaceSpinBudget(slow_ns, false), nanoseconds(0));
  EXPECT_EQ(ResultBuffer::SpaceSpinBudget(slow_ns, true), nanoseconds(0));
  EXPECT_EQ(ResultBuffer::SpaceSpinBudget(1500, false), nanoseconds(3000));
  EXPECT_EQ(ResultBuffer::SpaceSpinBudget(1500, true),
            nanoseconds(ResultBuffer::kMaxWakeSpin));
}

// SpinForSpace says true when a push can go ahead (room, or a closed
// buffer that will refuse it), false when the producer should park -- here
// at once, since no consumer's pace is known.
TEST(ResultBuffer, SpinForSpaceSaysWhetherThePushCanGoAhead) {
  auto buffer = std::make_shared<ResultBuffer>(2);
  EXPECT_TRUE(buffer->SpinForSpace());  // empty
  Push(*buffer, Number(1));
  Push(*buffer, Number(2));
  EXPECT_FALSE(buffer->SpinForSpace());  // full, no consumer seen
  EXPECT_EQ(Value(*buffer->TryPop()), 1);
  EXPECT_TRUE(buffer->SpinForSpace());  // room for one
  Push(*buffer, Number(3));
  buffer->Close(End(), /*drop_buffered=*/false);
  EXPECT_TRUE(buffer->SpinForSpace());  // full but closed
  Result late = Number(4);
  EXPECT_EQ(buffer->TryPush(late), ResultBuffer::PushOutcome::kClosed);
}

TEST(ResultBuffer, AWaitingConsumerTakesTheNextResultDirectly) {
  asio::io_context io;
  auto buffer = std::make_shared<ResultBuffer>(2);
  std::optional<Result> got;
  buffer->AsyncPop(asio::bind_executor(io, [&](Result r) { got = r; }));
  io.poll();
  EXPECT_FALSE(got.has_value());
  Push(*buffer, Number(7));
  io.poll();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(Value(*got), 7);
  EXPECT_FALSE(buffer->TryPop().has_value());  // not also buffered
}

// A cancelled consumer leaves the queue of waiters: the next result goes
// to the next one, and none is lost.
TEST(ResultBuffer, ACancelledWaitLeavesTheQueueAndLosesNoResult) {
  asio::io_context io;
  auto buffer = std::make_shared<ResultBuffer>(2);
  asio::cancellation_signal cancel_first;
  std::optional<Result> first, second;
  buffer->AsyncPop(asio::bind_cancellation_slot(
      cancel_first.slot(),
      asio::bind_executor(io, [&](Result r) { first = r; })));
  buffer->AsyncPop(asio::bind_executor(io, [&](Result r) { second = r; }));
  cancel_first.emit(asio::cancellation_type::terminal);
  io.poll();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->status().code(), absl::StatusCode::kCancelled);
  Push(*buffer, Number(3));
  io.poll();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(Value(*second), 3);
}

TEST(ResultBuffer, AnEndHandedToOneWaiterEndsEveryOther) {
  asio::io_context io;
  auto buffer = std::make_shared<ResultBuffer>(2);
  std::vector<int64_t> got;
  for (int i = 0; i < 3; ++i) {
    buffer->AsyncPop(
        asio::bind_executor(io, [&](Result r) { got.push_back(Value(r)); }));
  }
  Push(*buffer, End());
  io.poll();
  EXPECT_EQ(got, (std::vector<int64_t>{-1, -1, -1}));
}

TEST(ResultBuffer, CloseKeepsOrDropsWhatIsBuffered) {
  auto kept = std::make_shared<ResultBuffer>(4);
  Push(*kept, Number(1));
  kept->Close(End(), /*drop_buffered=*/false);
  EXPECT_EQ(Value(*kept->TryPop()), 1);
  EXPECT_EQ(Value(*kept->TryPop()), -1);

  auto dropped = std::make_shared<ResultBuffer>(4);
  Push(*dropped, Number(1));
  dropped->Close(absl::CancelledError("stopped"), /*drop_buffered=*/true);
  Result r = *dropped->TryPop();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(Push(*dropped, Number(2)), ResultBuffer::PushOutcome::kClosed);
}

TEST(ResultBuffer, TheFirstFinalResultWins) {
  auto buffer = std::make_shared<ResultBuffer>(2);
  buffer->Close(absl::DataLossError("bad row"), true);
  buffer->Close(absl::CancelledError("stopped"), true);
  EXPECT_EQ(buffer->TryPop()->status().code(), absl::StatusCode::kDataLoss);
}

TEST(ResultBuffer, CloseWakesTheWaitingConsumersAndTheProducer) {
  asio::io_context io;
  auto buffer = std::make_shared<ResultBuffer>(1);
  std::optional<Result> consumer;
  buffer->AsyncPop(asio::bind_executor(io, [&](Result r) { consumer = r; }));
  io.poll();
  auto full = std::make_shared<ResultBuffer>(1);
  Push(*full, Number(1));
  std::optional<error_code> producer;
  full->AsyncWaitForSpace(
      asio::bind_executor(io, [&](error_code ec) { producer = ec; }));
  buffer->Close(absl::CancelledError("stopped"), true);
  full->Close(absl::CancelledError("stopped"), true);
  io.poll();
  ASSERT_TRUE(consumer.has_value());
  EXPECT_EQ(consumer->status().code(), absl::StatusCode::kCancelled);
  ASSERT_TRUE(producer.has_value());
  EXPECT_EQ(*producer, asio::error::operation_aborted);
}

TEST(ResultBuffer, ACancelledWaitForSpaceCompletesWithAborted) {
  asio::io_context io;
  auto buffer = std::make_shared<ResultBuffer>(1);
  Push(*buffer, Number(1));
  asio::cancellation_signal cancel;
  std::optional<error_code> producer;
  buffer->AsyncWaitForSpace(asio::bind_cancellation_slot(
      cancel.slot(),
      asio::bind_executor(io, [&](error_code ec) { producer = ec; })));
  cancel.emit(asio::cancellation_type::terminal);
  io.poll();
  ASSERT_TRUE(producer.has_value());
  EXPECT_EQ(*producer, asio::error::operation_aborted);
  EXPECT_EQ(Value(*buffer->TryPop()), 1);  // the buffered result stays
}

// One producer thread, two consumer threads that wait: every result is
// taken exactly once, then each consumer sees the end. Bounded in time.
TEST(ResultBuffer, ConcurrentConsumersTakeEachResultExactlyOnce) {
  constexpr int64_t kResults = 20000;
  auto buffer = std::make_shared<ResultBuffer>(8);
  std::vector<std::vector<int64_t>> taken(2);
  // Outlive every thread: the producer's post may still be signalling a
  // consumer's context when that consumer already ran the completion.
  asio::io_context consumer_io[2];
  asio::io_context producer_io;
  auto consume = [&](std::vector<int64_t>& mine, asio::io_context& io) {
    for (;;) {
      std::optional<Result> r = buffer->TryPop();
      if (!r.has_value()) {
        buffer->AsyncPop(asio::bind_executor(io, [&](Result got) { r = got; }));
        io.run();
        io.restart();
      }
      if (Value(*r) < 0) return;
      mine.push_back(Value(*r));
    }
  };
  auto done = std::async(std::launch::async, [&] {
    std::thread a(consume, std::ref(taken[0]), std::ref(consumer_io[0]));
    std::thread b(consume, std::ref(taken[1]), std::ref(consumer_io[1]));
    for (int64_t i = 0; i <= kResults; ++i) {
      Result r = i < kResults ? Number(i) : End();
      while (buffer->TryPush(r) == ResultBuffer::PushOutcome::kFull) {
        if (buffer->SpinForSpace()) continue;
        buffer->AsyncWaitForSpace(
            asio::bind_executor(producer_io, [](error_code) {}));
        producer_io.run();
        producer_io.restart();
      }
    }
    a.join();
    b.join();
  });
  if (done.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    // The threads may still use the buffer: no safe way to go on.
    std::fprintf(stderr, "ConcurrentConsumers: not done within 20 s\n");
    std::fflush(stderr);
    std::_Exit(1);
  }
  std::set<int64_t> all(taken[0].begin(), taken[0].end());
  all.insert(taken[1].begin(), taken[1].end());
  EXPECT_EQ(taken[0].size() + taken[1].size(), static_cast<size_t>(kResults));
  EXPECT_EQ(all.size(), static_cast<size_t>(kResults));
  // Each consumer takes its results in the buffer's order.
  for (const auto& mine : taken) {
    EXPECT_TRUE(std::is_sorted(mine.begin(), mine.end()));
  }
}

}  // namespace
}  // namespace cosession::detail
