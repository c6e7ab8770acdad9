// BatchingSession: concurrent requests of one signature, merged into few
// graph runs -- TensorFlow Serving's batching session, with requests that
// leave the queue the moment their caller stops waiting.
//
//   auto batching = BatchingSession::Create(*model.session, signature,
//                                           {.max_batch_size = 64});
//   absl::StatusOr<NamedTensors> outputs = co_await (*batching)->Run(
//       inputs, options, asio::use_awaitable);
//
// A request is a row batch per signature input (the same number of rows in
// each, at most max_batch_size). Requests wait in one FIFO queue; a batch
// takes requests from its head while their rows fit in max_batch_size and
// runs once a batch thread is free and
//   * it is full (the next request would not fit), or
//   * its oldest request has waited batch_timeout, or
//   * waiting longer would make one of its requests miss its deadline: the
//     batch closes when a request's remaining time falls to twice the
//     recent batch run time (at least 1 ms), or, before any batch's run
//     completed, to half of the request's timeout. Only runs that
//     completed are timed: a cancelled one lasted as long as its requests
//     waited.
// Its inputs are concatenated along dimension 0, padded up to the next of
// allowed_batch_sizes by repeating the last row, run in one Session::Run,
// and every output is split back along dimension 0.
//
// The rules that hold (tests/batching_session_test.cc):
//   * Backpressure: a request that would take the queued rows above
//     max_enqueued_batches * max_batch_size completes with Unavailable at
//     once. The queue never holds more.
//   * Deadline: RunOptions::timeout, counted from the call. When it passes
//     the request completes with DeadlineExceeded at that moment, whether
//     it still waits in the queue (it leaves it) or its batch runs (its
//     slice is discarded). A request's other RunOptions do not apply to
//     the batch it joins (the batch threads run it); an invalid one is
//     InvalidArgument all the same (ValidateRunOptions).
//   * Cancellation: the handler's cancellation slot (any type; e.g. the
//     awaiting coroutine's client went away) completes the request with
//     Cancelled at once, the same way. A batch whose every request left is
//     cancelled itself. Other requests are never delayed or failed by it.
//   * Every request completes exactly once, through its handler's
//     executor, never inline in Run. Its rows of the batch's outputs are
//     copied out there, just before its handler runs.
//   * Bad requests fail at once with InvalidArgument naming the input: an
//     unknown or missing input, a dtype or shape that does not match the
//     signature, inputs with different row counts, no rows or more than
//     max_batch_size rows.
//
// Destroying the BatchingSession completes the requests still queued with
// Cancelled; batches already running finish and deliver.
//
// Thread safety: thread-safe; Run may be called from any thread. The
// scheduling runs on a strand of the Session's Runtime. The Session (and
// its Graph) must outlive the batcher's work -- every request in flight and
// every batch still running -- unless an owner passed to Create keeps them
// alive; requests and batches in flight keep the batcher's own state (and
// that owner) alive.
#ifndef COSESSION_SERVING_BATCHING_SESSION_H_
#define COSESSION_SERVING_BATCHING_SESSION_H_

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "cosession/async/grouped_completion.h"
#include "cosession/async/run_args.h"
#include "cosession/async/session.h"
#include "cosession/serving/saved_model.h"

