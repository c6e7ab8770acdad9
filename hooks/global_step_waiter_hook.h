// GlobalStepWaiterHook: holds back a worker's first step until the global
// step reaches a value, as TensorFlow 1.x's tf.train.GlobalStepWaiterHook
// (used to start workers gradually: wait_until_step = K * log(task_id + 1)).
//
//   auto hook = GlobalStepWaiterHook::Create({.wait_until_step = 1000});
//
// Behaviour kept from TensorFlow:
//   * The first BeforeRun reads the global step through the session, and
//     while it is below wait_until_step waits one poll interval and reads it
//     again (TensorFlow sleeps 0.5 s; that is the default poll_interval).
//     Once it was reached, later steps do not wait. wait_until_step <= 0
//     never waits. It logs "Waiting for global step N before starting
//     training." when it starts waiting, and the current step whenever it
//     moved by more than 1000 since the last such line.
//
// Asynchronous instead of sleeping: the wait is an asio::steady_timer on the
// step coroutine's executor -- no thread sleeps or spins. It is cancellable:
// a stop request or the cancellation of the caller's Run ends the wait
// promptly, and BeforeRun completes with Cancelled ("GlobalStepWaiterHook:
// cancelled while waiting for global step N (at M)"); the step then returns
// Cancelled (or the error that caused the stop), nothing runs.
//
// Errors: Create returns InvalidArgument when poll_interval <= 0. Begin fails
// (NotFound / InvalidArgument, prefixed with the hook's name) when the graph
// has no int64 global step. A failing read of the global step fails the
// step.
//
// Thread safety: the session calls the hook's methods one at a time.
#ifndef COSESSION_HOOKS_GLOBAL_STEP_WAITER_HOOK_H_
#define COSESSION_HOOKS_GLOBAL_STEP_WAITER_HOOK_H_

#include <chrono>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "cosession/async/session_run_hook.h"
#include "cosession/hooks/global_step.h"
#include "cosession/hooks/log_sink.h"

namespace cosession {

struct GlobalStepWaiterHookOptions {
  int64_t wait_until_step = 0;
  std::chrono::nanoseconds poll_interval = std::chrono::milliseconds(500);
  LogSink sink{};  // unset = stderr
};

class GlobalStepWaiterHook : public SessionRunHook {
 public:
  static absl::StatusOr<std::shared_ptr<GlobalStepWaiterHook>> Create(
      GlobalStepWaiterHookOptions options);

  absl::Status Begin(Graph& graph) override;
  boost::asio::awaitable<absl::StatusOr<SessionRunArgs>> BeforeRun(
      SessionRunContext& context) override;

  // Only the steps before the global step was reached wait.
  bool MaySuspendInNextStep() const override {
    return !started_ && options_.wait_until_step > 0;
  }

  // True once the global step was seen at or past wait_until_step.
  bool started() const { return started_; }

 private:
  explicit GlobalStepWaiterHook(GlobalStepWaiterHookOptions options)
      : options_(std::move(options)) {}

  GlobalStepWaiterHookOptions options_;
  GlobalStep step_;
  bool started_ = false;
};

}  // namespace cosession

#endif  // COSESSION_HOOKS_GLOBAL_STEP_WAITER_HOOK_H_
