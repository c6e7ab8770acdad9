#include "async/monitored_session.h"

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/experimental/channel.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>
#include <exception>
#include <mutex>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "async/detail/cancellation.h"
#include "graph/ops.h"
#include "graph/status.h"

namespace cosession {
namespace asio = boost::asio;

namespace {

bool IsRecoverable(const absl::Status& s) {
  return absl::IsAborted(s) || absl::IsUnavailable(s);
}

// Turns an exception escaping a hook into a status naming the hook's method.
absl::Status FromException(std::exception_ptr e, absl::string_view where) {
  try {
    std::rethrow_exception(e);
  } catch (const StatusError& error) {
    return error.status();
  } catch (const boost::system::system_error& error) {
    // A wait cancelled by a stop or by the caller.
    if (detail::IsCancellation(error.code())) {
      return absl::CancelledError(absl::StrCat(where, " was cancelled"));
    }
    return absl::InternalError(absl::StrCat(where, " threw: ", error.what()));
  } catch (const std::exception& error) {
    return absl::InternalError(absl::StrCat(where, " threw: ", error.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat(where, " threw"));
  }
}

// BeforeRun whose result lands in *out: spawned by AwaitTogether, so its
// parameters are by value (ASYNC_NOTES pitfall 5); *context and *out live in
// the step's frame, which waits for it.
asio::awaitable<absl::Status> BeforeRunInto(
    std::shared_ptr<SessionRunHook> hook, SessionRunContext* context,
    RunArgs* out) {
  absl::StatusOr<SessionRunArgs> r = co_await hook->BeforeRun(*context);
  if (!r.ok()) co_return r.status();
  *out = *std::move(r);
  co_return absl::OkStatus();
}

// Starts make_call(i) for i in [0, n), in order, each as a coroutine of its
// own on this executor, and waits for all of them. The first real failure
// (or a cancellation of the step) cancels the others; the result is that
// failure, not the Cancelled of the calls it cancelled. Each call's state
// lives in this frame, which always waits for every call to finish.
template <typename MakeCall>
asio::awaitable<absl::Status> AwaitTogether(size_t n, MakeCall make_call,
                                            absl::string_view phase) {
  auto executor = co_await asio::this_coro::executor;
  asio::experimental::channel<void(boost::system::error_code, size_t)> finished(
      executor, n);
  std::unique_ptr<asio::cancellation_signal[]> signals(
      new asio::cancellation_signal[n]);
  std::vector<absl::Status> statuses(n);
  std::vector<bool> done(n, false);
  for (size_t i = 0; i < n; ++i) {
    asio::co_spawn(
        executor, make_call(i),
        asio::bind_cancellation_slot(
            signals[i].slot(), [&finished, &statuses, i, phase](
                                   std::exception_ptr e, absl::Status s) {
              statuses[i] = e ? FromException(e, phase) : std::move(s);
              finished.try_send(boost::system::error_code(), i);
            }));
  }
  bool cancelled_all = false;
  auto cancel_all = [&] {
    if (cancelled_all) return;
    cancelled_all = true;
    for (size_t i = 0; i < n; ++i) {
      if (!done[i]) signals[i].emit(asio::cancellation_type::terminal);
    }
  };
  absl::Status first;
  for (size_t got = 0; got < n;) {
    auto [ec, i] =
        co_await finished.async_receive(asio::as_tuple(asio::use_awaitable));
    if (ec) {  // the step itself was cancelled: cancel the calls, keep waiting
      cancel_all();
      continue;
    }
    ++got;
    done[i] = true;
    const absl::Status& s = statuses[i];
    if (s.ok()) continue;
    if (first.ok() || (absl::IsCancelled(first) && !absl::IsCancelled(s))) {
      first = s;
    }
    cancel_all();
  }
  co_return first;
}

}  // namespace

// ---------------------------------------------------------------- hooks

absl::Status SessionRunHook::Begin(Graph&) { return absl::OkStatus(); }
asio::awaitable<absl::Status> SessionRunHook::AfterCreateSession(Session&,
                                                                 Coordinator&) {
  co_return absl::OkStatus();
}
asio::awaitable<absl::StatusOr<SessionRunArgs>> SessionRunHook::BeforeRun(
    SessionRunContext&) {
  co_return SessionRunArgs{};
}
asio::awaitable<absl::Status> SessionRunHook::AfterRun(
    SessionRunContext&, const SessionRunValues&) {
  co_return absl::OkStatus();
}
asio::awaitable<absl::Status> SessionRunHook::End(Session&) {
  co_return absl::OkStatus();
}
void SessionRunHook::OnError(const absl::Status&) {}

// ---------------------------------------------------------------- creators

void Scaffold::Finalize(Graph& graph) {
  if (init_op.valid()) return;
  // One default init op per graph, found again by later sessions once the
  // graph is finalized.
  constexpr absl::string_view kInitOpCollection = "scaffold_init_op";
  if (auto existing = graph.GetCollection(kInitOpCollection);
      !existing.empty()) {
    init_op = Operation(existing.front());
  } else if (!graph.finalized()) {
    init_op = GlobalVariablesInitializer(graph);
    graph.AddToCollection(kInitOpCollection, init_op.node());
  }
}

asio::awaitable<absl::StatusOr<std::unique_ptr<Session>>>
ChiefSessionCreator::CreateSession(const Graph& graph, Runtime& runtime) {
  auto session = std::make_unique<Session>(graph, runtime);
  bool restored = false;
  if (scaffold_.restore) {
    absl::StatusOr<bool> r = co_await scaffold_.restore(*session);
    if (!r.ok()) co_return r.status();
    restored = *r;
  }
  for (const Operation& op :
       {restored ? Operation() : scaffold_.init_op, scaffold_.local_init_op}) {
    if (!op.valid()) continue;
    RunArgs args{.targets = {op}};
    auto ran = co_await session->Run(std::move(args), asio::use_awaitable);
    if (!ran.ok()) co_return ran.status();
  }
  co_return session;
}

// ---------------------------------------------------------------- state

// One Run in flight: its cancellation signal lives on `executor`.
struct StepState {
  explicit StepState(asio::any_io_executor ex) : executor(std::move(ex)) {}
  asio::any_io_executor executor;
  asio::cancellation_signal signal;
  bool finished = false;  // touched only on `executor`

