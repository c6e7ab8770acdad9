// SessionRunHook: code that runs around every step of a MonitoredSession,
// as TensorFlow 1.x's tf.train.SessionRunHook.
//
// The lifecycle, with every error path (H = the hooks, in the order given):
//
// clang-format off
//   MonitoredSession::Create(graph, hooks):
//     for h in H: h.Begin(graph)               // may add ops; an error ends Create
//     graph.Finalize()
//     create the session (init or restore)     // Aborted/Unavailable: retried
//     for h in H: co_await h.AfterCreateSession(session, coord)  // one by one
//
//   MonitoredSession::Run(args):
//     if ShouldStop(): return FailedPrecondition   // no hook is called
//     ctx = SessionRunContext(args, session)       // shared by all hooks
//     start h.BeforeRun(ctx) for h in H, in order; await them all
//       - any error: the others are cancelled, nothing runs, no AfterRun,
//         h.OnError(error) for every hook; Run returns the error
//     merge the hooks' feeds/fetches/targets/options with args
//       - a tensor fed twice: InvalidArgument, nothing runs
//     co_await session.Run(merged)
//       - error: no AfterRun; OnError; Run returns it
//     start h.AfterRun(ctx, values_of_h) for h in H, in order; await all
//       - an error: Run returns it (the others are cancelled)
//     return the caller's fetches
//     (ctx.RequestStop() in BeforeRun/AfterRun: the step finishes, every
//      AfterRun still runs, then ShouldStop() is true.)
//     Aborted/Unavailable anywhere: the session is closed and re-created
//     (AfterCreateSession again, Begin and End not), and Run is retried.
//
//   MonitoredSession::Close():
//     if the session ended normally (or on OutOfRange, or a clean stop):
//       for h in H: co_await h.End(session)    // one by one; may run ops
//     after any other error, End is not called.
// clang-format on
//
// Every method has a no-op default. Hooks are called from the session's
// step coroutine, never concurrently for one hook; a hook shared between
// sessions must synchronise itself. Each method runs on the executor of the
// MonitoredSession operation that calls it -- Begin and AfterCreateSession
// on Create's (or on the recovering Run's), BeforeRun and AfterRun on
// Run's, End on Close's: the completion handler's executor, for
// use_awaitable the awaiting coroutine's -- so a program that awaits them
// all from one event loop gets every hook call on that loop. The awaitable
// methods may suspend (await I/O, timers, channels); a stop request or the
// caller's cancellation cancels those waits (terminal cancellation), so a hook
// must let them be cancelled.
#ifndef COSESSION_ASYNC_SESSION_RUN_HOOK_H_
#define COSESSION_ASYNC_SESSION_RUN_HOOK_H_

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cosession/async/run_args.h"
#include "cosession/async/session.h"
#include "cosession/graph/graph.h"
#include "cosession/graph/tensor.h"

namespace cosession {

class Coordinator;

using SessionRunArgs = RunArgs;

// What every hook of one step sees: the caller's arguments, the session, and
// a way to ask the monitored session to stop after this step.
class SessionRunContext {
 public:
  SessionRunContext(const RunArgs& original_args, Session& session)
      : original_args_(original_args), session_(session) {}

  const RunArgs& original_args() const { return original_args_; }
  Session& session() const { return session_; }
  // The step still finishes (every AfterRun runs); then ShouldStop() is true.
  void RequestStop() { stop_requested_ = true; }
  // Same, saying why ("hook 'StopAtStepHook' requested stop: ..."): the
  // first reason given becomes MonitoredSession::stop_reason(). Hooks of one
  // step may run on several threads of a pool, hence the lock.
  void RequestStop(std::string reason) {
    std::lock_guard lock(reason_mu_);
    if (stop_reason_.empty()) stop_reason_ = std::move(reason);
    stop_requested_ = true;
  }
  bool stop_requested() const { return stop_requested_; }
  // The first reason given to RequestStop ("" if none).
  std::string stop_reason() const {
    std::lock_guard lock(reason_mu_);
    return stop_reason_;
  }

