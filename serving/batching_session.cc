#include "cosession/serving/batching_session.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/defer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cosession/async/status_from_exception.h"
#include "cosession/async/timer_executor.h"
#include "cosession/graph/status.h"

namespace cosession {
namespace detail {
namespace {

namespace asio = boost::asio;
using SteadyClock = std::chrono::steady_clock;
using Result = BatchingSession::Result;
using Completion = GroupedCompletion<BatchAnswer>;

// The least time a batch keeps in hand for its run when it closes early
// for a request's deadline.
constexpr std::chrono::nanoseconds kMinRunReserve =
    std::chrono::milliseconds(1);

struct RunningBatch;

// One caller's request. Touched only on the batcher's strand once it was
// posted there.
struct Request {
  // In the order of the signature's inputs; inline, since a request is
  // made on its caller's thread and freed on the batcher's.
  absl::InlinedVector<Tensor, 2> inputs;
  int64_t rows = 0;
  SteadyClock::time_point enqueued;
  std::optional<SteadyClock::time_point> deadline;
  Completion done;
  bool finished = false;
  bool in_queue = false;
  // Its rows count against the queue's capacity (from Start until it
  // leaves the queue).
  bool holds_rows = true;
  std::shared_ptr<RunningBatch> batch;  // set while its batch runs
  std::optional<asio::steady_timer> deadline_timer;
};

// Touched only on the strand, but for `cancel`'s slot, which the batch's
// Session::Run takes on a pool thread: the strand emits only after it
// learnt that the run was started (`started`), and remembers a cancellation
// wanted before that (`cancel_wanted`).
struct RunningBatch {
  std::vector<std::shared_ptr<Request>> members;
  int live = 0;  // members not yet finished
  asio::cancellation_signal cancel;
  bool started = false;
  bool cancel_wanted = false;
};

// Rows [begin, begin + rows) of `t` (dimension 0), copied.
Tensor SliceRows(const Tensor& t, int64_t begin, int64_t rows) {
  TensorShape shape = t.shape();
  const size_t row_bytes =
      t.TotalBytes() / static_cast<size_t>(shape.dim_size(0));
  shape.set_dim(0, rows);
  Tensor out = Tensor::Allocate(t.dtype(), shape);
  if (rows > 0 && row_bytes > 0) {
    std::memcpy(out.raw_data(),
                static_cast<const char*>(t.raw_data()) + begin * row_bytes,
                static_cast<size_t>(rows) * row_bytes);
  }
  return out;
}

// The same row shape (every dimension but the first).
bool SameRowShape(const Tensor& a, const Tensor& b) {
  if (a.shape().dims() != b.shape().dims()) return false;
  for (int i = 1; i < a.shape().dims(); ++i) {
    if (a.shape().dim_size(i) != b.shape().dim_size(i)) return false;
  }
  return true;
}

}  // namespace

// One batch's outputs, shared by the answers of its requests.
struct BatchOutputs {
  std::vector<Tensor> tensors;  // in the order of `names`
  // The batcher's output names: shared, since an answer may be made after
  // the batcher is gone.
  std::shared_ptr<const std::vector<std::string>> names;
};

absl::StatusOr<NamedTensors> AnswerOf(BatchAnswer answer) {
  if (!answer.status.ok()) return std::move(answer.status);
  const BatchOutputs& batch = *answer.outputs;
  // Runs in the caller's handler: an allocation failing here must not
  // throw into the caller's event loop.
  try {
    NamedTensors outputs;
    for (size_t j = 0; j < batch.tensors.size(); ++j) {
      const Tensor& t = batch.tensors[j];
      // A request with every row of its batch takes the outputs uncopied.
      outputs.emplace_hint(outputs.end(), (*batch.names)[j],
                           answer.rows == t.shape().dim_size(0)
                               ? t
                               : SliceRows(t, answer.begin, answer.rows));
    }
    return outputs;
  } catch (...) {
    return StatusFromException(std::current_exception(),
                               "taking a request's rows of its batch");
  }
}

struct BatchingState : std::enable_shared_from_this<BatchingState> {
  BatchingState(Session& s, Signature sig, BatchingOptions o,
                std::shared_ptr<const void> owner)
      : owner(std::move(owner)),
        session(s),
        signature(std::move(sig)),
        options(std::move(o)),
        capacity_rows(options.max_enqueued_batches * options.max_batch_size),
        strand(asio::make_strand(s.runtime().executor())),
        close_timer(TimerExecutor()) {
    for (const auto& [name, t] : signature.inputs) {
      input_tensors.push_back(t.tensor);
    }
    auto names = std::make_shared<std::vector<std::string>>();
    for (const auto& [name, t] : signature.outputs) {
      names->push_back(name);
      output_tensors.push_back(t.tensor);
    }
    output_names = std::move(names);
  }

