// Prefetch: a bounded buffer filled ahead of its consumer by a coordinated
// task (the Prefetcher of pipeline/detail/prefetcher.h, which also feeds
// the graph's IteratorGetNext op).
//
// How the producer runs. The coordinated task ("prefetch ..." on the
// coordinator's strand) does no work itself: it co_spawns Fill on a strand
// of the pool of its own, so that the chain before the buffer -- its maps,
// its socket reads, its batches -- runs off the coordinator's strand, and
// then waits for Fill to finish. A cancellation of that wait (the
// coordinator's stop) is not a completion: it is forwarded to Fill, on
// Fill's strand (a cancellation_signal is emitted only there), and the task
// keeps waiting until Fill returned, so that Join never reports a task done
// while its chain still runs. Shutdown (the consumer is gone) does the
// same without the coordinator.
//
// Results. They travel through a ResultBuffer (pipeline/detail/
// result_buffer.h) of buffer_size results: the producer parks when it is
// full and is woken once consumers took half of it; a consumer that finds
// it empty while the producer keeps pace spins briefly instead of sleeping,
// and so does a producer that finds it full while consumers keep pace.
// The first final result -- the end of the input (nullopt), an error, or a
// stop -- is recorded once; a consumer that meets it returns it from then
// on. The end and an error travel behind the elements before them (an
// error also requests stop on the coordinator, as any failed coordinated
// task does); a stop closes the buffer at once, dropping what is
// buffered.
#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <exception>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/strings/str_cat.h"
#include "cosession/async/completion.h"
#include "cosession/async/status_from_exception.h"
#include "cosession/pipeline/detail/prefetcher.h"
#include "cosession/pipeline/detail/result_buffer.h"
#include "cosession/pipeline/detail/stages.h"

namespace cosession::detail {

namespace asio = boost::asio;
using boost::system::error_code;

absl::Status PipelineStopped() {
  return absl::CancelledError("input pipeline stopped");
}

class PrefetcherState : public std::enable_shared_from_this<PrefetcherState> {
 public:
  using Result = ElementIterator::Result;
  using Strand = asio::strand<Runtime::executor_type>;

  PrefetcherState(Runtime::executor_type pool, int64_t buffer_size)
      : strand(asio::make_strand(pool)),
        buffer(
            std::make_shared<ResultBuffer>(static_cast<size_t>(buffer_size))) {}

  std::optional<Result> final_result() { return buffer->final_result(); }
  // Records the final result (the first one wins). With `close`, waiting
  // receivers wake up and read it, a waiting producer stops, buffered
  // results are dropped; without, they stay to be taken first.
  void Finish(Result result, bool close) {
    buffer->Close(std::move(result), /*drop_buffered=*/close);
  }

  bool stopping() const { return stopping_.load(std::memory_order_acquire); }
  // Stops Fill: sets the flag it checks between elements and cancels the
  // wait it is in, on its strand.
  void StopFill(asio::cancellation_type type) {
    stopping_.store(true, std::memory_order_release);
    asio::post(strand, [self = shared_from_this(), type] {
      if (self->fill_running) self->fill_signal.emit(type);
    });
  }

  // Fill's end, delivered once to the producer task's wait.
  void FillDone(absl::Status status) {
    absl::AnyInvocable<void(absl::Status)> waiter;
    {
      std::lock_guard lock(mu_);
      fill_result_ = status;
      waiter = std::move(fill_waiter_);
    }
    if (waiter) waiter(std::move(status));
  }
  // Completes with Fill's status once Fill returned. Cancellation does not
  // complete it: it stops Fill, whose return then completes it.
  template <typename CompletionToken>
  auto AsyncWaitFill(CompletionToken&& token) {
    return asio::async_initiate<CompletionToken, void(absl::Status)>(
        [this](auto handler) {
          auto slot = asio::get_associated_cancellation_slot(handler);
          if (slot.is_connected()) {
            // The slot may outlive this wait (and the state): it holds a
            // weak reference only.
            slot.assign(
                [weak = weak_from_this()](asio::cancellation_type type) {
                  if (auto self = weak.lock()) self->StopFill(type);
                });
          }
          auto done = PostToHandler<absl::Status>(
              std::move(handler), [](absl::Status s) { return s; });
          std::optional<absl::Status> ready;
          {
            std::lock_guard lock(mu_);
            if (fill_result_.has_value()) {
              ready = fill_result_;
            } else {
              fill_waiter_ = std::move(done);
            }
          }
          if (ready.has_value()) done(*std::move(ready));
        },
        token);
  }

  Strand strand;
  const std::shared_ptr<ResultBuffer> buffer;
  // Emitted only on `strand` (StopFill): Fill's cancellation, while Fill
  // runs (fill_running, also only touched on `strand`).
  asio::cancellation_signal fill_signal;
  bool fill_running = false;

