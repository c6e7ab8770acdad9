// MonitoredSession: a Session that runs hooks around every step, stops on
// request, and recovers from Aborted/Unavailable by re-creating its session,
// as TensorFlow 1.x's tf.train.MonitoredSession.
//
//   auto ms = co_await MonitoredSession::Create(graph, hooks, creator,
//                                               options, asio::use_awaitable);
//   while (!(*ms)->ShouldStop()) {
//     auto values = co_await (*ms)->Run(args, asio::use_awaitable);
//     ...
//   }
//   absl::Status closed = co_await (*ms)->Close(asio::use_awaitable);
//
// The hook lifecycle and every error path are in async/session_run_hook.h;
// the decisions where TensorFlow's Python semantics do not carry over are in
// DESIGN.md ("Edge cases, decided"). In short:
//   * Run completes exactly once, through the handler's executor, with the
//     caller's fetches or an error. OutOfRange (input exhausted) stops the
//     session cleanly. Run after ShouldStop() is FailedPrecondition and calls
//     no hook.
//   * Cancelling the caller's Run requests stop on the coordinator (a clean
//     stop, stop_reason() "cancelled") and cancels the step's waits; a stop
//     requested elsewhere (another thread, a coordinated task's error, Close)
//     cancels the waits of a step in flight too. Such a step completes
//     promptly with the error that caused the stop, or Cancelled; a step whose
//     graph execution completed anyway returns its values.
//   * Aborted/Unavailable from a hook, the graph or the coordinator: the
//     session is re-created (new coordinator, hooks' AfterCreateSession again)
//     and the same Run retried, up to options.max_recovery_attempts times.
//
// Thread safety: Run, RunStepFn and Close must not be called concurrently
// with each other (one step at a time, like TensorFlow's); ShouldStop,
// stop_reason and coordinator().RequestStop may be called from any thread.
// Lifetime: the MonitoredSession must outlive every operation started on it
// (destroy it after Close completed).
#ifndef COSESSION_ASYNC_MONITORED_SESSION_H_
#define COSESSION_ASYNC_MONITORED_SESSION_H_

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "async/coordinator.h"
#include "async/run_args.h"
#include "async/runtime.h"
#include "async/session.h"
#include "async/session_run_hook.h"
#include "graph/graph.h"

namespace cosession {

// The ops a session creator uses to bring a new session to life. Unset ops
// get TensorFlow's defaults when the graph is finalized: init_op = every
// global variable's initializer, ready_op = ReportUninitializedVariables
// (graph/ops.h) over every variable.
struct Scaffold {
  Operation init_op;
  // A bool vector, true for each variable not initialised yet; the session
  // is ready when none is true. WorkerSessionCreator waits for it.
  Output ready_op;
  Operation local_init_op;
  // Restores a session from the latest checkpoint; true if it restored
  // something. Filled in by the checkpoint hooks; unset = never restores.
  std::function<boost::asio::awaitable<absl::StatusOr<bool>>(Session&)> restore;

  // Fills in the defaults; called by MonitoredSession::Create before the
  // graph is finalized.
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

// The chief: restores from the scaffold's restore function when it restores
// something, otherwise runs the init op; then the local init op. Sessions
// are built over `shared_resources` when given, so that workers built over
// the same ResourceManager see the chief's variables (as sessions of one
// TensorFlow server do); null = each session has variables of its own.
class ChiefSessionCreator : public SessionCreator {
 public:
  explicit ChiefSessionCreator(
      Scaffold scaffold = {},
      std::shared_ptr<ResourceManager> shared_resources = nullptr)
      : scaffold_(std::move(scaffold)),
        shared_resources_(std::move(shared_resources)) {}
  void Prepare(Graph& graph) override { scaffold_.Finalize(graph); }
  boost::asio::awaitable<absl::StatusOr<std::unique_ptr<Session>>>
  CreateSession(const Graph& graph, Runtime& runtime) override;
  const Scaffold& scaffold() const { return scaffold_; }

