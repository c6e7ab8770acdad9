// GlobalStep: how every standard hook follows the global step -- the one
// place that finds it, fetches it in a step, estimates it, and reads it.
//
// TensorFlow's hooks fetch the global step in each step, and read it again
// after the step (a run of its own) when they need the exact step a trigger
// belongs to: the fetch and the train op run in one step in no guaranteed
// order, so the fetched value may be read before the step's own increment
// (TensorFlow's assumption: "stale", the step's value is fetched +
// steps_per_run) or after it. Each real read after a step teaches the
// estimate the difference, so estimates are right in either order.
//
//   absl::Status Begin(Graph& g)    { return step_.Find(g, "MyHook"); }
//   BeforeRunSync(ctx, args)        { step_.AddFetch(args); ... }
//   AfterRunSync(ctx, values)       { auto fetched = step_.TakeFetched(values);
//                                     ... step_.EstimatedAfter() ... }
//   AfterRun(ctx, values) (a trigger step: suspends)
//                                   { ... co_await step_.Read(ctx.session()) }
//
// A hook that suspends only to read the global step on trigger steps says
// so through MaySuspendInNextStep (async/session_run_hook.h), from
// ExpectedAfterNextStep(); on a step it declared not to suspend it uses
// EstimatedAfter() instead of a read.
//
// Errors: Find keeps GetGlobalStep's code (NotFound, InvalidArgument) and
// prefixes the hook's name; TakeFetched is Internal naming the hook when the
// fetch is missing; Read returns the run's error.
// Thread safety: as any hook's state (one step at a time).
#ifndef COSESSION_HOOKS_GLOBAL_STEP_H_
#define COSESSION_HOOKS_GLOBAL_STEP_H_

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosession/async/session.h"
#include "cosession/async/session_run_hook.h"
#include "cosession/graph/graph.h"

namespace cosession {

class GlobalStep {
 public:
  // `steps_per_run`: global steps one run advances (TensorFlow's
  // steps_per_run).
  explicit GlobalStep(int64_t steps_per_run = 1)
      : steps_per_run_(steps_per_run), lag_(steps_per_run) {}

  // In Begin: finds the graph's int64 global step for hook `hook`.
  absl::Status Find(Graph& graph, absl::string_view hook);
  const Output& tensor() const { return tensor_; }
  bool found() const { return tensor_.valid(); }

  // BeforeRun: adds the global step to the step's fetches.
  void AddFetch(SessionRunArgs& args) const;
  // AfterRun: the value this step fetched, `index`-th of the hook's results
  // (0 when AddFetch came first).
  absl::StatusOr<int64_t> TakeFetched(const SessionRunValues& values,
                                      size_t index = 0);

  // The global step after / before the step whose fetch was taken last.
  int64_t EstimatedAfter() const { return fetched_ + lag_; }
  int64_t EstimatedBefore() const { return fetched_ + lag_ - steps_per_run_; }
  // The global step expected after the coming step: the last value known
  // (read, or estimated after the last step) + steps_per_run. Unset before
  // anything is known.
  std::optional<int64_t> ExpectedAfterNextStep() const;
  // The last value known (read, or estimated after the last step).
  std::optional<int64_t> last_known() const { return last_known_; }

  // Reads the global step now, in a run of its own on `session` (suspends).
  // Read right after a step's TakeFetched, it also learns where that fetch
  // stood. `session` must outlive the awaitable.
  boost::asio::awaitable<absl::StatusOr<int64_t>> Read(Session& session);
  // The same for a value the hook read by other means (e.g. together with
  // the variables of a checkpoint).
  void Observe(int64_t now);

 private:
  std::string hook_;
  Output tensor_;
  int64_t steps_per_run_;
  // The value after a step minus the value fetched in it.
  int64_t lag_;
  int64_t fetched_ = 0;
  // A fetch taken and not yet compared with a read.
  bool unlearned_fetch_ = false;
  std::optional<int64_t> last_known_;
};

}  // namespace cosession

#endif  // COSESSION_HOOKS_GLOBAL_STEP_H_