  absl::Status Validate(const NamedTensors& inputs,
                        const RunOptions& run_options, int64_t& rows) const;
  absl::Status ReserveRows(int64_t rows);
  void Admit(std::shared_ptr<Request> request);
  void DrainInbox();
  // True when the request joined the queue (else it finished).
  bool Enqueue(std::shared_ptr<Request> request);
  void ReleaseRows(Request& request);
  // Retires the request (Retire) and completes it with `error`.
  void Finish(Request& request, absl::Status error);
  // Takes the request out of the queue, its batch and the counts, once;
  // returns its completion, to be posted a result of `status`, or an empty
  // one when it had finished already. The caller then calls PublishQueue.
  Completion Retire(Request& request, const absl::Status& status);
  void Schedule();
  void RunBatch(std::vector<std::shared_ptr<Request>> members, int64_t rows);
  void BatchDone(const std::shared_ptr<RunningBatch>& batch, int64_t padded,
                 SteadyClock::time_point started, Session::RunResult result);
  void ArmCloseTimer(SteadyClock::time_point at);
  void Shutdown();
  void PublishQueue();

  const std::shared_ptr<const void> owner;  // keeps `session` alive
  Session& session;
  const Signature signature;
  const BatchingOptions options;
  const int64_t capacity_rows;
  std::shared_ptr<const std::vector<std::string>> output_names;
  std::vector<Output> input_tensors, output_tensors;
  asio::strand<Runtime::executor_type> strand;

  // Rows admitted and not yet in a batch (or finished): checked when a
  // request arrives, so that a full queue answers at once.
  std::atomic<int64_t> admitted_rows{0};
  // Requests admitted, waiting to be moved into the queue by the strand.
  // One drain is posted per burst of arrivals, not one per request: a
  // post wakes a pool thread, which costs more than a request's own work.
  std::mutex inbox_mu;
  std::vector<std::shared_ptr<Request>> inbox ABSL_GUARDED_BY(inbox_mu);
  bool drain_posted ABSL_GUARDED_BY(inbox_mu) = false;

  // On the strand.
  asio::steady_timer close_timer;
  std::optional<SteadyClock::time_point> close_timer_at;
  std::deque<std::shared_ptr<Request>> queue;
  int64_t queued_rows = 0;
  int running = 0;
  // Requests retired since the last PublishQueue, by outcome: published
  // with the queue's depth in one update, so that a reader of the
  // statistics never sees a request counted as gone and still queued.
  int64_t retired_cancelled = 0;
  int64_t retired_deadline_exceeded = 0;
  bool shut_down = false;
  // A moving average of the batches' run times.
  std::chrono::nanoseconds run_estimate{0};

  mutable std::mutex stats_mu;
  BatchingStats stats ABSL_GUARDED_BY(stats_mu);
};

absl::Status BatchingState::Validate(const NamedTensors& inputs,
                                     const RunOptions& run_options,
                                     int64_t& rows) const {
  COSESSION_RETURN_IF_ERROR(ValidateRunOptions(run_options));
  absl::StatusOr<int64_t> counted = CheckSignatureInputs(signature, inputs);
  if (!counted.ok()) return counted.status();
  rows = *counted;
  if (rows > options.max_batch_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the request has ", rows, " rows, more than max_batch_size ",
        options.max_batch_size));
  }
  return absl::OkStatus();
}

void BatchingState::PublishQueue() {
  std::lock_guard lock(stats_mu);
  stats.queued_requests = static_cast<int64_t>(queue.size());
  stats.running_batches = running;
  stats.cancelled += std::exchange(retired_cancelled, 0);
  stats.deadline_exceeded += std::exchange(retired_deadline_exceeded, 0);
}

void BatchingState::ReleaseRows(Request& request) {
  if (!request.holds_rows) return;
  request.holds_rows = false;
  admitted_rows.fetch_sub(request.rows, std::memory_order_relaxed);
}

