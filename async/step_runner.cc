#include "cosession/async/step_runner.h"

#include <algorithm>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <exception>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cosession/async/completion.h"
#include "cosession/async/detail/cancellation.h"
#include "cosession/async/status_from_exception.h"
#include "cosession/async/task_group.h"

namespace cosession {
namespace asio = boost::asio;

namespace {

// The hooks' calls when they run together, as coroutines of their own:
// parameters by value (docs/async_pitfalls.md, 5); *context, *out and
// *stop_requester live in the step's frame, which joins them. Each notes,
// right as the hook's call returns (before another hook resumes), whether
// it is the first hook to ask for stop.
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

using detail::IsCancelled;

std::vector<SyncSessionRunHook*> AsSyncHooks(const StepRunner::Hooks& hooks) {
  std::vector<SyncSessionRunHook*> sync;
  sync.reserve(hooks.size());
  for (const auto& hook : hooks) {
    sync.push_back(dynamic_cast<SyncSessionRunHook*>(hook.get()));
  }
  return sync;
}

}  // namespace

StepRunner::StepRunner(const Graph& graph, Hooks all, Hooks unskippable,
                       HookConcurrency concurrency)
    : graph_(graph), concurrency_(concurrency) {
  all_.sync = AsSyncHooks(all);
  all_.hooks = std::move(all);
  unskippable_.sync = AsSyncHooks(unskippable);
  unskippable_.hooks = std::move(unskippable);
}

int StepRunner::PlanStep(RunMode mode) {
  const Hooks& hooks = ForMode(mode).hooks;
  may_suspend_.resize(hooks.size());
  int suspending = 0;
  for (size_t h = 0; h < hooks.size(); ++h) {
    may_suspend_[h] = hooks[h]->MaySuspendInNextStep() ? 1 : 0;
    suspending += may_suspend_[h];
  }
  planned_suspending_ = suspending;
  return suspending;
}

// Kept out of Run: their TaskGroups would make Run's frame, allocated for
// every step, too big for Asio's frame cache.
asio::awaitable<absl::Status> StepRunner::BeforeRunTogether(
    const Hooks& hooks, SessionRunContext& context, int& stop_requester) {
  TaskGroup group(co_await asio::this_coro::executor, "BeforeRun");
  for (size_t h = 0; h < hooks.size(); ++h) {
    group.Spawn(BeforeRunInto(hooks[h], &context, &hook_args_[h],
                              static_cast<int>(h), &stop_requester));
  }
  if (IsCancelled(co_await asio::this_coro::cancellation_state)) {
    group.CancelAll();
  }
  co_return co_await group.Join(asio::use_awaitable);
}

asio::awaitable<absl::Status> StepRunner::AfterRunTogether(
    const Hooks& hooks, SessionRunContext& context, int& stop_requester) {
  TaskGroup group(co_await asio::this_coro::executor, "AfterRun");
  for (size_t h = 0; h < hooks.size(); ++h) {
    group.Spawn(AfterRunNoting(hooks[h], &context, values_[h],
                               static_cast<int>(h), &stop_requester));
  }
  if (IsCancelled(co_await asio::this_coro::cancellation_state)) {
    group.CancelAll();
  }
  co_return co_await group.Join(asio::use_awaitable);
}

size_t StepRunner::BeforeRunSync(const HooksOfMode& mode_hooks, size_t h,
                                 SessionRunContext& context,
                                 int& stop_requester, bool& any_asked,
                                 absl::Status& status) {
  const size_t n = mode_hooks.hooks.size();
  for (; h < n; ++h) {
    SyncSessionRunHook* hook = mode_hooks.sync[h];
    if (hook == nullptr || may_suspend_[h]) return h;
    RunArgs& asked = hook_args_[h];
    try {
      status = hook->BeforeRunSync(context, asked);
    } catch (...) {
      status = StatusFromException(std::current_exception(), "BeforeRun");
    }
    if (!status.ok()) return h;
    any_asked = any_asked || !AsksForNothing(asked);
    if (stop_requester < 0 && context.stop_requested()) {
      stop_requester = static_cast<int>(h);
    }
  }
  return h;
}

size_t StepRunner::AfterRunSync(const HooksOfMode& mode_hooks, size_t h,
                                SessionRunContext& context, int& stop_requester,
                                absl::Status& status) {
  const size_t n = mode_hooks.hooks.size();
  for (; h < n; ++h) {
    SyncSessionRunHook* hook = mode_hooks.sync[h];
    if (hook == nullptr || may_suspend_[h]) return h;
    try {
      status = hook->AfterRunSync(context, *values_[h]);
    } catch (...) {
      status = StatusFromException(std::current_exception(), "AfterRun");
    }
    if (stop_requester < 0 && context.stop_requested()) {
      stop_requester = static_cast<int>(h);
    }
    if (!status.ok()) return h;
  }
  return h;
}

void StepRunner::PrepareHookValues(size_t n, bool merged,
                                   const RunOptions& options,
                                   RunOutputs& outputs) {
  common_values_.options = options;
  common_values_.run_metadata = std::move(outputs.metadata);
  const bool traced =
      !common_values_.run_metadata.step_stats.node_stats.empty();
  values_.assign(n, &common_values_);
  if (!merged) return;
  own_values_.resize(n);
  for (size_t h = 0; h < n; ++h) {
    if (merged_.HookFetchedNothing(h)) continue;
    if (const size_t same = merged_.same_results_as[h]; same != h) {
      values_[h] = values_[same];  // the same fetches: the same values
      continue;
    }
    SessionRunValues& own = own_values_[h];
    // The hooks' own results are dropped after AfterRun: handed on.
    merged_.TakeHookResults(absl::MakeSpan(outputs.values), h, own.results);
    own.options = options;
    if (traced || !own.run_metadata.step_stats.node_stats.empty()) {
      own.run_metadata = common_values_.run_metadata;
    }
    values_[h] = &own;
  }
}

void StepRunner::ReleaseHookValues(size_t n, bool merged) {
  // This step's tensors go now; the vectors keep their capacity.
  if (merged) {
    for (size_t h = 0; h < n; ++h) {
      if (merged_.same_results_as[h] == h) own_values_[h].results.clear();
    }
  }
  common_values_.run_metadata.step_stats.node_stats.clear();
}

asio::awaitable<absl::StatusOr<RunOutputs>> StepRunner::RunGraph(
    Session& session, const RunArgs& args,
    absl::Span<const Output> extra_fetches, InlineStep* inline_step) {
  auto initiation = [](auto handler, Session* session, const RunArgs* args,
                       absl::Span<const Output> extra_fetches,
                       InlineStep* inline_step) {
    asio::cancellation_slot caller =
        asio::get_associated_cancellation_slot(handler);
    asio::cancellation_slot run_slot = caller;
    if (inline_step != nullptr) {
      // Until PostToHandler clears it, right before the completion.
      if (caller.is_connected()) {
        caller.assign([inline_step](asio::cancellation_type type) {
          if (inline_step->finished) return;
          if (inline_step->on_caller_cancel) inline_step->on_caller_cancel();
          inline_step->signal.emit(type);
        });
      }
      run_slot = inline_step->signal.slot();
    }
    Session::StartRun(session->state_, *args, extra_fetches, run_slot,
                      PostToHandler<absl::StatusOr<RunOutputs>>(
                          std::move(handler),
                          [](absl::StatusOr<RunOutputs> r) { return r; }));
  };
  return asio::async_initiate<const asio::use_awaitable_t<>&,
                              void(absl::StatusOr<RunOutputs>)>(
      initiation, asio::use_awaitable, &session, &args, extra_fetches,
      inline_step);
}

asio::awaitable<StepRunner::RunResult> StepRunner::Run(
    Session& session, const RunArgs& args, RunMode mode, Planned planned,
    InlineStep* inline_step, std::string* stop_reason) {
  const HooksOfMode& mode_hooks = ForMode(mode);
  const Hooks& hooks = mode_hooks.hooks;
  const size_t n = hooks.size();
  // Hooks share one context; none is made for a step without hooks.
  std::optional<SessionRunContext> context;
  // The first hook that asked for stop: noted as each hook's call returns.
  int stop_requester = -1;
  auto note_stop = [&](size_t h) {
    if (stop_requester < 0 && context->stop_requested()) {
      stop_requester = static_cast<int>(h);
    }
  };
  bool together = false;
  bool any_asked = false;  // some hook asked for something: merge
  // A hook that may suspend is awaited with Asio's default rule,
  // throw_if_cancelled(true), whatever the awaiting coroutine set for
  // itself: a stop that struck between two of the hook's waits then ends
  // the second wait instead of going unnoticed (docs/async_pitfalls.md, 2).
  bool awaiter_throws = true;
  if (n > 0) {
    awaiter_throws = co_await asio::this_coro::throw_if_cancelled();
    context.emplace(args, session);
    const int suspending =
        planned == Planned::kYes ? planned_suspending_ : PlanStep(mode);
    together = concurrency_ == HookConcurrency::kConcurrent && suspending >= 2;
    hook_args_.resize(n);
    for (RunArgs& asked : hook_args_) ClearRunArgs(asked);
  }

  // ---- BeforeRun.
  if (together) {
    absl::Status s =
        co_await BeforeRunTogether(hooks, *context, stop_requester);
    if (!s.ok()) co_return s;
    any_asked =
        std::any_of(hook_args_.begin(), hook_args_.end(),
                    [](const RunArgs& a) { return !AsksForNothing(a); });
  } else {
    for (size_t h = 0; h < n; ++h) {
      absl::Status s;
      // Hooks called as plain functions, without this frame's overhead.
      h = BeforeRunSync(mode_hooks, h, *context, stop_requester, any_asked, s);
      if (!s.ok()) co_return s;
      if (h == n) break;
      RunArgs& asked = hook_args_[h];
      if (may_suspend_[h]) co_await asio::this_coro::throw_if_cancelled(true);
      try {
        absl::StatusOr<SessionRunArgs> r =
            co_await hooks[h]->BeforeRun(*context);
        s = r.status();
        if (r.ok()) asked = *std::move(r);
      } catch (...) {
        s = StatusFromException(std::current_exception(), "BeforeRun");
      }
      if (may_suspend_[h]) {
        co_await asio::this_coro::throw_if_cancelled(awaiter_throws);
      }
      if (!s.ok()) co_return s;
      any_asked = any_asked || !AsksForNothing(asked);
      note_stop(h);
    }
  }

  // ---- One graph run.
  const bool merge = any_asked;
  if (merge) {
    absl::Status s =
        MergeRunArgs(graph_, args, absl::MakeSpan(hook_args_), merged_);
    if (!s.ok()) co_return s;
  }
  // Also what keeps the await below from throwing (Asio's throw_if_cancelled
  // rule), whatever the awaiting coroutine's setting.
  if (IsCancelled(co_await asio::this_coro::cancellation_state)) {
    co_return absl::CancelledError("Step cancelled before the graph ran");
  }
  // (Named, not a conditional inside the co_await: g++ 12 mishandles
  // temporaries there.)
  const bool copied = merge && !merged_.only_fetches;
  const RunArgs& run_args = copied ? merged_.args : args;
  absl::Span<const Output> extra_fetches;
  if (merge && merged_.only_fetches) extra_fetches = merged_.extra_fetches;
  absl::StatusOr<RunOutputs> outputs =
      co_await RunGraph(session, run_args, extra_fetches, inline_step);
  if (!outputs.ok()) co_return std::move(outputs).status();

  // ---- AfterRun, each hook with its own results. Hooks that fetched
  // nothing share common_values_.
  if (n > 0) {
    PrepareHookValues(n, merge, run_args.options, *outputs);
    absl::Status after;
    if (together) {
      after = co_await AfterRunTogether(hooks, *context, stop_requester);
    } else {
      for (size_t h = 0; h < n; ++h) {
        h = AfterRunSync(mode_hooks, h, *context, stop_requester, after);
        if (!after.ok() || h == n) break;
        if (may_suspend_[h]) {
          co_await asio::this_coro::throw_if_cancelled(true);
        }
        try {
          after = co_await hooks[h]->AfterRun(*context, *values_[h]);
        } catch (...) {
          after = StatusFromException(std::current_exception(), "AfterRun");
        }
        if (may_suspend_[h]) {
          co_await asio::this_coro::throw_if_cancelled(awaiter_throws);
        }
        note_stop(h);
        if (!after.ok()) break;
      }
    }
    ReleaseHookValues(n, merge);
    if (!after.ok()) co_return after;
    if (IsCancelled(co_await asio::this_coro::cancellation_state)) {
      co_return absl::CancelledError("Step cancelled in AfterRun");
    }
    if (stop_requester >= 0) {
      *stop_reason = context->stop_reason();
      if (stop_reason->empty()) {
        *stop_reason = absl::StrCat("hook '", hooks[stop_requester]->name(),
                                    "' requested stop");
      }
    }
  }
  if (merge) outputs->values.resize(merged_.caller_fetches);
  co_return std::move(outputs->values);
}

}  // namespace cosession
