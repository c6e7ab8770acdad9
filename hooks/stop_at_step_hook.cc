#include "hooks/stop_at_step_hook.h"

#include "absl/strings/str_cat.h"
#include "hooks/detail/hook_util.h"

namespace cosession {

absl::StatusOr<std::shared_ptr<StopAtStepHook>> StopAtStepHook::Create(
    StopAtStepHookOptions options) {
  if (options.num_steps.has_value() == options.last_step.has_value()) {
    return absl::InvalidArgumentError(
        "StopAtStepHook: exactly one of num_steps and last_step must be set");
  }
  if (options.num_steps && *options.num_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "StopAtStepHook: num_steps must be >= 0, got ", *options.num_steps));
  }
  return std::shared_ptr<StopAtStepHook>(new StopAtStepHook(options));
}

StopAtStepHook::StopAtStepHook(StopAtStepHookOptions options)
    : num_steps_(options.num_steps), last_step_(options.last_step) {}

absl::Status StopAtStepHook::Begin(Graph& graph) {
  auto step = hooks_detail::FindGlobalStepFor(graph, "StopAtStepHook");
  if (!step.ok()) return step.status();
  global_step_ = *step;
  return absl::OkStatus();
}

boost::asio::awaitable<absl::Status> StopAtStepHook::AfterCreateSession(
    Session& session, Coordinator&) {
  if (last_step_.has_value()) co_return absl::OkStatus();
  auto step = co_await hooks_detail::ReadInt64(session, global_step_);
  if (!step.ok()) co_return step.status();
  last_step_ = *step + *num_steps_;
  co_return absl::OkStatus();
}

boost::asio::awaitable<absl::StatusOr<SessionRunArgs>>
StopAtStepHook::BeforeRun(SessionRunContext&) {
  SessionRunArgs args;
  args.fetches.push_back(global_step_);
  co_return args;
}

boost::asio::awaitable<absl::Status> StopAtStepHook::AfterRun(
    SessionRunContext& context, const SessionRunValues& values) {
  if (!last_step_.has_value()) {
    co_return absl::FailedPreconditionError(
        "StopAtStepHook: AfterRun before AfterCreateSession");
  }
  auto stale =
      hooks_detail::ScalarAsInt64(values.results.at(0), global_step_.name());
  if (!stale.ok()) co_return stale.status();
  if (*stale + 1 < *last_step_) co_return absl::OkStatus();
  // The value fetched may predate this step's update: read it again.
  auto step = co_await hooks_detail::ReadInt64(context.session(), global_step_);
  if (!step.ok()) co_return step.status();
  if (*step >= *last_step_) {
    context.RequestStop(
        absl::StrCat("hook 'StopAtStepHook' requested stop: global step ",
                     *step, " reached last step ", *last_step_));
  }
  co_return absl::OkStatus();
}

}  // namespace cosession