// Any thread: counts `rows` against the capacity, or returns the
// Unavailable answer of a full queue.
absl::Status BatchingState::ReserveRows(int64_t rows) {
  int64_t admitted = admitted_rows.load(std::memory_order_relaxed);
  do {
    if (admitted + rows > capacity_rows) {
      {
        std::lock_guard lock(stats_mu);
        ++stats.rejected_full;
      }
      return absl::UnavailableError(absl::StrCat(
          "the batching queue is full (", admitted,
          " rows queued; it holds max_enqueued_batches * max_batch_size = ",
          capacity_rows, ")"));
    }
  } while (!admitted_rows.compare_exchange_weak(admitted, admitted + rows,
                                                std::memory_order_relaxed));
  return absl::OkStatus();
}

// Any thread: a request whose rows were reserved, into the inbox.
void BatchingState::Admit(std::shared_ptr<Request> request) {
  bool post = false;
  {
    std::lock_guard lock(inbox_mu);
    inbox.push_back(std::move(request));
    post = !std::exchange(drain_posted, true);
  }
  if (post) {
    asio::post(strand, [self = shared_from_this()] { self->DrainInbox(); });
  }
}

void BatchingState::DrainInbox() {
  std::vector<std::shared_ptr<Request>> arrived;
  {
    std::lock_guard lock(inbox_mu);
    arrived.swap(inbox);
    drain_posted = false;
  }
  int64_t queued = 0;
  for (std::shared_ptr<Request>& request : arrived) {
    queued += Enqueue(std::move(request)) ? 1 : 0;
  }
  if (queued > 0) {
    std::lock_guard lock(stats_mu);
    stats.requests += queued;
  }
  Schedule();
}

// On the strand; the caller schedules and counts the queued requests.
bool BatchingState::Enqueue(std::shared_ptr<Request> request) {
  if (request->finished) {  // cancelled before it got here
    ReleaseRows(*request);
    return false;
  }
  if (shut_down) {
    Finish(*request, absl::CancelledError("the batching session was closed"));
    return false;
  }
  if (request->deadline && *request->deadline <= SteadyClock::now()) {
    Finish(*request, absl::DeadlineExceededError(
                         "the request's deadline passed before it was queued"));
    return false;
  }
  request->in_queue = true;
  queued_rows += request->rows;
  if (request->deadline) {
    request->deadline_timer.emplace(TimerExecutor(), *request->deadline);
    request->deadline_timer->async_wait(asio::bind_executor(
        strand,
        [self = shared_from_this(),
         weak = std::weak_ptr<Request>(request)](boost::system::error_code ec) {
          if (ec) return;
          if (std::shared_ptr<Request> r = weak.lock()) {
            self->Finish(*r, absl::DeadlineExceededError(
                                 "the request's deadline passed while it was "
                                 "queued or its batch ran"));
          }
        }));
  }
  queue.push_back(std::move(request));
  return true;
}

void BatchingState::Finish(Request& request, absl::Status error) {
  Completion done = Retire(request, error);
  PublishQueue();
  if (done) std::move(done).Post(BatchAnswer{.status = std::move(error)});
}

Completion BatchingState::Retire(Request& request, const absl::Status& status) {
  if (request.finished) return {};
  request.finished = true;
  ReleaseRows(request);
  if (request.deadline_timer) request.deadline_timer->cancel();
  if (request.in_queue) {
    request.in_queue = false;
    queued_rows -= request.rows;
    auto it = std::find_if(queue.begin(), queue.end(),
                           [&](const auto& r) { return r.get() == &request; });
    if (it != queue.end()) queue.erase(it);
  }
  if (std::shared_ptr<RunningBatch> batch = std::move(request.batch)) {
    // Nobody waits for this batch any more: stop its run.
    if (--batch->live == 0) {
      if (batch->started) {
        batch->cancel.emit(asio::cancellation_type::all);
      } else {
        batch->cancel_wanted = true;
      }
    }
  }
  // Counted here, published with the queue by PublishQueue.
  if (status.code() == absl::StatusCode::kCancelled) ++retired_cancelled;
  if (status.code() == absl::StatusCode::kDeadlineExceeded) {
    ++retired_deadline_exceeded;
  }
  return std::move(request.done);
}

