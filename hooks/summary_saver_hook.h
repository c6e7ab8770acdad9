// SummarySaverHook: writes summaries of chosen tensors to a TensorBoard event
// file every save_steps global steps or every save_secs seconds (exactly one),
// as TensorFlow's tf.train.SummarySaverHook.
//
// Our graphs have no summary ops, so the tensors to summarise are given as
// (tag, Output) pairs: `scalars` (one-element tensors, written as
// simple_value) and `histograms` (any tensor, written as HistogramProto).
// On trigger steps BeforeRun adds them to the step's fetches; AfterRun
// queues them on the summary writer (io/summary_writer.h: the file is
// written off the step path). They are not fetched on other steps, so
// tensors with side effects run only on trigger steps, as in TensorFlow.
//
// TensorFlow's behaviour kept (basic_session_run_hooks.py and its tests):
//   * the first step always triggers; then the timer decides, asked about
//     the step after the last one seen (the fetched global step + 1 in
//     TensorFlow; see hooks/global_step.h);
//   * summaries are written at the global step read after the step
//     (save_steps = 8, one increment per step: steps 1, 9, 17, 25, ...);
//   * End flushes the writer.
//   * SessionLog START is written after the first step, at the global step
//     read after it (1 for a fresh run, N + 1 after a restore from the
//     checkpoint of step N), before that step's summaries. TensorBoard
//     then discards the events a crashed run wrote after step N, and keeps
//     those at step N itself (a START at N would drop them). Where
//     TensorFlow writes it once after Begin, this hook writes it after the
//     first step of every session it is told of (AfterCreateSession), so
//     that a session recovered from a checkpoint does the same.
//
// The hook suspends (to read the global step after the step) only on the
// steps it expects to trigger (MaySuspendInNextStep); when a time-based
// timer fires on another step, the summaries are written at the estimated
// global step instead of a read one.
//
// Errors: Create returns InvalidArgument naming the bad option (no period
// or both, no tensors, an invalid Output, neither output_dir nor
// summary_writer). Begin fails without a global step or when the writer
// cannot be created. AfterRun fails with InvalidArgument naming the tag when
// a scalar tensor holds more than one element or a histogram holds a NaN or
// an infinity (TensorFlow's summary ops fail the step too).
// Thread safety: as any hook.
#ifndef COSESSION_HOOKS_SUMMARY_SAVER_HOOK_H_
#define COSESSION_HOOKS_SUMMARY_SAVER_HOOK_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cosession/async/clock.h"
#include "cosession/async/session_run_hook.h"
#include "cosession/hooks/global_step.h"
#include "cosession/hooks/second_or_step_timer.h"
#include "cosession/io/summary_writer.h"

namespace cosession {

struct SummarySaverHookOptions {
  std::optional<int64_t> save_steps{};
  std::optional<absl::Duration> save_secs{};
  // `summary_writer`, else SummaryWriterCache::Get(output_dir).
  std::string output_dir{};
  std::shared_ptr<SummaryWriter> summary_writer{};
  std::vector<std::pair<std::string, Output>> scalars{};
  std::vector<std::pair<std::string, Output>> histograms{};
  Clock* clock = nullptr;  // null = SystemClock()
};

class SummarySaverHook : public SyncSessionRunHook {
 public:
  static absl::StatusOr<std::shared_ptr<SummarySaverHook>> Create(
      SummarySaverHookOptions options);

  absl::Status Begin(Graph& graph) override;
  boost::asio::awaitable<absl::Status> AfterCreateSession(
      Session& session, Coordinator& coordinator) override;
  absl::Status BeforeRunSync(SessionRunContext& context,
                             SessionRunArgs& args) override;
  absl::Status AfterRunSync(SessionRunContext& context,
                            const SessionRunValues& values) override;
  // On the steps it expects to trigger: reads the global step after them.
  boost::asio::awaitable<absl::Status> AfterRun(
      SessionRunContext& context, const SessionRunValues& values) override;
  boost::asio::awaitable<absl::Status> End(Session& session) override;
  bool MaySuspend() const override { return true; }
  bool MaySuspendInNextStep() const override {
    return start_pending_ || WantsSummaries();
  }

 private:
  SummarySaverHook(SummarySaverHookOptions options, SecondOrStepTimer timer)
      : options_(std::move(options)), timer_(std::move(timer)) {}
  // Whether the coming step fetches the summaries: the first step, then
  // when the timer triggers for it.
  bool WantsSummaries() const;
  // Queues the fetched summaries at `global_step` (after the step).
  absl::Status Write(const SessionRunValues& values, int64_t global_step);

  SummarySaverHookOptions options_;
  SecondOrStepTimer timer_;
  std::shared_ptr<SummaryWriter> writer_;
  GlobalStep step_;
  // The step the next run is expected to produce; unset before the first.
  std::optional<int64_t> next_step_;
  bool request_summary_ = false;
  // A session was created and its first step has not run: START is due.
  bool start_pending_ = false;
};

}  // namespace cosession

#endif  // COSESSION_HOOKS_SUMMARY_SAVER_HOOK_H_
