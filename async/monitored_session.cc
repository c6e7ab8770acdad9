#include "cosession/async/monitored_session.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <mutex>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "cosession/async/detail/cancellation.h"

namespace cosession {
namespace asio = boost::asio;

namespace {

bool IsRecoverable(const absl::Status& s) {
  return absl::IsAborted(s) || absl::IsUnavailable(s);
}

using detail::IsCancelled;

}  // namespace

// The session's state, shared with the operations in flight. The step path
// (Create, the one step in flight, Close: never two at once) owns the
// fields marked "step path"; the rest is read from any thread.
struct MonitoredSession::Impl {
  Impl(Graph& graph, Hooks all, Hooks unskippable,
       std::shared_ptr<SessionCreator> creator, MonitoredSessionOptions opts)
      : graph(graph),
        hooks(all),
        runner(graph, std::move(all), std::move(unskippable),
               opts.hook_concurrency),
        creator(std::move(creator)),
        options(std::move(opts)),
        runtime(options.runtime ? *options.runtime : Runtime::Default()) {}

  Graph& graph;
  const Hooks hooks;
  StepRunner runner;
  const std::shared_ptr<SessionCreator> creator;
  const MonitoredSessionOptions options;
  Runtime& runtime;

  // Step path.
  std::unique_ptr<Session> session;
  bool needs_recreate = false;
  bool last_run_failed = false;
  bool closed = false;
  int recoveries = 0;
  uint64_t stop_callback = 0;
  // The inline path's step state, reused step after step while the caller's
  // executor stays the same (it stays in `steps`).
  std::shared_ptr<InlineStep> inline_step;

  mutable std::mutex mu;
  // Replaced on recovery, by the step path only, under mu: the step path
  // reads it without mu (step_coord()), everyone else with it (coord()).
  std::unique_ptr<Coordinator> coordinator ABSL_GUARDED_BY(mu);
  // Set once, under mu, together with stop_reason; read without mu.
  std::atomic<bool> stopped{false};
  std::string stop_reason ABSL_GUARDED_BY(mu);
  // The operations in flight, which a stop cancels.
  absl::flat_hash_set<std::shared_ptr<detail::StepState>> steps
      ABSL_GUARDED_BY(mu);

  Coordinator& coord() const {
    std::lock_guard lock(mu);
    return *coordinator;
  }
  Coordinator& step_coord() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return *coordinator;
  }

  void MarkStopped(std::string reason) {
    std::lock_guard lock(mu);
    if (!stopped.load(std::memory_order_relaxed)) {
      stop_reason = std::move(reason);
      stopped.store(true, std::memory_order_release);
    }
  }

  // Requests a clean stop for `reason`, which becomes stop_reason().
  void StopCleanly(std::string reason) {
    MarkStopped(reason);
    coord().RequestStop(absl::OkStatus(), std::move(reason)).IgnoreError();
  }

  // True when the coordinator holds Aborted/Unavailable: the next step
  // recovers first.
  static bool HoldsRecoverableError(const Coordinator& c) {
    return c.ShouldStop() && IsRecoverable(c.status());
  }

  bool ShouldStop() const {
    if (stopped.load(std::memory_order_acquire)) return true;
    std::lock_guard lock(mu);
    return coordinator->ShouldStop() && !IsRecoverable(coordinator->status());
  }
  // ShouldStop from the step path: no lock while nothing stopped.
  bool StepShouldStop() const {
    if (stopped.load(std::memory_order_acquire)) return true;
    const Coordinator& c = step_coord();
    return c.ShouldStop() && !IsRecoverable(c.status());
  }

  std::string StopReason() const {
    std::lock_guard lock(mu);
    if (!stop_reason.empty()) return stop_reason;
    return coordinator->stop_reason();
  }