  // From any thread: cancel the step's waits, on its own executor.
  static void CancelFromAnywhere(const std::shared_ptr<StepState>& step) {
    asio::post(step->executor, [step] {
      if (!step->finished) step->signal.emit(asio::cancellation_type::terminal);
    });
  }
};

struct MonitoredSession::Impl {
  Graph* graph = nullptr;
  Hooks hooks;
  std::shared_ptr<SessionCreator> creator;
  MonitoredSessionOptions options;
  Runtime* runtime = nullptr;

  // Touched only by the (single) step in flight.
  std::unique_ptr<Session> session;
  bool needs_recreate = false;
  bool last_run_failed = false;
  bool closed = false;
  int recoveries = 0;

  mutable std::mutex mu;
  std::unique_ptr<Coordinator> coordinator;  // replaced on recovery, under mu
  uint64_t stop_callback = 0;
  bool stopped = false;                                   // under mu
  std::string stop_reason;                                // under mu
  absl::flat_hash_set<std::shared_ptr<StepState>> steps;  // under mu

  Coordinator& coord() const {
    std::lock_guard lock(mu);
    return *coordinator;
  }

  void MarkStopped(std::string reason) {
    std::lock_guard lock(mu);
    if (!stopped) {
      stopped = true;
      stop_reason = std::move(reason);
    }
  }

  bool ShouldStop() const {
    std::lock_guard lock(mu);
    if (stopped) return true;
    return coordinator->ShouldStop() && !IsRecoverable(coordinator->status());
  }

  // A new coordinator whose stop cancels the steps in flight.
  void NewCoordinator(asio::any_io_executor executor,
                      const std::shared_ptr<Impl>& self) {
    auto next = std::make_unique<Coordinator>(executor, options.coordinator);
    std::weak_ptr<Impl> weak = self;
    stop_callback = next->AddStopCallback([weak] {
      auto impl = weak.lock();
      if (!impl) return;
      std::lock_guard lock(impl->mu);
      for (const auto& step : impl->steps) StepState::CancelFromAnywhere(step);
    });
    std::unique_ptr<Coordinator> old;
    {
      std::lock_guard lock(mu);
      old = std::exchange(coordinator, std::move(next));
    }
  }