 private:
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::optional<absl::Status> fill_result_ ABSL_GUARDED_BY(mu_);
  absl::AnyInvocable<void(absl::Status)> fill_waiter_ ABSL_GUARDED_BY(mu_);
};

namespace {

// Owned by the producer task's frame: however the task ends -- returns,
// throws, or is destroyed without ever running (spawned after a stop) --
// a consumer never waits for results that will not come.
class ProducerGuard {
 public:
  explicit ProducerGuard(std::shared_ptr<PrefetcherState> state)
      : state_(std::move(state)) {}
  ProducerGuard(ProducerGuard&& other) noexcept
      : state_(std::move(other.state_)) {}
  ProducerGuard& operator=(ProducerGuard&&) = delete;
  ~ProducerGuard() {
    // After the end was queued (a final result recorded, the buffer still
    // open), the buffered elements are still the consumer's.
    if (state_ != nullptr && !state_->final_result().has_value()) {
      state_->Finish(PipelineStopped(), /*close=*/true);
    }
  }

 private:
  std::shared_ptr<PrefetcherState> state_;
};

// The chain, element by element, into the buffer. `state` and `input`
// belong to Fill's frame, which outlives this call.
asio::awaitable<absl::Status> FillLoop(PrefetcherState& state,
                                       ElementIterator& input,
                                       int64_t skip_first) {
  if (state.stopping()) co_return PipelineStopped();
  if (skip_first > 0) {
    absl::StatusOr<int64_t> skipped = co_await input.Skip(skip_first);
    if (!skipped.ok()) co_return skipped.status();
  }
  ResultBuffer& buffer = *state.buffer;
  while (!state.stopping()) {
    ElementIterator::Result next = co_await NextOf(input);
    if (!next.ok()) co_return next.status();
    const bool at_end = !next->has_value();
    for (;;) {
      const ResultBuffer::PushOutcome pushed = buffer.TryPush(next);
      if (pushed == ResultBuffer::PushOutcome::kDone) break;
      if (pushed == ResultBuffer::PushOutcome::kClosed) {
        co_return PipelineStopped();
      }
      if (buffer.SpinForSpace()) continue;
      auto [ec] = co_await buffer.AsyncWaitForSpace(
          asio::as_tuple(asio::use_awaitable));
      if (ec) co_return PipelineStopped();  // closed or cancelled: stopped
    }
    if (at_end) {
      state.Finish(std::optional<Element>(), /*close=*/false);
      co_return absl::OkStatus();
    }
  }
  co_return PipelineStopped();
}

// Runs on the prefetcher's strand. Owns the input iterator, which is
// therefore used and destroyed there only.
asio::awaitable<absl::Status> Fill(std::shared_ptr<PrefetcherState> state,
                                   std::unique_ptr<ElementIterator> input,
                                   int64_t skip_first, std::string name) {
  state->fill_running = true;
  absl::Status status;
  try {
    status = co_await FillLoop(*state, *input, skip_first);
  } catch (...) {
    status = StatusFromException(std::current_exception(), name);
  }
  if (state->stopping() && !status.ok()) status = PipelineStopped();
  if (absl::IsCancelled(status)) {
    state->Finish(PipelineStopped(), /*close=*/true);
    // A stop is not the pipeline's failure: the task ends cleanly.
    status = absl::OkStatus();
  } else if (!status.ok()) {
    // Behind the results before it, as the end: they are the consumer's.
    state->Finish(status, /*close=*/false);
  }
  input.reset();
  state->fill_running = false;
  // A body that ends without suspending after a cancellation loses its
  // completion in co_spawn (docs/async_pitfalls.md, item 12).
  co_await asio::this_coro::reset_cancellation_state();
  co_return status;
}

asio::awaitable<absl::Status> Produce(std::shared_ptr<PrefetcherState> state,
                                      std::unique_ptr<ElementIterator> input,
                                      int64_t skip_first, std::string name,
                                      ProducerGuard guard) {
  (void)guard;  // its destructor is the point
  if (state->stopping()) co_return absl::OkStatus();
  // Named first: a temporary inside co_await is what g++ 12 mishandles
  // (docs/async_pitfalls.md, item 4).
  asio::awaitable<absl::Status> fill =
      Fill(state, std::move(input), skip_first, std::move(name));
  asio::co_spawn(state->strand, std::move(fill),
                 asio::bind_cancellation_slot(
                     state->fill_signal.slot(),
                     [state](std::exception_ptr error, absl::Status status) {
                       if (error) {
                         status = StatusFromException(error, "prefetch");
                       }
                       state->FillDone(std::move(status));
                     }));
  co_return co_await state->AsyncWaitFill(asio::use_awaitable);
}

}  // namespace

absl::StatusOr<std::shared_ptr<Prefetcher>> Prefetcher::Start(
    std::unique_ptr<ElementIterator> input, int64_t buffer_size,
    const IteratorContext& context, int64_t skip_first, std::string name) {
  if (context.coordinator == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(name,
                     ": a prefetching stage needs a Coordinator "
                     "(IteratorContext::coordinator) to run its producer"));
  }
  auto state = std::make_shared<PrefetcherState>(context.pool, buffer_size);
  auto prefetcher = std::make_shared<Prefetcher>(state);
  ProducerGuard guard(state);
  std::string task_name = name;
  context.coordinator->Spawn(std::move(task_name),
                             Produce(state, std::move(input), skip_first,
                                     std::move(name), std::move(guard)));
  return prefetcher;
}

