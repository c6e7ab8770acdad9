// Interleave: TensorFlow's interleave, in TensorFlow's order (its
// interleave_dataset_op), over inputs that come either as a list of
// datasets (many files, many sockets) or as fn(element) for each element of
// an upstream dataset (tf.data's interleave(map_func): file names into
// their lines).
//
// A cycle of cycle_length slots is visited round-robin, block_length
// elements from each in turn. An empty slot that the visit reaches takes
// the next input, which gives the slot's elements at once; an input that
// ends leaves its slot empty and the visit moves on to the next slot (a
// block there starts afresh). Once there is no next input, empty slots are
// passed over. The stream ends when every input ended. Inputs are opened
// (their iterators made; for the function form, the upstream element
// awaited and fn called) only when they enter the cycle, so that a
// thousand files hold at most cycle_length open.
//
// Errors: an input's error is returned and the visit stays on that input
// (read ahead, the error comes after the elements before it and requests
// stop on the coordinator, as a Prefetch's does);
// an error of the upstream dataset is returned and the next visit of the
// empty slot asks it again; fn's failed dataset or exception is returned
// naming "Interleave(<name>)" and the element's origin, and the slot takes
// the next element when visited again (as FlatMap goes on).
//
// The order is fixed by the inputs' own orders, so the stream is
// deterministic when they are (for the function form: when the upstream
// dataset is and fn is a function of its element). Inputs are read in
// turn, in the iterator's coroutine: a waiting input (a quiet socket) holds
// the cycle up -- unless the function form's num_parallel_calls is above
// 1: then each input, once open, is read ahead by a Prefetch of
// 2 x block_length elements (tf.data's default buffer per input of its
// parallel interleave), a task of the IteratorContext's coordinator, so
// that the open inputs wait and work at the same time; the order stays
// the one above (tf.data's deterministic parallel interleave). An input is
// still opened only when the visit reaches its slot, so at most
// cycle_length are read ahead; the pool bounds the work done at once. To read
// the list form's inputs ahead, end each with a Prefetch.
//
// Not deterministic (the parallel form with deterministic false, tf.data's
// deterministic=False): when the visited input has no element ready, the
// visit takes one from the next open input that has (in cycle order), and
// starts a block there. When none has, the cycle's empty slots are filled
// with the inputs that can be opened without waiting (all of the cycle
// read ahead, as tf.data's parallel interleave keeps its cycle open), and
// the visit waits for whichever open input gives first -- their buffers'
// pops in one parallel group, the others cancelled once one completes; a
// pop that completed before its cancellation keeps its result for its
// input. So a quiet input (an idle socket) never holds up the others.
// Every element still comes exactly once, each input's in its order; the
// stream is no longer deterministic().
//
// Thread safety: an iterator is used by one consumer at a time.
#include <algorithm>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cosession/pipeline/detail/prefetcher.h"
#include "cosession/pipeline/detail/result_buffer.h"
#include "cosession/pipeline/detail/stages.h"

namespace cosession::detail {
namespace {

namespace asio = boost::asio;
using Result = ElementIterator::Result;

// The next input's iterator; null when there are no more inputs.
using Opened = absl::StatusOr<std::unique_ptr<ElementIterator>>;

// Where the cycle's inputs come from, in order.
class CycleInputs {
 public:
  virtual ~CycleInputs() = default;
  // The next input when it is ready without waiting; nullopt when the
  // caller must await Open() instead.
  virtual std::optional<Opened> TryOpen() = 0;
  virtual asio::awaitable<Opened> Open() = 0;
};

// The list form: the datasets' iterators, made in turn.
class ListedInputs : public CycleInputs {
 public:
  ListedInputs(std::vector<Node> inputs, IteratorContext context)
      : inputs_(std::move(inputs)), context_(std::move(context)) {}

  std::optional<Opened> TryOpen() override {
    if (next_ == inputs_.size()) return Opened(nullptr);
    Opened it = inputs_[next_]->MakeIterator(context_);
    if (it.ok()) ++next_;  // a failed one is tried again on the next visit
    return it;
  }
  asio::awaitable<Opened> Open() override { co_return *TryOpen(); }