  // A new coordinator whose stop cancels the operations in flight.
  void NewCoordinator(asio::any_io_executor executor,
                      const std::shared_ptr<Impl>& self) {
    auto next = std::make_unique<Coordinator>(executor, options.coordinator);
    std::weak_ptr<Impl> weak = self;
    stop_callback = next->AddStopCallback([weak] {
      auto impl = weak.lock();
      if (!impl) return;
      std::lock_guard lock(impl->mu);
      for (const auto& step : impl->steps) {
        detail::StepState::CancelFromAnywhere(step);
      }
    });
    std::unique_ptr<Coordinator> old;
    {
      std::lock_guard lock(mu);
      old = std::exchange(coordinator, std::move(next));
    }
  }

  asio::awaitable<absl::Status> CallAfterCreateSession() {
    // Hooks are awaited with Asio's default throw_if_cancelled (see
    // async/step_runner.cc).
    const bool awaiter_throws = co_await asio::this_coro::throw_if_cancelled();
    for (const auto& hook : hooks) {
      absl::Status s;
      try {
        co_await asio::this_coro::throw_if_cancelled(true);
        s = co_await hook->AfterCreateSession(*session, coord());
      } catch (...) {
        s = StatusFromException(std::current_exception(), "AfterCreateSession");
      }
      co_await asio::this_coro::throw_if_cancelled(awaiter_throws);
      if (!s.ok()) co_return s;
    }
    co_return absl::OkStatus();
  }

  bool HasRecoveryBudget(int used) const {
    return !options.max_recovery_attempts.has_value() ||
           used < *options.max_recovery_attempts;
  }

  // Creates (or, `recovery`, re-creates) the session and calls
  // AfterCreateSession, retrying recoverable errors within the budget.
  asio::awaitable<absl::Status> CreateSessionWithRetries(
      std::shared_ptr<Impl> self, bool recovery) {
    for (int attempts = 0;; ++attempts) {
      if (recovery) {
        // Close the broken session: stop its coordinator (no End). Its stop
        // must not cancel this very step, which goes on with the new one.
        coord().RemoveStopCallback(stop_callback);
        coord()
            .RequestStop(absl::AbortedError("session is being re-created"))
            .IgnoreError();
        (void)co_await coord().Join(options.stop_grace_period,
                                    asio::use_awaitable);
        session.reset();
        NewCoordinator(co_await asio::this_coro::executor, self);
        ++recoveries;
        // The old coordinator's stop cancelled this step's waits; the new
        // session starts with a clean slate, unless the caller itself
        // cancelled (then the session has stopped, and the caller sees
        // Cancelled below).
        if (stopped.load(std::memory_order_acquire)) {
          co_return absl::CancelledError(
              absl::StrCat("Session re-creation stopped: ", StopReason()));
        }
        co_await asio::this_coro::reset_cancellation_state();
      }
      absl::Status s;
      try {
        auto created = co_await creator->CreateSession(graph, runtime);
        s = created.status();
        if (created.ok()) session = std::move(created).value();
      } catch (...) {
        s = StatusFromException(std::current_exception(), "CreateSession");
      }
      if (s.ok()) s = co_await CallAfterCreateSession();
      if (s.ok()) {
        needs_recreate = false;
        co_return s;
      }
      if (!IsRecoverable(s) || !HasRecoveryBudget(attempts)) co_return s;
      recovery = true;
    }
  }

  asio::awaitable<absl::Status> RecoverIfNeeded(std::shared_ptr<Impl> self) {
    if (!needs_recreate) co_return absl::OkStatus();
    co_return co_await CreateSessionWithRetries(std::move(self), true);
  }

  // ---- step bookkeeping

  absl::Status CheckCanRun() const {
    if (closed) {
      return absl::FailedPreconditionError("Run called after Close()");
    }
    if (StepShouldStop()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Run called after ShouldStop() became true (", StopReason(), ")"));
    }
    return absl::OkStatus();
  }

  // Whether a Run can go through RunInline: no hook it calls may suspend
  // in this step, and no recovery is due. `planned` tells whether the step
  // was planned (the hooks asked) to find out.
  bool CanRunInline(RunMode mode, bool& planned) {
    planned = false;
    if (needs_recreate || HoldsRecoverableError(step_coord())) return false;
    planned = true;
    return runner.PlanStep(mode) == 0;
  }

