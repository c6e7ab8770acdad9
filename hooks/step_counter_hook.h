// StepCounterHook: measures training speed, as TensorFlow's
// tf.train.StepCounterHook. Every every_n_steps global steps (default 100)
// or every every_n_secs seconds -- exactly one of the two -- it logs
// "global_step/sec: X" and writes X as the scalar summary "global_step/sec"
// at the global step it measured, where X = elapsed global steps / elapsed
// seconds since the previous trigger.
//
// TensorFlow's behaviour kept (basic_session_run_hooks.py and its tests):
//   * each step fetches the global step (TensorFlow assumes the "stale"
//     value, read before the step's own increment; see hooks/global_step.h);
//     when the timer would trigger for the step's estimated value, the hook
//     reads the real global step after the step and triggers if the timer
//     agrees for that value;
//   * the first trigger only records the time and step (nothing written):
//     with every_n_steps = 10 and one increment per step, values are written
//     at global steps 11, 21, ...;
//   * when the fetched global step did not change since the previous step,
//     it warns (the first 5 times) that the global step is not increasing.
// Differences: End flushes the summary writer (TensorFlow leaves it to the
// writer's periodic flush); a trigger with no elapsed time writes nothing
// (TensorFlow would divide by zero). The hook suspends (for the read) only
// on the steps it expects to trigger (MaySuspendInNextStep); when a trigger
// comes on another step (a time-based timer that fired meanwhile, another
// worker's increments), it uses the estimated global step instead of a
// read.
//
// Errors: Create returns InvalidArgument naming the bad option; Begin fails
// when the graph has no global step, or the writer for output_dir cannot be
// created. Thread safety: as any hook (a session calls it from one step at a
// time).
#ifndef COSESSION_HOOKS_STEP_COUNTER_HOOK_H_
#define COSESSION_HOOKS_STEP_COUNTER_HOOK_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cosession/async/clock.h"
#include "cosession/async/session_run_hook.h"
#include "cosession/hooks/global_step.h"
#include "cosession/hooks/second_or_step_timer.h"
#include "cosession/io/summary_writer.h"

namespace cosession {

struct StepCounterHookOptions {
  // Exactly one of these (TensorFlow's defaults: 100 steps, no seconds; to
  // count by time set every_n_steps = std::nullopt).
  std::optional<int64_t> every_n_steps = 100;
  std::optional<absl::Duration> every_n_secs{};
  // Where the scalar goes: `summary_writer`, else SummaryWriterCache::Get(
  // output_dir); both empty = log only.
  std::string output_dir{};
  std::shared_ptr<SummaryWriter> summary_writer{};
  // Global steps one run advances (TensorFlow's steps_per_run).
  int64_t steps_per_run = 1;
  // Receives each log line ("global_step/sec: 12.5", warnings); null =
  // StderrLogSink() (standard error, above a progress bar).
  std::function<void(const std::string&)> log{};
  Clock* clock = nullptr;  // null = SystemClock()
};

class StepCounterHook : public SyncSessionRunHook {
 public:
  static absl::StatusOr<std::shared_ptr<StepCounterHook>> Create(
      StepCounterHookOptions options = {});

  absl::Status Begin(Graph& graph) override;
  absl::Status BeforeRunSync(SessionRunContext& context,
                             SessionRunArgs& args) override;
  absl::Status AfterRunSync(SessionRunContext& context,
                            const SessionRunValues& values) override;
  // On the steps it expects to trigger: reads the global step after them.
  boost::asio::awaitable<absl::Status> AfterRun(
      SessionRunContext& context, const SessionRunValues& values) override;
  boost::asio::awaitable<absl::Status> End(Session& session) override;
  bool MaySuspend() const override { return true; }
  bool MaySuspendInNextStep() const override;

  // The summary tag: "global_step/sec".
  static constexpr char kTag[] = "global_step/sec";

 private:
  StepCounterHook(StepCounterHookOptions options, SecondOrStepTimer timer)
      : options_(std::move(options)),
        timer_(std::move(timer)),
        step_(options_.steps_per_run) {}
  void Log(const std::string& line) const;
  // The rate, when the timer triggers for `global_step` (the value after
  // the step, read or estimated).
  void MaybeTrigger(int64_t global_step);
  // The warning when the fetched global step did not change.
  void CheckIncreasing(int64_t fetched);

  StepCounterHookOptions options_;
  SecondOrStepTimer timer_;
  std::shared_ptr<SummaryWriter> writer_;
  GlobalStep step_;
  std::optional<int64_t> last_fetched_;
  int not_increasing_warnings_ = 0;
};

}  // namespace cosession

#endif  // COSESSION_HOOKS_STEP_COUNTER_HOOK_H_
