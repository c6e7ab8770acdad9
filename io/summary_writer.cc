#include "cosession/io/summary_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cosession/io/record_writer.h"

namespace cosession {
namespace {

absl::Status IoError(int error, const std::string& what) {
  std::string message = absl::StrCat(what, ": ", std::strerror(error));
  switch (error) {
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case ENOENT:
      return absl::NotFoundError(message);
    default:
      return absl::InternalError(message);
  }
}

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') {
    return "localhost";
  }
  return name;
}

std::atomic<int> writers_opened{0};

}  // namespace

absl::StatusOr<std::shared_ptr<SummaryWriter>> SummaryWriter::Create(
    std::string logdir, SummaryWriterOptions options) {
  if (logdir.empty()) {
    return absl::InvalidArgumentError("SummaryWriter: logdir is empty");
  }
  if (options.max_pending == 0) {
    return absl::InvalidArgumentError(
        "SummaryWriter: max_pending must be at least 1, got 0");
  }
  if (options.flush_every <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SummaryWriter: flush_every must be positive, got ",
                     absl::FormatDuration(options.flush_every)));
  }
  std::error_code ec;
  std::filesystem::create_directories(logdir, ec);
  if (ec) {
    return IoError(ec.value(),
                   absl::StrCat("SummaryWriter: cannot create '", logdir, "'"));
  }
  Clock* clock = options.clock != nullptr ? options.clock : &SystemClock();
  const int64_t seconds = absl::ToUnixSeconds(clock->Now());
  const std::string path =
      absl::StrFormat("%s/events.out.tfevents.%010d.%s.%d.%d%s", logdir,
                      seconds, Hostname(), static_cast<int>(getpid()),
                      writers_opened.fetch_add(1), options.filename_suffix);
  // O_EXCL: never append to (or truncate) another writer's file.
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    return IoError(errno,
                   absl::StrCat("SummaryWriter: cannot create '", path, "'"));
  }
  std::FILE* file = fdopen(fd, "wb");
  if (file == nullptr) {
    const int error = errno;
    close(fd);
    return IoError(error,
                   absl::StrCat("SummaryWriter: cannot open '", path, "'"));
  }
  std::shared_ptr<SummaryWriter> writer(
      new SummaryWriter(std::move(logdir), path, file, std::move(options)));
  Event version{.what = FileVersion{kFileVersion}};
  writer->AddEvent(std::move(version));
  return writer;
}

SummaryWriter::SummaryWriter(std::string logdir, std::string path,
                             std::FILE* file, SummaryWriterOptions options)
    : logdir_(std::move(logdir)),
      path_(std::move(path)),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : &SystemClock()),
      wake_at_(std::min(options_.max_queue, options_.max_pending)),
      file_(file) {
  thread_ = std::thread([this] { WriterLoop(); });
}

SummaryWriter::~SummaryWriter() { Close().IgnoreError(); }

double SummaryWriter::WallTimeNow() const {
  return absl::ToDoubleSeconds(clock_->Now() - absl::UnixEpoch());
}

void SummaryWriter::AddScalar(std::string tag, float value, int64_t step) {
  Summary summary;
  summary.value.push_back(SummaryValue{std::move(tag), value});
  AddEvent(Event{.step = step, .what = std::move(summary)});
}

absl::Status SummaryWriter::AddHistogram(std::string tag, Tensor values,
                                         int64_t step) {
  if (!values.IsInitialized()) {
    return absl::InvalidArgumentError(
        absl::StrCat("histogram '", tag, "': the tensor holds no data"));
  }
  // Only the cheap check here; the bucketing happens on the writer thread.
  bool finite = true;
  VisitDType(values.dtype(), [&]<typename T>() {
    if constexpr (std::is_floating_point_v<T>) {
      for (T v : values.flat<T>()) finite = finite && std::isfinite(v);
    }
  });
  if (!finite) {
    return absl::InvalidArgumentError(absl::StrCat(
        "histogram '", tag, "': the tensor holds a NaN or an infinity"));
  }
  Pending pending;
  pending.event = Event{.wall_time = WallTimeNow(), .step = step};
  pending.histogram_values = std::move(values);
  pending.histogram_tag = std::move(tag);
  Enqueue(std::move(pending));
  return absl::OkStatus();
}

void SummaryWriter::AddSessionLog(SessionLog::SessionStatus status,
                                  int64_t step, std::string checkpoint_path,
                                  std::string msg) {
  AddEvent(Event{
      .step = step,
      .what = SessionLog{status, std::move(checkpoint_path), std::move(msg)}});
}

void SummaryWriter::AddEvent(Event event) {
  if (event.wall_time == 0) event.wall_time = WallTimeNow();
  Pending pending;
  pending.event = std::move(event);
  Enqueue(std::move(pending));
}

void SummaryWriter::Enqueue(Pending pending) {
  bool wake = false;
  {
    std::unique_lock lock(mu_);
    if (queue_.size() >= options_.max_pending && !close_requested_) {
      ++adds_waiting_;
      room_.wait(lock, [&] {
        return queue_.size() < options_.max_pending || close_requested_;
      });
      --adds_waiting_;
    }
    if (close_requested_) return;  // documented: dropped after Close
    queue_.push_back(std::move(pending));
    wake = queue_.size() >= wake_at_;
  }
  if (wake) wake_.notify_one();
}

size_t SummaryWriter::adds_waiting() const {
  std::lock_guard lock(mu_);
  return adds_waiting_;
}

