// Prefetcher: a bounded buffer of a chain's results, filled ahead by a
// producer -- the engine of the Prefetch stage and of the graph's iterator
// (pipeline/dataset_iterator.h).
//
// The producer is a coordinated task of IteratorContext::coordinator
// ("prefetch <name>") that runs the chain on a strand of the pool of its
// own: off the coordinator's strand and off the consumer's path. It first
// skips `skip_first` elements (a resumed position), then sends each result
// into a channel of `buffer_size` results, waiting while it is full (so a
// slow consumer slows the source), and ends after the end of the input or
// an error, which it queues behind the results before it.
// It stops early, dropping what is buffered, when
//   * the coordinator stops (its tasks are cancelled): every wait of the
//     chain is cancelled on the producer's strand;
//   * Shutdown() is called (the consumer is gone);
//   * its task never runs (spawned after a stop).
// Then Receive() returns the producer's end: Cancelled("input pipeline
// stopped") unless an error came first.
//
// Thread safety: TryReceive, Receive and Shutdown may be called from any
// thread, concurrently (each result goes to exactly one receiver).
#ifndef COSESSION_PIPELINE_DETAIL_PREFETCHER_H_
#define COSESSION_PIPELINE_DETAIL_PREFETCHER_H_

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "cosession/pipeline/dataset.h"

namespace cosession::detail {

class PrefetcherState;
class ResultBuffer;

class Prefetcher {
 public:
  using Result = ElementIterator::Result;

  // FailedPrecondition when context.coordinator is null.
  static absl::StatusOr<std::shared_ptr<Prefetcher>> Start(
      std::unique_ptr<ElementIterator> input, int64_t buffer_size,
      const IteratorContext& context, int64_t skip_first, std::string name);
  ~Prefetcher();

  // A buffered result, if one is there.
  std::optional<Result> TryReceive();
  // The next result; a cancelled wait completes with Cancelled.
  boost::asio::awaitable<Result> Receive();
  // Stops the producer (idempotent).
  void Shutdown();
  // The buffer receivers take from: its AsyncPop is Receive as an
  // asynchronous operation, for waiting on several prefetchers at once (a
  // parallel group's wait_for_one: pipeline/interleave.cc).
  const std::shared_ptr<ResultBuffer>& buffer() const;

  explicit Prefetcher(std::shared_ptr<PrefetcherState> state);

 private:
  std::shared_ptr<PrefetcherState> state_;
};

}  // namespace cosession::detail

#endif  // COSESSION_PIPELINE_DETAIL_PREFETCHER_H_
