// StepRunner: one step of a MonitoredSession, and only that -- every hook's
// BeforeRun, one graph run of the merged arguments, every hook's AfterRun,
// as semantics 3-6, 10 and 11 of async/session_run_hook.h require. No
// recovery, no coordinator, no session bookkeeping: what the step learned
// (its values or error, a hook's stop request) is in its result, for
// MonitoredSession to act on. Every entry path of MonitoredSession (Run,
// Run with use_awaitable, RunStepFn, StepContext::RunWithHooks) runs its
// steps here.
//
// Order within a step (H = the hooks of the step's RunMode, in order):
//   ask each h in H whether it may suspend in this step
//     (SessionRunHook::MaySuspendInNextStep);
//   BeforeRun of every h: started together and awaited as a TaskGroup
//     (async/task_group.h) when two or more may suspend and the concurrency
//     is kConcurrent, else one after another; a SyncSessionRunHook that
//     will not suspend is called through BeforeRunSync. The first error
//     ends the step: no graph run, no AfterRun.
//   merge the caller's and the hooks' arguments (async/run_args_merge.h);
//     a merge error ends the step likewise. A hook that asked for nothing
//     costs no merge.
//   one graph run; an error ends the step (no AfterRun).
//   AfterRun of every h with its own results, the same way; the first
//     error ends the step.
//   the caller's values.
// A cancellation of the step (the awaiting coroutine's, or, in an inline
// step, a stop emitted on its StepState) cancels the wait in progress; one
// that arrives between phases is seen at the next check: before the graph
// run ("Step cancelled before the graph ran") and after the AfterRuns
// ("Step cancelled in AfterRun"), both Cancelled. A graph run that
// completed returns its values unless AfterRun was cut short. Exceptions
// escaping a hook become statuses (async/status_from_exception.h).
//
// Inline steps: when the step runs inside the caller's coroutine
// (`inline_step` set; no hook may suspend), the graph run is bound to the
// inline step's own signal -- which a stop emits -- and the caller's slot
// is bridged to it right before the run: a cancellation by the caller also
// calls inline_step->on_caller_cancel (the session's stop request).
//
// Thread safety: one step at a time (the runner reuses buffers from step to
// step). The Graph, the hooks and the Session outlive the step.
#ifndef COSESSION_ASYNC_STEP_RUNNER_H_
#define COSESSION_ASYNC_STEP_RUNNER_H_

#include <boost/asio/awaitable.hpp>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "cosession/async/detail/step_state.h"
#include "cosession/async/run_args.h"
#include "cosession/async/run_args_merge.h"
#include "cosession/async/session.h"
#include "cosession/async/session_run_hook.h"
#include "cosession/graph/graph.h"
#include "cosession/graph/tensor.h"

namespace cosession {

enum class HookConcurrency {
  // BeforeRun/AfterRun started in order and awaited together.
  kConcurrent,
  // Each awaited before the next starts.
  kSequential,
};

// Which hooks a Run calls. TensorFlow users asked for a run without hooks
// (e.g. an evaluation step inside a training loop): hooks registered as
// skippable (MonitoredSessionOptions::skippable_hooks) sit such a Run out --
// none of their methods is called for it; the others run as usual.
enum class RunMode {
  kAllHooks,
  kWithoutSkippableHooks,
};

// An inline step's state: its StepState plus what a caller's cancellation
// must also do.
struct InlineStep : detail::StepState {
  using detail::StepState::StepState;
  std::function<void()> on_caller_cancel{};
};

class StepRunner {
 public:
  using Hooks = std::vector<std::shared_ptr<SessionRunHook>>;
  using RunResult = absl::StatusOr<std::vector<Tensor>>;

  // `unskippable` = `all` minus the skippable hooks, in order.
  StepRunner(const Graph& graph, Hooks all, Hooks unskippable,
             HookConcurrency concurrency);

