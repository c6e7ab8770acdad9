// SummaryWriter: writes a TensorBoard event file, as TensorFlow's
// tf.summary.FileWriter; SummaryWriterCache: one shared writer per
// directory, as TensorFlow's FileWriterCache.
//
// The file is `<logdir>/events.out.tfevents.<10-digit unix seconds>.<host>.
// <pid>.<n><suffix>` (n counts the writers this process opened, so two
// writers never collide, even within one second); the directory is created
// if missing. Each event is one TFRecord (io/record_writer.h) holding an
// Event protobuf (io/event_proto.h); the first is
// `file_version: "brain.Event:2"`.
//
// Off the step path: AddScalar/AddHistogram/AddSessionLog/AddEvent only
// queue the event (a lock and a move; histogram bucketing is deferred too).
// Each writer owns one background std::thread that encodes and writes the
// queue when it holds max_queue events, when flush_every has passed (then
// it also flushes the file to the OS), and on Flush/Close. The queue is
// bounded: an Add that finds max_pending events waiting blocks until the
// writer thread takes them (as TensorFlow's FileWriter blocks its adders at
// max_queue), so a stalled disk holds up the adders instead of growing
// memory; no event is dropped for it (an Add still waiting when Close is
// called is dropped, as an Add after Close is). on_batch must not add
// events: it runs on the writer thread. A dedicated
// thread, not the runtime's pool: file I/O never occupies a pool thread that
// a step needs, and a blocking Flush() is safe from any thread, including
// the pool's.
//
// Flush(): blocks until every event added before the call is written and
// flushed to the OS; AsyncFlush(token) is the same as an Asio async
// operation (completion void(absl::Status), delivered through the handler's
// executor; cancellation has no effect -- it completes once the bytes are
// written). Close()/AsyncClose(token): flushes, closes the file and stops
// the thread; idempotent (later calls return the same status). The
// destructor closes. Events added after Close are dropped.
//
// Errors: creating the directory or the file fails Create (naming the
// path). A write error later (disk full, the file or its directory removed)
// is kept -- the first one -- and returned by every later Flush/Close; the
// events after it are dropped. Nothing throws.
//
// Thread safety: every method is thread-safe.
#ifndef COSESSION_IO_SUMMARY_WRITER_H_
#define COSESSION_IO_SUMMARY_WRITER_H_

#include <boost/asio/async_result.hpp>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cosession/async/clock.h"
#include "cosession/async/completion.h"
#include "cosession/graph/tensor.h"
#include "cosession/io/event_proto.h"

namespace cosession {

struct SummaryWriterOptions {
  // TensorFlow's flush_secs: how often queued events reach the OS.
  absl::Duration flush_every = absl::Seconds(120);
  // TensorFlow's max_queue: the writer thread wakes up once this many events
  // are queued.
  size_t max_queue = 10;
  // The bound of the queue: an Add that finds this many events waiting for
  // the writer thread blocks until it took them. At least 1.
  size_t max_pending = 1000;
  // Called on the writer thread with the number of events of each batch it
  // takes from the queue, before writing them (monitoring; a test holds the
  // writer there).
  std::function<void(size_t events)> on_batch{};
  // Appended to the file name.
  std::string filename_suffix{};
  // Where events' wall_time comes from; null = SystemClock().
  Clock* clock = nullptr;
};

class SummaryWriter {
 public:
  static inline constexpr char kFileVersion[] = "brain.Event:2";

  static absl::StatusOr<std::shared_ptr<SummaryWriter>> Create(
      std::string logdir, SummaryWriterOptions options = {});

  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;
  ~SummaryWriter();

  const std::string& logdir() const { return logdir_; }
  // The event file's full path.
  const std::string& path() const { return path_; }

  // A scalar summary (Summary.Value.simple_value).
  void AddScalar(std::string tag, float value, int64_t step);
  // A histogram of `values` (any dtype). InvalidArgument naming the tag when
  // a value is NaN or infinite, or the tensor holds no data; nothing is
  // queued then. The tensor's buffer is shared, not copied: don't write
  // through it afterwards.
  absl::Status AddHistogram(std::string tag, Tensor values, int64_t step);
  void AddSessionLog(SessionLog::SessionStatus status, int64_t step,
                     std::string checkpoint_path = "", std::string msg = "");
  // Any event; wall_time 0 is replaced by now.
  void AddEvent(Event event);

  // Blocking; see the top comment.
  absl::Status Flush();
  absl::Status Close();

  // Completion signature: void(absl::Status).
  template <typename CompletionToken>
  auto AsyncFlush(CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(absl::Status)>(
        [this](auto handler) {
          RequestFlush(/*close=*/false, PostToHandler<absl::Status>(
                                            std::move(handler),
                                            [](absl::Status s) { return s; }));
        },
        token);
  }
  template <typename CompletionToken>
  auto AsyncClose(CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(absl::Status)>(
        [this](auto handler) {
          RequestFlush(/*close=*/true, PostToHandler<absl::Status>(
                                           std::move(handler),
                                           [](absl::Status s) { return s; }));
        },
        token);
  }

  // The first write error so far (OK if none).
  absl::Status status() const;
  // Adds blocked right now because max_pending events wait.
  size_t adds_waiting() const;

 private:
  using Done = absl::AnyInvocable<void(absl::Status)>;
  struct Pending {
    Event event{};
    // Set for a histogram whose buckets the writer thread computes.
    std::optional<Tensor> histogram_values{};
    std::string histogram_tag{};
  };

  SummaryWriter(std::string logdir, std::string path, std::FILE* file,
                SummaryWriterOptions options);
  void Enqueue(Pending pending);
  // `done` runs on the writer thread once everything queued before is
  // written and flushed (and the file closed, when `close`).
  void RequestFlush(bool close, Done done);
  void WriterLoop();
  // Writer thread only.
  void WriteBatch(std::deque<Pending>& batch);
  void FlushFile();
  void Fail(absl::Status error);
  double WallTimeNow() const;

  const std::string logdir_;
  const std::string path_;
  const SummaryWriterOptions options_;
  Clock* const clock_;
  // The writer thread wakes at max_queue events, or sooner when the queue's
  // bound is lower: it must wake before adders wait for room.
  const size_t wake_at_;
  std::FILE* file_;  // writer thread only (after construction)

  mutable std::mutex mu_;
  std::condition_variable wake_;  // the writer thread waits on it
  std::condition_variable room_;  // adders wait on it for room in queue_
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  size_t adds_waiting_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Done> flush_done_ ABSL_GUARDED_BY(mu_);
  bool close_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;  // the thread finished
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::mutex join_mu_;  // Close() from two threads joins once
  std::thread thread_;
};

// One writer per directory, shared by every hook that writes there (as
// TensorFlow's FileWriterCache), so the step counter and the summary saver
// append to the same file. Thread-safe.
class SummaryWriterCache {
 public:
  // The writer for `logdir` (paths are compared after making them absolute
  // and normal), created with default options on first use.
  static absl::StatusOr<std::shared_ptr<SummaryWriter>> Get(
      const std::string& logdir);
  // Closes and forgets every cached writer (the next Get makes new files).
  static void Clear();
};

}  // namespace cosession

#endif  // COSESSION_IO_SUMMARY_WRITER_H_
