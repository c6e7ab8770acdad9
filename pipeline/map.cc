// Map: fn(element) for every element, as tf.data's map.
//   * parallelism 1: fn runs in the iterator's coroutine (a MapFunction
//     synchronously, inside TryNext when the input is ready).
//   * parallelism P > 1: a window of up to P tasks in flight, each started
//     as soon as its input is taken. A MapFunction's task maps a run of up
//     to kMaxRun consecutive elements that the input had ready at once
//     (one post to the pool per run, not per element: a post and the wake
//     of a pool thread cost more than parsing a row); an AsyncMapFunction
//     is spawned per element on a strand of the pool of its own.
//     deterministic returns the window's front results once its task
//     finished (input order); otherwise those of any finished task, each
//     run's in order. An input error takes its place in the window, so it
//     comes after the results before it (deterministic).
// Errors of fn end the stream with fn's status (its message is fn's own):
// every later call returns it, with any parallelism and whatever was in
// flight (results after it are dropped);
// an OutOfRange from fn becomes InvalidArgument, so that it cannot pass for
// the end of the input; an exception becomes Internal "Map(<name>) threw".
// Skip skips the input without calling fn: fn must be a function of its
// element (it is, for exact resume to hold anyway).
// Cancellation: a waiting Next() completes with Cancelled. Destroying the
// iterator cancels the coroutines in flight; plain calls in flight finish on
// the pool and their results are dropped.
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/strings/str_cat.h"
#include "cosession/async/completion.h"
#include "cosession/async/status_from_exception.h"
#include "cosession/pipeline/detail/stages.h"

namespace cosession::detail {
namespace {

namespace asio = boost::asio;
using Result = ElementIterator::Result;
using MapResult = absl::StatusOr<Element>;

std::string StageName(const MapOptions& options) {
  return absl::StrCat("Map(", options.name, ")");
}

// What fn's result becomes in the stream.
Result FromMapResult(MapResult result) {
  if (!result.ok()) {
    return UserFunctionError(std::move(result).status(), "map function");
  }
  return std::optional<Element>(*std::move(result));
}

MapResult CallGuarded(const MapFunction& fn, Element element,
                      const std::string& stage) {
  try {
    return fn(std::move(element));
  } catch (...) {
    return StatusFromException(std::current_exception(), stage);
  }
}

class SequentialMapIterator : public ElementIterator {
 public:
  SequentialMapIterator(std::unique_ptr<ElementIterator> input,
                        std::shared_ptr<const MapFunction> fn,
                        std::string stage)
      : input_(std::move(input)),
        fn_(std::move(fn)),
        stage_(std::move(stage)) {}

  std::optional<Result> TryNext() override {
    if (!failure_.ok()) return Result(failure_);
    std::optional<Result> in = input_->TryNext();
    if (!in.has_value()) return std::nullopt;
    return Apply(*std::move(in));
  }
  asio::awaitable<Result> Next() override {
    if (!failure_.ok()) co_return failure_;
    co_return Apply(co_await input_->Next());
  }
  asio::awaitable<absl::StatusOr<int64_t>> Skip(int64_t n) override {
    if (!failure_.ok()) co_return failure_;
    co_return co_await input_->Skip(n);
  }
  // The input's elements taken at once, then mapped in place.
  absl::StatusOr<Taken> TryTakeInto(std::vector<Element>& out,
                                    size_t size) override {
    if (!failure_.ok()) return failure_;
    const size_t first = out.size();
    absl::StatusOr<Taken> taken = input_->TryTakeInto(out, size);
    for (size_t i = first; i < out.size(); ++i) {
      MapResult mapped = CallGuarded(*fn_, std::move(out[i]), stage_);
      if (!mapped.ok()) {
        out.resize(i);
        failure_ = FromMapResult(std::move(mapped)).status();
        return failure_;
      }
      out[i] = *std::move(mapped);
    }
    return taken;
  }

 private:
  Result Apply(Result in) {
    if (!in.ok() || !in->has_value()) return in;
    Result out = FromMapResult(CallGuarded(*fn_, **std::move(in), stage_));
    if (!out.ok()) failure_ = out.status();
    return out;
  }
  std::unique_ptr<ElementIterator> input_;
  std::shared_ptr<const MapFunction> fn_;
  std::string stage_;
  // fn's first error ends the stream: every later call returns it (the
  // same whether elements were taken one by one or in bulk).
  absl::Status failure_;
};

class SequentialAsyncMapIterator : public ElementIterator {
 public:
  SequentialAsyncMapIterator(std::unique_ptr<ElementIterator> input,
                             std::shared_ptr<const AsyncMapFunction> fn,
                             std::string stage)
      : input_(std::move(input)),
        fn_(std::move(fn)),
        stage_(std::move(stage)) {}