  asio::awaitable<absl::Status> CallAfterCreateSession() {
    for (const auto& hook : hooks) {
      absl::Status s;
      try {
        s = co_await hook->AfterCreateSession(*session, coord());
      } catch (...) {
        s = FromException(std::current_exception(), "AfterCreateSession");
      }
      if (!s.ok()) co_return s;
    }
    co_return absl::OkStatus();
  }

  // Creates (or re-creates) the session and calls AfterCreateSession,
  // retrying recoverable errors within the recovery budget.
  asio::awaitable<absl::Status> CreateSessionWithRetries(
      std::shared_ptr<Impl> self, bool recovery) {
    int attempts = 0;
    while (true) {
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
      }
      absl::Status s;
      try {
        auto created = co_await creator->CreateSession(*graph, *runtime);
        s = created.status();
        if (created.ok()) session = std::move(created).value();
      } catch (...) {
        s = FromException(std::current_exception(), "CreateSession");
      }
      if (s.ok()) s = co_await CallAfterCreateSession();
      if (s.ok()) {
        needs_recreate = false;
        co_return s;
      }
      if (!IsRecoverable(s) || !HasRecoveryBudget(attempts++)) co_return s;
      recovery = true;
    }
  }

  bool HasRecoveryBudget(int used) const {
    return !options.max_recovery_attempts.has_value() ||
           used < *options.max_recovery_attempts;
  }

  // ---- one step with hooks, no recovery

  struct Merged {
    RunArgs args;
    // fetch ranges: [0, caller_fetches) are the caller's, then per hook.
    size_t caller_fetches = 0;
    std::vector<std::pair<size_t, size_t>> hook_ranges;
  };

  absl::StatusOr<Merged> Merge(const RunArgs& caller,
                               std::vector<RunArgs>& from_hooks) const {
    Merged merged;
    merged.args = caller;
    COSESSION_RETURN_IF_ERROR(ResolveNames(*graph, merged.args));
    merged.caller_fetches = merged.args.fetches.size();
    absl::flat_hash_set<Output> fed;
    for (const auto& [out, value] : merged.args.feeds) fed.insert(out);
    for (size_t h = 0; h < from_hooks.size(); ++h) {
      RunArgs& hook = from_hooks[h];
      COSESSION_RETURN_IF_ERROR(ResolveNames(*graph, hook));
      const size_t begin = merged.args.fetches.size();
      merged.args.fetches.insert(merged.args.fetches.end(),
                                 hook.fetches.begin(), hook.fetches.end());
      merged.hook_ranges.emplace_back(begin, merged.args.fetches.size());
      merged.args.targets.insert(merged.args.targets.end(),
                                 hook.targets.begin(), hook.targets.end());
      for (auto& [out, value] : hook.feeds) {
        if (!fed.insert(out).second) {
          return absl::InvalidArgumentError(absl::StrCat(
              "Tensor '", out.valid() ? out.name() : std::string("<empty>"),
              "' is fed twice: by hook ", h,
              " and by the caller or an earlier hook"));
        }
        merged.args.feeds.emplace_back(out, std::move(value));
      }
      RunOptions& o = merged.args.options;
      o.trace_level = std::max(o.trace_level, hook.options.trace_level);
      if (hook.options.timeout.has_value()) {
        o.timeout = o.timeout.has_value()
                        ? std::max(*o.timeout, *hook.options.timeout)
                        : *hook.options.timeout;
      }
    }
    return merged;
  }

  // Tells the hooks about a step's final error: not for recoverable errors
  // being recovered, a clean stop (OutOfRange) or a cancellation.
  void NotifyError(const absl::Status& s) {
    if (s.ok() || absl::IsCancelled(s) || absl::IsOutOfRange(s)) return;
    for (const auto& hook : hooks) hook->OnError(s);
  }

  // True once the step's cancellation (the caller's or a stop) was
  // delivered. Checked between phases: a cancellation that arrives while
  // nothing cancellable is waiting must still end the step.
  static asio::awaitable<bool> Cancelled() {
    auto state = co_await asio::this_coro::cancellation_state;
    co_return state.cancelled() != asio::cancellation_type::none;
  }

  bool RunHooksTogether() const {
    if (options.hook_concurrency != HookConcurrency::kConcurrent) return false;
    int may_suspend = 0;
    for (const auto& hook : hooks) may_suspend += hook->MaySuspend() ? 1 : 0;
    return may_suspend >= 2;
  }