 private:
  std::vector<Node> inputs_;
  IteratorContext context_;
  size_t next_ = 0;  // inputs_[next_] is the next to open
};

// The function form: fn(element)'s iterator for each upstream element.
class MappedInputs : public CycleInputs {
 public:
  // read_ahead > 0: each input is read ahead through a Prefetch of that
  // many elements.
  MappedInputs(std::unique_ptr<ElementIterator> upstream,
               std::shared_ptr<const FlatMapFunction> fn, std::string name,
               IteratorContext context, int64_t read_ahead)
      : upstream_(std::move(upstream)),
        fn_(std::move(fn)),
        name_(std::move(name)),
        context_(std::move(context)),
        read_ahead_(read_ahead) {}

  std::optional<Opened> TryOpen() override {
    std::optional<Result> element = upstream_->TryNext();
    if (!element.has_value()) return std::nullopt;
    return OpenFor(*std::move(element));
  }
  asio::awaitable<Opened> Open() override {
    co_return OpenFor(co_await NextOf(*upstream_));
  }

 private:
  Opened OpenFor(Result element) {
    if (!element.ok()) return element.status();
    if (!element->has_value()) return nullptr;
    return OpenDatasetOf(*fn_, **element, name_, context_, read_ahead_);
  }

  std::unique_ptr<ElementIterator> upstream_;
  std::shared_ptr<const FlatMapFunction> fn_;
  std::string name_;
  IteratorContext context_;
  int64_t read_ahead_;
};

class InterleaveIterator : public ElementIterator {
 public:
  // deterministic false: the visit may take from another open input that
  // has an element ready (see the top comment).
  InterleaveIterator(std::unique_ptr<CycleInputs> inputs, size_t cycle_length,
                     int64_t block_length, bool deterministic)
      : inputs_(std::move(inputs)),
        block_length_(block_length),
        deterministic_(deterministic),
        cycle_(cycle_length),
        stash_(cycle_length) {}

  std::optional<Result> TryNext() override {
    while (VisitInput()) {
      std::unique_ptr<ElementIterator>& slot = cycle_[position_];
      if (slot == nullptr) {
        std::optional<Opened> opened = inputs_->TryOpen();
        if (!opened.has_value()) return std::nullopt;  // Next() opens it
        if (absl::Status s = Fill(position_, *std::move(opened)); !s.ok()) {
          return Result(s);
        }
        continue;
      }
      std::optional<Result> next =
          deterministic_ ? slot->TryNext() : TryAnyReady();
      if (!next.has_value()) return std::nullopt;  // Next() continues here
      if (std::optional<Result> taken = Take(*std::move(next))) return taken;
    }
    return Result(std::optional<Element>());
  }

  asio::awaitable<Result> Next() override {
    while (VisitInput()) {
      std::unique_ptr<ElementIterator>& slot = cycle_[position_];
      if (slot == nullptr) {
        if (absl::Status s = Fill(position_, co_await inputs_->Open());
            !s.ok()) {
          co_return s;
        }
        continue;
      }
      if (!deterministic_) {
        std::optional<Result> ready = TryAnyReady();
        if (!ready.has_value()) {
          if (absl::Status s = OpenEmptySlots(); !s.ok()) co_return s;
          ready = TryAnyReady();
        }
        if (!ready.has_value() && co_await WaitForAnyReady()) {
          ready = TryAnyReady();
        }
        if (ready.has_value()) {
          if (std::optional<Result> taken = Take(*std::move(ready))) {
            co_return *std::move(taken);
          }
          continue;
        }
      }
      Result next = co_await NextOf(*slot);
      if (std::optional<Result> taken = Take(std::move(next))) {
        co_return *std::move(taken);
      }
    }
    co_return std::optional<Element>();
  }

 private:
  // Moves the visit past the empty slots that no input will fill; false
  // when the stream ended. Else the visited slot holds an input, or is
  // empty with a next input to open there.
  bool VisitInput() {
    while (!(no_more_inputs_ && open_ == 0)) {
      if (cycle_[position_] != nullptr || !no_more_inputs_) return true;
      Advance();
    }
    return false;
  }

  void Advance() {
    taken_in_block_ = 0;
    position_ = (position_ + 1) % cycle_.size();
  }