  asio::awaitable<Result> Next() override {
    if (!failure_.ok()) co_return failure_;
    Result in = co_await NextOf(*input_);
    if (!in.ok() || !in->has_value()) co_return in;
    std::exception_ptr thrown;
    MapResult out = absl::UnknownError("");
    try {
      out = co_await (*fn_)(**std::move(in));
    } catch (...) {
      thrown = std::current_exception();
    }
    Result result = thrown ? Result(StatusFromException(thrown, stage_))
                           : FromMapResult(std::move(out));
    if (!result.ok()) failure_ = result.status();
    co_return result;
  }
  asio::awaitable<absl::StatusOr<int64_t>> Skip(int64_t n) override {
    if (!failure_.ok()) co_return failure_;
    co_return co_await input_->Skip(n);
  }

 private:
  std::unique_ptr<ElementIterator> input_;
  std::shared_ptr<const AsyncMapFunction> fn_;
  std::string stage_;
  // As the plain function's: fn's first error ends the stream.
  absl::Status failure_;
};

// The longest run of elements one task of a parallel MapFunction maps
// (BM_Pipeline_CsvFile/2: runs of 1, 16 and 64 took 67, 10 and 6.4 ms).
constexpr size_t kMaxRun = 64;

// The tasks in flight of a parallel map, in input order, shared with the
// tasks (which finish on other threads) and the one waiting consumer.
class Window : public std::enable_shared_from_this<Window> {
 public:
  struct Slot {
    // Set, all at once, when the task finished; guarded by the window's
    // mutex.
    bool done = false;
    std::deque<Result> results;
    // An AsyncMapFunction's coroutine: its strand and its cancellation.
    std::optional<asio::strand<Runtime::executor_type>> strand;
    std::shared_ptr<asio::cancellation_signal> cancel;
  };

  explicit Window(bool deterministic) : deterministic_(deterministic) {}

  size_t size() {
    std::lock_guard lock(mu_);
    return slots_.size();
  }
  // A new slot at the back (already finished when `ready` is set).
  std::shared_ptr<Slot> Add(std::optional<Result> ready = std::nullopt) {
    auto slot = std::make_shared<Slot>();
    std::lock_guard lock(mu_);
    if (ready.has_value()) {
      slot->done = true;
      slot->results.push_back(*std::move(ready));
    }
    slots_.push_back(slot);
    return slot;
  }
  // A task finished; from any thread.
  void Complete(const std::shared_ptr<Slot>& slot, std::deque<Result> results) {
    absl::AnyInvocable<void(bool)> wake;
    {
      std::lock_guard lock(mu_);
      slot->results = std::move(results);
      slot->done = true;
      if (waiter_ && ReadyLocked().has_value()) wake = std::move(waiter_);
    }
    if (wake) wake(true);
  }
  // The result to return now, if one is ready (removing its slot once
  // every result of it was taken).
  std::optional<Result> TakeReady() {
    std::lock_guard lock(mu_);
    std::optional<size_t> at = ReadyLocked();
    if (!at.has_value()) return std::nullopt;
    Slot& slot = *slots_[*at];
    Result result = std::move(slot.results.front());
    slot.results.pop_front();
    if (slot.results.empty()) {
      slots_.erase(slots_.begin() + static_cast<std::ptrdiff_t>(*at));
    }
    return result;
  }
  // Completes with true once a result is ready, with false when cancelled.
  template <typename CompletionToken>
  auto WaitReady(CompletionToken&& token) {
    return asio::async_initiate<CompletionToken, void(bool)>(
        [self = shared_from_this()](auto handler) {
          auto slot = asio::get_associated_cancellation_slot(handler);
          auto done =
              PostToHandler<bool>(std::move(handler), [](bool b) { return b; });
          std::lock_guard lock(self->mu_);
          if (self->ReadyLocked().has_value()) {
            done(true);
            return;
          }
          self->waiter_ = std::move(done);
          if (slot.is_connected()) {
            slot.assign([self](asio::cancellation_type) {
              absl::AnyInvocable<void(bool)> wake;
              {
                std::lock_guard lock(self->mu_);
                wake = std::move(self->waiter_);
              }
              if (wake) wake(false);
            });
          }
        },
        token);
  }
  // Cancels every coroutine in flight; results that come later are dropped.
  void Shutdown() {
    std::deque<std::shared_ptr<Slot>> slots;
    {
      std::lock_guard lock(mu_);
      slots.swap(slots_);
      waiter_ = nullptr;
    }
    for (const std::shared_ptr<Slot>& slot : slots) {
      if (slot->cancel != nullptr) {
        asio::dispatch(*slot->strand, [cancel = slot->cancel] {
          cancel->emit(asio::cancellation_type::terminal);
        });
      }
    }
  }

