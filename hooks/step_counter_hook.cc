#include "cosession/hooks/step_counter_hook.h"

#include <boost/asio/use_awaitable.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cosession/graph/status.h"
#include "cosession/hooks/detail/hook_util.h"
#include "cosession/hooks/log_sink.h"

namespace cosession {

absl::StatusOr<std::shared_ptr<StepCounterHook>> StepCounterHook::Create(
    StepCounterHookOptions options) {
  if (options.every_n_steps.has_value() == options.every_n_secs.has_value()) {
    return absl::InvalidArgumentError(
        "StepCounterHook: exactly one of every_n_steps and every_n_secs must "
        "be set");
  }
  if (options.steps_per_run < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("StepCounterHook: steps_per_run must be >= 1, got ",
                     options.steps_per_run));
  }
  Clock& clock = options.clock != nullptr ? *options.clock : SystemClock();
  auto timer = SecondOrStepTimer::Create(options.every_n_secs,
                                         options.every_n_steps, clock);
  if (!timer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("StepCounterHook: ", timer.status().message()));
  }
  return std::shared_ptr<StepCounterHook>(
      new StepCounterHook(std::move(options), *std::move(timer)));
}

void StepCounterHook::Log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    StderrLogSink()(line);
  }
}

absl::Status StepCounterHook::Begin(Graph& graph) {
  COSESSION_RETURN_IF_ERROR(step_.Find(graph, "StepCounterHook"));
  writer_ = nullptr;  // no writer and no output_dir: no summaries
  if (options_.summary_writer != nullptr || !options_.output_dir.empty()) {
    auto writer = hooks_detail::SummaryWriterFor(options_.summary_writer,
                                                 options_.output_dir);
    if (!writer.ok()) return writer.status();
    writer_ = *std::move(writer);
  }
  return absl::OkStatus();
}

bool StepCounterHook::MaySuspendInNextStep() const {
  std::optional<int64_t> expected = step_.ExpectedAfterNextStep();
  return !expected.has_value() || timer_.ShouldTriggerForStep(*expected);
}

absl::Status StepCounterHook::BeforeRunSync(SessionRunContext&,
                                            SessionRunArgs& args) {
  step_.AddFetch(args);
  return absl::OkStatus();
}

void StepCounterHook::MaybeTrigger(int64_t global_step) {
  if (!timer_.ShouldTriggerForStep(global_step)) return;
  auto elapsed = timer_.UpdateLastTriggeredStep(global_step);
  if (!elapsed || elapsed->time <= absl::ZeroDuration()) return;
  const double steps_per_sec = static_cast<double>(elapsed->steps) /
                               absl::ToDoubleSeconds(elapsed->time);
  if (writer_ != nullptr) {
    writer_->AddScalar(kTag, static_cast<float>(steps_per_sec), global_step);
  }
  Log(absl::StrFormat("%s: %g", kTag, steps_per_sec));
}

void StepCounterHook::CheckIncreasing(int64_t fetched) {
  if (last_fetched_ == fetched && not_increasing_warnings_ < 5) {
    ++not_increasing_warnings_;
    Log(absl::StrCat(
        "WARNING: It seems that global step has not been increased. Current "
        "value (could be stable): ",
        fetched, " vs previous value: ", *last_fetched_,
        ". You could increase the global step by adding an AssignAdd of "
        "global_step to the training op."));
  }
  last_fetched_ = fetched;
}

absl::Status StepCounterHook::AfterRunSync(SessionRunContext&,
                                           const SessionRunValues& values) {
  absl::StatusOr<int64_t> fetched = step_.TakeFetched(values);
  if (!fetched.ok()) return fetched.status();
  MaybeTrigger(step_.EstimatedAfter());
  CheckIncreasing(*fetched);
  return absl::OkStatus();
}

boost::asio::awaitable<absl::Status> StepCounterHook::AfterRun(
    SessionRunContext& context, const SessionRunValues& values) {
  absl::StatusOr<int64_t> fetched = step_.TakeFetched(values);
  if (!fetched.ok()) co_return fetched.status();
  if (timer_.ShouldTriggerForStep(step_.EstimatedAfter())) {
    // The real value, after this step's increment.
    absl::StatusOr<int64_t> global_step =
        co_await step_.Read(context.session());
    if (!global_step.ok()) co_return global_step.status();
    MaybeTrigger(*global_step);
  }
  CheckIncreasing(*fetched);
  co_return absl::OkStatus();
}

boost::asio::awaitable<absl::Status> StepCounterHook::End(Session&) {
  if (writer_ == nullptr) co_return absl::OkStatus();
  co_return co_await writer_->AsyncFlush(boost::asio::use_awaitable);
}

}  // namespace cosession