 private:
  Scaffold scaffold_;
  std::shared_ptr<ResourceManager> shared_resources_;
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
// chief's. The wait is cancelled with the Create (or the recovering Run)
// that awaits it.
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

enum class HookConcurrency {
  // BeforeRun/AfterRun started in order and awaited together.
  kConcurrent,
  // Each awaited before the next starts.
  kSequential,
};

// Which hooks a Run calls. TensorFlow users asked for a run without hooks
// (e.g. an evaluation step inside a training loop): hooks registered as
// skippable (MonitoredSessionOptions::skippable_hooks) sit such a Run out --
// none of their methods is called for it; the others run as usual.
enum class RunMode {
  kAllHooks,
  kWithoutSkippableHooks,
};

struct MonitoredSessionOptions {
  HookConcurrency hook_concurrency = HookConcurrency::kConcurrent;
  // Hooks (each one of the session's hooks) that a Run in
  // RunMode::kWithoutSkippableHooks skips. Create fails with InvalidArgument
  // when one is not among the session's hooks.
  std::vector<std::shared_ptr<SessionRunHook>> skippable_hooks;
  // Recovery attempts per Run (and per creation); unset = unbounded, as
  // TensorFlow. 0 = no recovery (SingularMonitoredSession).
  std::optional<int> max_recovery_attempts;
  // Close() joins the coordinator with this grace period.
  std::chrono::nanoseconds stop_grace_period = std::chrono::seconds(120);
  // Where the step coroutine runs when the caller's completion handler has
  // no executor of its own (use_future, plain callbacks): a single-threaded
  // executor or a strand. Null = a strand of the runtime's pool.
  std::optional<boost::asio::any_io_executor> executor;
  Runtime* runtime = nullptr;  // null = Runtime::Default()
  CoordinatorOptions coordinator;
};

class MonitoredSession {
 public:
  using RunResult = absl::StatusOr<std::vector<Tensor>>;
  using CreateResult = absl::StatusOr<std::unique_ptr<MonitoredSession>>;
  using Hooks = std::vector<std::shared_ptr<SessionRunHook>>;

  // What RunStepFn's function gets.
  class StepContext {
   public:
    // The raw session: no hooks.
    Session& session() const;
    // A step with the hooks, as Run (without recovery: RunStepFn retries the
    // whole function).
    boost::asio::awaitable<RunResult> RunWithHooks(RunArgs args);
    boost::asio::awaitable<RunResult> RunWithHooks(RunArgs args, RunMode mode);
    // ShouldStop() becomes true once the function returns.
    void RequestStop() { stop_requested_ = true; }

   private:
    friend class MonitoredSession;
    explicit StepContext(MonitoredSession& owner) : owner_(owner) {}
    MonitoredSession& owner_;
    bool stop_requested_ = false;
  };
  using StepFn =
      std::function<boost::asio::awaitable<absl::Status>(StepContext&)>;

  // Calls every hook's Begin, finalizes the graph, creates the session and
  // calls every hook's AfterCreateSession. Completion signature:
  // void(std::exception_ptr, CreateResult) (co_spawn's; never an exception
  // in practice: errors are statuses).
  template <typename CompletionToken>
  static auto Create(Graph& graph, Hooks hooks,
                     std::shared_ptr<SessionCreator> creator,
                     MonitoredSessionOptions options, CompletionToken&& token) {
    auto executor = DefaultExecutor(options);
    return boost::asio::co_spawn(
        executor,
        CreateCoroutine(&graph, std::move(hooks), std::move(creator),
                        std::move(options)),
        std::forward<CompletionToken>(token));
  }

  MonitoredSession(const MonitoredSession&) = delete;
  MonitoredSession& operator=(const MonitoredSession&) = delete;
  ~MonitoredSession();

  // One step with the hooks. Completion signature: void(RunResult).
  template <typename CompletionToken>
  auto Run(RunArgs args, CompletionToken&& token) {
    return RunFrom(0, std::move(args), RunMode::kAllHooks,
                   std::forward<CompletionToken>(token));
  }
  // One step with the hooks `mode` selects.
  template <typename CompletionToken>
  auto Run(RunArgs args, RunMode mode, CompletionToken&& token) {
    return RunFrom(0, std::move(args), mode,
                   std::forward<CompletionToken>(token));
  }
  // The same for `co_await ms.Run(args, asio::use_awaitable)`, with the
  // same guarantees, faster: when no hook the step calls may suspend
  // (SessionRunHook::MaySuspend) and no recovery is due, the step runs
  // inside the awaiting coroutine instead of a coroutine of its own (which
  // costs a co_spawn and a post, about 0.5 µs here).
  boost::asio::awaitable<RunResult> Run(
      RunArgs args, const boost::asio::use_awaitable_t<>& /*token*/) {
    return RunInline(std::move(args), RunMode::kAllHooks);
  }
  boost::asio::awaitable<RunResult> Run(
      RunArgs args, RunMode mode,
      const boost::asio::use_awaitable_t<>& /*token*/) {
    return RunInline(std::move(args), mode);
  }