  asio::awaitable<absl::Status> BeforeRunTogether(
      SessionRunContext& context, std::vector<RunArgs>& hook_args) {
    co_return co_await AwaitTogether(
        hooks.size(),
        [&](size_t h) {
          return BeforeRunInto(hooks[h], &context, &hook_args[h]);
        },
        "BeforeRun");
  }

  asio::awaitable<absl::Status> AfterRunTogether(
      SessionRunContext& context, const std::vector<SessionRunValues>& values) {
    co_return co_await AwaitTogether(
        hooks.size(),
        [&](size_t h) { return hooks[h]->AfterRun(context, values[h]); },
        "AfterRun");
  }

  asio::awaitable<RunResult> RunWithHooks(RunArgs args) {
    SessionRunContext context(args, *session);
    std::vector<RunArgs> hook_args(hooks.size());
    const bool together = RunHooksTogether();
    if (together) {
      absl::Status s = co_await BeforeRunTogether(context, hook_args);
      if (!s.ok()) co_return s;
    }
    for (size_t h = 0; h < hooks.size() && !together; ++h) {
      absl::StatusOr<SessionRunArgs> r;
      try {
        r = co_await hooks[h]->BeforeRun(context);
      } catch (...) {
        r = FromException(std::current_exception(), "BeforeRun");
      }
      if (!r.ok()) co_return r.status();
      hook_args[h] = *std::move(r);
    }
    if (hooks.empty()) {
      // Nothing to merge or hand out: run the caller's arguments as they are.
      if (co_await Cancelled()) {
        co_return absl::CancelledError("Step cancelled before the graph ran");
      }
      co_return co_await session->Run(std::move(args), asio::use_awaitable);
    }
    absl::StatusOr<Merged> merged = Merge(args, hook_args);
    if (!merged.ok()) co_return merged.status();
    if (co_await Cancelled()) {
      co_return absl::CancelledError("Step cancelled before the graph ran");
    }
    auto outputs =
        co_await session->RunWithMetadata(merged->args, asio::use_awaitable);
    if (!outputs.ok()) co_return outputs.status();
    std::vector<SessionRunValues> values(hooks.size());
    for (size_t h = 0; h < hooks.size(); ++h) {
      auto [begin, end] = merged->hook_ranges[h];
      values[h].results.assign(outputs->values.begin() + begin,
                               outputs->values.begin() + end);
      values[h].options = merged->args.options;
      values[h].run_metadata = outputs->metadata;
    }
    if (together) {
      absl::Status s = co_await AfterRunTogether(context, values);
      if (!s.ok()) co_return s;
    }
    for (size_t h = 0; h < hooks.size() && !together; ++h) {
      absl::Status s;
      try {
        s = co_await hooks[h]->AfterRun(context, values[h]);
      } catch (...) {
        s = FromException(std::current_exception(), "AfterRun");
      }
      if (!s.ok()) co_return s;
    }
    if (co_await Cancelled()) {
      co_return absl::CancelledError("Step cancelled in AfterRun");
    }
    if (context.stop_requested()) {
      std::string reason = context.stop_reason();
      if (reason.empty()) reason = "a hook requested stop";
      MarkStopped(reason);
      coord().RequestStop(absl::OkStatus(), std::move(reason)).IgnoreError();
    }
    outputs->values.resize(merged->caller_fetches);
    co_return std::move(outputs->values);
  }

  // Runs `body` as one step on `executor`: the caller's cancellation (a
  // connected `slot`) requests a clean stop and cancels the step's waits, a
  // stop from anywhere cancels them too (see NewCoordinator), and `done` gets
  // the result exactly once.
  template <typename Result>
  static void SpawnStep(const std::shared_ptr<Impl>& impl,
                        asio::awaitable<Result> body,
                        asio::cancellation_slot slot,
                        asio::any_io_executor executor,
                        absl::AnyInvocable<void(Result)> done,
                        absl::string_view what) {
    auto step = std::make_shared<StepState>(executor);
    {
      std::lock_guard lock(impl->mu);
      impl->steps.insert(step);
    }
    if (slot.is_connected()) {
      slot.assign([impl, step](asio::cancellation_type type) {
        if (step->finished) return;
        impl->MarkStopped("cancelled");
        impl->coord().RequestStop(absl::OkStatus(), "cancelled").IgnoreError();
        step->signal.emit(type);
      });
    }
    asio::co_spawn(executor, std::move(body),
                   asio::bind_cancellation_slot(
                       step->signal.slot(),
                       [impl, step, what, done = std::move(done)](
                           std::exception_ptr e, Result result) mutable {
                         step->finished = true;
                         {
                           std::lock_guard lock(impl->mu);
                           impl->steps.erase(step);
                         }
                         if (e) result = FromException(e, what);
                         done(std::move(result));
                       }));
  }