  // The inline path's step state for a step on `executor`, registered in
  // `steps` so that a stop cancels the step's graph run.
  InlineStep* InlineStepOn(const asio::any_io_executor& executor,
                           const std::shared_ptr<Impl>& self) {
    if (!inline_step || inline_step->executor != executor) {
      auto step = std::make_shared<InlineStep>(executor);
      std::weak_ptr<Impl> weak = self;
      step->on_caller_cancel = [weak] {
        if (auto impl = weak.lock()) StopForCancellation(*impl);
      };
      std::lock_guard lock(mu);
      if (inline_step) steps.erase(inline_step);
      steps.insert(step);
      inline_step = std::move(step);
    }
    inline_step->finished = false;
    return inline_step.get();
  }

  // The status a step reports when it was cut short by a stop: the stop's
  // cause if it was an error.
  absl::Status CauseOf(const absl::Status& s) const {
    if (!absl::IsCancelled(s)) return s;
    absl::Status held = coord().status();
    return held.ok() ? s : held;
  }

  // Tells the hooks about a step's final error: not for recoverable errors
  // being recovered, a clean stop (OutOfRange) or a cancellation.
  void NotifyError(const absl::Status& s) {
    if (s.ok() || absl::IsCancelled(s) || absl::IsOutOfRange(s)) return;
    for (const auto& hook : hooks) hook->OnError(s);
  }

  // What a step's outcome does to the session, once recovery (if any) gave
  // up: a hook's stop request, input exhausted, the error bookkeeping.
  RunResult FinishStep(RunResult result, std::string hook_stop_reason) {
    if (!hook_stop_reason.empty()) StopCleanly(std::move(hook_stop_reason));
    if (result.ok()) {
      last_run_failed = false;
      return result;
    }
    const absl::Status& s = result.status();
    if (absl::IsOutOfRange(s)) {
      MarkStopped("input exhausted");
      coord().RequestStop(s, "input exhausted").IgnoreError();
      last_run_failed = false;
    } else if (absl::IsCancelled(s)) {
      last_run_failed = false;  // a clean stop: End still runs
    } else {
      last_run_failed = true;
    }
    NotifyError(s);
    return result;
  }
};

// ---------------------------------------------------------------- creation

MonitoredSession::MonitoredSession(std::shared_ptr<Impl> impl,
                                   asio::any_io_executor executor)
    : impl_(std::move(impl)), executor_(std::move(executor)) {}

MonitoredSession::~MonitoredSession() {
  impl_->coord().RequestStop().IgnoreError();
}

asio::any_io_executor MonitoredSession::DefaultExecutor(
    const MonitoredSessionOptions& options) {
  if (options.executor.has_value()) return *options.executor;
  Runtime& runtime = options.runtime ? *options.runtime : Runtime::Default();
  // A strand: an operation's cancellation signal is emitted on its
  // executor, which must not run two handlers at once.
  return asio::make_strand(runtime.executor());
}

namespace {

// Every hook's Begin, the creator's Prepare, the graph finalized.
absl::Status PrepareGraph(Graph& graph, const MonitoredSession::Hooks& hooks,
                          SessionCreator& creator) {
  for (const auto& hook : hooks) {
    absl::Status s;
    try {
      s = hook->Begin(graph);
    } catch (...) {
      s = StatusFromException(std::current_exception(), "Begin");
    }
    if (!s.ok()) return s;
  }
  try {
    creator.Prepare(graph);
  } catch (...) {
    return StatusFromException(std::current_exception(),
                               "SessionCreator::Prepare");
  }
  graph.Finalize();
  return absl::OkStatus();
}

// The hooks a Run in RunMode::kWithoutSkippableHooks calls, or
// InvalidArgument naming a skippable hook that is not one of `hooks`.
absl::StatusOr<MonitoredSession::Hooks> UnskippableHooks(
    const MonitoredSession::Hooks& hooks,
    const MonitoredSession::Hooks& skippable) {
  for (size_t i = 0; i < skippable.size(); ++i) {
    if (std::find(hooks.begin(), hooks.end(), skippable[i]) == hooks.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("MonitoredSessionOptions::skippable_hooks[", i,
                       "] is not one of the session's hooks"));
    }
  }
  MonitoredSession::Hooks unskippable;
  for (const auto& hook : hooks) {
    if (std::find(skippable.begin(), skippable.end(), hook) ==
        skippable.end()) {
      unskippable.push_back(hook);
    }
  }
  return unskippable;
}

}  // namespace