  // Not deterministic: what the first open input from the visited one on
  // has ready (a result a lost race of WaitForAnyReady kept first), the
  // visit moved there (a new block); nullopt when none has.
  std::optional<Result> TryAnyReady() {
    for (size_t k = 0; k < cycle_.size(); ++k) {
      const size_t slot = (position_ + k) % cycle_.size();
      if (cycle_[slot] == nullptr) continue;
      std::optional<Result> ready = std::exchange(stash_[slot], std::nullopt);
      if (!ready.has_value()) ready = cycle_[slot]->TryNext();
      if (!ready.has_value()) continue;
      if (slot != position_) {
        position_ = slot;
        taken_in_block_ = 0;
      }
      return ready;
    }
    return std::nullopt;
  }

  // Puts what opening gave into an empty slot. Without a next input the
  // visit stays, and passes the slot over on its next turn.
  absl::Status Fill(size_t slot, Opened opened) {
    if (!opened.ok()) return opened.status();
    if (*opened == nullptr) {
      no_more_inputs_ = true;
      return absl::OkStatus();
    }
    cycle_[slot] = *std::move(opened);
    ++open_;
    return absl::OkStatus();
  }

  // Not deterministic, nothing ready: opens the next inputs into the
  // cycle's empty slots, as far as they open without waiting. An input
  // that fails to open is returned with the visit moved to its slot, which
  // takes the next input when visited again.
  absl::Status OpenEmptySlots() {
    for (size_t slot = 0; slot < cycle_.size() && !no_more_inputs_; ++slot) {
      if (cycle_[slot] != nullptr) continue;
      std::optional<Opened> opened = inputs_->TryOpen();
      if (!opened.has_value()) break;  // the next input is not there yet
      if (absl::Status s = Fill(slot, *std::move(opened)); !s.ok()) {
        position_ = slot;
        taken_in_block_ = 0;
        return s;
      }
    }
    return absl::OkStatus();
  }

  // Not deterministic, nothing ready: waits until one of the open inputs,
  // all read ahead, gives a result, and keeps it (and any other that came
  // in the same race) for TryAnyReady. A pop that lost the race was
  // cancelled and took nothing -- or completed first and holds a result,
  // which is kept; a Cancelled that came second is dropped, as a stopped
  // buffer gives its stop again. False when fewer than two inputs are open
  // and read ahead: the caller waits on the visited one.
  asio::awaitable<bool> WaitForAnyReady() {
    // Each pop completes on this coroutine's executor: a deferred operation
    // has none of its own, and the group would complete it on the system
    // executor's threads instead, beside the cancellation slots this
    // thread owns.
    using Token =
        asio::executor_binder<asio::deferred_t, asio::any_io_executor>;
    using Pop =
        decltype(std::declval<ResultBuffer&>().AsyncPop(std::declval<Token>()));
    const asio::any_io_executor executor = co_await asio::this_coro::executor;
    std::vector<Pop> pops;
    std::vector<size_t> slots;
    for (size_t slot = 0; slot < cycle_.size(); ++slot) {
      if (cycle_[slot] == nullptr) continue;
      auto* ahead = dynamic_cast<ReadAheadIterator*>(cycle_[slot].get());
      Prefetcher* prefetcher = ahead != nullptr ? ahead->prefetcher() : nullptr;
      if (prefetcher == nullptr) co_return false;
      pops.push_back(prefetcher->buffer()->AsyncPop(
          asio::bind_executor(executor, asio::deferred)));
      slots.push_back(slot);
    }
    if (pops.size() < 2) co_return false;
    auto group = asio::experimental::make_parallel_group(std::move(pops));
    auto [order, results] = co_await group.async_wait(
        asio::experimental::wait_for_one(), asio::use_awaitable);
    for (size_t k = 0; k < order.size(); ++k) {
      Result& result = results[order[k]];
      if (k > 0 && absl::IsCancelled(result.status())) continue;
      stash_[slots[order[k]]] = std::move(result);
    }
    co_return true;
  }

  // What the visited input gave: an element or an error to return, or
  // nullopt after its end (its slot emptied; the caller goes on).
  std::optional<Result> Take(Result next) {
    if (!next.ok()) return next;
    if (!next->has_value()) {
      cycle_[position_].reset();
      --open_;
      Advance();
      return std::nullopt;
    }
    if (++taken_in_block_ == block_length_) Advance();
    return next;
  }

