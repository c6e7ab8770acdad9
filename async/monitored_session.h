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
// one step is async/step_runner.h; the decisions where TensorFlow's Python
// semantics do not carry over are in docs/design.md ("Edge cases"). In
// short:
//   * Every operation (Create, Run, RunStepFn, StepContext::RunWithHooks,
//     Close) completes exactly once, through the handler's executor, with a
//     status or a value. OutOfRange (input exhausted) stops the session
//     cleanly. Run after ShouldStop() is FailedPrecondition and calls no
//     hook.
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
// Lifetime: the Graph given to Create and the MonitoredSession must outlive
// every operation started on it (destroy the session after Close completed,
// the graph after the session).
#ifndef COSESSION_ASYNC_MONITORED_SESSION_H_
#define COSESSION_ASYNC_MONITORED_SESSION_H_

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "cosession/async/completion.h"
#include "cosession/async/coordinator.h"
#include "cosession/async/detail/step_state.h"
#include "cosession/async/run_args.h"
#include "cosession/async/runtime.h"
#include "cosession/async/session.h"
#include "cosession/async/session_creator.h"
#include "cosession/async/session_run_hook.h"
#include "cosession/async/status_from_exception.h"
#include "cosession/async/step_runner.h"
#include "cosession/graph/graph.h"

namespace cosession {

struct MonitoredSessionOptions {
  HookConcurrency hook_concurrency = HookConcurrency::kConcurrent;
  // Hooks (each one of the session's hooks) that a Run in
  // RunMode::kWithoutSkippableHooks skips. Create fails with InvalidArgument
  // when one is not among the session's hooks.
  std::vector<std::shared_ptr<SessionRunHook>> skippable_hooks{};
  // Recovery attempts per Run (and per creation); unset = unbounded, as
  // TensorFlow. 0 = no recovery (SingularMonitoredSession).
  std::optional<int> max_recovery_attempts{};
  // Close() joins the coordinator with this grace period.
  std::chrono::nanoseconds stop_grace_period = std::chrono::seconds(120);
  // Where the step coroutine runs when the caller's completion handler has
  // no executor of its own (use_future, plain callbacks): a single-threaded
  // executor or a strand. Null = a strand of the runtime's pool.
  std::optional<boost::asio::any_io_executor> executor{};
  Runtime* runtime = nullptr;  // null = Runtime::Default()
  CoordinatorOptions coordinator{};
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
    // A step with the hooks, as Run but without recovery (RunStepFn retries
    // the whole function). Completion signature: void(RunResult). With
    // use_awaitable it runs inside the awaiting coroutine -- the function's
    // -- and so shares its cancellation; with another token it runs as an
    // operation of its own, cancelled through the token's slot and by a
    // stop.
    template <typename CompletionToken>
    auto RunWithHooks(RunArgs args, CompletionToken&& token) {
      return RunWithHooks(std::move(args), RunMode::kAllHooks,
                          std::forward<CompletionToken>(token));
    }
    template <typename CompletionToken>
    auto RunWithHooks(RunArgs args, RunMode mode, CompletionToken&& token) {
      return boost::asio::async_initiate<CompletionToken, void(RunResult)>(
          [this](auto handler, RunArgs args, RunMode mode) {
            auto slot = boost::asio::get_associated_cancellation_slot(handler);
            auto executor =
                boost::asio::get_associated_executor(handler, owner_.executor_);
            StartStep<RunResult>(
                owner_.impl_,
                RunWithHooksInline(owner_.impl_, std::move(args), mode), slot,
                executor,
                PostToHandler<RunResult>(
                    std::move(handler),
                    [](RunResult&& r) { return std::move(r); }),
                "RunWithHooks");
          },
          token, std::move(args), mode);
    }
    boost::asio::awaitable<RunResult> RunWithHooks(
        RunArgs args, const boost::asio::use_awaitable_t<>& /*token*/) {
      return RunWithHooksInline(owner_.impl_, std::move(args),
                                RunMode::kAllHooks);
    }
    boost::asio::awaitable<RunResult> RunWithHooks(
        RunArgs args, RunMode mode,
        const boost::asio::use_awaitable_t<>& /*token*/) {
      return RunWithHooksInline(owner_.impl_, std::move(args), mode);
    }
    // ShouldStop() becomes true once the function returns.
    void RequestStop() { stop_requested_ = true; }
    bool stop_requested() const { return stop_requested_; }

