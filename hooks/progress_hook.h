// ProgressHook: shows training progress -- a progress bar redrawn in place
// when the output is a terminal, plain periodic lines when it is not (a log
// file, a pipe, CI) -- through the program's Console (io/console.h), so that
// log lines printed meanwhile go above the bar instead of through it.
//
//   auto hook = ProgressHook::Create(
//       {.last_step = 10000, .metrics = {loss}, .every_n_steps = 100});
//
// What it shows, each time it triggers (SecondOrStepTimer on the global
// step: the first step, then every_n_steps steps or every_n_secs):
//   terminal:  "[=========>          ] 450/1000 45%, 52.3 steps/s, eta 10s,
//               loss=0.1234" as the Console's status line, cut to the
//               terminal's width: the bar narrows first, the text is cut
//               only when even a bar of 5 does not fit;
//   otherwise: "step 450/1000, 52.3 steps/s, eta 10s, loss=0.1234", a line.
// Without last_step there is no bar, total or ETA ("step 450, 52.3
// steps/s, loss=0.1234"). Steps/s is measured between two triggers with the
// Clock, so the first line has none (and no ETA). Metrics (one-element
// tensors) are shown with 4 significant digits; a metric with several
// values shows its DebugString. They are fetched in every step, so that End
// -- which re-reads the global step and prints the final line, with the
// average rate since the first trigger -- shows the last step's values,
// never older ones; fetch only tensors the step computes anyway (a loss) or
// that are cheap.
//
// The global step is fetched with every step and predicts whether the next
// step will draw (TensorFlow's _next_step rule: value + 1); a drawing step
// re-reads the global step after it (the only steps on which the hook
// suspends) and draws only if the timer triggers for it.
// last_step is not guessed: pass StopAtStepHook's last_step() if you use one.
//
// Injectable for tests: `console` (null = Console::Stdout()), `clock`.
//
// Errors: Create returns InvalidArgument naming the option: both every_n_steps
// and every_n_secs, a non-positive one, a bar_width < 1, an empty metric.
// Begin fails (prefixed with the hook's name) without an int64 global step.
//
// Thread safety: the session calls the hook's methods one at a time.
#ifndef COSESSION_HOOKS_PROGRESS_HOOK_H_
#define COSESSION_HOOKS_PROGRESS_HOOK_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cosession/async/clock.h"
#include "cosession/async/session_run_hook.h"
#include "cosession/hooks/global_step.h"
#include "cosession/hooks/second_or_step_timer.h"
#include "cosession/io/console.h"

namespace cosession {

struct ProgressHookOptions {
  // The step training ends at; unset = unknown (no bar, no ETA).
  std::optional<int64_t> last_step{};
  std::vector<Output> metrics{};
  // At most one; neither = every 100 steps (a terminal is redrawn more often
  // by setting every_n_secs, e.g. 0.2 s).
  std::optional<int64_t> every_n_steps{};
  std::optional<absl::Duration> every_n_secs{};
  Console* console = nullptr;  // null = Console::Stdout()
  // The widest bar; narrower when the terminal is.
  int bar_width = 30;
  Clock* clock = nullptr;  // null = SystemClock()
};

class ProgressHook : public SyncSessionRunHook {
 public:
  static absl::StatusOr<std::shared_ptr<ProgressHook>> Create(
      ProgressHookOptions options);

  absl::Status Begin(Graph& graph) override;
  absl::Status BeforeRunSync(SessionRunContext& context,
                             SessionRunArgs& args) override;
  absl::Status AfterRunSync(SessionRunContext& context,
                            const SessionRunValues& values) override;
  // On drawing steps: re-reads the global step after them.
  boost::asio::awaitable<absl::Status> AfterRun(
      SessionRunContext& context, const SessionRunValues& values) override;
  boost::asio::awaitable<absl::Status> End(Session& session) override;
  bool MaySuspend() const override { return true; }
  // Only the steps that draw wait (to read the global step they reached).
  bool MaySuspendInNextStep() const override { return WantsDraw(); }

  bool is_terminal() const { return console_->status_on_terminal(); }

 private:
  ProgressHook(ProgressHookOptions options, SecondOrStepTimer timer);
  bool WantsDraw() const {
    return !next_step_ || timer_.ShouldTriggerForStep(*next_step_);
  }
  // Keeps this step's metric values (the hook's results after the global
  // step).
  absl::Status TakeMetrics(const SessionRunValues& values);
  // Draws for `step` (the value after the step) if the timer triggers.
  void MaybeDraw(int64_t step);
  // The text of one report.
  std::string Format(int64_t step, std::optional<double> steps_per_sec) const;

  ProgressHookOptions options_;
  SecondOrStepTimer timer_;
  Console* console_;
  Clock* clock_;
  GlobalStep step_;
  // The global step expected after the next step (TF's _next_step); unset
  // before the first step.
  std::optional<int64_t> next_step_;
  std::vector<Tensor> metric_values_;  // of the last step
  std::optional<int64_t> first_step_;
  absl::Time first_time_;
};

}  // namespace cosession

#endif  // COSESSION_HOOKS_PROGRESS_HOOK_H_
