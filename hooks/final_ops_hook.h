// FinalOpsHook: evaluates tensors when the session ends, as TensorFlow 1.x's
// tf.train.FinalOpsHook (e.g. the value ops of evaluation metrics).
//
//   auto hook = FinalOpsHook::Create({.final_ops = {accuracy}});
//   ... run the session, Close() it ...
//   const auto& values = hook->final_ops_values();   // set after End
//
// Behaviour kept from TensorFlow:
//   * End runs final_ops (and final_targets) once, with `feeds`, and keeps
//     the values, in the order of final_ops. Nothing happens in the steps.
//   * An OutOfRange from that run is logged with TensorFlow's hint (the final
//     ops depend on an input source, which they should not) and returned.
//   * End is not called after a non-recoverable error (MonitoredSession's
//     rule), so final_ops_values() then stays unset.
//
// Errors: Create returns InvalidArgument when there is nothing to run or an
// Output/Operation is empty. A failing run is End's error.
//
// Thread safety: final_ops_values() may be read once Close completed.
#ifndef COSESSION_HOOKS_FINAL_OPS_HOOK_H_
#define COSESSION_HOOKS_FINAL_OPS_HOOK_H_

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "cosession/async/session_run_hook.h"
#include "cosession/hooks/log_sink.h"

namespace cosession {

struct FinalOpsHookOptions {
  std::vector<Output> final_ops{};
  // Run for their effect only.
  std::vector<Operation> final_targets{};
  std::vector<std::pair<Output, Tensor>> feeds{};
  LogSink sink{};  // unset = stderr
};

class FinalOpsHook : public SyncSessionRunHook {
 public:
  static absl::StatusOr<std::shared_ptr<FinalOpsHook>> Create(
      FinalOpsHookOptions options);

  boost::asio::awaitable<absl::Status> End(Session& session) override;

  // The values of final_ops; unset until End ran them successfully.
  const std::optional<std::vector<Tensor>>& final_ops_values() const {
    return values_;
  }

 private:
  explicit FinalOpsHook(FinalOpsHookOptions options)
      : options_(std::move(options)) {}
  FinalOpsHookOptions options_;
  std::optional<std::vector<Tensor>> values_;
};

}  // namespace cosession

#endif  // COSESSION_HOOKS_FINAL_OPS_HOOK_H_
