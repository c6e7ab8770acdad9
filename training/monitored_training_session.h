// MonitoredTrainingSession: a MonitoredSession set up for training with
// TensorFlow 1.x's defaults (tf.train.MonitoredTrainingSession).
//
//   MonitoredTrainingSessionOptions options;
//   options.checkpoint_dir = "/tmp/run";      // restore from / save to
//   options.max_steps = 1000;                 // StopAtStepHook(last_step)
//   options.summary_scalars = {{"loss", loss}};
//   auto ms = co_await MonitoredTrainingSession(graph, options,
//                                               asio::use_awaitable);
//
// The chief gets, in this order (TF's): the chief-only hooks; a
// StepCounterHook (every log_step_count_steps, written as the scalar
// "global_step/sec" into summary_dir); a SummarySaverHook (every
// save_summaries_steps, or save_summaries_secs, of summary_scalars and
// summary_histograms -- our graphs have no summary ops, so the tensors are
// named here; without any, no SummarySaverHook); a CheckpointSaverHook
// (every save_checkpoint_steps, or save_checkpoint_secs: 600 s by default);
// then a StopAtStepHook when max_steps is set; then the user's hooks. Its
// ChiefSessionCreator restores from the latest checkpoint of checkpoint_dir
// (unless the scaffold has a restore function of its own), otherwise
// initialises. A worker (is_chief = false) gets a WorkerSessionCreator over
// the chief's shared_resources, the StopAtStepHook when max_steps is set,
// and the user's hooks -- no chief-only or default hooks.
//
// Defaults as TensorFlow's: summaries every 100 steps, checkpoints every
// 600 s, step rate every 100 steps, stop grace period 120 s; summary_dir
// defaults to checkpoint_dir; an empty checkpoint_dir means no checkpoints
// and no summaries unless summary_dir is set. A period of 0 or unset turns
// that hook off.
//
// Errors: bad options (a hook's Create rejecting them) complete the
// operation with InvalidArgument naming the option; otherwise as
// MonitoredSession::Create. Thread safety: as MonitoredSession::Create.
#ifndef COSESSION_TRAINING_MONITORED_TRAINING_SESSION_H_
#define COSESSION_TRAINING_MONITORED_TRAINING_SESSION_H_

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_executor.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cosession/async/clock.h"
#include "cosession/async/completion.h"
#include "cosession/async/monitored_session.h"
#include "cosession/graph/graph.h"
#include "cosession/graph/resource_manager.h"

namespace cosession {

struct MonitoredTrainingSessionOptions {
  bool is_chief = true;
  std::string checkpoint_dir{};
  std::string summary_dir{};  // empty = checkpoint_dir
  Scaffold scaffold{};
  MonitoredSession::Hooks hooks{};
  MonitoredSession::Hooks chief_only_hooks{};
  // Checkpoints: every save_checkpoint_steps when set, else every
  // save_checkpoint_secs when set; neither = no CheckpointSaverHook.
  std::optional<int64_t> save_checkpoint_steps{};
  std::optional<absl::Duration> save_checkpoint_secs = absl::Seconds(600);
  // The CheckpointSaverHook's save_graph_def: graph.pbtxt and the graph
  // events for TensorBoard.
  bool save_graph_def = true;
  // Summaries: every save_summaries_secs when set, else every
  // save_summaries_steps when set.
  std::optional<int64_t> save_summaries_steps = 100;
  std::optional<absl::Duration> save_summaries_secs{};
  std::vector<std::pair<std::string, Output>> summary_scalars{};
  std::vector<std::pair<std::string, Output>> summary_histograms{};
  // The step rate, every this many steps; unset or 0 = no StepCounterHook.
  std::optional<int64_t> log_step_count_steps = 100;
  // Stop once the global step reaches it (a StopAtStepHook's last_step).
  std::optional<int64_t> max_steps{};
  std::chrono::nanoseconds stop_grace_period = std::chrono::seconds(120);
  // A worker's sessions run over the chief's variables (see
  // WorkerSessionCreator); the chief's sessions too when set.
  std::shared_ptr<ResourceManager> shared_resources{};
  WorkerSessionOptions worker{};
  // Everything else of the MonitoredSession (its stop_grace_period is
  // replaced by the one above).
  MonitoredSessionOptions session{};
  // The clock of the default hooks; null = SystemClock().
  Clock* clock = nullptr;
  // Where the StepCounterHook's lines go; null = standard error.
  std::function<void(const std::string&)> log{};
};

// What MonitoredTrainingSession creates a MonitoredSession from.
struct MonitoredTrainingSessionSetup {
  MonitoredSession::Hooks hooks{};
  std::shared_ptr<SessionCreator> creator{};
  MonitoredSessionOptions options{};
};

// The hooks, session creator and options, without creating anything yet
// (the graph is not finalized; a Saver may be added to it). InvalidArgument
// naming the option when one is bad.
absl::StatusOr<MonitoredTrainingSessionSetup> SetUpMonitoredTrainingSession(
    Graph& graph, MonitoredTrainingSessionOptions options);

// Sets up as above, on the calling thread (it adds ops to `graph`), and
// creates the MonitoredSession. Completion signature:
// void(MonitoredSession::CreateResult), as MonitoredSession::Create: bad
// options complete with InvalidArgument, through the handler's executor,
// never inline; cancellation as MonitoredSession::Create's.
template <typename CompletionToken>
auto MonitoredTrainingSession(Graph& graph,
                              MonitoredTrainingSessionOptions options,
                              CompletionToken&& token) {
  return boost::asio::async_initiate<CompletionToken,
                                     void(MonitoredSession::CreateResult)>(
      [](auto handler, Graph* graph, MonitoredTrainingSessionOptions options) {
        const MonitoredSessionOptions session_options = options.session;
        absl::StatusOr<MonitoredTrainingSessionSetup> setup =
            SetUpMonitoredTrainingSession(*graph, std::move(options));
        if (!setup.ok()) {
          // Through the executor Create would have completed on.
          auto executor = boost::asio::get_associated_executor(
              handler, MonitoredSession::DefaultExecutor(session_options));
          PostToHandler<MonitoredSession::CreateResult>(
              boost::asio::bind_executor(std::move(executor),
                                         std::move(handler)),
              [](MonitoredSession::CreateResult r) { return r; })(
              setup.status());
          return;
        }
        MonitoredSession::Create(*graph, std::move(setup->hooks),
                                 std::move(setup->creator),
                                 std::move(setup->options), std::move(handler));
      },
      token, &graph, std::move(options));
}

}  // namespace cosession

#endif  // COSESSION_TRAINING_MONITORED_TRAINING_SESSION_H_