namespace cosession {

using NamedTensors = std::map<std::string, Tensor>;

// TensorFlow Serving's batching parameters (its --batching_parameters_file
// names them the same).
struct BatchingOptions {
  // Rows in one batch.
  int64_t max_batch_size = 32;
  // How long a batch that is not full waits for more requests.
  std::chrono::microseconds batch_timeout{1000};
  // The queue holds at most this many full batches' rows.
  int64_t max_enqueued_batches = 100;
  // Batches that run at the same time.
  int num_batch_threads = 1;
  // Sizes a batch is padded up to (ascending; the last must be
  // max_batch_size). Empty = no padding.
  std::vector<int64_t> allowed_batch_sizes{};
};

// Kept since the batcher was created; a snapshot.
struct BatchingStats {
  int64_t requests = 0;          // accepted into the queue
  int64_t rejected_full = 0;     // Unavailable: the queue was full
  int64_t rejected_invalid = 0;  // InvalidArgument
  int64_t cancelled = 0;
  int64_t deadline_exceeded = 0;
  int64_t batches = 0;
  // Batches by their size after padding.
  std::map<int64_t, int64_t> batch_sizes{};
  int64_t padding_rows = 0;
  // Time from enqueue to the start of the request's batch.
  std::chrono::nanoseconds total_queue_delay{0};
  std::chrono::nanoseconds max_queue_delay{0};
  int64_t batched_requests = 0;  // requests that started in a batch
  // Now.
  int64_t queued_requests = 0;
  int64_t queued_rows = 0;  // counted from Run, so it includes arrivals
  int64_t running_batches = 0;
};

namespace detail {
struct BatchingState;
struct BatchOutputs;

// What a batch gives one of its requests: the batch's outputs and the
// request's rows of them, or the request's error. It becomes the request's
// NamedTensors (AnswerOf) on the request's own executor, so that the
// tensors and map its caller frees are allocated on the caller's thread
// rather than on the batch's (a pool thread's allocations freed on another
// thread miss both glibc's and cosession's per-thread caches).
struct BatchAnswer {
  absl::Status status{};  // not OK: the request's answer
  std::shared_ptr<const BatchOutputs> outputs{};
  int64_t begin = 0;
  int64_t rows = 0;
};
absl::StatusOr<NamedTensors> AnswerOf(BatchAnswer answer);
}  // namespace detail

class BatchingSession {
 public:
  using Result = absl::StatusOr<NamedTensors>;

  // InvalidArgument naming the option for a bad option (a size < 1, a
  // negative timeout, allowed_batch_sizes not ascending or not ending at
  // max_batch_size) or a signature without inputs or outputs.
  static absl::StatusOr<std::unique_ptr<BatchingSession>> Create(
      Session& session, Signature signature, BatchingOptions options);
  // The same, keeping `owner` (e.g. the SavedModel that owns `session`)
  // alive for as long as the batcher has work: a batch still running after
  // its callers left and the BatchingSession was destroyed.
  static absl::StatusOr<std::unique_ptr<BatchingSession>> Create(
      Session& session, Signature signature, BatchingOptions options,
      std::shared_ptr<const void> owner);
  BatchingSession(const BatchingSession&) = delete;
  BatchingSession& operator=(const BatchingSession&) = delete;
  ~BatchingSession();

  // Completion signature: void(absl::StatusOr<NamedTensors>), the
  // signature's every output with this request's rows.
  template <typename CompletionToken>
  auto Run(NamedTensors inputs, RunOptions options, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(Result)>(
        [](auto handler, std::shared_ptr<detail::BatchingState> state,
           NamedTensors inputs, RunOptions options) {
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          Start(std::move(state), std::move(inputs), options, slot,
                GroupedCompletion<detail::BatchAnswer>::Of(
                    std::move(handler), [](detail::BatchAnswer answer) {
                      return detail::AnswerOf(std::move(answer));
                    }));
        },
        token, state_, std::move(inputs), options);
  }

  const Signature& signature() const;
  const BatchingOptions& options() const;
  BatchingStats stats() const;

 private:
  explicit BatchingSession(std::shared_ptr<detail::BatchingState> state);
  static void Start(std::shared_ptr<detail::BatchingState> state,
                    NamedTensors inputs, const RunOptions& options,
                    boost::asio::cancellation_slot slot,
                    GroupedCompletion<detail::BatchAnswer> done);

  std::shared_ptr<detail::BatchingState> state_;
};

}  // namespace cosession

#endif  // COSESSION_SERVING_BATCHING_SESSION_H_