void SummaryWriter::RequestFlush(bool close, Done done) {
  std::unique_lock lock(mu_);
  if (closed_) {
    absl::Status status = status_;
    lock.unlock();
    std::move(done)(std::move(status));
    return;
  }
  if (close) close_requested_ = true;
  flush_done_.push_back(std::move(done));
  lock.unlock();
  wake_.notify_one();
  if (close) room_.notify_all();  // blocked adders give up: dropped
}

absl::Status SummaryWriter::Flush() {
  std::promise<absl::Status> flushed;
  std::future<absl::Status> result = flushed.get_future();
  RequestFlush(false, [&flushed](absl::Status s) { flushed.set_value(s); });
  return result.get();
}

absl::Status SummaryWriter::Close() {
  std::promise<absl::Status> closed;
  std::future<absl::Status> result = closed.get_future();
  RequestFlush(true, [&closed](absl::Status s) { closed.set_value(s); });
  absl::Status status = result.get();
  std::lock_guard lock(join_mu_);
  if (thread_.joinable()) thread_.join();
  return status;
}

absl::Status SummaryWriter::status() const {
  std::lock_guard lock(mu_);
  return status_;
}

void SummaryWriter::Fail(absl::Status error) {
  std::lock_guard lock(mu_);
  if (status_.ok()) status_ = std::move(error);
}

void SummaryWriter::WriterLoop() {
  using SteadyClock = std::chrono::steady_clock;
  const auto flush_every = absl::ToChronoNanoseconds(options_.flush_every);
  auto next_flush = SteadyClock::now() + flush_every;
  std::unique_lock lock(mu_);
  while (true) {
    wake_.wait_until(lock, next_flush, [&] {
      return close_requested_ || !flush_done_.empty() ||
             queue_.size() >= wake_at_;
    });
    std::deque<Pending> batch = std::exchange(queue_, {});
    std::vector<Done> done = std::exchange(flush_done_, {});
    const bool closing = close_requested_;
    const bool failed = !status_.ok();
    const bool adders_wait = adds_waiting_ > 0;
    lock.unlock();
    if (adders_wait) room_.notify_all();

    if (options_.on_batch && !batch.empty()) options_.on_batch(batch.size());
    if (!failed) WriteBatch(batch);
    batch.clear();  // release tensors before waking anyone
    if (closing || !done.empty() || SteadyClock::now() >= next_flush) {
      FlushFile();
      next_flush = SteadyClock::now() + flush_every;
    }
    if (closing && file_ != nullptr) {
      if (std::fclose(file_) != 0) {
        Fail(IoError(errno, absl::StrCat("closing '", path_, "'")));
      }
      file_ = nullptr;
    }

    lock.lock();
    if (closing) {
      closed_ = true;
      // Requests that arrived while the file was being closed.
      for (Done& late : std::exchange(flush_done_, {})) {
        done.push_back(std::move(late));
      }
    }
    const absl::Status status = status_;
    lock.unlock();
    for (Done& d : done) std::move(d)(status);
    if (closing) return;
    lock.lock();
  }
}

void SummaryWriter::WriteBatch(std::deque<Pending>& batch) {
  if (batch.empty() || file_ == nullptr) return;
  std::string bytes;
  for (Pending& pending : batch) {
    if (pending.histogram_values) {
      auto histogram = MakeHistogram(*pending.histogram_values);
      if (!histogram.ok()) continue;  // AddHistogram checked; unreachable
      Summary summary;
      summary.value.push_back(SummaryValue{std::move(pending.histogram_tag),
                                           std::move(histogram).value()});
      pending.event.what = std::move(summary);
    }
    AppendRecord(bytes, EncodeEvent(pending.event));
  }
  if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size()) {
    Fail(IoError(errno, absl::StrCat("writing events to '", path_, "'")));
  }
}

void SummaryWriter::FlushFile() {
  if (file_ == nullptr) return;
  if (std::fflush(file_) != 0) {
    Fail(IoError(errno, absl::StrCat("flushing events to '", path_, "'")));
    return;
  }
  // Writes to a file whose directory was removed succeed but reach nobody:
  // report it rather than lose events silently (TensorFlow checks too).
  struct stat info;
  if (stat(path_.c_str(), &info) != 0) {
    Fail(absl::DataLossError(absl::StrCat(
        "event file '", path_, "' was removed; its events are lost")));
  }
}

// ---- SummaryWriterCache

namespace {

struct WriterCacheState {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<SummaryWriter>> writers
      ABSL_GUARDED_BY(mu);
};

WriterCacheState& CacheState() {
  // Destroyed at exit, which closes (flushes) the cached writers.
  static WriterCacheState state;
  return state;
}

std::string NormalDir(const std::string& logdir) {
  std::error_code ec;
  std::filesystem::path path = std::filesystem::absolute(logdir, ec);
  if (ec) path = logdir;
  path = path.lexically_normal();
  if (!path.has_filename() && path.has_parent_path()) path = path.parent_path();
  return path.string();
}

}  // namespace

absl::StatusOr<std::shared_ptr<SummaryWriter>> SummaryWriterCache::Get(
    const std::string& logdir) {
  const std::string key = NormalDir(logdir);
  WriterCacheState& state = CacheState();
  std::lock_guard lock(state.mu);
  auto it = state.writers.find(key);
  if (it != state.writers.end()) return it->second;
  auto writer = SummaryWriter::Create(logdir);
  if (!writer.ok()) return writer.status();
  state.writers.emplace(key, *writer);
  return writer;
}

void SummaryWriterCache::Clear() {
  std::map<std::string, std::shared_ptr<SummaryWriter>> writers;
  {
    WriterCacheState& state = CacheState();
    std::lock_guard lock(state.mu);
    writers.swap(state.writers);
  }
  for (auto& [dir, writer] : writers) writer->Close().IgnoreError();
}

}  // namespace cosession
