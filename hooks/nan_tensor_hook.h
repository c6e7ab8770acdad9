// NanTensorHook: watches the loss and stops training when it is NaN, as
// TensorFlow 1.x's tf.train.NanTensorHook.
//
//   auto hook = NanTensorHook::Create({.loss = loss});
//
// Behaviour kept from TensorFlow:
//   * The loss is fetched with every step. When any of its elements is NaN
//     the hook logs "Model diverged with loss = NaN." and then
//       - fail_on_nan_loss (default): the step fails with InvalidArgument
//         "NaN loss during training." (TensorFlow raises
//         NanLossDuringTrainingError; InvalidArgument is the canonical code
//         for "the model's input/state is bad", is not recoverable, and so
//         does not make the monitored session retry). Close() then skips End,
//         so no final checkpoint saves the diverged state.
//       - otherwise: a clean stop is requested ("hook 'NanTensorHook'
//         requested stop: loss is NaN"); the step returns its values.
//   * Infinities are not NaN (as in TensorFlow).
//
// Errors: Create returns InvalidArgument when `loss` is empty or not float
// or double.
//
// Thread safety: the session calls the hook's methods one at a time.
#ifndef COSESSION_HOOKS_NAN_TENSOR_HOOK_H_
#define COSESSION_HOOKS_NAN_TENSOR_HOOK_H_

#include <memory>

#include "absl/status/statusor.h"
#include "cosession/async/session_run_hook.h"
#include "cosession/hooks/log_sink.h"

namespace cosession {

struct NanTensorHookOptions {
  Output loss{};
  bool fail_on_nan_loss = true;
  LogSink sink{};  // unset = stderr
};

class NanTensorHook : public SyncSessionRunHook {
 public:
  static absl::StatusOr<std::shared_ptr<NanTensorHook>> Create(
      NanTensorHookOptions options);

  absl::Status BeforeRunSync(SessionRunContext& context,
                             SessionRunArgs& args) override;
  absl::Status AfterRunSync(SessionRunContext& context,
                            const SessionRunValues& values) override;

 private:
  explicit NanTensorHook(NanTensorHookOptions options)
      : options_(std::move(options)) {}
  NanTensorHookOptions options_;
};

}  // namespace cosession

#endif  // COSESSION_HOOKS_NAN_TENSOR_HOOK_H_
