// Saver: writes a graph's variables as crash-safe safetensors checkpoints and
// restores them, as TensorFlow 1.x's tf.train.Saver.
//
//   auto saver = Saver::Create(graph);          // before graph.Finalize()
//   co_await (*saver)->Save(session, "/ckpt", step);  // fetch + write + wait
//   co_await (*saver)->RestoreLatest(session, "/ckpt");
//
// Files, in `dir`:
//   <prefix>-<step>.safetensors   one checkpoint (io/safetensors.h); its
//                                 __metadata__ holds "global_step" (decimal)
//                                 and "crc32c"; one tensor per variable,
//                                 named after the variable's op
//   checkpoint                    TensorFlow's text state file:
//     model_checkpoint_path: "model.ckpt-20"
//     all_model_checkpoint_paths: "model.ckpt-10"   (oldest first)
//     all_model_checkpoint_paths: "model.ckpt-20"
//     all_model_checkpoint_timestamps: 1700000000.5  (seconds, one per path)
//     last_preserved_timestamp: 1699990000
// A checkpoint is named by its path prefix ("/ckpt/model.ckpt-20"), as TF's.
//
// Crash safety: each file is written to a temporary file in `dir`, fsynced,
// renamed over its name, and the directory fsynced (io/atomic_file.h).
// The checkpoint is written first, the state file last, and checkpoints
// beyond max_to_keep are deleted only after the state file no longer names
// them. So a crash at any instant leaves a state file that names only whole
// checkpoints: the previous checkpoint (or the new one) stays loadable. A
// crash may leave a stray temporary file, removed by the next Saver that
// writes to the directory, or an old checkpoint that was about to be deleted.
//
// Retention (TF's rules): the state file lists the last max_to_keep
// checkpoints (0 = all); an older one is deleted, unless it is the first one
// saved keep_checkpoint_every_n_hours after the last one preserved that way
// (preserved files leave the list but stay on disk). A Saver that first
// writes to a directory adopts the list of the state file already there, so
// retention carries over a restart -- or, when the state file is missing or
// unreadable, the checkpoints it finds in the directory (with a warning).
// A save that would replace an existing checkpoint file this Saver neither
// wrote nor restored from (one of another run) warns before it does.
//
// Restore validates everything: a corrupt file is DataLoss naming it; a
// variable absent from the file is NotFound naming both; a dtype or shape
// that differs from the variable's is InvalidArgument naming both. Tensors
// in the file that the Saver does not know are ignored. The values are
// assigned in one step (a Placeholder + Assign per variable, built by
// Create), only after every check passed. RestoreLatest falls back to older
// checkpoints of the state file when the newest is corrupt or missing
// (printing a warning on stderr that names both), and is DataLoss only when
// none loads. Without a usable state file (deleted, truncated) it restores
// the newest loadable "<prefix>-<step>.safetensors" of the directory, with a
// warning.
//
// Saving without stalling training: StartSave takes a snapshot (Tensors are
// immutable once shared, so values fetched in a step stay as they were) and
// writes it on the Runtime's pool while later steps run. At most one save is
// in flight: StartSave waits for the previous save to finish first (a save
// is never skipped; training stalls only when saves come faster than the
// disk writes them). WaitForPendingSave waits for the save in flight. Every
// save in flight is also known by its directory, process-wide, so that a
// restore of that directory by another Saver waits for it too.
//
// Thread safety: thread-safe. A save in flight keeps its Saver alive (it
// holds a shared_ptr); the Runtime it runs on must outlive it.
#ifndef COSESSION_IO_SAVER_H_
#define COSESSION_IO_SAVER_H_

#include <boost/asio/awaitable.hpp>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cosession/async/checkpoint_restorer.h"
#include "cosession/async/clock.h"
#include "cosession/async/runtime.h"
#include "cosession/async/session.h"
#include "cosession/graph/graph.h"
#include "cosession/graph/tensor.h"
#include "cosession/io/safetensors.h"

