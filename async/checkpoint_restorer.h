// CheckpointRestorer: what a session creator needs of a checkpoint format to
// restore a new session from a checkpoint directory (TensorFlow's
// Scaffold.saver as ChiefSessionCreator uses it). The async layer knows only
// this interface; io/saver.h's Saver implements it for safetensors
// checkpoints.
//
// Contract of RestoreLatestIfAny: restores every variable of `session` from the
// newest loadable checkpoint in `checkpoint_dir` and completes with true;
// with false when the directory holds no checkpoint (a first run); with an
// error naming the file otherwise (DataLoss for a corrupt file, NotFound or
// InvalidArgument for a variable missing or of another dtype or shape). It
// waits first for any checkpoint still being written into that directory,
// by any writer of the process, so that it never restores a state older
// than one already being saved. `session` must outlive the awaitable.
//
// Thread safety: implementations are thread-safe.
#ifndef COSESSION_ASYNC_CHECKPOINT_RESTORER_H_
#define COSESSION_ASYNC_CHECKPOINT_RESTORER_H_

#include <boost/asio/awaitable.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "cosession/async/session.h"

namespace cosession {

class CheckpointRestorer {
 public:
  virtual ~CheckpointRestorer() = default;
  virtual boost::asio::awaitable<absl::StatusOr<bool>> RestoreLatestIfAny(
      Session& session, std::string checkpoint_dir) = 0;
};

}  // namespace cosession

#endif  // COSESSION_ASYNC_CHECKPOINT_RESTORER_H_