  const Hooks& hooks(RunMode mode) const { return ForMode(mode).hooks; }
  // Asks each hook of `mode` whether it may suspend in the coming step
  // (SessionRunHook::MaySuspendInNextStep) and returns how many may. The
  // step that follows uses these answers: a caller that plans a step
  // passes Planned::kYes to its Run, so that each hook is asked once per
  // step.
  int PlanStep(RunMode mode);

  enum class Planned {
    kNo,   // Run asks the hooks
    kYes,  // PlanStep(mode) was called for this step, right before
  };
  // One step: the caller's values, or the step's error. An inline step
  // (`inline_step` set) was planned (Planned::kYes) with no hook that may
  // suspend. When a hook asked the session to stop (the step still
  // finished), *stop_reason is set to the reason it gave, or one naming
  // the first hook that asked. `session`, `args` and `stop_reason` live in
  // the awaiting frame.
  boost::asio::awaitable<RunResult> Run(Session& session, const RunArgs& args,
                                        RunMode mode, Planned planned,
                                        InlineStep* inline_step,
                                        std::string* stop_reason);

 private:
  // The hooks one RunMode calls, and each as a SyncSessionRunHook (or null).
  struct HooksOfMode {
    Hooks hooks{};
    std::vector<SyncSessionRunHook*> sync{};
  };
  const HooksOfMode& ForMode(RunMode mode) const {
    return mode == RunMode::kWithoutSkippableHooks ? unskippable_ : all_;
  }

  // The step's graph run, as an operation of its own (no coroutine frame
  // of ours): cancelled through the awaiting coroutine's slot, or, in an
  // inline step, through the step's signal, to which that slot is bridged
  // until the run completes. `args` is borrowed until the run started.
  static boost::asio::awaitable<absl::StatusOr<RunOutputs>> RunGraph(
      Session& session, const RunArgs& args,
      absl::Span<const Output> extra_fetches, InlineStep* inline_step);

  // BeforeRunSync (AfterRunSync) of the hooks from `h` on that this step
  // calls as plain functions, up to the first that must be awaited; returns
  // its index (or the hooks' count). On an error, `status` holds it and the
  // index is the failing hook's.
  size_t BeforeRunSync(const HooksOfMode& mode_hooks, size_t h,
                       SessionRunContext& context, int& stop_requester,
                       bool& any_asked, absl::Status& status);
  size_t AfterRunSync(const HooksOfMode& mode_hooks, size_t h,
                      SessionRunContext& context, int& stop_requester,
                      absl::Status& status);
  // The SessionRunValues each hook's AfterRun gets (values_), and their
  // release after the step.
  void PrepareHookValues(size_t n, bool merged, const RunOptions& options,
                         RunOutputs& outputs);
  void ReleaseHookValues(size_t n, bool merged);

  // The BeforeRun (AfterRun) of every hook, started together and joined.
  // The references live in Run's frame, which awaits these.
  boost::asio::awaitable<absl::Status> BeforeRunTogether(
      const Hooks& hooks, SessionRunContext& context, int& stop_requester);
  boost::asio::awaitable<absl::Status> AfterRunTogether(
      const Hooks& hooks, SessionRunContext& context, int& stop_requester);

  const Graph& graph_;
  HooksOfMode all_;
  HooksOfMode unskippable_;
  const HookConcurrency concurrency_;

  // Buffers reused from step to step: each hook's arguments (a sync hook
  // writes into its own), the plan, the merge, each hook's values.
  std::vector<RunArgs> hook_args_;
  std::vector<char> may_suspend_;  // the plan: PlanStep's answers
  int planned_suspending_ = 0;     // how many of them are true
  MergedRunArgs merged_;
  SessionRunValues common_values_;  // of the hooks that fetched nothing
  std::vector<SessionRunValues> own_values_;
  std::vector<const SessionRunValues*> values_;
};

}  // namespace cosession

#endif  // COSESSION_ASYNC_STEP_RUNNER_H_
