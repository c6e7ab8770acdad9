// ChunkReadAhead: reads a LineFileReader's next chunks on the pool, up to
// `depth` chunks ahead of the one whose lines are being served, so that a
// consumer parsing lines seldom waits for the disk or the gunzip -- and,
// with work to do on another thread, the reads overlap it.
//
//   auto ahead = std::make_shared<ChunkReadAhead>(reader, pool, 3);
//   ahead->Start();
//   ... NextBuffered() said kNeedsRead:
//   std::optional<absl::Status> taken = ahead->TryTake(buffer);
//   if (!taken) { co_await ahead->AsyncWaitReady(what, use_awaitable); ... }
//   reader->AdoptChunk(buffer);
//
// One read task at a time runs on the pool (a reader's FillChunk calls are
// serialised), reading chunk after chunk until `depth` wait or the file
// ends or fails; taking a chunk starts it again. The chunks come out in
// order; a read error comes out in its place, and the reads stop there.
// Memory: at most depth chunks read ahead, plus the buffers handed back.
//
// Thread safety: TryTake, AsyncWaitReady and Stop from one consumer at a
// time; the read task runs concurrently with them (and with the reader's
// NextBuffered/AdoptChunk, which touch only what is in memory).
#ifndef COSESSION_PIPELINE_DETAIL_CHUNK_READ_AHEAD_H_
#define COSESSION_PIPELINE_DETAIL_CHUNK_READ_AHEAD_H_

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "cosession/async/completion.h"
#include "cosession/async/runtime.h"
#include "cosession/io/line_file_reader.h"

namespace cosession::detail {

class ChunkReadAhead : public std::enable_shared_from_this<ChunkReadAhead> {
 public:
  ChunkReadAhead(std::shared_ptr<LineFileReader> reader,
                 Runtime::executor_type pool, size_t depth);

  // Starts the first read.
  void Start();
  const std::shared_ptr<LineFileReader>& reader() const { return reader_; }

  // When the next chunk is read: its read's status and, if OK, the chunk
  // in `buffer` (empty at the end of the file); the buffer passed in is
  // kept for a later read. nullopt while the read still runs.
  std::optional<absl::Status> TryTake(std::string& buffer);

  // Completes with OK once TryTake has a chunk to give, or with
  // Cancelled(what) when the wait is cancelled (its handler's slot).
  template <typename CompletionToken>
  auto AsyncWaitReady(std::string what, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(absl::Status)>(
        [this](auto handler, std::string what) {
          boost::asio::cancellation_slot slot =
              boost::asio::get_associated_cancellation_slot(handler);
          AddWaiter(PostToHandler<absl::Status>(
                        std::move(handler), [](absl::Status s) { return s; }),
                    slot, std::move(what));
        },
        token, std::move(what));
  }

  // Starts no more reads (the one running finishes and is dropped).
  void Stop();

 private:
  using Waiter = absl::AnyInvocable<void(absl::Status)>;
  struct Chunk {
    absl::Status status;
    std::string bytes;
  };

  // The read task: reads until `depth` chunks wait, the file ends or fails,
  // or Stop.
  static void ReadChunks(std::shared_ptr<ChunkReadAhead> self);
  // Posts the read task unless it runs or has nothing to do.
  void StartReadingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddWaiter(Waiter done, boost::asio::cancellation_slot slot,
                 std::string what);
  void CancelWaiter(const std::string& what);

  const std::shared_ptr<LineFileReader> reader_;
  const Runtime::executor_type pool_;
  const size_t depth_;

  std::mutex mu_;
  std::deque<Chunk> ready_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> spares_ ABSL_GUARDED_BY(mu_);
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // the end, or an error, read
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  Waiter waiter_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cosession::detail

#endif  // COSESSION_PIPELINE_DETAIL_CHUNK_READ_AHEAD_H_