Prefetcher::Prefetcher(std::shared_ptr<PrefetcherState> state)
    : state_(std::move(state)) {}

Prefetcher::~Prefetcher() { Shutdown(); }

void Prefetcher::Shutdown() {
  state_->Finish(PipelineStopped(), /*close=*/true);
  state_->StopFill(asio::cancellation_type::terminal);
}

const std::shared_ptr<ResultBuffer>& Prefetcher::buffer() const {
  return state_->buffer;
}

std::optional<Prefetcher::Result> Prefetcher::TryReceive() {
  return state_->buffer->TryPop();
}

asio::awaitable<Prefetcher::Result> Prefetcher::Receive() {
  if (std::optional<Result> ready = TryReceive()) co_return *std::move(ready);
  std::shared_ptr<PrefetcherState> state = state_;
  co_return co_await state->buffer->AsyncPop(asio::use_awaitable);
}

namespace {

class PrefetchIterator : public ReadAheadIterator {
 public:
  PrefetchIterator(std::unique_ptr<ElementIterator> input, int64_t buffer_size,
                   IteratorContext context, std::string name)
      : input_(std::move(input)),
        buffer_size_(buffer_size),
        context_(context),
        name_(std::move(name)) {}

  std::optional<Result> TryNext() override {
    if (absl::Status started = EnsureStarted(); !started.ok()) return started;
    return prefetcher_->TryReceive();
  }
  asio::awaitable<Result> Next() override {
    if (absl::Status started = EnsureStarted(); !started.ok()) {
      co_return started;
    }
    co_return co_await prefetcher_->Receive();
  }
  Prefetcher* prefetcher() override { return prefetcher_.get(); }
  // Before the producer started, the input skips (exactly, and cheaply
  // where it can); after, elements are taken from the buffer.
  asio::awaitable<absl::StatusOr<int64_t>> Skip(int64_t n) override {
    if (prefetcher_ == nullptr && start_status_.ok()) {
      co_return co_await input_->Skip(n);
    }
    co_return co_await ElementIterator::Skip(n);
  }

 private:
  absl::Status EnsureStarted() {
    if (prefetcher_ != nullptr || !start_status_.ok()) return start_status_;
    absl::StatusOr<std::shared_ptr<Prefetcher>> started =
        Prefetcher::Start(std::move(input_), buffer_size_, context_, 0, name_);
    if (!started.ok()) {
      start_status_ = started.status();
    } else {
      prefetcher_ = *std::move(started);
    }
    return start_status_;
  }

  std::unique_ptr<ElementIterator> input_;
  int64_t buffer_size_;
  IteratorContext context_;
  std::string name_;
  absl::Status start_status_;
  std::shared_ptr<Prefetcher> prefetcher_;
};

class PrefetchDataset : public DatasetNode {
 public:
  PrefetchDataset(Node input, int64_t buffer_size)
      : input_(std::move(input)), buffer_size_(buffer_size) {}
  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    absl::StatusOr<std::unique_ptr<ElementIterator>> input =
        input_->MakeIterator(context);
    if (!input.ok()) return input.status();
    return std::make_unique<PrefetchIterator>(
        *std::move(input), buffer_size_, context,
        absl::StrCat("prefetch ", DebugString()));
  }
  std::optional<ElementSpec> spec() const override { return input_->spec(); }
  bool deterministic() const override { return input_->deterministic(); }
  std::string DebugString() const override {
    return absl::StrCat(input_->DebugString(), ".Prefetch(", buffer_size_, ")");
  }
  int64_t cardinality() const override { return input_->cardinality(); }

 private:
  Node input_;
  int64_t buffer_size_;
};

}  // namespace

Node PrefetchNode(Node input, int64_t buffer_size) {
  return std::make_shared<PrefetchDataset>(std::move(input), buffer_size);
}

}  // namespace cosession::detail
