// EarlyStoppingHook: stops training when a metric has stopped improving, in
// the spirit of Keras' EarlyStopping and TensorFlow's
// tf.estimator.experimental.stop_if_no_decrease_hook, for a MonitoredSession.
//
//   auto hook = EarlyStoppingHook::Create(
//       {.metric = val_loss, .mode = EarlyStoppingMode::kMin,
//        .min_delta = 1e-3, .patience = 5, .every_n_steps = 100});
//
// Behaviour:
//   * The metric (a one-element numeric tensor) is fetched with the steps at
//     local iterations 0, N, 2N, ... (every_n_steps = N; 1 = every step):
//     each such value is one evaluation. The global step of an evaluation is
//     read after the step ran.
//   * The first evaluation sets the best value. A later value improves when
//     it is below best - min_delta (kMin) or above best + min_delta (kMax);
//     then it becomes the best and the count of evaluations without
//     improvement restarts at 0, otherwise the count goes up. A NaN never
//     improves.
//   * When the count reaches `patience`, the hook logs and requests a clean
//     stop; MonitoredSession::stop_reason() is "hook 'EarlyStoppingHook'
//     requested stop: 'val_loss' did not improve for 5 evaluations (best
//     0.25 at step 1200)". best_value(), best_step() and
//     evaluations_without_improvement() report the state at any time
//     between steps. The state persists across session re-creation.
//
// Errors: Create returns InvalidArgument naming the option: an empty or
// non-numeric metric, patience < 1, every_n_steps < 1, min_delta < 0 or
// NaN. Begin fails (prefixed with the hook's name) without an int64 global
// step. A metric value that does not hold exactly one number fails the step
// with InvalidArgument naming the metric.
//
// Thread safety: the session calls the hook's methods one at a time.
#ifndef COSESSION_HOOKS_EARLY_STOPPING_HOOK_H_
#define COSESSION_HOOKS_EARLY_STOPPING_HOOK_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "cosession/async/session_run_hook.h"
#include "cosession/hooks/global_step.h"
#include "cosession/hooks/log_sink.h"

namespace cosession {

enum class EarlyStoppingMode {
  kMin,  // lower is better (a loss)
  kMax,  // higher is better (an accuracy)
};

struct EarlyStoppingHookOptions {
  Output metric{};
  EarlyStoppingMode mode = EarlyStoppingMode::kMin;
  // How much a value must beat the best by to count as an improvement.
  double min_delta = 0.0;
  // Evaluations without improvement before stopping.
  int64_t patience = 1;
  // Evaluate at local iterations 0, N, 2N, ...
  int64_t every_n_steps = 1;
  LogSink sink{};  // unset = stderr
};

class EarlyStoppingHook : public SessionRunHook {
 public:
  static absl::StatusOr<std::shared_ptr<EarlyStoppingHook>> Create(
      EarlyStoppingHookOptions options);

  absl::Status Begin(Graph& graph) override;
  boost::asio::awaitable<absl::StatusOr<SessionRunArgs>> BeforeRun(
      SessionRunContext& context) override;
  boost::asio::awaitable<absl::Status> AfterRun(
      SessionRunContext& context, const SessionRunValues& values) override;

  // Only evaluation steps wait (to read the global step they reached).
  bool MaySuspendInNextStep() const override {
    return iteration_ % options_.every_n_steps == 0;
  }

  std::optional<double> best_value() const { return best_value_; }
  // The global step after the evaluation that gave the best value.
  std::optional<int64_t> best_step() const { return best_step_; }
  int64_t evaluations_without_improvement() const { return without_; }
  int64_t evaluations() const { return evaluations_; }

 private:
  explicit EarlyStoppingHook(EarlyStoppingHookOptions options)
      : options_(std::move(options)) {}
  bool Improves(double value) const;

  EarlyStoppingHookOptions options_;
  GlobalStep step_;
  int64_t iteration_ = 0;
  bool evaluate_ = false;
  std::optional<double> best_value_;
  std::optional<int64_t> best_step_;
  int64_t without_ = 0;
  int64_t evaluations_ = 0;
};

}  // namespace cosession

#endif  // COSESSION_HOOKS_EARLY_STOPPING_HOOK_H_
