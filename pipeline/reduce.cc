// Reduce: tf.data's reduce, the final state of a Scan whose every output is
// its new state. Reusing Scan keeps one definition of a state's structure
// check, of how fn's errors and exceptions are named, and of what a
// resumed state is; Reduce only reads the stream to its end, keeping the
// last output.
//
// The read is a coroutine awaited by the caller: it completes on the
// caller's executor, once, with the state or the first error. An exception
// that reaches it (a cancelled wait of a stage: Asio throws
// operation_aborted into the awaiting coroutine) becomes a status, so none
// crosses into the caller.
// Thread safety: as the Dataset's (immutable); the iterator is Reduce's own.
#include <boost/asio/use_awaitable.hpp>
#include <exception>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cosession/async/status_from_exception.h"
#include "cosession/pipeline/dataset.h"

namespace cosession {
namespace {

namespace asio = boost::asio;

// By value: the caller's Dataset may be a temporary of its co_await
// expression (docs/async_pitfalls.md, item 5).
asio::awaitable<absl::StatusOr<Element>> LastState(Dataset states,
                                                   Element initial_state,
                                                   IteratorContext context) {
  absl::StatusOr<std::unique_ptr<ElementIterator>> it =
      states.MakeIterator(context);
  if (!it.ok()) co_return it.status();
  Element state = std::move(initial_state);
  try {
    for (;;) {
      ElementIterator::Result next = co_await NextOf(**it);
      if (!next.ok()) co_return next.status();
      if (!next->has_value()) co_return state;
      state = **std::move(next);
    }
  } catch (...) {
    co_return StatusFromException(std::current_exception(), "Reduce");
  }
}

}  // namespace

asio::awaitable<absl::StatusOr<Element>> Dataset::Reduce(
    Element initial_state, ReduceFunction fn, IteratorContext context) const {
  if (!fn && ok()) {
    return LastState(
        Failed(absl::InvalidArgumentError(absl::StrCat(
            DebugString(), ".Reduce: the reduce function is empty"))),
        std::move(initial_state), context);
  }
  ScanFunction step = [fn = std::move(fn)](
                          const Element& state,
                          Element element) -> absl::StatusOr<ScanStep> {
    absl::StatusOr<Element> next = fn(state, std::move(element));
    if (!next.ok()) return next.status();
    return ScanStep{.state = *next, .output = *std::move(next)};
  };
  Dataset states =
      Scan(initial_state, std::move(step), ScanOptions{.name = "Reduce"});
  return LastState(std::move(states), std::move(initial_state), context);
}

}  // namespace cosession
