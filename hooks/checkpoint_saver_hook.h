// CheckpointSaverHook: saves checkpoints every N steps or seconds, once the
// session is created, and at the end, as TensorFlow 1.x's
// tf.train.CheckpointSaverHook; CheckpointSaverListener: code run around
// each save.
//
//   auto hook = CheckpointSaverHook::Create({.checkpoint_dir = "/ckpt",
//                                            .save_steps = 1000});
//   Scaffold scaffold{.restore = MakeRestoreFunction(*hook)};  // resume
//   MonitoredSession::Create(graph, {*hook}, std::make_shared<
//       ChiefSessionCreator>(scaffold), options, asio::use_awaitable);
//
// TensorFlow's behaviour, kept (basic_session_run_hooks_test.py's trigger
// steps and listener counts are ported in tests/checkpoint_saver_hook_test.cc):
//   * Begin: finds the global step (NotFound from Begin when the graph has
//     none), creates the Saver unless one was given (so it runs before the
//     graph is finalized), calls every listener's Begin.
//   * AfterCreateSession (also after each recovery): unless save_graph_def
//     is false, writes the graph --
//     <checkpoint_dir>/graph.pbtxt (GraphDef in text format, with
//     "_output_shapes") and a graph_def and a meta_graph_def event in the
//     directory's event file, for TensorBoard's Graphs dashboard
//     (io/graph_def_proto.h) --, then saves the checkpoint of the current
//     (restored or initial) step and marks that step triggered.
//   * BeforeRun fetches the global step. AfterRun: when the timer would
//     trigger for the step's estimated value (that step + 1, as TensorFlow,
//     until a read teaches otherwise: hooks/global_step.h), reads the global
//     step and the variables in one run; if the timer triggers for the step
//     read, saves it.
//   * End: saves when the last saved step is not the current one, then calls
//     every listener's End.
//   * A save: every listener's BeforeSave, the write, every listener's
//     AfterSave; an AfterSave that returns true asks the session to stop
//     (ShouldStop() becomes true after the step in which AfterSave ran).
//   * Each save written is logged as a SessionLog CHECKPOINT event (its
//     checkpoint_path "<checkpoint_dir>/<filename_prefix>", its step the
//     saved one) in the checkpoint directory's event file
//     (SummaryWriterCache; made when the graph is written), flushed by End.
//
// Where this differs, and why:
//   * The write runs on the Runtime's pool while training goes on (see
//     io/saver.h: at most one write in flight; a save waits for the one
//     before it). So AfterSave, which promises a finished file, runs once the
//     write has finished: at the first BeforeRun/AfterRun that finds it done,
//     at the next save, or at End -- whichever comes first. Set
//     wait_for_write for TensorFlow's timing (AfterRun waits for the write
//     and AfterSave runs in the same step). An AfterSave run from
//     AfterCreateSession or End cannot stop anything (TF ignores it there
//     too).
//   * The snapshot is read in its own run right after the step, together
//     with the global step it is saved under: variables fetched in the
//     training step itself could be read before or after that step's updates
//     (nothing orders a read against an Assign in one run), so a checkpoint
//     could mix steps. Reading a variable shares its buffer: no copy.
//   * A failed write surfaces as the error of the hook call that delivers
//     it (the next BeforeRun/AfterRun, save or End), as TF's save raises.
//
// Suspending: the hook waits (MaySuspendInNextStep) only on the steps it
// expects to save, and while a write is in flight with listeners to tell
// (AfterSave is a coroutine). On other steps its calls are plain functions;
// a time-based timer that becomes due during such a step makes the next
// step the one that saves.
//
// Thread safety: a hook belongs to one MonitoredSession at a time, which
// never calls it concurrently; listeners are called in order, one at a time.
#ifndef COSESSION_HOOKS_CHECKPOINT_SAVER_HOOK_H_
#define COSESSION_HOOKS_CHECKPOINT_SAVER_HOOK_H_

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <functional>
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
#include "cosession/io/saver.h"
#include "cosession/io/summary_writer.h"