void MonitoredSession::StartCreate(
    Graph* graph, Hooks hooks, std::shared_ptr<SessionCreator> creator,
    MonitoredSessionOptions options, asio::cancellation_slot slot,
    asio::any_io_executor executor,
    absl::AnyInvocable<void(CreateResult)> done) {
  auto body =
      [](Graph* graph, Hooks hooks, std::shared_ptr<SessionCreator> creator,
         MonitoredSessionOptions options) -> asio::awaitable<CreateResult> {
    co_await asio::this_coro::throw_if_cancelled(false);
    if (!creator) creator = std::make_shared<ChiefSessionCreator>();
    absl::StatusOr<Hooks> unskippable =
        UnskippableHooks(hooks, options.skippable_hooks);
    if (!unskippable.ok()) co_return unskippable.status();
    if (absl::Status s = PrepareGraph(*graph, hooks, *creator); !s.ok()) {
      co_return s;
    }
    auto impl = std::make_shared<Impl>(*graph, std::move(hooks),
                                       *std::move(unskippable),
                                       std::move(creator), std::move(options));
    impl->NewCoordinator(co_await asio::this_coro::executor, impl);
    absl::Status s = co_await impl->CreateSessionWithRetries(impl, false);
    if (!s.ok()) co_return s;
    // Later operations whose handlers have no executor of their own run
    // where options.executor (or the runtime) says.
    auto default_executor = DefaultExecutor(impl->options);
    co_return std::unique_ptr<MonitoredSession>(
        new MonitoredSession(std::move(impl), std::move(default_executor)));
  };
  detail::SpawnWithCancellation<CreateResult>(
      std::make_shared<detail::StepState>(std::move(executor)),
      body(graph, std::move(hooks), std::move(creator), std::move(options)),
      slot, std::move(done), "Create", nullptr, nullptr);
}

// ---------------------------------------------------------------- queries

bool MonitoredSession::ShouldStop() const { return impl_->ShouldStop(); }

std::string MonitoredSession::stop_reason() const {
  return impl_->StopReason();
}

Coordinator& MonitoredSession::coordinator() { return impl_->coord(); }
Session& MonitoredSession::raw_session() { return *impl_->session; }
int MonitoredSession::recoveries() const { return impl_->recoveries; }

// ---------------------------------------------------------------- steps

std::shared_ptr<detail::StepState> MonitoredSession::RegisterStep(
    const std::shared_ptr<Impl>& impl, asio::any_io_executor executor) {
  auto step = std::make_shared<detail::StepState>(std::move(executor));
  std::lock_guard lock(impl->mu);
  impl->steps.insert(step);
  return step;
}

void MonitoredSession::UnregisterStep(
    Impl& impl, const std::shared_ptr<detail::StepState>& step) {
  std::lock_guard lock(impl.mu);
  impl.steps.erase(step);
}

void MonitoredSession::StopForCancellation(Impl& impl) {
  impl.StopCleanly("cancelled");
}