   private:
    friend class MonitoredSession;
    explicit StepContext(MonitoredSession& owner) : owner_(owner) {}
    MonitoredSession& owner_;
    bool stop_requested_ = false;
  };

  // Calls every hook's Begin, finalizes the graph, creates the session and
  // calls every hook's AfterCreateSession -- on the completion handler's
  // executor (for use_awaitable, the awaiting coroutine's), else on
  // options.executor or a strand of the runtime's pool, as every later
  // operation does: awaited from one event loop, every hook method runs on
  // it. The session's coordinator lives on a strand of that executor.
  // Completion signature:
  // void(CreateResult): the session, or the first error (a Begin's, the
  // creator's, an AfterCreateSession's). `graph` must outlive the session.
  // Cancelling Create (per-operation, any type) cancels the waits of the
  // creator and of the hooks' AfterCreateSession; Create then completes
  // with Cancelled (or the error the cancellation caused) and no session
  // exists -- End is not called, as for any session that did not start.
  template <typename CompletionToken>
  static auto Create(Graph& graph, Hooks hooks,
                     std::shared_ptr<SessionCreator> creator,
                     MonitoredSessionOptions options, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(CreateResult)>(
        [](auto handler, Graph* graph, Hooks hooks,
           std::shared_ptr<SessionCreator> creator,
           MonitoredSessionOptions options) {
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          auto executor = boost::asio::get_associated_executor(
              handler, DefaultExecutor(options));
          StartCreate(
              graph, std::move(hooks), std::move(creator), std::move(options),
              slot, std::move(executor),
              PostToHandler<CreateResult>(std::move(handler),
                                          [](CreateResult r) { return r; }));
        },
        token, &graph, std::move(hooks), std::move(creator),
        std::move(options));
  }

  MonitoredSession(const MonitoredSession&) = delete;
  MonitoredSession& operator=(const MonitoredSession&) = delete;
  ~MonitoredSession();

  // One step with the hooks. Completion signature: void(RunResult).
  template <typename CompletionToken>
  auto Run(RunArgs args, CompletionToken&& token) {
    return Run(std::move(args), RunMode::kAllHooks,
               std::forward<CompletionToken>(token));
  }
  // One step with the hooks `mode` selects.
  template <typename CompletionToken>
  auto Run(RunArgs args, RunMode mode, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(RunResult)>(
        [this](auto handler, RunArgs args, RunMode mode) {
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          auto executor =
              boost::asio::get_associated_executor(handler, executor_);
          StartStep<RunResult>(impl_,
                               RunCoroutine(impl_, std::move(args), mode, 0,
                                            /*planned=*/false),
                               slot, executor,
                               PostToHandler<RunResult>(
                                   std::move(handler),
                                   [](RunResult&& r) { return std::move(r); }),
                               "Run");
        },
        token, std::move(args), mode);
  }
  // The same for `co_await ms.Run(args, asio::use_awaitable)`, with the
  // same guarantees, faster: when no hook the step calls may suspend in it
  // (SessionRunHook::MaySuspendInNextStep) and no recovery is due, the step
  // runs inside the awaiting coroutine instead of a coroutine of its own
  // (which costs a co_spawn and a post, about 0.5 us here).
  boost::asio::awaitable<RunResult> Run(
      RunArgs args, const boost::asio::use_awaitable_t<>& /*token*/) {
    return RunInline(impl_, std::move(args), RunMode::kAllHooks);
  }
  boost::asio::awaitable<RunResult> Run(
      RunArgs args, RunMode mode,
      const boost::asio::use_awaitable_t<>& /*token*/) {
    return RunInline(impl_, std::move(args), mode);
  }