  std::unique_ptr<CycleInputs> inputs_;
  int64_t block_length_;
  bool deterministic_;
  bool no_more_inputs_ = false;
  size_t open_ = 0;  // slots holding an input
  std::vector<std::unique_ptr<ElementIterator>> cycle_;  // null: empty slot
  // Not deterministic: per slot, a result WaitForAnyReady took and the
  // visit has not yet taken.
  std::vector<std::optional<Result>> stash_;
  size_t position_ = 0;
  int64_t taken_in_block_ = 0;
};

class InterleaveDataset : public DatasetNode {
 public:
  InterleaveDataset(std::vector<Node> inputs, int64_t cycle_length,
                    int64_t block_length)
      : inputs_(std::move(inputs)),
        cycle_length_(cycle_length),
        block_length_(block_length) {}

  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    // Slots beyond the number of inputs would only ever be passed over.
    const size_t cycle =
        cycle_length_ == 0
            ? inputs_.size()
            : std::min(static_cast<size_t>(cycle_length_), inputs_.size());
    return std::make_unique<InterleaveIterator>(
        std::make_unique<ListedInputs>(inputs_, context), cycle, block_length_,
        /*deterministic=*/true);
  }
  std::optional<ElementSpec> spec() const override {
    return CommonSpecOf(inputs_);
  }
  bool deterministic() const override { return AllDeterministic(inputs_); }
  std::string DebugString() const override {
    return absl::StrCat("Interleave(", DebugStringOf(inputs_), ")");
  }

 private:
  std::vector<Node> inputs_;
  int64_t cycle_length_;
  int64_t block_length_;
};

class MappedInterleaveDataset : public DatasetNode {
 public:
  MappedInterleaveDataset(Node upstream, FlatMapFunction fn,
                          InterleaveOptions options)
      : upstream_(std::move(upstream)),
        fn_(std::make_shared<const FlatMapFunction>(std::move(fn))),
        options_(std::move(options)) {}

  absl::StatusOr<std::unique_ptr<ElementIterator>> MakeIterator(
      const IteratorContext& context) const override {
    if (Parallel() && context.coordinator == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          Name(),
          ": num_parallel_calls > 1 reads the inputs ahead as tasks of a "
          "Coordinator (IteratorContext::coordinator), and there is none"));
    }
    absl::StatusOr<std::unique_ptr<ElementIterator>> upstream =
        upstream_->MakeIterator(context);
    if (!upstream.ok()) return upstream.status();
    return std::make_unique<InterleaveIterator>(
        std::make_unique<MappedInputs>(
            *std::move(upstream), fn_, Name(), context,
            Parallel() ? 2 * options_.block_length : 0),
        static_cast<size_t>(options_.cycle_length), options_.block_length,
        !Sloppy());
  }
  std::optional<ElementSpec> spec() const override {
    return options_.output_spec;
  }
  bool deterministic() const override {
    return upstream_->deterministic() && !Sloppy();
  }
  std::string DebugString() const override {
    return absl::StrCat(upstream_->DebugString(), ".", Name());
  }

 private:
  std::string Name() const {
    return absl::StrCat("Interleave(", options_.name, ")");
  }
  // Inputs read ahead; and, besides, in the order they are ready.
  bool Parallel() const { return options_.num_parallel_calls > 1; }
  bool Sloppy() const { return Parallel() && !options_.deterministic; }
  Node upstream_;
  std::shared_ptr<const FlatMapFunction> fn_;
  InterleaveOptions options_;
};

}  // namespace

Node InterleaveNode(std::vector<Node> inputs, int64_t cycle_length,
                    int64_t block_length) {
  return std::make_shared<InterleaveDataset>(std::move(inputs), cycle_length,
                                             block_length);
}

Node MappedInterleaveNode(Node upstream, FlatMapFunction fn,
                          InterleaveOptions options) {
  return std::make_shared<MappedInterleaveDataset>(
      std::move(upstream), std::move(fn), std::move(options));
}

}  // namespace cosession::detail