asio::awaitable<MonitoredSession::RunResult> MonitoredSession::RunCoroutine(
    std::shared_ptr<Impl> impl, RunArgs args, RunMode mode, int first_attempt,
    bool planned) {
  // Errors are statuses here: a cancelled wait must not skip the
  // bookkeeping below (docs/async_pitfalls.md, 2).
  co_await asio::this_coro::throw_if_cancelled(false);
  if (absl::Status s = impl->CheckCanRun(); !s.ok()) co_return s;
  if (IsRecoverable(impl->coord().status())) impl->needs_recreate = true;
  for (int attempts = first_attempt;; ++attempts) {
    // A session re-created (hooks told AfterCreateSession) asks again.
    if (impl->needs_recreate) planned = false;
    if (absl::Status s = co_await impl->RecoverIfNeeded(impl); !s.ok()) {
      co_return s;
    }
    std::string stop_reason;
    RunResult result = co_await impl->runner.Run(
        *impl->session, args, mode,
        planned ? StepRunner::Planned::kYes : StepRunner::Planned::kNo,
        /*inline_step=*/nullptr, &stop_reason);
    planned = false;  // a retry is a step of its own
    if (!result.ok()) {
      absl::Status s = impl->CauseOf(result.status());
      if (IsRecoverable(s) && impl->HasRecoveryBudget(attempts)) {
        impl->needs_recreate = true;
        continue;
      }
      result = std::move(s);
    }
    co_return impl->FinishStep(std::move(result), std::move(stop_reason));
  }
}

asio::awaitable<MonitoredSession::RunResult>
MonitoredSession::RunCoroutineAsOperation(std::shared_ptr<Impl> impl,
                                          RunArgs args, RunMode mode,
                                          int first_attempt, bool planned) {
  // Named, not a temporary inside the co_await (docs/async_pitfalls.md, 4).
  auto initiation = [impl](auto handler, RunArgs args, RunMode mode,
                           int first_attempt, bool planned) {
    auto slot = asio::get_associated_cancellation_slot(handler);
    auto executor = asio::get_associated_executor(handler);
    StartStep<RunResult>(
        impl, RunCoroutine(impl, std::move(args), mode, first_attempt, planned),
        slot, executor,
        PostToHandler<RunResult>(std::move(handler),
                                 [](RunResult r) { return r; }),
        "Run");
  };
  co_return co_await asio::async_initiate<const asio::use_awaitable_t<>&,
                                          void(RunResult)>(
      initiation, asio::use_awaitable, std::move(args), mode, first_attempt,
      planned);
}

asio::awaitable<MonitoredSession::RunResult> MonitoredSession::RunInline(
    std::shared_ptr<Impl> impl, RunArgs args, RunMode mode) {
  bool planned;
  if (!impl->CanRunInline(mode, planned)) {
    co_return co_await RunCoroutineAsOperation(impl, std::move(args), mode, 0,
                                               planned);
  }
  if (absl::Status s = impl->CheckCanRun(); !s.ok()) co_return s;
  InlineStep* step =
      impl->InlineStepOn(co_await asio::this_coro::executor, impl);
  std::string stop_reason;
  RunResult result =
      co_await impl->runner.Run(*impl->session, args, mode,
                                StepRunner::Planned::kYes, step, &stop_reason);
  step->finished = true;
  step->signal.slot().clear();  // releases the finished run
  if (IsCancelled(co_await asio::this_coro::cancellation_state)) {
    // The caller's cancellation is a stop request, wherever it struck.
    StopForCancellation(*impl);
  }
  if (!result.ok()) {
    absl::Status s = impl->CauseOf(result.status());
    if (IsRecoverable(s) && impl->HasRecoveryBudget(0)) {
      // Recovery awaits hooks that may suspend: the spawned path does it.
      impl->needs_recreate = true;
      co_return co_await RunCoroutineAsOperation(impl, std::move(args), mode, 1,
                                                 /*planned=*/false);
    }
    result = std::move(s);
  }
  co_return impl->FinishStep(std::move(result), std::move(stop_reason));
}