  // Runs `fn` as one step with recovery, as TensorFlow's run_step_fn: `fn`
  // is a callable StepContext& -> awaitable<R>, R absl::Status or
  // absl::StatusOr<T>; RunStepFn completes with what `fn` returned --
  // signature void(R) -- after retrying the whole `fn` on Aborted/
  // Unavailable (within max_recovery_attempts). Cancelled and stopped like
  // Run. An exception escaping `fn` becomes its status.
  template <typename StepFn, typename CompletionToken>
  auto RunStepFn(StepFn fn, CompletionToken&& token) {
    using Result =
        typename std::invoke_result_t<StepFn&, StepContext&>::value_type;
    static_assert(std::is_constructible_v<Result, absl::Status>,
                  "RunStepFn's function must return awaitable<absl::Status> "
                  "or awaitable<absl::StatusOr<T>>");
    return boost::asio::async_initiate<CompletionToken, void(Result)>(
        [this](auto handler, StepFn fn) {
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          auto executor =
              boost::asio::get_associated_executor(handler, executor_);
          StartStep<Result>(
              impl_, StepFnCoroutine<Result>(this, std::move(fn)), slot,
              executor,
              PostToHandler<Result>(std::move(handler),
                                    [](Result&& r) { return std::move(r); }),
              "RunStepFn");
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

  // Where Create completes for a handler without an executor of its own:
  // options.executor, else a strand of options.runtime's pool (a new strand
  // each call).
  static boost::asio::any_io_executor DefaultExecutor(
      const MonitoredSessionOptions& options);

 private:
  struct Impl;
  MonitoredSession(std::shared_ptr<Impl> impl,
                   boost::asio::any_io_executor executor);
  static void StartCreate(Graph* graph, Hooks hooks,
                          std::shared_ptr<SessionCreator> creator,
                          MonitoredSessionOptions options,
                          boost::asio::cancellation_slot slot,
                          boost::asio::any_io_executor executor,
                          absl::AnyInvocable<void(CreateResult)> done);

  // Runs `body` as one step on `executor`: registered so that a stop
  // cancels its waits, the caller's cancellation (`slot`) requests a clean
  // stop and cancels them too, `done` gets the result exactly once.
  template <typename Result>
  static void StartStep(const std::shared_ptr<Impl>& impl,
                        boost::asio::awaitable<Result> body,
                        boost::asio::cancellation_slot slot,
                        boost::asio::any_io_executor executor,
                        absl::AnyInvocable<void(Result)> done,
                        std::string what) {
    std::shared_ptr<detail::StepState> step = RegisterStep(impl, executor);
    detail::SpawnWithCancellation<Result>(
        step, std::move(body), slot, std::move(done), std::move(what),
        [impl] { StopForCancellation(*impl); },
        [impl, step] { UnregisterStep(*impl, step); });
  }
  static std::shared_ptr<detail::StepState> RegisterStep(
      const std::shared_ptr<Impl>& impl, boost::asio::any_io_executor executor);
  static void UnregisterStep(Impl& impl,
                             const std::shared_ptr<detail::StepState>& step);
  // The caller's cancellation, wherever it struck, is a clean stop. From
  // any thread.
  static void StopForCancellation(Impl& impl);

  // Run's step, with the recovery attempts counted from first_attempt.
  // `planned`: the step was planned (StepRunner::PlanStep) just before, by
  // RunInline finding a hook that may suspend; its first attempt keeps that
  // plan unless the session is re-created first, so that a hook is asked
  // once per step (SessionRunHook::MaySuspendInNextStep).
  static boost::asio::awaitable<RunResult> RunCoroutine(
      std::shared_ptr<Impl> impl, RunArgs args, RunMode mode, int first_attempt,
      bool planned);
  // RunCoroutine as an operation of its own, on the awaiting coroutine's
  // executor and cancelled through its slot: Run(args, token) for the
  // awaiting coroutine.
  static boost::asio::awaitable<RunResult> RunCoroutineAsOperation(
      std::shared_ptr<Impl> impl, RunArgs args, RunMode mode, int first_attempt,
      bool planned);
  static boost::asio::awaitable<RunResult> RunInline(std::shared_ptr<Impl> impl,
                                                     RunArgs args,
                                                     RunMode mode);
  static boost::asio::awaitable<RunResult> RunWithHooksInline(
      std::shared_ptr<Impl> impl, RunArgs args, RunMode mode);

  // RunStepFn's step. The parts that need Impl are the three calls below.
  template <typename Result, typename StepFn>
  static boost::asio::awaitable<Result> StepFnCoroutine(MonitoredSession* self,
                                                        StepFn fn) {
    // Errors are statuses here: a cancelled wait must not skip the
    // bookkeeping below (docs/async_pitfalls.md, 2).
    co_await boost::asio::this_coro::throw_if_cancelled(false);
    if (absl::Status s = CheckCanRunStepFn(*self->impl_); !s.ok()) co_return s;
    for (int attempt = 0;; ++attempt) {
      if (absl::Status s = co_await RecoverIfNeeded(self->impl_); !s.ok()) {
        co_return s;
      }
      StepContext context(*self);
      Result result = absl::UnknownError("RunStepFn's function did not run");
      try {
        result = co_await fn(context);
      } catch (...) {
        result = StatusFromException(std::current_exception(),
                                     "RunStepFn's function");
      }
      if (!FinishStepFnAttempt(*self->impl_, StatusOf(result),
                               context.stop_requested_, attempt)) {
        co_return result;
      }
    }
  }
  static const absl::Status& StatusOf(const absl::Status& s) { return s; }
  template <typename T>
  static absl::Status StatusOf(const absl::StatusOr<T>& r) {
    return r.status();
  }
  static absl::Status CheckCanRunStepFn(const Impl& impl);
  // Re-creates the session when a recovery is due.
  static boost::asio::awaitable<absl::Status> RecoverIfNeeded(
      std::shared_ptr<Impl> impl);
  // After an attempt of RunStepFn's function that returned `status`: true
  // to retry it.
  static bool FinishStepFnAttempt(Impl& impl, const absl::Status& status,
                                  bool stop_requested, int attempt);

  void StartClose(boost::asio::cancellation_slot slot,
                  boost::asio::any_io_executor executor,
                  absl::AnyInvocable<void(absl::Status)> done);

  std::shared_ptr<Impl> impl_;
  boost::asio::any_io_executor executor_;
};

// A MonitoredSession without recovery (max_recovery_attempts = 0), for the
// chief alone, as TensorFlow's SingularMonitoredSession: with a
// ChiefSessionCreator (default: initialise), or the creator given -- e.g.
// one with a checkpoint_dir to restore from.
template <typename CompletionToken>
auto CreateSingularMonitoredSession(Graph& graph, MonitoredSession::Hooks hooks,
                                    std::shared_ptr<SessionCreator> creator,
                                    MonitoredSessionOptions options,
                                    CompletionToken&& token) {
  options.max_recovery_attempts = 0;
  return MonitoredSession::Create(graph, std::move(hooks), std::move(creator),
                                  std::move(options),
                                  std::forward<CompletionToken>(token));
}
template <typename CompletionToken>
auto CreateSingularMonitoredSession(Graph& graph, MonitoredSession::Hooks hooks,
                                    MonitoredSessionOptions options,
                                    CompletionToken&& token) {
  return CreateSingularMonitoredSession(
      graph, std::move(hooks), std::make_shared<ChiefSessionCreator>(),
      std::move(options), std::forward<CompletionToken>(token));
}

}  // namespace cosession

#endif  // COSESSION_ASYNC_MONITORED_SESSION_H_