void BatchingState::ArmCloseTimer(SteadyClock::time_point at) {
  if (close_timer_at == at) return;
  close_timer_at = at;
  close_timer.expires_at(at);
  close_timer.async_wait(asio::bind_executor(
      strand, [self = shared_from_this(), at](boost::system::error_code ec) {
        if (ec) return;  // re-armed or cancelled
        if (self->close_timer_at == at) self->close_timer_at.reset();
        self->Schedule();
      }));
}

void BatchingState::Shutdown() {
  shut_down = true;
  close_timer.cancel();
  close_timer_at.reset();
  while (!queue.empty()) {
    std::shared_ptr<Request> request = queue.front();
    Finish(*request, absl::CancelledError("the batching session was closed"));
  }
}

void BatchingState::Schedule() {
  while (running < options.num_batch_threads && !queue.empty()) {
    const SteadyClock::time_point now = SteadyClock::now();
    const std::chrono::nanoseconds reserve =
        std::max(2 * run_estimate, kMinRunReserve);
    const Request& head = *queue.front();
    SteadyClock::time_point close = head.enqueued + options.batch_timeout;
    int64_t rows = 0;
    size_t count = 0;
    bool full = false;
    for (const std::shared_ptr<Request>& r : queue) {
      bool fits = rows + r->rows <= options.max_batch_size;
      for (size_t i = 0; fits && i < r->inputs.size(); ++i) {
        fits = SameRowShape(r->inputs[i], head.inputs[i]);
      }
      if (!fits) {
        full = true;
        break;
      }
      rows += r->rows;
      ++count;
      if (r->deadline) {
        // Before any batch was timed there is no run time to keep in hand;
        // half of the request's own time is, since a first run also builds
        // its plan (1 ms had been too little under a sanitizer).
        const std::chrono::nanoseconds kept =
            run_estimate.count() > 0
                ? reserve
                : std::max<std::chrono::nanoseconds>(
                      (*r->deadline - r->enqueued) / 2, kMinRunReserve);
        close = std::min(close, *r->deadline - kept);
      }
      if (rows == options.max_batch_size) {
        full = true;
        break;
      }
    }
    if (!full && now < close) {
      ArmCloseTimer(close);
      break;
    }
    std::vector<std::shared_ptr<Request>> members(queue.begin(),
                                                  queue.begin() + count);
    queue.erase(queue.begin(), queue.begin() + count);
    queued_rows -= rows;
    for (const auto& m : members) {
      m->in_queue = false;
      ReleaseRows(*m);
    }
    RunBatch(std::move(members), rows);
  }
  if (queue.empty() && close_timer_at) {
    // Nothing to close: the timer's wait would only hold this state.
    close_timer.cancel();
    close_timer_at.reset();
  }
  PublishQueue();
}

