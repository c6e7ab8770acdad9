// StopAtStepHook: requests stop once the global step reaches a last step, as
// TensorFlow 1.x's tf.train.StopAtStepHook.
//
//   auto hook = StopAtStepHook::Create({.num_steps = 1000});   // or last_step
//
// Behaviour kept from TensorFlow:
//   * Exactly one of num_steps / last_step. num_steps is turned into a last
//     step once, at the first session creation (AfterCreateSession:
//     last_step = global_step + num_steps); a session re-created after a
//     recoverable error keeps that last step (training resumes towards the
//     same goal instead of running num_steps more).
//   * BeforeRun fetches the global step. The read has no order with the
//     step's own update (as in TensorFlow), so AfterRun looks at value + 1
//     (the estimate of hooks/global_step.h): when that reaches the last
//     step, it re-reads the global step through the session (the step may
//     not have incremented it) and requests stop only if the re-read value
//     is >= last_step.
//   * It suspends for that read only on the steps expected to reach the
//     last step (MaySuspendInNextStep); when another worker's increments
//     make a step reach it unexpectedly, the fetched value decides when it
//     is at or past the last step, and otherwise the next step reads again
//     (so such a stop may come one step late).
//   * The stop is a clean stop: the step finishes, ShouldStop() becomes true,
//     stop_reason() is "hook 'StopAtStepHook' requested stop: global step N
//     reached last step M".
//
// Errors: Create returns InvalidArgument naming the option when both or
// neither of num_steps / last_step are set, or num_steps < 0. Begin fails
// (NotFound / InvalidArgument from GetGlobalStep, prefixed with the hook's
// name) when the graph has no int64 global step.
//
// Thread safety: the session calls the hook's methods one at a time;
// last_step() may be read between steps.
#ifndef COSESSION_HOOKS_STOP_AT_STEP_HOOK_H_
#define COSESSION_HOOKS_STOP_AT_STEP_HOOK_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "cosession/async/session_run_hook.h"
#include "cosession/hooks/global_step.h"

namespace cosession {

struct StopAtStepHookOptions {
  // Steps to run from the global step at the first session creation.
  std::optional<int64_t> num_steps{};
  // The global step after which to stop.
  std::optional<int64_t> last_step{};
};

class StopAtStepHook : public SyncSessionRunHook {
 public:
  static absl::StatusOr<std::shared_ptr<StopAtStepHook>> Create(
      StopAtStepHookOptions options);

  absl::Status Begin(Graph& graph) override;
  boost::asio::awaitable<absl::Status> AfterCreateSession(
      Session& session, Coordinator& coordinator) override;
  absl::Status BeforeRunSync(SessionRunContext& context,
                             SessionRunArgs& args) override;
  absl::Status AfterRunSync(SessionRunContext& context,
                            const SessionRunValues& values) override;
  // On the steps expected to reach the last step: re-reads the global step.
  boost::asio::awaitable<absl::Status> AfterRun(
      SessionRunContext& context, const SessionRunValues& values) override;
  bool MaySuspend() const override { return true; }
  bool MaySuspendInNextStep() const override;

  // The step after which the hook stops; unset until the first session was
  // created when num_steps was given.
  std::optional<int64_t> last_step() const { return last_step_; }

 private:
  explicit StopAtStepHook(StopAtStepHookOptions options);
  void StopIfReached(SessionRunContext& context, int64_t step);

  std::optional<int64_t> num_steps_;
  std::optional<int64_t> last_step_;
  GlobalStep step_;
  // The last step may have been reached on a step that did not read: the
  // next one does.
  bool read_due_ = false;
};

}  // namespace cosession

#endif  // COSESSION_HOOKS_STOP_AT_STEP_HOOK_H_
