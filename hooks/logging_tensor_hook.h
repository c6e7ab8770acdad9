// LoggingTensorHook: logs chosen tensors every N local steps, every N
// seconds, and/or at the end, as TensorFlow 1.x's tf.train.LoggingTensorHook.
//
//   auto hook = LoggingTensorHook::Create(
//       {.tensors = {loss}, .tensor_names = {"accuracy"}, .every_n_iter =
//       100});
//
// Behaviour kept from TensorFlow:
//   * Exactly one of every_n_iter / every_n_secs, or neither with at_end
//     (then it logs only at the end). at_end may be combined with either.
//   * The hook counts its own iterations (0, 1, 2, ... one per step it sees
//     in this session), not the global step: it logs at local iterations 0,
//     N, 2N, ... (every_n_iter), or at iteration 0 and then once every_n_secs
//     passed (every_n_secs), fetching the tensors only in those steps. Begin
//     resets the count and the timer.
//   * The default line is "tag = value, tag = value" in the order given
//     (tensors first, then tensor_names), followed by " (0.123 sec)" -- the
//     time since the previous log -- except for the first. A tag is the
//     Output's name ("loss:0") or the name as given in tensor_names. Values
//     are Tensor::DebugString(). A formatter, when set, makes the whole line
//     from the map tag -> value.
//   * at_end: End fetches the tensors through the session and logs them. As
//     in TensorFlow, they must not consume input (End runs them once more).
//
// Errors: Create returns InvalidArgument naming the option (no tensors, both
// or neither of every_n_iter / every_n_secs without at_end, a non-positive
// period). Begin returns NotFound / InvalidArgument naming a tensor name that
// is not in the graph. A failing fetch in End is returned from End.
//
// Thread safety: the session calls the hook's methods one at a time. The
// sink and formatter are called from the step coroutine.
#ifndef COSESSION_HOOKS_LOGGING_TENSOR_HOOK_H_
#define COSESSION_HOOKS_LOGGING_TENSOR_HOOK_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cosession/async/clock.h"
#include "cosession/async/session_run_hook.h"
#include "cosession/hooks/log_sink.h"
#include "cosession/hooks/second_or_step_timer.h"

namespace cosession {

// tag -> value, for a LoggingTensorHook formatter.
using TensorValues = std::map<std::string, Tensor>;

struct LoggingTensorHookOptions {
  std::vector<Output> tensors{};
  // Looked up in Begin: "op" (output 0) or "op:i".
  std::vector<std::string> tensor_names{};
  std::optional<int64_t> every_n_iter{};
  std::optional<absl::Duration> every_n_secs{};
  bool at_end = false;
  // Makes the whole line; unset = "tag = value, ..." with the elapsed time.
  std::function<std::string(const TensorValues&)> formatter{};
  LogSink sink{};          // unset = stderr
  Clock* clock = nullptr;  // for every_n_secs; null = SystemClock()
};

class LoggingTensorHook : public SyncSessionRunHook {
 public:
  static absl::StatusOr<std::shared_ptr<LoggingTensorHook>> Create(
      LoggingTensorHookOptions options);

  absl::Status Begin(Graph& graph) override;
  absl::Status BeforeRunSync(SessionRunContext& context,
                             SessionRunArgs& args) override;
  absl::Status AfterRunSync(SessionRunContext& context,
                            const SessionRunValues& values) override;
  boost::asio::awaitable<absl::Status> End(Session& session) override;
  // Suspends only in End.

 private:
  LoggingTensorHook(LoggingTensorHookOptions options,
                    std::optional<SecondOrStepTimer> timer);
  void Log(const std::vector<Tensor>& values);

  LoggingTensorHookOptions options_;
  // Unset when logging only at the end.
  std::optional<SecondOrStepTimer> timer_;
  // Tags and tensors in the order they are logged (resolved in Begin).
  std::vector<std::string> tags_;
  std::vector<Output> fetches_;
  int64_t iteration_ = 0;
  bool should_trigger_ = false;
};

}  // namespace cosession

#endif  // COSESSION_HOOKS_LOGGING_TENSOR_HOOK_H_