void BatchingState::RunBatch(std::vector<std::shared_ptr<Request>> members,
                             int64_t rows) {
  int64_t padded = rows;
  for (int64_t size : options.allowed_batch_sizes) {
    if (size >= rows) {
      padded = size;
      break;
    }
  }
  const SteadyClock::time_point started = SteadyClock::now();
  {
    std::lock_guard lock(stats_mu);
    ++stats.batches;
    ++stats.batch_sizes[padded];
    stats.padding_rows += padded - rows;
    for (const auto& m : members) {
      const auto delay = started - m->enqueued;
      stats.total_queue_delay += delay;
      stats.max_queue_delay =
          std::max<std::chrono::nanoseconds>(stats.max_queue_delay, delay);
      ++stats.batched_requests;
    }
  }
  RunArgs args;
  args.fetches = output_tensors;
  for (size_t i = 0; i < input_tensors.size(); ++i) {
    if (members.size() == 1 && padded == rows) {
      args.feeds.emplace_back(input_tensors[i], members[0]->inputs[i]);
      continue;
    }
    const Tensor& first = members[0]->inputs[i];
    TensorShape shape = first.shape();
    shape.set_dim(0, padded);
    Tensor batch = Tensor::Allocate(first.dtype(), shape);
    char* out = static_cast<char*>(batch.raw_data());
    size_t row_bytes = 0;
    for (const auto& m : members) {
      const Tensor& t = m->inputs[i];
      std::memcpy(out, t.raw_data(), t.TotalBytes());
      out += t.TotalBytes();
      row_bytes = t.TotalBytes() / static_cast<size_t>(m->rows);
    }
    // Padding: the last row again, valid data for any op.
    for (int64_t r = rows; r < padded; ++r) {
      std::memcpy(out, out - row_bytes, row_bytes);
      out += row_bytes;
    }
    args.feeds.emplace_back(input_tensors[i], std::move(batch));
  }
  auto batch = std::make_shared<RunningBatch>();
  batch->live = static_cast<int>(members.size());
  for (const auto& m : members) m->batch = batch;
  batch->members = std::move(members);
  ++running;
  // The run starts off the strand, which a run would otherwise hold for as
  // long as its kernels run on the starting thread: requests arriving,
  // deadlines and cancellations, other batches would wait for it. Deferred,
  // not posted: this thread starts it as soon as it leaves the strand,
  // without waking another.
  asio::defer(session.runtime().executor(), [self = shared_from_this(), batch,
                                             args = std::move(args), padded,
                                             started]() {
    self->session.Run(
        args,
        asio::bind_cancellation_slot(
            batch->cancel.slot(),
            asio::bind_executor(self->strand, [self, batch, padded, started](
                                                  Session::RunResult result) {
              self->BatchDone(batch, padded, started, std::move(result));
            })));
    // The run holds the slot now; from here on the strand may emit.
    asio::post(self->strand, [batch] {
      batch->started = true;
      if (batch->cancel_wanted) {
        batch->cancel.emit(asio::cancellation_type::all);
      }
    });
  });
}

void BatchingState::BatchDone(const std::shared_ptr<RunningBatch>& batch,
                              int64_t padded, SteadyClock::time_point started,
                              Session::RunResult result) {
  --running;
  // Only a run that completed says how long runs take: a cancelled one
  // lasted as long as its requests waited (up to their deadlines), and
  // counting it would close every later batch at once.
  if (result.ok()) {
    const auto took = SteadyClock::now() - started;
    run_estimate =
        run_estimate.count() == 0 ? took : (3 * run_estimate + took) / 4;
  }
  // Outputs must have one row per input row to be split.
  absl::Status split_error;
  if (result.ok()) {
    for (size_t j = 0; j < result->size(); ++j) {
      const Tensor& t = (*result)[j];
      if (t.shape().dims() < 1 || t.shape().dim_size(0) != padded) {
        split_error = absl::InvalidArgumentError(absl::StrCat(
            "output '", (*output_names)[j], "' has shape ",
            t.shape().DebugString(), " for a batch of ", padded,
            " rows; a batched output needs one row per input row"));
        break;
      }
    }
  }
  // The answers share the batch's outputs; each request's rows are taken
  // out of them on its own executor (AnswerOf). Every member's answer is
  // made first, then they are posted together: one function per caller's
  // executor (async/grouped_completion.h says why), not one per request.
  std::shared_ptr<const BatchOutputs> outputs;
  if (result.ok() && split_error.ok()) {
    outputs = std::make_shared<const BatchOutputs>(
        BatchOutputs{.tensors = *std::move(result), .names = output_names});
  }
  const absl::Status& error = !result.ok() ? result.status() : split_error;
  std::vector<std::pair<Completion, BatchAnswer>> answers;
  answers.reserve(batch->members.size());
  int64_t offset = 0;
  for (const std::shared_ptr<Request>& m : batch->members) {
    const int64_t begin = offset;
    offset += m->rows;
    if (m->finished) continue;
    m->batch.reset();
    Completion done = Retire(*m, error);
    if (!done) continue;
    if (outputs != nullptr) {
      answers.emplace_back(
          std::move(done),
          BatchAnswer{.outputs = outputs, .begin = begin, .rows = m->rows});
    } else {
      answers.emplace_back(std::move(done), BatchAnswer{.status = error});
    }
  }
  PublishQueue();
  Completion::PostAll(answers);
  Schedule();
}

}  // namespace detail

absl::StatusOr<std::unique_ptr<BatchingSession>> BatchingSession::Create(
    Session& session, Signature signature, BatchingOptions options) {
  return Create(session, std::move(signature), std::move(options), nullptr);
}