 private:
  // A finished slot with results left: the front (deterministic) or any.
  // A finished task's slot always holds a result (a task maps >= 1
  // element), and is removed with its last one.
  std::optional<size_t> ReadyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (deterministic_) {
      if (!slots_.empty() && slots_.front()->done) return 0;
      return std::nullopt;
    }
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i]->done) return i;
    }
    return std::nullopt;
  }

  const bool deterministic_;
  std::mutex mu_;
  std::deque<std::shared_ptr<Slot>> slots_ ABSL_GUARDED_BY(mu_);
  absl::AnyInvocable<void(bool)> waiter_ ABSL_GUARDED_BY(mu_);
};

// Starts one task of the map function for `elements` (a run of 1 to
// kMaxRun) into `slot`.
using StartCall =
    std::function<void(std::shared_ptr<Window>, std::shared_ptr<Window::Slot>,
                       std::vector<Element>)>;

class ParallelMapIterator : public ElementIterator {
 public:
  ParallelMapIterator(std::unique_ptr<ElementIterator> input,
                      StartCall start_call, size_t max_run,
                      const MapOptions& options)
      : input_(std::move(input)),
        start_call_(std::move(start_call)),
        max_run_(max_run),
        parallelism_(static_cast<size_t>(options.parallelism)),
        window_(std::make_shared<Window>(options.deterministic)),
        stage_(StageName(options)) {}
  ~ParallelMapIterator() override { window_->Shutdown(); }

  std::optional<Result> TryNext() override {
    if (!failure_.ok()) return Result(failure_);
    TopUpFromReadyInput();
    if (std::optional<Result> ready = window_->TakeReady()) {
      return Remembered(*std::move(ready));
    }
    if (input_done_ && window_->size() == 0) {
      return Result(std::optional<Element>());
    }
    return std::nullopt;
  }

  asio::awaitable<Result> Next() override {
    if (!failure_.ok()) co_return failure_;
    while (true) {
      TopUpFromReadyInput();
      if (std::optional<Result> ready = window_->TakeReady()) {
        co_return Remembered(*std::move(ready));
      }
      if (window_->size() == 0) {
        if (input_done_) co_return std::optional<Element>();
        // Nothing in flight: wait for the input.
        Take(co_await input_->Next());
        continue;
      }
      // Calls are in flight: wait for one of them, not for the input (a
      // socket may be idle while results are ready); the input is topped
      // up with what it has ready.
      if (!co_await window_->WaitReady(asio::use_awaitable)) {
        co_return absl::CancelledError(absl::StrCat(stage_, " was cancelled"));
      }
    }
  }

  asio::awaitable<absl::StatusOr<int64_t>> Skip(int64_t n) override {
    if (!failure_.ok()) co_return failure_;
    // Results in flight first, then the input, without calls.
    int64_t skipped = 0;
    while (skipped < n && window_->size() > 0) {
      Result next = co_await Next();
      if (!next.ok()) co_return next.status();
      if (!next->has_value()) co_return skipped;
      ++skipped;
    }
    if (skipped == n || input_done_) co_return skipped;
    absl::StatusOr<int64_t> rest = co_await input_->Skip(n - skipped);
    if (!rest.ok()) co_return rest.status();
    co_return skipped + *rest;
  }

 private:
  // An error returned ends the stream, whichever task or run it came from
  // and however many elements were in flight: later calls return it.
  Result Remembered(Result result) {
    if (!result.ok()) {
      failure_ = result.status();
      input_done_ = true;
      window_->Shutdown();
    }
    return result;
  }

  // Starts tasks for input elements that are ready without waiting, in
  // runs of up to max_run_.
  void TopUpFromReadyInput() {
    while (!input_done_ && window_->size() < parallelism_) {
      std::vector<Element> run;
      std::optional<Result> failed;
      while (run.size() < max_run_) {
        std::optional<Result> in = input_->TryNext();
        if (!in.has_value()) break;
        if (!in->ok()) {
          failed = *std::move(in);
          input_done_ = true;
          break;
        }
        if (!(*in)->has_value()) {
          input_done_ = true;
          break;
        }
        run.push_back(***std::move(in));
      }
      const bool started = !run.empty();
      if (started) start_call_(window_, window_->Add(), std::move(run));
      if (failed.has_value()) window_->Add(std::move(failed));
      if (!started && !failed.has_value()) return;
    }
  }
  void Take(Result in) {
    if (!in.ok()) {
      input_done_ = true;
      window_->Add(Result(in.status()));
      return;
    }
    if (!in->has_value()) {
      input_done_ = true;
      return;
    }
    std::vector<Element> one;
    one.push_back(**std::move(in));
    start_call_(window_, window_->Add(), std::move(one));
  }

