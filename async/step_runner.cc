#include "async/step_runner.h"

#include <algorithm>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <exception>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "async/completion.h"
#include "async/status_from_exception.h"
#include "async/task_group.h"

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

// True once the awaiting coroutine's cancellation was delivered; used as
// IsCancelled(co_await asio::this_coro::cancellation_state), which costs no
// coroutine frame.
bool IsCancelled(const asio::cancellation_state& state) {
  return state.cancelled() != asio::cancellation_type::none;
}

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

bool StepRunner::AnyHookMaySuspend(RunMode mode) const {
  const Hooks& hooks = ForMode(mode).hooks;
  return std::any_of(hooks.begin(), hooks.end(), [](const auto& hook) {
    return hook->MaySuspendInNextStep();
  });
}

asio::awaitable<absl::StatusOr<RunOutputs>> StepRunner::RunGraph(
    Session& session, const RunArgs& args, InlineStep* inline_step) {
  auto initiation = [](auto handler, Session* session, const RunArgs* args,
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
    Session::StartRun(session->state_, *args, run_slot,
                      PostToHandler<absl::StatusOr<RunOutputs>>(
                          std::move(handler),
                          [](absl::StatusOr<RunOutputs> r) { return r; }));
  };
  return asio::async_initiate<const asio::use_awaitable_t<>&,
                              void(absl::StatusOr<RunOutputs>)>(
      initiation, asio::use_awaitable, &session, &args, inline_step);
}

asio::awaitable<StepRunner::RunResult> StepRunner::Run(
    Session& session, const RunArgs& args, RunMode mode,
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
  // A hook that may suspend is awaited with Asio's default rule,
  // throw_if_cancelled(true), whatever the awaiting coroutine set for
  // itself: a stop that struck between two of the hook's waits then ends
  // the second wait instead of going unnoticed (docs/async_pitfalls.md, 2).
  bool awaiter_throws = true;
  hook_args_.clear();
  if (n > 0) {
    awaiter_throws = co_await asio::this_coro::throw_if_cancelled();
    context.emplace(args, session);
    may_suspend_.assign(n, 0);
    int suspending = 0;
    for (size_t h = 0; h < n; ++h) {
      may_suspend_[h] = hooks[h]->MaySuspendInNextStep() ? 1 : 0;
      suspending += may_suspend_[h];
    }
    together = concurrency_ == HookConcurrency::kConcurrent && suspending >= 2;
  }

  // ---- BeforeRun. hook_args_ stays empty while every hook called in turn
  // asks for nothing (the common case, kept cheap).
  if (together) {
    hook_args_.resize(n);
    TaskGroup group(co_await asio::this_coro::executor, "BeforeRun");
    for (size_t h = 0; h < n; ++h) {
      group.Spawn(BeforeRunInto(hooks[h], &*context, &hook_args_[h],
                                static_cast<int>(h), &stop_requester));
    }
    if (IsCancelled(co_await asio::this_coro::cancellation_state)) {
      group.CancelAll();
    }
    absl::Status s = co_await group.Join(asio::use_awaitable);
    if (!s.ok()) co_return s;
  } else if (n > 0) {
    SessionRunArgs asked;  // what a sync hook writes; moved out when not empty
    for (size_t h = 0; h < n; ++h) {
      absl::Status s;
      try {
        if (mode_hooks.sync[h] != nullptr && !may_suspend_[h]) {
          s = mode_hooks.sync[h]->BeforeRunSync(*context, asked);
        } else {
          co_await asio::this_coro::throw_if_cancelled(true);
          absl::StatusOr<SessionRunArgs> r =
              co_await hooks[h]->BeforeRun(*context);
          s = r.status();
          if (r.ok()) asked = *std::move(r);
        }
      } catch (...) {
        s = StatusFromException(std::current_exception(), "BeforeRun");
      }
      co_await asio::this_coro::throw_if_cancelled(awaiter_throws);
      if (!s.ok()) co_return s;
      if (!AsksForNothing(asked)) {
        hook_args_.resize(n);
        hook_args_[h] = std::exchange(asked, SessionRunArgs{});
      }
      note_stop(h);
    }
  }

  // ---- One graph run.
  const bool merge = std::any_of(
      hook_args_.begin(), hook_args_.end(),
      [](const RunArgs& a) { return !AsksForNothing(a); });
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
  const RunArgs& run_args = merge ? merged_.args : args;
  absl::StatusOr<RunOutputs> outputs =
      co_await RunGraph(session, run_args, inline_step);
  if (!outputs.ok()) co_return std::move(outputs).status();

  // ---- AfterRun, each hook with its own results. Hooks that fetched
  // nothing share `common`.
  if (n > 0) {
    SessionRunValues common;
    common.options = run_args.options;
    common.run_metadata = std::move(outputs->metadata);
    values_.assign(n, &common);
    if (merge) {
      own_values_.resize(n);
      for (size_t h = 0; h < n; ++h) {
        absl::Span<const Tensor> mine =
            merged_.HookResults(outputs->values, h);
        if (mine.empty()) continue;
        SessionRunValues& own = own_values_[h];
        own.results.assign(mine.begin(), mine.end());
        own.options = common.options;
        own.run_metadata = common.run_metadata;
        values_[h] = &own;
      }
    }
    absl::Status after;
    if (together) {
      TaskGroup group(co_await asio::this_coro::executor, "AfterRun");
      for (size_t h = 0; h < n; ++h) {
        group.Spawn(AfterRunNoting(hooks[h], &*context, values_[h],
                                   static_cast<int>(h), &stop_requester));
      }
      if (IsCancelled(co_await asio::this_coro::cancellation_state)) {
        group.CancelAll();
      }
      after = co_await group.Join(asio::use_awaitable);
    } else {
      for (size_t h = 0; h < n && after.ok(); ++h) {
        try {
          if (mode_hooks.sync[h] != nullptr && !may_suspend_[h]) {
            after = mode_hooks.sync[h]->AfterRunSync(*context, *values_[h]);
          } else {
            co_await asio::this_coro::throw_if_cancelled(true);
            after = co_await hooks[h]->AfterRun(*context, *values_[h]);
          }
        } catch (...) {
          after = StatusFromException(std::current_exception(), "AfterRun");
        }
        co_await asio::this_coro::throw_if_cancelled(awaiter_throws);
        note_stop(h);
      }
    }
    if (merge) {
      // Release this step's tensors now, keep the vectors' capacity.
      for (size_t h = 0; h < n; ++h) own_values_[h].results.clear();
    }
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
