#include "cosession/hooks/stop_at_step_hook.h"

#include "absl/strings/str_cat.h"
#include "cosession/graph/status.h"

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
  return step_.Find(graph, "StopAtStepHook");
}

boost::asio::awaitable<absl::Status> StopAtStepHook::AfterCreateSession(
    Session& session, Coordinator&) {
  absl::StatusOr<int64_t> step = co_await step_.Read(session);
  if (!step.ok()) co_return step.status();
  if (!last_step_.has_value()) last_step_ = *step + *num_steps_;
  co_return absl::OkStatus();
}

bool StopAtStepHook::MaySuspendInNextStep() const {
  std::optional<int64_t> expected = step_.ExpectedAfterNextStep();
  return read_due_ || !expected.has_value() || !last_step_.has_value() ||
         *expected >= *last_step_;
}

absl::Status StopAtStepHook::BeforeRunSync(SessionRunContext&,
                                           SessionRunArgs& args) {
  step_.AddFetch(args);
  return absl::OkStatus();
}

void StopAtStepHook::StopIfReached(SessionRunContext& context, int64_t step) {
  if (step < *last_step_) return;
  context.RequestStop(
      absl::StrCat("hook 'StopAtStepHook' requested stop: global step ", step,
                   " reached last step ", *last_step_));
}

absl::Status StopAtStepHook::AfterRunSync(SessionRunContext& context,
                                          const SessionRunValues& values) {
  if (!last_step_.has_value()) {
    return absl::FailedPreconditionError(
        "StopAtStepHook: AfterRun before AfterCreateSession");
  }
  absl::StatusOr<int64_t> fetched = step_.TakeFetched(values);
  if (!fetched.ok()) return fetched.status();
  // A step that was not expected to reach the last step (another worker's
  // increments) and may have: a fetched value at or past it decides; one
  // below it, with this step's increment perhaps not in it, is read again
  // after the next step, which suspends for that.
  StopIfReached(context, *fetched);
  if (*fetched < *last_step_ && step_.EstimatedAfter() >= *last_step_) {
    read_due_ = true;
  }
  return absl::OkStatus();
}

boost::asio::awaitable<absl::Status> StopAtStepHook::AfterRun(
    SessionRunContext& context, const SessionRunValues& values) {
  if (!last_step_.has_value()) {
    co_return absl::FailedPreconditionError(
        "StopAtStepHook: AfterRun before AfterCreateSession");
  }
  absl::Status fetched = step_.TakeFetched(values).status();
  if (!fetched.ok()) co_return fetched;
  if (!read_due_ && step_.EstimatedAfter() < *last_step_) {
    co_return absl::OkStatus();
  }
  read_due_ = false;
  // The value fetched may predate this step's update: read it again.
  absl::StatusOr<int64_t> step = co_await step_.Read(context.session());
  if (!step.ok()) co_return step.status();
  StopIfReached(context, *step);
  co_return absl::OkStatus();
}

}  // namespace cosession