absl::StatusOr<std::unique_ptr<BatchingSession>> BatchingSession::Create(
    Session& session, Signature signature, BatchingOptions options,
    std::shared_ptr<const void> owner) {
  auto invalid = [](auto... what) {
    return absl::InvalidArgumentError(
        absl::StrCat("BatchingSession: ", what...));
  };
  if (options.max_batch_size < 1) {
    return invalid("max_batch_size must be >= 1, got ", options.max_batch_size);
  }
  if (options.batch_timeout.count() < 0) {
    return invalid("batch_timeout must be >= 0, got ",
                   options.batch_timeout.count(), " us");
  }
  if (options.max_enqueued_batches < 1) {
    return invalid("max_enqueued_batches must be >= 1, got ",
                   options.max_enqueued_batches);
  }
  if (options.num_batch_threads < 1) {
    return invalid("num_batch_threads must be >= 1, got ",
                   options.num_batch_threads);
  }
  const auto& sizes = options.allowed_batch_sizes;
  if (!sizes.empty()) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] < 1 || (i > 0 && sizes[i] <= sizes[i - 1])) {
        return invalid("allowed_batch_sizes must be ascending sizes >= 1, got ",
                       absl::StrJoin(sizes, ","));
      }
    }
    if (sizes.back() != options.max_batch_size) {
      return invalid("the last of allowed_batch_sizes (", sizes.back(),
                     ") must equal max_batch_size (", options.max_batch_size,
                     ")");
    }
  }
  if (signature.inputs.empty() || signature.outputs.empty()) {
    return invalid("the signature needs inputs and outputs");
  }
  return std::unique_ptr<BatchingSession>(
      new BatchingSession(std::make_shared<detail::BatchingState>(
          session, std::move(signature), std::move(options),
          std::move(owner))));
}

BatchingSession::BatchingSession(std::shared_ptr<detail::BatchingState> state)
    : state_(std::move(state)) {}

BatchingSession::~BatchingSession() {
  boost::asio::post(state_->strand, [state = state_] { state->Shutdown(); });
}

const Signature& BatchingSession::signature() const {
  return state_->signature;
}

const BatchingOptions& BatchingSession::options() const {
  return state_->options;
}

BatchingStats BatchingSession::stats() const {
  BatchingStats stats;
  {
    std::lock_guard lock(state_->stats_mu);
    stats = state_->stats;
  }
  // Rows count from their arrival, before the strand moves them in.
  stats.queued_rows = state_->admitted_rows.load(std::memory_order_relaxed);
  return stats;
}

void BatchingSession::Start(std::shared_ptr<detail::BatchingState> state,
                            NamedTensors inputs, const RunOptions& options,
                            boost::asio::cancellation_slot slot,
                            GroupedCompletion<detail::BatchAnswer> done) {
  namespace asio = boost::asio;
  int64_t rows = 0;
  if (absl::Status invalid = state->Validate(inputs, options, rows);
      !invalid.ok()) {
    {
      std::lock_guard lock(state->stats_mu);
      ++state->stats.rejected_invalid;
    }
    // Never inline in Run.
    std::move(done).Post(detail::BatchAnswer{.status = std::move(invalid)});
    return;
  }
  if (absl::Status full = state->ReserveRows(rows); !full.ok()) {
    // At once, without queueing.
    std::move(done).Post(detail::BatchAnswer{.status = std::move(full)});
    return;
  }
  auto request = std::make_shared<detail::Request>();
  request->inputs.reserve(inputs.size());
  for (auto& [name, tensor] : inputs) {
    request->inputs.push_back(std::move(tensor));  // the signature's order
  }
  request->rows = rows;
  request->enqueued = std::chrono::steady_clock::now();
  if (options.timeout) {
    request->deadline =
        request->enqueued +
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            *options.timeout);
  }
  request->done = std::move(done);
  if (slot.is_connected()) {
    slot.assign([weak_state = std::weak_ptr<detail::BatchingState>(state),
                 weak = std::weak_ptr<detail::Request>(request)](
                    asio::cancellation_type) {
      std::shared_ptr<detail::BatchingState> s = weak_state.lock();
      if (s == nullptr) return;
      asio::post(s->strand, [s, weak] {
        if (std::shared_ptr<detail::Request> r = weak.lock()) {
          s->Finish(*r, absl::CancelledError(
                            "the request was cancelled by its caller"));
        }
      });
    });
  }
  state->Admit(std::move(request));
}

}  // namespace cosession