namespace cosession {

// Code run around the saves of a CheckpointSaverHook (TF's
// CheckpointSaverListener). Every method has a no-op default.
class CheckpointSaverListener {
 public:
  virtual ~CheckpointSaverListener() = default;
  // In the hook's Begin, before the graph is finalized; may add ops.
  virtual absl::Status Begin(Graph& graph);
  // Before the snapshot of `step` is handed to the writer.
  virtual boost::asio::awaitable<absl::Status> BeforeSave(Session& session,
                                                          int64_t step);
  // Once the checkpoint of `step` is on disk; true asks the session to stop.
  virtual boost::asio::awaitable<absl::StatusOr<bool>> AfterSave(
      Session& session, int64_t step);
  // In the hook's End, after the last save finished.
  virtual boost::asio::awaitable<absl::Status> End(Session& session,
                                                   int64_t step);
};

struct CheckpointSaverHookOptions {
  std::string checkpoint_dir{};  // required
  // Exactly one of the two.
  std::optional<absl::Duration> save_secs{};
  std::optional<int64_t> save_steps{};
  // Null = a Saver created in Begin with saver_options.
  std::shared_ptr<Saver> saver{};
  SaverOptions saver_options{};
  std::vector<std::shared_ptr<CheckpointSaverListener>> listeners{};
  // The timer's clock (and the created Saver's, unless saver_options sets
  // one); null = SystemClock().
  Clock* clock = nullptr;
  // true: AfterRun waits for each periodic write and runs AfterSave in the
  // same step, as TensorFlow (training stalls for the write).
  bool wait_for_write = false;
  // TensorFlow's save_graph_def: write the graph (graph.pbtxt and the graph
  // events) when the session is created. false: only checkpoints (a graph
  // whose constants are too big to repeat, say).
  bool save_graph_def = true;
};

class CheckpointSaverHook : public SyncSessionRunHook {
 public:
  // InvalidArgument naming the bad option: an empty checkpoint_dir, both or
  // neither of save_secs/save_steps, a non-positive period, a null listener.
  static absl::StatusOr<std::shared_ptr<CheckpointSaverHook>> Create(
      CheckpointSaverHookOptions options);

  // The Saver (null before Begin unless one was given).
  const std::shared_ptr<Saver>& saver() const { return saver_; }
  const std::string& checkpoint_dir() const { return options_.checkpoint_dir; }
  // The step of the last save started (nullopt before the first).
  std::optional<int64_t> last_saved_step() const {
    return timer_.last_triggered_step();
  }

  absl::Status Begin(Graph& graph) override;
  boost::asio::awaitable<absl::Status> AfterCreateSession(
      Session& session, Coordinator& coordinator) override;
  absl::Status BeforeRunSync(SessionRunContext& context,
                             SessionRunArgs& args) override;
  absl::Status AfterRunSync(SessionRunContext& context,
                            const SessionRunValues& values) override;
  boost::asio::awaitable<absl::StatusOr<SessionRunArgs>> BeforeRun(
      SessionRunContext& context) override;
  boost::asio::awaitable<absl::Status> AfterRun(
      SessionRunContext& context, const SessionRunValues& values) override;
  boost::asio::awaitable<absl::Status> End(Session& session) override;
  bool MaySuspend() const override { return true; }
  bool MaySuspendInNextStep() const override;

 private:
  CheckpointSaverHook(CheckpointSaverHookOptions options,
                      SecondOrStepTimer timer);

  // Reads the global step and the variables in one run.
  boost::asio::awaitable<absl::StatusOr<std::vector<Tensor>>> ReadSnapshot(
      Session& session);
  // BeforeSave listeners, then hands the snapshot to the writer (after the
  // previous save was delivered). `context` null outside a step.
  boost::asio::awaitable<absl::Status> Save(Session& session, int64_t step,
                                            std::vector<Tensor> snapshot,
                                            SessionRunContext* context);
  // Waits for the undelivered save (if any) and runs AfterSave listeners.
  boost::asio::awaitable<absl::Status> Deliver(Session& session,
                                               SessionRunContext* context);
  // Deliver, only when the write already finished.
  boost::asio::awaitable<absl::Status> DeliverIfDone(
      Session& session, SessionRunContext* context);
  // The same without suspending, when there are no listeners to tell.
  absl::Status DeliverIfDoneWithoutListeners();
  // Once `save`'s write succeeded: SessionLog CHECKPOINT into the
  // checkpoint directory's event file, as TensorFlow's hook writes it.
  absl::Status LogCheckpoint(const PendingSave& save);
  // The checkpoint directory's event file (made, with the directory, on
  // first use).
  absl::Status OpenSummaryWriter();
  // graph.pbtxt and the graph events, as TensorFlow's after_create_session.
  absl::Status WriteGraph();

  CheckpointSaverHookOptions options_;
  SecondOrStepTimer timer_;
  std::shared_ptr<Saver> saver_;
  const Graph* saver_graph_ = nullptr;
  const Graph* graph_ = nullptr;  // Begin's
  GlobalStep step_;
  // A save whose AfterSave listeners have not run yet.
  std::shared_ptr<PendingSave> undelivered_;
  // The checkpoint directory's event file (SummaryWriterCache), from the
  // graph's writing.
  std::shared_ptr<SummaryWriter> summary_writer_;
};

// A Scaffold::restore function that restores, with the hook's Saver (created
// in Begin, which runs before the session creator restores), the latest
// checkpoint of the hook's directory; false when there is none.
std::function<boost::asio::awaitable<absl::StatusOr<bool>>(Session&)>
MakeRestoreFunction(std::shared_ptr<CheckpointSaverHook> hook);

}  // namespace cosession

#endif  // COSESSION_HOOKS_CHECKPOINT_SAVER_HOOK_H_
