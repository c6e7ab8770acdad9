// ProfilerHook: every save_steps global steps or every save_secs seconds
// (exactly one) traces one whole step and writes it as Chrome trace JSON
// (io/chrome_trace.h) to `<output_dir>/timeline-<global step>.json`, which
// opens in ui.perfetto.dev and chrome://tracing -- as TensorFlow's
// tf.train.ProfilerHook.
//
// TensorFlow's behaviour kept (basic_session_run_hooks.py and its tests):
//   * the first step is never traced: it only starts the timer, at the
//     global step before it (it reads the global step once after it, to
//     learn where its fetch stands: see hooks/global_step.h);
//   * on a trigger step BeforeRun asks for RunOptions::kFullTrace; AfterRun
//     reads the global step after the step, names the file by it, and
//     restarts the timer there (save_steps = 2, one increment per step:
//     timeline-2.json, timeline-4.json, ...; save_secs = 2: the first step
//     at least 2 s after the first one, then 2 s after each trace);
//   * each trace is also added to output_dir's event file as
//     tagged_run_metadata tagged "step_<global step>" (TensorFlow's
//     FileWriter.add_run_metadata, no step on the event, as TensorFlow
//     writes it: io/run_metadata_proto.h), which TensorBoard's graph
//     dashboard lists as a session run. The writer is
//     SummaryWriterCache::Get(output_dir) unless summary_writer is given, so
//     it is the file the other hooks writing there share, created by Begin.
// End flushes that writer (TensorFlow's does not; ours must hold the last
// trace when the session closes).
//
// The trace file is written atomically (temporary file, fsync, rename) in
// AfterRun, on the step's thread, as TensorFlow does -- one file per
// trigger, so the cost falls on traced steps only. Begin removes the
// temporary files a killed process left; max_timelines bounds how many
// traces the directory keeps.
//
// The hook suspends (to read the global step) on the first step and on the
// steps it traces (MaySuspendInNextStep); a time-based trigger that fires
// on another step names its file by the estimated global step.
//
// Errors: Create returns InvalidArgument naming the bad option (no period or
// both, empty output_dir, a negative max_timelines). Begin fails without a
// global step, or when output_dir cannot be created. A trace that cannot be
// written fails that step's AfterRun with the I/O error naming the file; an
// event file that cannot be created fails Begin, one that cannot be written
// fails End with the writer's first error (io/summary_writer.h). Thread
// safety: as any hook.
#ifndef COSESSION_HOOKS_PROFILER_HOOK_H_
#define COSESSION_HOOKS_PROFILER_HOOK_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cosession/async/clock.h"
#include "cosession/async/session_run_hook.h"
#include "cosession/hooks/global_step.h"
#include "cosession/hooks/second_or_step_timer.h"
#include "cosession/io/chrome_trace.h"
#include "cosession/io/summary_writer.h"

namespace cosession {

struct ProfilerHookOptions {
  std::optional<int64_t> save_steps{};
  std::optional<absl::Duration> save_secs{};
  std::string output_dir{};
  ChromeTraceOptions trace{};
  // Keep only the newest this many timeline-<step>.json files of output_dir
  // (earlier runs' included); 0 = keep all, as TensorFlow.
  int max_timelines = 0;
  Clock* clock = nullptr;  // null = SystemClock()
  // Where the traces' tagged_run_metadata events go; null =
  // SummaryWriterCache::Get(output_dir).
  std::shared_ptr<SummaryWriter> summary_writer{};
};

class ProfilerHook : public SyncSessionRunHook {
 public:
  static absl::StatusOr<std::shared_ptr<ProfilerHook>> Create(
      ProfilerHookOptions options);

  absl::Status Begin(Graph& graph) override;
  absl::Status BeforeRunSync(SessionRunContext& context,
                             SessionRunArgs& args) override;
  absl::Status AfterRunSync(SessionRunContext& context,
                            const SessionRunValues& values) override;
  // On the first step and on traced steps: reads the global step after them.
  boost::asio::awaitable<absl::Status> AfterRun(
      SessionRunContext& context, const SessionRunValues& values) override;
  // Flushes the event file.
  boost::asio::awaitable<absl::Status> End(Session& session) override;
  bool MaySuspend() const override { return true; }
  bool MaySuspendInNextStep() const override {
    return !next_step_.has_value() || WantsTrace();
  }

  // "<output_dir>/timeline-<step>.json".
  std::string TimelinePath(int64_t global_step) const;

 private:
  ProfilerHook(ProfilerHookOptions options, SecondOrStepTimer timer)
      : options_(std::move(options)), timer_(std::move(timer)) {}
  bool WantsTrace() const {
    return next_step_.has_value() && timer_.ShouldTriggerForStep(*next_step_);
  }
  // After a traced step: the file for `global_step`, the timer restarted.
  absl::Status WriteTrace(const SessionRunValues& values, int64_t global_step);
  // Keeps the newest max_timelines traces of output_dir.
  void RemoveOldTimelines() const;

  ProfilerHookOptions options_;
  SecondOrStepTimer timer_;
  std::shared_ptr<SummaryWriter> writer_;  // set by Begin
  GlobalStep step_;
  std::optional<int64_t> next_step_;
  bool request_trace_ = false;
};

}  // namespace cosession

#endif  // COSESSION_HOOKS_PROFILER_HOOK_H_