namespace cosession {

// Variables a checkpoint may lack: restoring a checkpoint that has no value
// for one runs the variable's initializer instead, with a warning (other
// variables missing are NotFound). For variables added to a model after
// checkpoints of it were written -- the input pipeline's position
// (pipeline/dataset_iterator.h) is one.
inline constexpr absl::string_view kRestoreOptionalCollection =
    "restore_optional_variables";

// The __metadata__ key of a checkpoint file holding its global step.
inline constexpr absl::string_view kGlobalStepKey = "global_step";

struct SaverOptions {
  // Checkpoints listed in the state file; older ones are deleted. 0 = delete
  // none, and list only the newest in the state file (as TF's Saver).
  int max_to_keep = 5;
  // Additionally keep one checkpoint per this much time (TF's
  // keep_checkpoint_every_n_hours; the default keeps none in practice).
  absl::Duration keep_checkpoint_every_n_hours = absl::Hours(10000);
  // File names are "<filename_prefix>-<step>.safetensors".
  std::string filename_prefix = "model.ckpt";
  // The variables to save, each an output of ops::Variable. Empty = the
  // graph's "variables" collection.
  std::vector<Output> variables{};
  // Timestamps of checkpoints; null = SystemClock().
  Clock* clock = nullptr;
  // Receives each warning ("cosession: WARNING: ..."): a fallback to an older
  // or found checkpoint, a replaced file. Null = standard error, through
  // Console::Stdout().
  std::function<void(const std::string&)> warn{};
};

// The state file's contents.
struct CheckpointState {
  std::string model_checkpoint_path{};
  std::vector<std::string> all_model_checkpoint_paths{};
  std::vector<double> all_model_checkpoint_timestamps{};
  std::optional<double> last_preserved_timestamp{};
};

// The state file of `dir` ("<dir>/checkpoint"). NotFound when there is
// none; DataLoss naming it when it does not parse.
absl::StatusOr<CheckpointState> ReadCheckpointState(const std::string& dir);

// The newest checkpoint of `dir` as a path prefix ("<dir>/model.ckpt-20"),
// as tf.train.latest_checkpoint. NotFound when the directory has no state
// file or the checkpoint it names does not exist; DataLoss when the state
// file is corrupt.
absl::StatusOr<std::string> LatestCheckpoint(const std::string& dir);

// "<prefix>.safetensors" (a path that already ends so is returned as is).
std::string CheckpointFilePath(const std::string& prefix);

// One save in flight, shared by the Saver and whoever waits for it.
class PendingSave {
 public:
  explicit PendingSave(int64_t step) : step_(step) {}
  int64_t step() const { return step_; }
  // True once the checkpoint and the state file are written (or failed).
  bool done() const;
  // Completes once done(), through the awaiting coroutine's executor, with
  // the checkpoint's path prefix or the write's error. Not cancellable: the
  // write is bounded and waiting for it is what keeps a checkpoint whole.
  boost::asio::awaitable<absl::StatusOr<std::string>> Wait();
  // Blocks the calling thread until done() (for plain threads and tests;
  // never on a pool thread of the Runtime writing it).
  absl::StatusOr<std::string> WaitBlocking();

  // Called once by the writer.
  void Complete(absl::StatusOr<std::string> result);

 private:
  using Waiter = absl::AnyInvocable<void(absl::StatusOr<std::string>)>;
  void AddWaiter(Waiter waiter);

