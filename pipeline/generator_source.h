// Sources fed by the user's own code: a coroutine generator, and a channel
// that other coroutines send elements into.
//
//   Dataset requests = FromGenerator([&]() -> awaitable<std::optional<Element>>
//   {
//     auto line = co_await ReadRequest(socket);      // the user's I/O
//     if (!line) co_return std::nullopt;             // the end
//     co_return MakeElement({Parse(*line)});
//   });
//
//   auto channel = std::make_shared<ElementChannel>(pool, /*capacity=*/64);
//   Dataset fed = FromChannel(channel);
//   co_await channel->Send(element);   // waits while 64 are queued
//   channel->Close();                  // the dataset ends after the queue
//
// FromGenerator calls `next` for each element, awaiting it in the
// iterator's coroutine (so on the consumer's executor, or a Prefetch's
// strand); nullopt ends the stream. An exception from it ends the stream
// with its status (a StatusError's own, else Internal naming the source).
// Given an ElementGenerator, each iterator calls that same function: it is
// the user's to make a second pass meaningful or not. Given an
// ElementGeneratorFactory, each iterator (each pass of a Repeat) calls it
// once, in MakeIterator, for a generator of its own: the stream restarts, as
// tf.data's from_generator does. An exception from the factory fails
// MakeIterator with its status, as one from `next` ends the stream.
//
// ElementChannel is bounded: Send waits while `capacity` elements are
// queued (backpressure on the sender), and fails with FailedPrecondition
// after Close. Receiving drains what was queued, then ends. A cancelled
// Send or receive completes with Cancelled. Nothing Send reported as sent
// before Close was called is lost; a Send racing Close (from another
// thread) may report OK and land after the end, where it is dropped: close
// from the sending side once its last Send completed.
//
// Neither source is deterministic: no exact resume.
//
// Thread safety: ElementChannel's methods may be called from any thread,
// concurrently. A FromChannel dataset has one iterator (a second
// MakeIterator is FailedPrecondition).
#ifndef COSESSION_PIPELINE_GENERATOR_SOURCE_H_
#define COSESSION_PIPELINE_GENERATOR_SOURCE_H_

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <functional>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "cosession/async/runtime.h"
#include "cosession/pipeline/dataset.h"

namespace cosession {

using ElementGenerator =
    std::function<boost::asio::awaitable<std::optional<Element>>()>;

// Makes one ElementGenerator per iterator, as tf.data's from_generator calls
// its generator function for each iterator: a Repeat restarts it per pass.
using ElementGeneratorFactory = std::function<ElementGenerator()>;

Dataset FromGenerator(ElementGenerator next, std::string name = "generator");
Dataset FromGenerator(ElementGeneratorFactory make_next,
                      std::string name = "generator");

class ElementChannel {
 public:
  // An empty optional is the end Close queues.
  using Channel = boost::asio::experimental::concurrent_channel<void(
      boost::system::error_code, std::optional<Element>)>;

  ElementChannel(Runtime::executor_type executor, int64_t capacity);

  // Queues `element`, waiting while the channel is full.
  boost::asio::awaitable<absl::Status> Send(Element element);
  // Queues `element` if there is room; false when full or closed.
  bool TrySend(Element element);
  // No more elements: the receiver drains the queue, then ends.
  void Close();

  bool closed() const { return closed_.load(std::memory_order_acquire); }
  Channel& channel() { return channel_; }

 private:
  Channel channel_;
  std::atomic<bool> closed_{false};
};

Dataset FromChannel(std::shared_ptr<ElementChannel> channel,
                    std::string name = "channel");

}  // namespace cosession

#endif  // COSESSION_PIPELINE_GENERATOR_SOURCE_H_
