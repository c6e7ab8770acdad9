// ProgressHook: shows training progress -- a progress bar redrawn in place
// when the output is a terminal, plain periodic lines when it is not (a log
// file, a pipe, CI).
//
//   auto hook = ProgressHook::Create(
//       {.last_step = 10000, .metrics = {loss}, .every_n_steps = 100});
//
// What it shows, each time it triggers (SecondOrStepTimer on the global
// step: the first step, then every_n_steps steps or every_n_secs):
//   terminal:  "\r[=========>          ] 450/1000 45%, 52.3 steps/s,
//               eta 10s, loss=0.1234" followed by ESC[K (erase the rest of
//               the line); no newline, so the next draw replaces it.
//   otherwise: "step 450/1000, 52.3 steps/s, eta 10s, loss=0.1234\n".
// Without last_step there is no bar, total or ETA ("step 450, 52.3
// steps/s, loss=0.1234"). Steps/s is measured between two triggers with the
// Clock, so the first line has none (and no ETA). Metrics (one-element
// tensors) are fetched only in the steps that trigger and shown with 4
// significant digits; a metric with several values shows its DebugString.
// End re-reads the global step and prints a final line with the average
// rate since the first trigger (metrics as last seen), ending with a
// newline in both modes.
//
// The global step is fetched with every step and used to predict whether
// the next step will draw (TensorFlow's _next_step rule: value + 1); metrics
// are fetched only in predicted steps, and AfterRun then re-reads the global
// step and draws only if the timer triggers for it. As in TensorFlow, a
// step's read of the global step has no order with its update: when it sees
// the update, a metric fetch may come one step early (without a draw).
// last_step is not guessed: pass StopAtStepHook's last_step() if you use one.
//
// Injectable for tests: `output` (null = std::cout), `is_terminal` (unset =
// isatty() of stdout or stderr when output is std::cout or std::cerr /
// std::clog, false for any other stream), `clock`.
//
// Errors: Create returns InvalidArgument naming the option: both every_n_steps
// and every_n_secs, a non-positive one, a bar_width < 1, an empty metric.
// Begin fails (prefixed with the hook's name) without an int64 global step.
//
// Thread safety: the session calls the hook's methods one at a time; the
// stream is written from the step coroutine (do not write to it concurrently
// from elsewhere).
#ifndef COSESSION_HOOKS_PROGRESS_HOOK_H_
#define COSESSION_HOOKS_PROGRESS_HOOK_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "async/clock.h"
#include "async/session_run_hook.h"
#include "hooks/global_step.h"
#include "hooks/second_or_step_timer.h"

namespace cosession {

struct ProgressHookOptions {
  // The step training ends at; unset = unknown (no bar, no ETA).
  std::optional<int64_t> last_step{};
  std::vector<Output> metrics{};
  // At most one; neither = every 100 steps (a terminal is redrawn more often
  // by setting every_n_secs, e.g. 0.2 s).
  std::optional<int64_t> every_n_steps{};
  std::optional<absl::Duration> every_n_secs{};
  std::ostream* output = nullptr;     // null = std::cout
  std::optional<bool> is_terminal{};  // unset = isatty, see above
  int bar_width = 30;
  Clock* clock = nullptr;  // null = SystemClock()
};

class ProgressHook : public SessionRunHook {
 public:
  static absl::StatusOr<std::shared_ptr<ProgressHook>> Create(
      ProgressHookOptions options);

  absl::Status Begin(Graph& graph) override;
  boost::asio::awaitable<absl::StatusOr<SessionRunArgs>> BeforeRun(
      SessionRunContext& context) override;
  boost::asio::awaitable<absl::Status> AfterRun(
      SessionRunContext& context, const SessionRunValues& values) override;
  boost::asio::awaitable<absl::Status> End(Session& session) override;

  // Only the steps that report wait (to read the global step they reached).
  bool MaySuspendInNextStep() const override { return WantsMetrics(); }

  bool is_terminal() const { return terminal_; }

 private:
  ProgressHook(ProgressHookOptions options, SecondOrStepTimer timer,
               bool terminal);
  bool WantsMetrics() const {
    return !next_step_ || timer_.ShouldTriggerForStep(*next_step_);
  }
  // The text of one report (without \r, ESC[K or newline).
  std::string Format(int64_t step, std::optional<double> steps_per_sec) const;
  void Draw(int64_t step, std::optional<double> steps_per_sec, bool final);

  ProgressHookOptions options_;
  SecondOrStepTimer timer_;
  bool terminal_;
  Clock* clock_;
  GlobalStep step_;
  // The global step expected after the next step (TF's _next_step); unset
  // before the first step.
  std::optional<int64_t> next_step_;
  bool fetch_metrics_ = false;
  std::vector<std::string> metric_text_;  // "loss=0.1234", as last seen
  std::optional<int64_t> first_step_;
  absl::Time first_time_;
};

}  // namespace cosession

#endif  // COSESSION_HOOKS_PROGRESS_HOOK_H_
