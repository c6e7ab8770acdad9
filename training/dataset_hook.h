// DatasetHook: starts an input pipeline's iterator for every session a
// MonitoredSession creates (and re-creates after a recoverable error), as
// TensorFlow 1.x's make_initializable_iterator + an initializer run in
// after_create_session.
//
//   std::vector<Output> xy = IteratorGetNext(graph, batches);
//   auto hook = DatasetHook::Create({.get_next = xy[0],
//                                    .resume_from_checkpoint = true});
//   MonitoredSession::Hooks hooks = {*hook, ...};
//   ... co_await MonitoredSession::Create(graph, hooks, ...) ...
//   RunArgs step{.fetches = {loss}};
//   while (!ms->ShouldStop()) auto values = co_await ms->Run(step, ...);
//   // the step that meets the end returns OutOfRange; Close() is OK.
//
// Behaviour: AfterCreateSession calls StartDatasetIterator (see
// pipeline/dataset_iterator.h) for the new session with the session's
// coordinator: the producer is a coordinated task, so a stop (Close, a
// cancelled Run, a coordinator error) cancels it promptly and its error
// (a bad row, a missing file) stops the session. The iterator starts at
// element start_at_batch or, with resume_from_checkpoint, at the op's
// position variable (pipeline/dataset_iterator.h) once the session was
// restored or initialised: after a restart from a checkpoint the stream
// goes on exactly after the last element the checkpointed run took, shuffle
// buffers included. With resume_from_global_step it starts at the global
// step's value instead (one element per step). A dataset that is not
// deterministic (a socket, a channel, a generator) cannot be replayed: its
// iterator always starts at the stream's current start, and the resume
// options are ignored for it. Recovery re-reads the value, so a re-created
// session resumes too.
//
// Errors: Create returns InvalidArgument naming the option when get_next is
// not an output of an IteratorGetNext op or start_at_batch is negative.
// Begin fails (NotFound / InvalidArgument, naming the hook) when
// resume_from_global_step is set and the graph has no int64 global step, or
// when get_next belongs to another graph. AfterCreateSession fails with the
// error of reading the global step or of StartDatasetIterator.
//
// Thread safety: the MonitoredSession calls the hook's methods one at a
// time. BeforeRun/AfterRun are the no-op defaults (MaySuspend() is false).
#ifndef COSESSION_TRAINING_DATASET_HOOK_H_
#define COSESSION_TRAINING_DATASET_HOOK_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "cosession/async/session_run_hook.h"
#include "cosession/hooks/global_step.h"
#include "cosession/pipeline/dataset_iterator.h"

namespace cosession {

struct DatasetHookOptions {
  // Either output of DatasetIteratorGetNext.
  Output get_next{};
  // The first batch of each session's iterator...
  int64_t start_at_batch = 0;
  // ...or, when true, the global step's value after the session was created.
  bool resume_from_global_step = false;
  // ...or, when true (and taking precedence), the op's position variable
  // after the session was restored or initialised.
  bool resume_from_checkpoint = false;
};

class DatasetHook : public SyncSessionRunHook {
 public:
  static absl::StatusOr<std::shared_ptr<DatasetHook>> Create(
      DatasetHookOptions options);

  absl::Status Begin(Graph& graph) override;
  boost::asio::awaitable<absl::Status> AfterCreateSession(
      Session& session, Coordinator& coordinator) override;

  // The batch the most recently started iterator began at (-1 before any).
  int64_t last_start_batch() const { return last_start_batch_; }

 private:
  explicit DatasetHook(DatasetHookOptions options)
      : options_(std::move(options)) {}

  DatasetHookOptions options_;
  GlobalStep step_;
  int64_t last_start_batch_ = -1;
};

}  // namespace cosession

#endif  // COSESSION_TRAINING_DATASET_HOOK_H_
