// Session creators: how a MonitoredSession brings a new session to life --
// initialised, restored from a checkpoint, or waiting for a chief -- each
// time it creates one (at Create, and again after each recovery), as
// TensorFlow 1.x's Scaffold, ChiefSessionCreator and WorkerSessionCreator.
//
//   Scaffold scaffold{.saver = *Saver::Create(graph)};          // io/saver.h
//   auto creator = std::make_shared<ChiefSessionCreator>(
//       scaffold, ChiefSessionCreatorOptions{.checkpoint_dir = "/ckpt"});
//   co_await MonitoredSession::Create(graph, hooks, creator, options, token);
//
// Contract: MonitoredSession::Create calls Prepare(graph) once, before the
// graph is finalized (so a creator may add ops), then CreateSession for each
// session it needs; CreateSession's errors end Create (Aborted/Unavailable
// are retried as recoveries). CreateSession's waits (a worker's polling, a
// restore) are cancelled with the Create or the recovering Run that awaits
// them.
//
// Thread safety: a creator serves one MonitoredSession at a time, which
// never calls it concurrently. Lifetime: the Graph and the Runtime passed to
// CreateSession outlive the session it returns.
#ifndef COSESSION_ASYNC_SESSION_CREATOR_H_
#define COSESSION_ASYNC_SESSION_CREATOR_H_

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cosession/async/checkpoint_restorer.h"
#include "cosession/async/runtime.h"
#include "cosession/async/session.h"
#include "cosession/graph/graph.h"
#include "cosession/graph/resource_manager.h"

namespace cosession {

// The ops a session creator uses to bring a new session to life. Unset ops
// get TensorFlow's defaults when the graph is finalized: init_op = every
// global variable's initializer, ready_op = ReportUninitializedVariables
// (graph/ops.h) over every variable.
struct Scaffold {
  Operation init_op{};
  // A bool vector, true for each variable not initialised yet; the session
  // is ready when none is true. WorkerSessionCreator waits for it.
  Output ready_op{};
  Operation local_init_op{};
  // What ChiefSessionCreator restores checkpoint_dir with (TensorFlow's
  // Scaffold.saver): e.g. a Saver (io/saver.h). Needed only with a
  // checkpoint directory.
  std::shared_ptr<CheckpointRestorer> saver{};
  // Restores a session by other means: true if it restored something. When
  // set, ChiefSessionCreator calls it instead of restoring checkpoint_dir.
  std::function<boost::asio::awaitable<absl::StatusOr<bool>>(Session&)>
      restore{};

  // Fills in the defaults; called by MonitoredSession::Create (through
  // SessionCreator::Prepare) before the graph is finalized.
  void Finalize(Graph& graph);
};

// Makes ready-to-use sessions for a MonitoredSession (initialised or
// restored).
class SessionCreator {
 public:
  virtual ~SessionCreator() = default;
  virtual boost::asio::awaitable<absl::StatusOr<std::unique_ptr<Session>>>
  CreateSession(const Graph& graph, Runtime& runtime) = 0;
  // Called once by MonitoredSession::Create, before the graph is finalized.
  virtual void Prepare(Graph& graph) { (void)graph; }
};

struct ChiefSessionCreatorOptions {
  // TensorFlow's checkpoint_dir: each new session is restored from the
  // newest checkpoint there with Scaffold::saver (which then must be set),
  // or initialised when there is none. Empty = always initialise (unless
  // Scaffold::restore is set).
  std::string checkpoint_dir{};
  // Sessions are built over these shared variables when given, so that
  // workers built over the same ResourceManager see the chief's (as
  // sessions of one TensorFlow server do); null = each session has
  // variables of its own.
  std::shared_ptr<ResourceManager> shared_resources{};
};

// The chief: restores (Scaffold::restore if set, else checkpoint_dir with
// Scaffold::saver) when there is something to restore, otherwise runs the
// init op; then the local init op.
class ChiefSessionCreator : public SessionCreator {
 public:
  explicit ChiefSessionCreator(
      Scaffold scaffold = {},
      std::shared_ptr<ResourceManager> shared_resources = nullptr)
      : ChiefSessionCreator(
            std::move(scaffold),
            ChiefSessionCreatorOptions{.shared_resources =
                                           std::move(shared_resources)}) {}
  ChiefSessionCreator(Scaffold scaffold, ChiefSessionCreatorOptions options)
      : scaffold_(std::move(scaffold)), options_(std::move(options)) {}

  void Prepare(Graph& graph) override { scaffold_.Finalize(graph); }
  // InvalidArgument when checkpoint_dir is set without Scaffold::saver.
  boost::asio::awaitable<absl::StatusOr<std::unique_ptr<Session>>>
  CreateSession(const Graph& graph, Runtime& runtime) override;
  const Scaffold& scaffold() const { return scaffold_; }
  const ChiefSessionCreatorOptions& options() const { return options_; }

 private:
  Scaffold scaffold_;
  ChiefSessionCreatorOptions options_;
};

struct WorkerSessionOptions {
  // How often the ready op is polled while the chief has not initialised
  // the variables yet (TensorFlow: recovery_wait_secs, 30 s).
  std::chrono::nanoseconds poll_interval = std::chrono::seconds(30);
  // How long to wait in all; DeadlineExceeded naming the variables still
  // uninitialised afterwards (TensorFlow: max_wait_secs, 2 h).
  std::chrono::nanoseconds max_wait = std::chrono::hours(2);
};

// A worker: never initialises; waits, asynchronously (a timer on the
// creating coroutine's executor, no thread blocked), until the scaffold's
// ready op reports every variable initialised by the chief, then runs the
// local init op. Its sessions are built over `shared_resources` -- the
// chief's.
class WorkerSessionCreator : public SessionCreator {
 public:
  WorkerSessionCreator(Scaffold scaffold,
                       std::shared_ptr<ResourceManager> shared_resources,
                       WorkerSessionOptions options = {})
      : scaffold_(std::move(scaffold)),
        shared_resources_(std::move(shared_resources)),
        options_(options) {}
  void Prepare(Graph& graph) override { scaffold_.Finalize(graph); }
  boost::asio::awaitable<absl::StatusOr<std::unique_ptr<Session>>>
  CreateSession(const Graph& graph, Runtime& runtime) override;

 private:
  Scaffold scaffold_;
  std::shared_ptr<ResourceManager> shared_resources_;
  WorkerSessionOptions options_;
};

}  // namespace cosession

#endif  // COSESSION_ASYNC_SESSION_CREATOR_H_