 private:
  const RunArgs& original_args_;
  Session& session_;
  std::atomic<bool> stop_requested_ = false;
  mutable std::mutex reason_mu_;
  std::string stop_reason_ ABSL_GUARDED_BY(reason_mu_);
};

// What a hook's AfterRun receives.
struct SessionRunValues {
  // The values of this hook's own fetches, in the order it asked for them
  // (empty when it asked for none).
  std::vector<Tensor> results{};
  // The merged options the step ran with.
  RunOptions options{};
  // Always present; step stats only when a full trace was asked for.
  RunMetadata run_metadata{};
};

class SessionRunHook {
 public:
  virtual ~SessionRunHook() = default;

  // Once, before the session exists; may add ops to the graph.
  virtual absl::Status Begin(Graph& graph);
  // When a session is created, and again each time it is re-created.
  virtual boost::asio::awaitable<absl::Status> AfterCreateSession(
      Session& session, Coordinator& coordinator);
  // Before each step: what this hook wants run with it.
  virtual boost::asio::awaitable<absl::StatusOr<SessionRunArgs>> BeforeRun(
      SessionRunContext& context);
  // After each successful step.
  virtual boost::asio::awaitable<absl::Status> AfterRun(
      SessionRunContext& context, const SessionRunValues& values);
  // When the session closes cleanly; may run final ops.
  virtual boost::asio::awaitable<absl::Status> End(Session& session);
  // A step failed with `error` (not called for Cancelled). TensorFlow users
  // asked for it; End keeps TensorFlow's meaning.
  virtual void OnError(const absl::Status& error);

  // Whether BeforeRun/AfterRun may suspend (await I/O, a timer, a run of
  // the session) on some step. A hook that returns false promises never to
  // suspend in them.
  virtual bool MaySuspend() const { return true; }
  // Whether they may suspend in the coming step: asked once per step, just
  // before the step calls this hook's BeforeRun. A hook that answers false
  // promises not to suspend in that step's BeforeRun and AfterRun. Hooks
  // that wait only on some steps (a read of the global step on a trigger
  // step, a checkpoint) answer true only for those. Default: MaySuspend().
  //
  // What the step makes of the answers: when no hook of a step may suspend,
  // `co_await ms.Run(args, use_awaitable)` runs the whole step inside the
  // awaiting coroutine (no coroutine of its own, no hop), and a stop
  // requested elsewhere reaches its one wait, the graph run. In
  // HookConcurrency::kConcurrent mode, when two or more hooks may suspend,
  // every hook is started in order as a coroutine of its own and they are
  // awaited together (~0.4 us a hook); otherwise every hook is awaited in
  // order (~15 ns each), which is equivalent.
  virtual bool MaySuspendInNextStep() const { return MaySuspend(); }

  // How messages name this hook (e.g. stop_reason(): "hook 'X' requested
  // stop"). Default: the hook's C++ type name.
  virtual std::string name() const;
};

// A hook whose per-step methods are plain functions: MonitoredSession calls
// BeforeRunSync/AfterRunSync directly, without the coroutine frame and the
// StatusOr<SessionRunArgs> an awaitable call costs (measured: 3.5 ns a call
// against 27 ns an await, by hand; in a step, 24 against 78 ns per hook:
// BM_Step_SyncHooks, BM_Step_CoroutineHooks). Most TensorFlow hooks are of
// this kind. The awaitable BeforeRun/AfterRun call the sync forms, so code
// that awaits a hook sees no difference. Begin, AfterCreateSession, End and
// OnError are SessionRunHook's.
//
// A hook that must wait on some steps only (e.g. to read the global step
// when a timer triggers) overrides MaySuspend() to return true,
// MaySuspendInNextStep() to say which steps, and the awaitable forms for
// those: on such a step the step awaits BeforeRun/AfterRun instead of
// calling the sync forms.
class SyncSessionRunHook : public SessionRunHook {
 public:
  // Before each step: add to `args` (empty on entry) what this hook wants
  // run with the step. An error fails the step as BeforeRun's would.
  virtual absl::Status BeforeRunSync(SessionRunContext& context,
                                     SessionRunArgs& args);
  // After each successful step.
  virtual absl::Status AfterRunSync(SessionRunContext& context,
                                    const SessionRunValues& values);

  boost::asio::awaitable<absl::StatusOr<SessionRunArgs>> BeforeRun(
      SessionRunContext& context) override;
  boost::asio::awaitable<absl::Status> AfterRun(
      SessionRunContext& context, const SessionRunValues& values) override;
  bool MaySuspend() const override { return false; }
};

}  // namespace cosession

#endif  // COSESSION_ASYNC_SESSION_RUN_HOOK_H_