  const int64_t step_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::StatusOr<std::string> result_ ABSL_GUARDED_BY(mu_);
  std::vector<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
};

class Saver : public CheckpointRestorer,
              public std::enable_shared_from_this<Saver> {
 public:
  // Builds the restore ops (a Placeholder and an Assign per variable, under
  // "save/"). Call before the graph is finalized; on a finalized graph it
  // reuses the ops of an earlier Saver of the same variables, or fails with
  // FailedPrecondition. InvalidArgument for bad options (naming them), no
  // variables, or an output that is not a Variable.
  static absl::StatusOr<std::shared_ptr<Saver>> Create(Graph& graph,
                                                       SaverOptions options);
  static absl::StatusOr<std::shared_ptr<Saver>> Create(Graph& graph) {
    return Create(graph, SaverOptions{});
  }

  Saver(const Saver&) = delete;
  Saver& operator=(const Saver&) = delete;

  // The variables saved, in file order; fetch them (in one step) for a
  // snapshot.
  const std::vector<Output>& variables() const { return variables_; }
  const SaverOptions& options() const { return options_; }

  // Fetches the variables in one run of `session`, writes the checkpoint for
  // `step` in `dir` (created if missing) on the session's Runtime, waits for
  // it. Returns the checkpoint's path prefix.
  boost::asio::awaitable<absl::StatusOr<std::string>> Save(Session& session,
                                                           std::string dir,
                                                           int64_t step);

  // Starts writing `snapshot` (the values of variables(), in order) as the
  // checkpoint for `step` in `dir` on `runtime`'s pool, after waiting for the
  // save in flight, if any. InvalidArgument when the snapshot does not match
  // the variables.
  boost::asio::awaitable<absl::StatusOr<std::shared_ptr<PendingSave>>>
  StartSave(Runtime& runtime, std::vector<Tensor> snapshot, std::string dir,
            int64_t step);

  // Completes when no save is in flight, with the status of the one that was
  // (OK when none was). Not cancellable (see PendingSave::Wait).
  boost::asio::awaitable<absl::Status> WaitForPendingSave();

  // Writes the checkpoint now, on the calling thread (what StartSave runs on
  // the pool; also for tools and tests). Returns the path prefix.
  absl::StatusOr<std::string> WriteCheckpoint(
      const std::vector<Tensor>& snapshot, const std::string& dir,
      int64_t step);

  // Assigns every variable from the checkpoint `checkpoint` (a path prefix
  // or a .safetensors path). Errors as in the top comment; nothing is
  // assigned unless everything checks out.
  boost::asio::awaitable<absl::Status> Restore(Session& session,
                                               std::string checkpoint);

  // Restores the newest loadable checkpoint of `dir` and returns its prefix,
  // after waiting for every save into `dir` still in flight (by any Saver of
  // the process: a restore never reads a state older than one being
  // written, nor a file half-written). NotFound when `dir` has no state file;
  // DataLoss when no listed checkpoint loads (each failure named); errors of
  // the variables (NotFound, InvalidArgument) as Restore, without falling back.
  boost::asio::awaitable<absl::StatusOr<std::string>> RestoreLatest(
      Session& session, std::string dir);
  // CheckpointRestorer (a Scaffold's saver): RestoreLatest, or false when
  // `dir` holds no checkpoint.
  boost::asio::awaitable<absl::StatusOr<bool>> RestoreLatestIfAny(
      Session& session, std::string dir) override;

 private:
  struct Retained {
    std::string name{};  // relative to the directory, e.g. "model.ckpt-20"
    absl::Time time{};
  };

  Saver(SaverOptions options, std::vector<Output> variables,
        std::vector<Output> restore_values, std::vector<Operation> assigns,
        std::vector<Operation> initializers);

  absl::Status CheckSnapshot(const std::vector<Tensor>& snapshot) const;
  void AdoptDirectory(const std::string& dir);
  // Checks `contents` against the variables and adds the restore feeds and
  // targets to `args`.
  absl::Status RestoreFrom(const std::string& file,
                           const SafetensorsContents& contents,
                           RunArgs& args) const;

  const SaverOptions options_;
  Clock* const clock_;
  const std::vector<Output> variables_;
  // The variables' names and dtypes, copied: a save written on the pool
  // must not touch the Graph, which may be gone by then (a session that
  // failed closes without waiting in End for its last save).
  const std::vector<std::string> variable_names_;
  const std::vector<DType> variable_dtypes_;
  const std::vector<Output> restore_values_;  // Placeholders, one a variable
  const std::vector<Operation> assigns_;
  // Per variable: its initializer when it is in kRestoreOptionalCollection
  // (run when a checkpoint lacks it), else invalid.
  const std::vector<Operation> initializers_;

  std::mutex pending_mu_;
  std::shared_ptr<PendingSave> pending_ ABSL_GUARDED_BY(pending_mu_);

  // Retention state, touched only by WriteCheckpoint under write_mu_.
  std::mutex write_mu_;
  // The directory retained_ describes.
  std::string directory_ ABSL_GUARDED_BY(write_mu_);
  std::vector<Retained> retained_ ABSL_GUARDED_BY(write_mu_);
  absl::Time next_preserve_time_ ABSL_GUARDED_BY(write_mu_);
  std::optional<absl::Time> last_preserved_ ABSL_GUARDED_BY(write_mu_);
  // What this Saver restored from and has written ("model.ckpt-20"): the
  // files it may replace without a warning.
  std::string restored_name_ ABSL_GUARDED_BY(write_mu_);
  absl::flat_hash_set<std::string> written_ ABSL_GUARDED_BY(write_mu_);
};

// A Scaffold::restore function (async/monitored_session.h): waits for any
// save in flight, then restores the latest checkpoint of `checkpoint_dir`
// with `saver` (true), or returns false when the directory has none.
std::function<boost::asio::awaitable<absl::StatusOr<bool>>(Session&)>
MakeRestoreFunction(std::shared_ptr<Saver> saver, std::string checkpoint_dir);

}  // namespace cosession

#endif  // COSESSION_IO_SAVER_H_
