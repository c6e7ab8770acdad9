#include "cosession/training/monitored_training_session.h"

#include "absl/strings/str_cat.h"
#include "cosession/graph/status.h"
#include "cosession/hooks/checkpoint_saver_hook.h"
#include "cosession/hooks/step_counter_hook.h"
#include "cosession/hooks/stop_at_step_hook.h"
#include "cosession/hooks/summary_saver_hook.h"
#include "cosession/io/saver.h"

namespace cosession {
namespace {

bool Positive(const std::optional<int64_t>& steps) {
  return steps.has_value() && *steps > 0;
}
bool Positive(const std::optional<absl::Duration>& secs) {
  return secs.has_value() && *secs > absl::ZeroDuration();
}

// Adds `created` to `hooks`, or returns its error naming the option.
template <typename Hook>
absl::Status Append(absl::StatusOr<std::shared_ptr<Hook>> created,
                    absl::string_view option, MonitoredSession::Hooks& hooks) {
  if (!created.ok()) {
    return absl::Status(created.status().code(),
                        absl::StrCat("MonitoredTrainingSession (", option,
                                     "): ", created.status().message()));
  }
  hooks.push_back(*std::move(created));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MonitoredTrainingSessionSetup> SetUpMonitoredTrainingSession(
    Graph& graph, MonitoredTrainingSessionOptions options) {
  MonitoredTrainingSessionSetup setup;
  setup.options = options.session;
  setup.options.stop_grace_period = options.stop_grace_period;
  MonitoredSession::Hooks& hooks = setup.hooks;

  auto add_stop_at_step = [&]() -> absl::Status {
    if (!options.max_steps.has_value()) return absl::OkStatus();
    return Append(StopAtStepHook::Create({.last_step = options.max_steps}),
                  "max_steps", hooks);
  };

  if (!options.is_chief) {
    if (options.shared_resources == nullptr) {
      return absl::InvalidArgumentError(
          "MonitoredTrainingSession: a worker (is_chief = false) needs the "
          "chief's shared_resources");
    }
    COSESSION_RETURN_IF_ERROR(add_stop_at_step());
    hooks.insert(hooks.end(), options.hooks.begin(), options.hooks.end());
    setup.creator = std::make_shared<WorkerSessionCreator>(
        options.scaffold, options.shared_resources, options.worker);
    return setup;
  }

  hooks = options.chief_only_hooks;
  const std::string summary_dir = options.summary_dir.empty()
                                      ? options.checkpoint_dir
                                      : options.summary_dir;
  if (!summary_dir.empty()) {
    if (Positive(options.log_step_count_steps)) {
      StepCounterHookOptions counter;
      counter.every_n_steps = options.log_step_count_steps;
      counter.output_dir = summary_dir;
      counter.clock = options.clock;
      counter.log = options.log;
      COSESSION_RETURN_IF_ERROR(Append(StepCounterHook::Create(counter),
                                       "log_step_count_steps", hooks));
    }
    const bool by_secs = Positive(options.save_summaries_secs);
    if ((by_secs || Positive(options.save_summaries_steps)) &&
        (!options.summary_scalars.empty() ||
         !options.summary_histograms.empty())) {
      SummarySaverHookOptions summaries;
      if (by_secs) {
        summaries.save_secs = options.save_summaries_secs;
      } else {
        summaries.save_steps = options.save_summaries_steps;
      }
      summaries.output_dir = summary_dir;
      summaries.scalars = options.summary_scalars;
      summaries.histograms = options.summary_histograms;
      summaries.clock = options.clock;
      COSESSION_RETURN_IF_ERROR(
          Append(SummarySaverHook::Create(summaries), "save_summaries", hooks));
    }
  }
  Scaffold scaffold = options.scaffold;
  if (!options.checkpoint_dir.empty()) {
    const bool by_steps = Positive(options.save_checkpoint_steps);
    std::shared_ptr<CheckpointSaverHook> saver_hook;
    if (by_steps || Positive(options.save_checkpoint_secs)) {
      CheckpointSaverHookOptions checkpoints;
      checkpoints.checkpoint_dir = options.checkpoint_dir;
      if (by_steps) {
        checkpoints.save_steps = options.save_checkpoint_steps;
      } else {
        checkpoints.save_secs = options.save_checkpoint_secs;
      }
      checkpoints.clock = options.clock;
      checkpoints.save_graph_def = options.save_graph_def;
      auto created = CheckpointSaverHook::Create(checkpoints);
      COSESSION_RETURN_IF_ERROR(Append(created, "save_checkpoint", hooks));
      saver_hook = *created;
    }
    if (!scaffold.restore) {
      if (saver_hook) {
        scaffold.restore = MakeRestoreFunction(saver_hook);
      } else {
        // No saving, but TensorFlow still restores from checkpoint_dir.
        auto saver = Saver::Create(graph);
        if (!saver.ok()) return saver.status();
        scaffold.restore =
            MakeRestoreFunction(*std::move(saver), options.checkpoint_dir);
      }
    }
  }
  COSESSION_RETURN_IF_ERROR(add_stop_at_step());
  hooks.insert(hooks.end(), options.hooks.begin(), options.hooks.end());
  setup.creator = std::make_shared<ChiefSessionCreator>(
      std::move(scaffold), options.shared_resources);
  return setup;
}

}  // namespace cosession