  // The status a step reports when it was cut short by a stop: the stop's
  // cause if it was an error.
  absl::Status CauseOf(const absl::Status& s) const {
    if (!absl::IsCancelled(s)) return s;
    absl::Status held = coord().status();
    return held.ok() ? s : held;
  }
};

// ---------------------------------------------------------------- session

MonitoredSession::MonitoredSession(std::shared_ptr<Impl> impl)
    : impl_(std::move(impl)), executor_(DefaultExecutor(impl_->options)) {}

MonitoredSession::~MonitoredSession() {
  std::lock_guard lock(impl_->mu);
  if (impl_->coordinator) impl_->coordinator->RequestStop().IgnoreError();
}

asio::any_io_executor MonitoredSession::DefaultExecutor(
    const MonitoredSessionOptions& options) {
  if (options.executor.has_value()) return *options.executor;
  Runtime& runtime = options.runtime ? *options.runtime : Runtime::Default();
  return runtime.executor();
}

asio::awaitable<MonitoredSession::CreateResult>
MonitoredSession::CreateCoroutine(Graph* graph, Hooks hooks,
                                  std::shared_ptr<SessionCreator> creator,
                                  MonitoredSessionOptions options) {
  auto impl = std::make_shared<Impl>();
  impl->graph = graph;
  impl->hooks = std::move(hooks);
  impl->creator =
      creator ? std::move(creator) : std::make_shared<ChiefSessionCreator>();
  impl->options = std::move(options);
  impl->runtime =
      impl->options.runtime ? impl->options.runtime : &Runtime::Default();
  for (const auto& hook : impl->hooks) {
    absl::Status s;
    try {
      s = hook->Begin(*graph);
    } catch (...) {
      s = FromException(std::current_exception(), "Begin");
    }
    if (!s.ok()) co_return s;
  }
  try {
    impl->creator->Prepare(*graph);
  } catch (...) {
    co_return FromException(std::current_exception(),
                            "SessionCreator::Prepare");
  }
  graph->Finalize();
  impl->NewCoordinator(co_await asio::this_coro::executor, impl);
  absl::Status s = co_await impl->CreateSessionWithRetries(impl, false);
  if (!s.ok()) co_return s;
  co_return std::unique_ptr<MonitoredSession>(new MonitoredSession(impl));
}

bool MonitoredSession::ShouldStop() const { return impl_->ShouldStop(); }

std::string MonitoredSession::stop_reason() const {
  std::lock_guard lock(impl_->mu);
  if (!impl_->stop_reason.empty()) return impl_->stop_reason;
  return impl_->coordinator->stop_reason();
}

Coordinator& MonitoredSession::coordinator() { return impl_->coord(); }
Session& MonitoredSession::raw_session() { return *impl_->session; }
int MonitoredSession::recoveries() const { return impl_->recoveries; }

void MonitoredSession::StartRun(RunArgs args, asio::cancellation_slot slot,
                                asio::any_io_executor executor,
                                absl::AnyInvocable<void(RunResult)> done) {
  Impl::SpawnStep(impl_, RunCoroutine(impl_, std::move(args)), slot,
                  std::move(executor), std::move(done), "Run");
}

asio::awaitable<MonitoredSession::RunResult> MonitoredSession::RunCoroutine(
    std::shared_ptr<Impl> impl, RunArgs args) {
  // Errors are statuses here: a cancelled wait must not skip the
  // bookkeeping below (ASYNC_NOTES pitfall 2).
  co_await asio::this_coro::throw_if_cancelled(false);
  if (impl->closed) {
    co_return absl::FailedPreconditionError("Run called after Close()");
  }
  if (impl->ShouldStop()) {
    co_return absl::FailedPreconditionError(absl::StrCat(
        "Run called after ShouldStop() became true (", impl->stop_reason, ")"));
  }
  if (IsRecoverable(impl->coord().status())) impl->needs_recreate = true;
  for (int attempts = 0;; ++attempts) {
    if (impl->needs_recreate) {
      absl::Status s = co_await impl->CreateSessionWithRetries(impl, true);
      if (!s.ok()) co_return s;
    }
    MonitoredSession::RunResult result = co_await impl->RunWithHooks(args);
    if (result.ok()) {
      impl->last_run_failed = false;
      co_return result;
    }
    absl::Status s = impl->CauseOf(result.status());
    if (IsRecoverable(s) && impl->HasRecoveryBudget(attempts)) {
      impl->needs_recreate = true;
      continue;
    }
    if (absl::IsOutOfRange(s)) {
      impl->MarkStopped("input exhausted");
      impl->coord().RequestStop(s, "input exhausted").IgnoreError();
      impl->last_run_failed = false;
    } else if (absl::IsCancelled(s)) {
      impl->last_run_failed = false;  // a clean stop: End still runs
    } else {
      impl->last_run_failed = true;
    }
    impl->NotifyError(s);
    co_return s;
  }
}

void MonitoredSession::StartStepFn(
    StepFn fn, asio::cancellation_slot slot, asio::any_io_executor executor,
    absl::AnyInvocable<void(absl::Status)> done) {
  // A step whose body is fn: cancelled and stopped exactly like Run's.
  MonitoredSession* self = this;
  auto body = [](std::shared_ptr<Impl> impl, MonitoredSession* self,
                 StepFn fn) -> asio::awaitable<absl::Status> {
    co_await asio::this_coro::throw_if_cancelled(false);
    if (impl->closed || impl->ShouldStop()) {
      co_return absl::FailedPreconditionError(
          "RunStepFn called after ShouldStop() became true or after Close()");
    }
    for (int attempts = 0;; ++attempts) {
      if (impl->needs_recreate) {
        absl::Status s = co_await impl->CreateSessionWithRetries(impl, true);
        if (!s.ok()) co_return s;
      }
      StepContext context(*self);
      absl::Status s;
      try {
        s = co_await fn(context);
      } catch (...) {
        s = FromException(std::current_exception(), "RunStepFn's function");
      }
      if (context.stop_requested_)
        impl->MarkStopped("step function requested stop");
      if (IsRecoverable(s) && impl->HasRecoveryBudget(attempts)) {
        impl->needs_recreate = true;
        continue;
      }
      // A recoverable error fn swallowed still forces a new session.
      if (IsRecoverable(impl->coord().status())) impl->needs_recreate = true;
      co_return s;
    }
  };
  Impl::SpawnStep(impl_, body(impl_, self, std::move(fn)), slot,
                  std::move(executor), std::move(done), "RunStepFn");
}

Session& MonitoredSession::StepContext::session() const {
  return *owner_.impl_->session;
}

asio::awaitable<MonitoredSession::RunResult>
MonitoredSession::StepContext::RunWithHooks(RunArgs args) {
  RunResult r = co_await owner_.impl_->RunWithHooks(std::move(args));
  if (!r.ok() && IsRecoverable(r.status())) owner_.impl_->needs_recreate = true;
  co_return r;
}

void MonitoredSession::StartClose(asio::any_io_executor executor,
                                  absl::AnyInvocable<void(absl::Status)> done) {
  auto body = [](std::shared_ptr<Impl> impl) -> asio::awaitable<absl::Status> {
    co_await asio::this_coro::throw_if_cancelled(false);
    if (impl->closed) {
      co_return absl::FailedPreconditionError(
          "Close called on a MonitoredSession that is already closed");
    }
    impl->closed = true;
    impl->coord().RequestStop(absl::OkStatus(), "closed").IgnoreError();
    absl::Status end_status;
    if (!impl->last_run_failed && !impl->needs_recreate && impl->session) {
      for (const auto& hook : impl->hooks) {
        absl::Status s;
        try {
          s = co_await hook->End(*impl->session);
        } catch (...) {
          s = FromException(std::current_exception(), "End");
        }
        if (!s.ok() && end_status.ok()) end_status = s;
      }
    }
    absl::Status joined = co_await impl->coord().Join(
        impl->options.stop_grace_period, asio::use_awaitable);
    co_return joined.ok() ? end_status : joined;
  };
  asio::co_spawn(
      executor, body(impl_),
      [done = std::move(done)](std::exception_ptr e, absl::Status s) mutable {
        done(e ? FromException(e, "Close") : s);
      });
}

}  // namespace cosession
