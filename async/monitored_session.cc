#include "async/monitored_session.h"

#include <cxxabi.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/experimental/channel.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <typeinfo>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
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
// Both note in *stop_requester, right as the hook's call returns (before
// any other hook resumes), whether this hook is the first to ask for stop.
asio::awaitable<absl::Status> BeforeRunInto(
    std::shared_ptr<SessionRunHook> hook, SessionRunContext* context,
    RunArgs* out, int index, int* stop_requester) {
  absl::StatusOr<SessionRunArgs> r = co_await hook->BeforeRun(*context);
  if (*stop_requester < 0 && context->stop_requested()) *stop_requester = index;
  if (!r.ok()) co_return r.status();
  *out = *std::move(r);
  co_return absl::OkStatus();
}

asio::awaitable<absl::Status> AfterRunNoting(
    std::shared_ptr<SessionRunHook> hook, SessionRunContext* context,
    const SessionRunValues* values, int index, int* stop_requester) {
  absl::Status s = co_await hook->AfterRun(*context, *values);
  if (*stop_requester < 0 && context->stop_requested()) *stop_requester = index;
  co_return s;
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
              // Boost 1.81: once a receive on a buffered channel was
              // cancelled, try_send fails (the channel wrongly blocks) until
              // the next receive starts; a queued send survives that.
              if (!finished.try_send(boost::system::error_code(), i)) {
                finished.async_send(boost::system::error_code(), i,
                                    asio::detached);
              }
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
  auto state = co_await asio::this_coro::cancellation_state;
  for (size_t got = 0; got < n;) {
    // A cancellation that struck between two receives (after one call's
    // result was sent, before this coroutine resumed) found no wait to
    // cancel: only the state remembers it (ASYNC_NOTES pitfall 2).
    if (state.cancelled() != asio::cancellation_type::none) cancel_all();
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

absl::Status SyncSessionRunHook::BeforeRunSync(SessionRunContext&,
                                               SessionRunArgs&) {
  return absl::OkStatus();
}
absl::Status SyncSessionRunHook::AfterRunSync(SessionRunContext&,
                                              const SessionRunValues&) {
  return absl::OkStatus();
}
asio::awaitable<absl::StatusOr<SessionRunArgs>> SyncSessionRunHook::BeforeRun(
    SessionRunContext& context) {
  SessionRunArgs args;
  absl::Status s = BeforeRunSync(context, args);
  if (!s.ok()) co_return s;
  co_return args;
}
asio::awaitable<absl::Status> SyncSessionRunHook::AfterRun(
    SessionRunContext& context, const SessionRunValues& values) {
  co_return AfterRunSync(context, values);
}
std::string SessionRunHook::name() const {
  const char* mangled = typeid(*this).name();
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && demangled ? std::string(demangled.get())
                                  : std::string(mangled);
}

// ---------------------------------------------------------------- creators

void Scaffold::Finalize(Graph& graph) {
  // One default op of each kind per graph, found again by later sessions
  // once the graph is finalized.
  constexpr absl::string_view kInitOpCollection = "scaffold_init_op";
  constexpr absl::string_view kReadyOpCollection = "scaffold_ready_op";
  if (!init_op.valid()) {
    if (auto existing = graph.GetCollection(kInitOpCollection);
        !existing.empty()) {
      init_op = Operation(existing.front());
    } else if (!graph.finalized()) {
      init_op = GlobalVariablesInitializer(graph);
      graph.AddToCollection(kInitOpCollection, init_op.node());
    }
  }
  if (!ready_op.valid()) {
    if (auto existing = graph.GetCollection(kReadyOpCollection);
        !existing.empty()) {
      ready_op = Output(existing.front(), 0);
    } else if (!graph.finalized()) {
      ready_op = ReportUninitializedVariables(graph);
      graph.AddToCollection(kReadyOpCollection, ready_op.node());
    }
  }
}

asio::awaitable<absl::StatusOr<std::unique_ptr<Session>>>
ChiefSessionCreator::CreateSession(const Graph& graph, Runtime& runtime) {
  auto session = std::make_unique<Session>(graph, runtime, shared_resources_);
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

asio::awaitable<absl::StatusOr<std::unique_ptr<Session>>>
WorkerSessionCreator::CreateSession(const Graph& graph, Runtime& runtime) {
  if (!shared_resources_) {
    co_return absl::InvalidArgumentError(
        "WorkerSessionCreator needs the chief's shared ResourceManager (a "
        "worker with variables of its own would wait forever)");
  }
  auto session = std::make_unique<Session>(graph, runtime, shared_resources_);
  if (scaffold_.ready_op.valid()) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    const auto deadline = std::chrono::steady_clock::now() + options_.max_wait;
    while (true) {
      RunArgs args{.fetches = {scaffold_.ready_op}};
      auto report = co_await session->Run(std::move(args), asio::use_awaitable);
      if (!report.ok()) co_return report.status();
      std::vector<std::string> uninitialized =
          UninitializedVariableNames(graph, report->front());
      if (uninitialized.empty()) break;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        co_return absl::DeadlineExceededError(absl::StrCat(
            "WorkerSessionCreator: the chief did not initialise ",
            absl::StrJoin(uninitialized, ", "), " within ",
            absl::FormatDuration(absl::FromChrono(options_.max_wait))));
      }
      timer.expires_at(std::min(now + options_.poll_interval, deadline));
      co_await timer.async_wait(asio::use_awaitable);
    }
  }
  if (scaffold_.local_init_op.valid()) {
    RunArgs args{.targets = {scaffold_.local_init_op}};
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
  asio::cancellation_signal signal;  // emitted only on `executor`
  // Written on `executor`; read from cancellation handlers anywhere.
  std::atomic<bool> finished{false};

  // From any thread: cancel the step's waits, on its own executor (a
  // cancellation_signal is not thread-safe; ASYNC_NOTES pitfall 7).
  static void CancelFromAnywhere(
      const std::shared_ptr<StepState>& step,
      asio::cancellation_type type = asio::cancellation_type::terminal) {
    asio::post(step->executor, [step, type] {
      if (!step->finished) step->signal.emit(type);
    });
  }
};

struct MonitoredSession::Impl {
  Graph* graph = nullptr;
  Hooks hooks;
  Hooks unskippable_hooks;  // hooks minus options.skippable_hooks
  // Per RunMode: no hook it calls may suspend (RunInline applies).
  bool inline_ok[2] = {false, false};
  // Per RunMode: its hooks are started together (RunHooksTogether).
  bool together_in[2] = {false, false};
  // Per RunMode, parallel to ActiveHooks(mode): the hook as a
  // SyncSessionRunHook, called without a coroutine frame, or null.
  std::vector<SyncSessionRunHook*> sync_hooks[2];
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
  // Replaced on recovery, by the step path only, under mu: the step path
  // reads it without mu (step_coord()), everyone else with it (coord()).
  std::unique_ptr<Coordinator> coordinator;
  uint64_t stop_callback = 0;
  // Set once, under mu, together with stop_reason; read without mu.
  std::atomic<bool> stopped{false};
  std::string stop_reason;                                // under mu
  absl::flat_hash_set<std::shared_ptr<StepState>> steps;  // under mu
  // The inline path's step state, reused step after step while the caller's
  // executor stays the same (it stays in `steps`). Step path only.
  std::shared_ptr<StepState> inline_step;

  Coordinator& coord() const {
    std::lock_guard lock(mu);
    return *coordinator;
  }
  Coordinator& step_coord() const { return *coordinator; }

  void MarkStopped(std::string reason) {
    std::lock_guard lock(mu);
    if (!stopped.load(std::memory_order_relaxed)) {
      stop_reason = std::move(reason);
      stopped.store(true, std::memory_order_release);
    }
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

  bool RunHooksTogether(const Hooks& active) const {
    if (options.hook_concurrency != HookConcurrency::kConcurrent) return false;
    int may_suspend = 0;
    for (const auto& hook : active) may_suspend += hook->MaySuspend() ? 1 : 0;
    return may_suspend >= 2;
  }

  static asio::awaitable<absl::Status> BeforeRunTogether(
      const Hooks& hooks, SessionRunContext& context,
      std::vector<RunArgs>& hook_args, int& stop_requester) {
    co_return co_await AwaitTogether(
        hooks.size(),
        [&](size_t h) {
          return BeforeRunInto(hooks[h], &context, &hook_args[h],
                               static_cast<int>(h), &stop_requester);
        },
        "BeforeRun");
  }

  static asio::awaitable<absl::Status> AfterRunTogether(
      const Hooks& hooks, SessionRunContext& context,
      const std::vector<const SessionRunValues*>& values, int& stop_requester) {
    co_return co_await AwaitTogether(
        hooks.size(),
        [&](size_t h) {
          return AfterRunNoting(hooks[h], &context, values[h],
                                static_cast<int>(h), &stop_requester);
        },
        "AfterRun");
  }

  const Hooks& ActiveHooks(RunMode mode) const {
    return mode == RunMode::kWithoutSkippableHooks ? unskippable_hooks : hooks;
  }

  // True when a hook's BeforeRun asked for nothing: the step then runs the
  // caller's arguments as they are (no merge).
  static bool AsksForNothing(const RunArgs& a) {
    return a.fetches.empty() && a.targets.empty() && a.feeds.empty() &&
           a.fetch_names.empty() && a.target_names.empty() &&
           a.feeds_by_name.empty() &&
           a.options.trace_level == RunOptions::kNoTrace &&
           !a.options.timeout.has_value();
  }

  // The caller's cancellation, wherever it struck, is a clean stop.
  // From any thread (a cancellation slot handler).
  void StopForCancellation() {
    MarkStopped("cancelled");
    coord().RequestStop(absl::OkStatus(), "cancelled").IgnoreError();
  }

  // In an inline step, the caller's cancellation reaches the graph run
  // through this bridge on the coroutine's slot, which also requests stop.
  // Installed right before the run: a hook may have used the slot before.
  void BridgeCancellation(asio::cancellation_slot caller, StepState* step) {
    if (!caller.is_connected()) return;
    caller.assign([this, step](asio::cancellation_type type) {
      if (step->finished) return;
      StopForCancellation();
      step->signal.emit(type);
    });
  }

  // The graph run of a step, not started yet: the caller awaits it in the
  // same full-expression, so it costs no coroutine frame of its own (one
  // would cost about as much as ten sync hooks). In an inline step (see
  // RunInline) the run is bound to the step's own signal, which a stop
  // emits, and `caller` (the awaiting coroutine's slot) is bridged to it:
  // the caller clears `caller` after the await. Otherwise the run inherits
  // the spawned step's cancellation. `args` lives in the caller's frame.
  asio::awaitable<absl::StatusOr<RunOutputs>> RunGraph(
      const RunArgs& args, StepState* inline_step,
      asio::cancellation_slot caller) {
    if (inline_step == nullptr) {
      return session->RunBorrowed(args, asio::use_awaitable);
    }
    BridgeCancellation(caller, inline_step);
    return session->RunBorrowed(
        args, asio::bind_cancellation_slot(inline_step->signal.slot(),
                                           asio::use_awaitable));
  }

  // Requests stop on behalf of hook `h`, which asked for it: with the
  // reason it gave, or one naming it.
  void StopForHook(const Hooks& active, int h,
                   const SessionRunContext& context) {
    std::string reason = context.stop_reason();
    if (reason.empty()) {
      reason = absl::StrCat("hook '", active[h]->name(), "' requested stop");
    }
    MarkStopped(reason);
    coord().RequestStop(absl::OkStatus(), std::move(reason)).IgnoreError();
  }

  // One step with the hooks `mode` selects, no recovery. `inline_step` is
  // set when the step runs inside the caller's coroutine (RunInline).
  // Exceptions (a hook's, or Asio's after a cancellation) become statuses.
  // `args` lives in the awaiting caller's frame.
  asio::awaitable<RunResult> RunWithHooks(const RunArgs& args, RunMode mode,
                                          StepState* inline_step = nullptr) {
    const Hooks& hooks = ActiveHooks(mode);
    if (hooks.empty()) {
      // Nothing to merge or hand out: run the caller's arguments as they are.
      if ((co_await asio::this_coro::cancellation_state).cancelled() !=
          asio::cancellation_type::none) {
        co_return absl::CancelledError("Step cancelled before the graph ran");
      }
      asio::cancellation_slot caller =
          (co_await asio::this_coro::cancellation_state).slot();
      absl::StatusOr<RunOutputs> outputs;
      try {
        outputs = co_await RunGraph(args, inline_step, caller);
      } catch (...) {
        outputs = FromException(std::current_exception(), "the graph run");
      }
      if (inline_step != nullptr && caller.is_connected()) caller.clear();
      if (!outputs.ok()) co_return std::move(outputs).status();
      co_return std::move(outputs->values);
    }
    SessionRunContext context(args, *session);
    // The first hook that asked for stop: noted as each hook's call returns.
    int stop_requester = -1;
    auto note_stop = [&](size_t h) {
      if (stop_requester < 0 && context.stop_requested()) {
        stop_requester = static_cast<int>(h);
      }
    };
    // What the hooks asked for; left empty while every hook awaited one
    // after another asks for nothing (the common case, kept cheap).
    std::vector<RunArgs> hook_args;
    const bool together = together_in[static_cast<int>(mode)];
    if (together) {
      hook_args.resize(hooks.size());
      absl::Status s =
          co_await BeforeRunTogether(hooks, context, hook_args, stop_requester);
      if (!s.ok()) co_return s;
    }
    const std::vector<SyncSessionRunHook*>& sync =
        sync_hooks[static_cast<int>(mode)];
    // A sync hook writes what it asks for here; moved out when not empty.
    SessionRunArgs asked;
    for (size_t h = 0; h < hooks.size() && !together; ++h) {
      try {
        if (sync[h] != nullptr) {
          absl::Status s = sync[h]->BeforeRunSync(context, asked);
          if (!s.ok()) co_return s;
          if (!AsksForNothing(asked)) {
            hook_args.resize(hooks.size());
            hook_args[h] = std::exchange(asked, SessionRunArgs{});
          }
        } else {
          absl::StatusOr<SessionRunArgs> r =
              co_await hooks[h]->BeforeRun(context);
          if (!r.ok()) co_return r.status();
          if (!AsksForNothing(*r)) {
            hook_args.resize(hooks.size());
            hook_args[h] = *std::move(r);
          }
        }
      } catch (...) {
        co_return FromException(std::current_exception(), "BeforeRun");
      }
      note_stop(h);
    }
    const bool merge =
        !std::all_of(hook_args.begin(), hook_args.end(), &Impl::AsksForNothing);
    absl::StatusOr<Merged> merged;
    if (merge) {
      merged = Merge(args, hook_args);
      if (!merged.ok()) co_return merged.status();
    }
    if ((co_await asio::this_coro::cancellation_state).cancelled() !=
        asio::cancellation_type::none) {
      co_return absl::CancelledError("Step cancelled before the graph ran");
    }
    // Hooks that fetched nothing share one SessionRunValues.
    SessionRunValues common;
    common.options = merge ? merged->args.options : args.options;
    // (Named, not a conditional inside the co_await: g++ 12 mishandles
    // temporaries there.)
    const RunArgs& run_args = merge ? merged->args : args;
    asio::cancellation_slot caller =
        (co_await asio::this_coro::cancellation_state).slot();
    absl::StatusOr<RunOutputs> outputs;
    try {
      outputs = co_await RunGraph(run_args, inline_step, caller);
    } catch (...) {
      outputs = FromException(std::current_exception(), "the graph run");
    }
    if (inline_step != nullptr && caller.is_connected()) caller.clear();
    if (!outputs.ok()) co_return std::move(outputs).status();
    common.run_metadata = std::move(outputs->metadata);
    // Per hook, only when some hook fetched something or they run together.
    std::vector<SessionRunValues> own;
    std::vector<const SessionRunValues*> values;
    if (merge || together) values.assign(hooks.size(), &common);
    if (merge) {
      own.resize(hooks.size());
      for (size_t h = 0; h < hooks.size(); ++h) {
        auto [begin, end] = merged->hook_ranges[h];
        if (begin == end) continue;
        own[h].results.assign(outputs->values.begin() + begin,
                              outputs->values.begin() + end);
        own[h].options = common.options;
        own[h].run_metadata = common.run_metadata;
        values[h] = &own[h];
      }
    }
    if (together) {
      absl::Status s;
      try {
        s = co_await AfterRunTogether(hooks, context, values, stop_requester);
      } catch (...) {
        s = FromException(std::current_exception(), "AfterRun");
      }
      if (!s.ok()) co_return s;
    }
    for (size_t h = 0; h < hooks.size() && !together; ++h) {
      absl::Status s;
      try {
        const SessionRunValues& mine = values.empty() ? common : *values[h];
        if (sync[h] != nullptr) {
          s = sync[h]->AfterRunSync(context, mine);
        } else {
          s = co_await hooks[h]->AfterRun(context, mine);
        }
      } catch (...) {
        s = FromException(std::current_exception(), "AfterRun");
      }
      if (!s.ok()) co_return s;
      note_stop(h);
    }
    if ((co_await asio::this_coro::cancellation_state).cancelled() !=
        asio::cancellation_type::none) {
      co_return absl::CancelledError("Step cancelled in AfterRun");
    }
    if (stop_requester >= 0) StopForHook(hooks, stop_requester, context);
    if (merge) outputs->values.resize(merged->caller_fetches);
    co_return std::move(outputs->values);
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

  std::string StopReason() const {
    std::lock_guard lock(mu);
    if (!stop_reason.empty()) return stop_reason;
    return coordinator->stop_reason();
  }

  // Whether a Run can go through RunInline: every hook it calls completes
  // without suspending, and no recovery is due.
  bool CanRunInline(RunMode mode) const {
    return inline_ok[static_cast<int>(mode)] && !needs_recreate &&
           !HoldsRecoverableError(step_coord());
  }

  // The inline path's StepState for a step on `executor`, registered in
  // `steps` so that a stop cancels the step's waits.
  const std::shared_ptr<StepState>& InlineStep(
      const asio::any_io_executor& executor) {
    if (!inline_step || inline_step->executor != executor) {
      auto step = std::make_shared<StepState>(executor);
      std::lock_guard lock(mu);
      if (inline_step) steps.erase(inline_step);
      steps.insert(step);
      inline_step = std::move(step);
    }
    inline_step->finished = false;
    return inline_step;
  }

  void AddStep(const std::shared_ptr<StepState>& step) {
    std::lock_guard lock(mu);
    steps.insert(step);
  }
  void RemoveStep(const std::shared_ptr<StepState>& step) {
    std::lock_guard lock(mu);
    steps.erase(step);
  }

  // The bookkeeping of a step's final result (after recovery gave up).
  RunResult FinishStep(RunResult result) {
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
      // The caller may emit from another thread than the step's executor.
      slot.assign([impl, step](asio::cancellation_type type) {
        if (step->finished) return;
        impl->StopForCancellation();
        StepState::CancelFromAnywhere(step, type);
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
  // A strand: the step's cancellation signal is emitted on its executor,
  // which must not run two handlers at once.
  return asio::make_strand(runtime.executor());
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
  for (size_t i = 0; i < impl->options.skippable_hooks.size(); ++i) {
    const auto& skippable = impl->options.skippable_hooks[i];
    if (std::find(impl->hooks.begin(), impl->hooks.end(), skippable) ==
        impl->hooks.end()) {
      co_return absl::InvalidArgumentError(
          absl::StrCat("MonitoredSessionOptions::skippable_hooks[", i,
                       "] is not one of the session's hooks"));
    }
  }
  for (const auto& hook : impl->hooks) {
    if (std::find(impl->options.skippable_hooks.begin(),
                  impl->options.skippable_hooks.end(),
                  hook) == impl->options.skippable_hooks.end()) {
      impl->unskippable_hooks.push_back(hook);
    }
  }
  for (RunMode mode : {RunMode::kAllHooks, RunMode::kWithoutSkippableHooks}) {
    const Hooks& active = impl->ActiveHooks(mode);
    impl->inline_ok[static_cast<int>(mode)] =
        std::none_of(active.begin(), active.end(),
                     [](const auto& hook) { return hook->MaySuspend(); });
    impl->together_in[static_cast<int>(mode)] = impl->RunHooksTogether(active);
    for (const auto& hook : active) {
      impl->sync_hooks[static_cast<int>(mode)].push_back(
          dynamic_cast<SyncSessionRunHook*>(hook.get()));
    }
  }
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
  return impl_->StopReason();
}

Coordinator& MonitoredSession::coordinator() { return impl_->coord(); }
Session& MonitoredSession::raw_session() { return *impl_->session; }
int MonitoredSession::recoveries() const { return impl_->recoveries; }

void MonitoredSession::StartRun(RunArgs args, RunMode mode, int first_attempt,
                                asio::cancellation_slot slot,
                                asio::any_io_executor executor,
                                absl::AnyInvocable<void(RunResult)> done) {
  Impl::SpawnStep(impl_,
                  RunCoroutine(impl_, std::move(args), mode, first_attempt),
                  slot, std::move(executor), std::move(done), "Run");
}

asio::awaitable<MonitoredSession::RunResult> MonitoredSession::RunCoroutine(
    std::shared_ptr<Impl> impl, RunArgs args, RunMode mode, int first_attempt) {
  // Errors are statuses here: a cancelled wait must not skip the
  // bookkeeping below (ASYNC_NOTES pitfall 2).
  co_await asio::this_coro::throw_if_cancelled(false);
  if (absl::Status s = impl->CheckCanRun(); !s.ok()) co_return s;
  if (IsRecoverable(impl->coord().status())) impl->needs_recreate = true;
  for (int attempts = first_attempt;; ++attempts) {
    if (impl->needs_recreate) {
      absl::Status s = co_await impl->CreateSessionWithRetries(impl, true);
      if (!s.ok()) co_return s;
    }
    MonitoredSession::RunResult result =
        co_await impl->RunWithHooks(args, mode);
    if (!result.ok()) {
      absl::Status s = impl->CauseOf(result.status());
      if (IsRecoverable(s) && impl->HasRecoveryBudget(attempts)) {
        impl->needs_recreate = true;
        continue;
      }
      result = std::move(s);
    }
    co_return impl->FinishStep(std::move(result));
  }
}

asio::awaitable<MonitoredSession::RunResult> MonitoredSession::RunInline(
    RunArgs args, RunMode mode) {
  Impl* impl = impl_.get();  // the session outlives its operations
  if (!impl->CanRunInline(mode)) {
    co_return co_await RunFrom(0, std::move(args), mode, asio::use_awaitable);
  }
  if (absl::Status s = impl->CheckCanRun(); !s.ok()) co_return s;
  StepState* step = impl->InlineStep(co_await asio::this_coro::executor).get();
  RunResult result;
  if (impl->ActiveHooks(mode).empty()) {
    // The graph alone, awaited right here: no coroutine frames in between.
    asio::cancellation_slot caller =
        (co_await asio::this_coro::cancellation_state).slot();
    try {
      absl::StatusOr<RunOutputs> outputs =
          co_await impl->RunGraph(args, step, caller);
      if (outputs.ok()) {
        result = std::move(outputs->values);
      } else {
        result = std::move(outputs).status();
      }
    } catch (...) {
      result = FromException(std::current_exception(), "the graph run");
    }
    if (caller.is_connected()) caller.clear();
  } else {
    result = co_await impl->RunWithHooks(args, mode, step);
  }
  step->finished = true;
  if ((co_await asio::this_coro::cancellation_state).cancelled() !=
      asio::cancellation_type::none) {
    // The caller's cancellation is a stop request, wherever it struck.
    impl->StopForCancellation();
  }
  if (!result.ok()) {
    absl::Status s = impl->CauseOf(result.status());
    if (IsRecoverable(s) && impl->HasRecoveryBudget(0)) {
      // Recovery awaits hooks that may suspend: the spawned path does it.
      impl->needs_recreate = true;
      co_return co_await RunFrom(1, std::move(args), mode, asio::use_awaitable);
    }
    result = std::move(s);
  }
  co_return impl->FinishStep(std::move(result));
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
  co_return co_await RunWithHooks(std::move(args), RunMode::kAllHooks);
}

asio::awaitable<MonitoredSession::RunResult>
MonitoredSession::StepContext::RunWithHooks(RunArgs args, RunMode mode) {
  RunResult r = co_await owner_.impl_->RunWithHooks(args, mode);
  if (!r.ok() && IsRecoverable(r.status())) owner_.impl_->needs_recreate = true;
  co_return r;
}

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
    absl::Status end_status;
    if (!impl->last_run_failed && !impl->needs_recreate && impl->session) {
      for (const auto& hook : impl->hooks) {
        // A cancellation that arrived before this End started waiting
        // would not reach its wait: check first.
        if (co_await Impl::Cancelled()) {
          co_return absl::CancelledError(
              "Close was cancelled while the hooks' End ran");
        }
        absl::Status s;
        try {
          s = co_await hook->End(*impl->session);
        } catch (...) {
          s = FromException(std::current_exception(), "End");
        }
        if (co_await Impl::Cancelled()) {
          co_return absl::CancelledError(
              "Close was cancelled while the hooks' End ran");
        }
        if (!s.ok() && end_status.ok()) end_status = s;
      }
    }
    if (co_await Impl::Cancelled()) {
      co_return absl::CancelledError(
          "Close was cancelled while the hooks' End ran");
    }
    absl::Status joined = co_await impl->coord().Join(
        impl->options.stop_grace_period, asio::use_awaitable);
    if (co_await Impl::Cancelled()) {
      co_return absl::CancelledError(
          "Close was cancelled while joining the coordinator");
    }
    co_return joined.ok() ? end_status : joined;
  };
  // Close's own cancellation signal, emitted on its executor; unlike a
  // step, Close is not cancelled by the stop it requests itself.
  auto close = std::make_shared<StepState>(executor);
  if (slot.is_connected()) {
    slot.assign([close](asio::cancellation_type type) {
      if (!close->finished) StepState::CancelFromAnywhere(close, type);
    });
  }
  asio::co_spawn(executor, body(impl_),
                 asio::bind_cancellation_slot(
                     close->signal.slot(),
                     [close, done = std::move(done)](std::exception_ptr e,
                                                     absl::Status s) mutable {
                       close->finished = true;
                       done(e ? FromException(e, "Close") : s);
                     }));
}

}  // namespace cosession