  // Runs fn once per call with recovery: fn is retried on Aborted/
  // Unavailable. Completion signature: void(absl::Status).
  template <typename CompletionToken>
  auto RunStepFn(StepFn fn, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(absl::Status)>(
        [this](auto handler, StepFn fn) {
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          auto executor =
              boost::asio::get_associated_executor(handler, executor_);
          StartStepFn(
              std::move(fn), slot, executor,
              PostToHandler<absl::Status>(std::move(handler),
                                          [](absl::Status s) { return s; }));
        },
        token, std::move(fn));
  }

  // Ends the session: requests stop, calls every hook's End (unless the
  // last Run failed with a non-recoverable error), joins the coordinator.
  // Completes with the join result; a second Close is FailedPrecondition.
  // Cancelling it (per-operation cancellation, any type) cancels the waits
  // of the End in progress and of the join: Close then completes promptly
  // with Cancelled, the later hooks' End is not called, and the session
  // counts as closed. Completion signature: void(absl::Status).
  template <typename CompletionToken>
  auto Close(CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(absl::Status)>(
        [this](auto handler) {
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          auto executor =
              boost::asio::get_associated_executor(handler, executor_);
          StartClose(slot, executor,
                     PostToHandler<absl::Status>(
                         std::move(handler), [](absl::Status s) { return s; }));
        },
        token);
  }

  // True once a stop was requested (by a hook, the input running out, a
  // cancellation, a coordinator error or a call) -- but not for a
  // recoverable error, after which the next Run recovers first.
  bool ShouldStop() const;
  // Why the session stopped: "hook 'X' requested stop", "input exhausted",
  // "cancelled", "coordinator error: ...", "" while running.
  std::string stop_reason() const;
  // The current coordinator (a new one after each recovery).
  Coordinator& coordinator();
  // The current raw session.
  Session& raw_session();
  int recoveries() const;

 private:
  struct Impl;
  explicit MonitoredSession(std::shared_ptr<Impl> impl);

  static boost::asio::any_io_executor DefaultExecutor(
      const MonitoredSessionOptions& options);
  static boost::asio::awaitable<CreateResult> CreateCoroutine(
      Graph* graph, Hooks hooks, std::shared_ptr<SessionCreator> creator,
      MonitoredSessionOptions options);
  // Run, with the recovery attempts counted from first_attempt.
  template <typename CompletionToken>
  auto RunFrom(int first_attempt, RunArgs args, RunMode mode,
               CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(RunResult)>(
        [this](auto handler, RunArgs args, RunMode mode, int first_attempt) {
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          auto executor =
              boost::asio::get_associated_executor(handler, executor_);
          StartRun(std::move(args), mode, first_attempt, slot, executor,
                   PostToHandler<RunResult>(std::move(handler),
                                            [](RunResult r) { return r; }));
        },
        token, std::move(args), mode, first_attempt);
  }
  boost::asio::awaitable<RunResult> RunInline(RunArgs args, RunMode mode);
  static boost::asio::awaitable<RunResult> RunCoroutine(
      std::shared_ptr<Impl> impl, RunArgs args, RunMode mode,
      int first_attempt);
  void StartRun(RunArgs args, RunMode mode, int first_attempt,
                boost::asio::cancellation_slot slot,
                boost::asio::any_io_executor executor,
                absl::AnyInvocable<void(RunResult)> done);
  void StartStepFn(StepFn fn, boost::asio::cancellation_slot slot,
                   boost::asio::any_io_executor executor,
                   absl::AnyInvocable<void(absl::Status)> done);
  void StartClose(boost::asio::cancellation_slot slot,
                  boost::asio::any_io_executor executor,
                  absl::AnyInvocable<void(absl::Status)> done);

  std::shared_ptr<Impl> impl_;
  boost::asio::any_io_executor executor_;
};

// A MonitoredSession without recovery (max_recovery_attempts = 0), for the
// chief alone, as TensorFlow's SingularMonitoredSession.
template <typename CompletionToken>
auto CreateSingularMonitoredSession(Graph& graph, MonitoredSession::Hooks hooks,
                                    MonitoredSessionOptions options,
                                    CompletionToken&& token) {
  options.max_recovery_attempts = 0;
  return MonitoredSession::Create(
      graph, std::move(hooks), std::make_shared<ChiefSessionCreator>(),
      std::move(options), std::forward<CompletionToken>(token));
}

}  // namespace cosession

#endif  // COSESSION_ASYNC_MONITORED_SESSION_H_