asio::awaitable<MonitoredSession::RunResult>
MonitoredSession::RunWithHooksInline(std::shared_ptr<Impl> impl, RunArgs args,
                                     RunMode mode) {
  std::string stop_reason;
  RunResult result = co_await impl->runner.Run(
      *impl->session, args, mode, StepRunner::Planned::kNo,
      /*inline_step=*/nullptr, &stop_reason);
  if (!result.ok() && IsRecoverable(result.status())) {
    impl->needs_recreate = true;
  }
  if (!stop_reason.empty()) impl->StopCleanly(std::move(stop_reason));
  co_return result;
}

// ---------------------------------------------------------------- RunStepFn

absl::Status MonitoredSession::CheckCanRunStepFn(const Impl& impl) {
  if (impl.closed || impl.ShouldStop()) {
    return absl::FailedPreconditionError(
        "RunStepFn called after ShouldStop() became true or after Close()");
  }
  return absl::OkStatus();
}

asio::awaitable<absl::Status> MonitoredSession::RecoverIfNeeded(
    std::shared_ptr<Impl> impl) {
  co_return co_await impl->RecoverIfNeeded(impl);
}

bool MonitoredSession::FinishStepFnAttempt(Impl& impl,
                                           const absl::Status& status,
                                           bool stop_requested, int attempt) {
  if (stop_requested) impl.MarkStopped("step function requested stop");
  // As for Run: a function cut short by a stop failed for the stop's cause.
  if (IsRecoverable(impl.CauseOf(status)) && impl.HasRecoveryBudget(attempt)) {
    impl.needs_recreate = true;
    return true;
  }
  // A recoverable error fn swallowed still forces a new session.
  if (IsRecoverable(impl.coord().status())) impl.needs_recreate = true;
  return false;
}

Session& MonitoredSession::StepContext::session() const {
  return *owner_.impl_->session;
}

// ---------------------------------------------------------------- Close

void MonitoredSession::StartClose(asio::cancellation_slot slot,
                                  asio::any_io_executor executor,
                                  absl::AnyInvocable<void(absl::Status)> done) {
  auto body = [](std::shared_ptr<Impl> impl) -> asio::awaitable<absl::Status> {
    // Errors are statuses: a cancelled End must not skip the rest.
    co_await asio::this_coro::throw_if_cancelled(false);
    if (impl->closed) {
      co_return absl::FailedPreconditionError(
          "Close called on a MonitoredSession that is already closed");
    }
    impl->closed = true;
    impl->coord().RequestStop(absl::OkStatus(), "closed").IgnoreError();
    const absl::Status cancelled_in_end =
        absl::CancelledError("Close was cancelled while the hooks' End ran");
    absl::Status end_status;
    if (!impl->last_run_failed && !impl->needs_recreate && impl->session) {
      for (const auto& hook : impl->hooks) {
        // A cancellation that arrived before this End started waiting
        // would not reach its wait: check first.
        if (IsCancelled(co_await asio::this_coro::cancellation_state)) {
          co_return cancelled_in_end;
        }
        absl::Status s;
        try {
          // Asio's default rule for the hook (see async/step_runner.cc).
          co_await asio::this_coro::throw_if_cancelled(true);
          s = co_await hook->End(*impl->session);
        } catch (...) {
          s = StatusFromException(std::current_exception(), "End");
        }
        co_await asio::this_coro::throw_if_cancelled(false);
        if (!s.ok() && end_status.ok()) end_status = s;
      }
    }
    if (IsCancelled(co_await asio::this_coro::cancellation_state)) {
      co_return cancelled_in_end;
    }
    absl::Status joined = co_await impl->coord().Join(
        impl->options.stop_grace_period, asio::use_awaitable);
    if (IsCancelled(co_await asio::this_coro::cancellation_state)) {
      co_return absl::CancelledError(
          "Close was cancelled while joining the coordinator");
    }
    co_return joined.ok() ? end_status : joined;
  };
  // Close has a cancellation signal of its own; unlike a step, it is not
  // registered, so the stop it requests itself does not cancel it.
  detail::SpawnWithCancellation<absl::Status>(
      std::make_shared<detail::StepState>(std::move(executor)), body(impl_),
      slot, std::move(done), "Close", nullptr, nullptr);
}

}  // namespace cosession