  std::unique_ptr<ElementIterator> input_;
  StartCall start_call_;
  size_t max_run_;
  size_t parallelism_;
  std::shared_ptr<Window> window_;
  std::string stage_;
  bool input_done_ = false;
  absl::Status failure_;  // the error that ended the stream
};

class MapDataset : public DatasetNode {
 public:
  MapDataset(Node input, std::shared_ptr<const MapFunction> fn,
             std::shared_ptr<const AsyncMapFunction> async_fn,
             MapOptions options)
      : input_(std::move(input)),
        fn_(std::move(fn)),
        async_fn_(std::move(async_fn)),
        options_(std::move(options)) {}

  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    absl::StatusOr<std::unique_ptr<ElementIterator>> input =
        input_->MakeIterator(context);
    if (!input.ok()) return input.status();
    const std::string stage = StageName(options_);
    if (options_.parallelism == 1) {
      if (fn_ != nullptr) {
        return std::make_unique<SequentialMapIterator>(*std::move(input), fn_,
                                                       stage);
      }
      return std::make_unique<SequentialAsyncMapIterator>(*std::move(input),
                                                          async_fn_, stage);
    }
    StartCall start;
    Runtime::executor_type pool = context.pool;
    if (fn_ != nullptr) {
      start = [fn = fn_, pool, stage](std::shared_ptr<Window> window,
                                      std::shared_ptr<Window::Slot> slot,
                                      std::vector<Element> elements) {
        asio::post(pool, [fn, stage, window = std::move(window),
                          slot = std::move(slot),
                          elements = std::move(elements)]() mutable {
          std::deque<Result> results;
          for (Element& element : elements) {
            results.push_back(
                FromMapResult(CallGuarded(*fn, std::move(element), stage)));
            // The stream ends at an error: the rest is not mapped.
            if (!results.back().ok()) break;
          }
          window->Complete(slot, std::move(results));
        });
      };
    } else {
      start = [fn = async_fn_, pool, stage](std::shared_ptr<Window> window,
                                            std::shared_ptr<Window::Slot> slot,
                                            std::vector<Element> elements) {
        Element element = std::move(elements.front());  // runs of one
        slot->strand.emplace(asio::make_strand(pool));
        slot->cancel = std::make_shared<asio::cancellation_signal>();
        auto call = [](std::shared_ptr<const AsyncMapFunction> fn,
                       Element element) -> asio::awaitable<MapResult> {
          co_return co_await (*fn)(std::move(element));
        };
        asio::co_spawn(
            *slot->strand, call(fn, std::move(element)),
            asio::bind_cancellation_slot(
                slot->cancel->slot(),
                [window, slot, stage](std::exception_ptr thrown,
                                      MapResult result) {
                  std::deque<Result> results;
                  results.push_back(
                      thrown ? Result(StatusFromException(thrown, stage))
                             : FromMapResult(std::move(result)));
                  window->Complete(slot, std::move(results));
                }));
      };
    }
    const size_t max_run = fn_ != nullptr ? kMaxRun : 1;
    return std::make_unique<ParallelMapIterator>(
        *std::move(input), std::move(start), max_run, options_);
  }
  std::optional<ElementSpec> spec() const override {
    return options_.output_spec;
  }
  bool deterministic() const override {
    return input_->deterministic() &&
           (options_.parallelism == 1 || options_.deterministic);
  }
  std::string DebugString() const override {
    return absl::StrCat(input_->DebugString(), ".", StageName(options_));
  }
  int64_t cardinality() const override { return input_->cardinality(); }

 private:
  Node input_;
  std::shared_ptr<const MapFunction> fn_;
  std::shared_ptr<const AsyncMapFunction> async_fn_;
  MapOptions options_;
};

}  // namespace

Node MapNode(Node input, MapFunction fn, MapOptions options) {
  return std::make_shared<MapDataset>(
      std::move(input), std::make_shared<const MapFunction>(std::move(fn)),
      nullptr, std::move(options));
}

Node AsyncMapNode(Node input, AsyncMapFunction fn, MapOptions options) {
  return std::make_shared<MapDataset>(
      std::move(input), nullptr,
      std::make_shared<const AsyncMapFunction>(std::move(fn)),
      std::move(options));
}

}  // namespace cosession::detail
