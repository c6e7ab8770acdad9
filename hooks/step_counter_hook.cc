#include "hooks/step_counter_hook.h"

#include <boost/asio/use_awaitable.hpp>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "graph/ops.h"
#include "hooks/global_step_read.h"

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
    std::cerr << line << '\n';
  }
}

absl::Status StepCounterHook::Begin(Graph& graph) {
  auto global_step = GetGlobalStep(graph);
  if (!global_step.ok()) {
    return absl::Status(global_step.status().code(),
                        absl::StrCat("StepCounterHook needs a global step: ",
                                     global_step.status().message()));
  }
  global_step_ = *global_step;
  writer_ = options_.summary_writer;
  if (writer_ == nullptr && !options_.output_dir.empty()) {
    auto writer = SummaryWriterCache::Get(options_.output_dir);
    if (!writer.ok()) return writer.status();
    writer_ = *std::move(writer);
  }
  return absl::OkStatus();
}

boost::asio::awaitable<absl::StatusOr<SessionRunArgs>>
StepCounterHook::BeforeRun(SessionRunContext&) {
  SessionRunArgs args;
  args.fetches.push_back(global_step_);
  co_return args;
}

boost::asio::awaitable<absl::Status> StepCounterHook::AfterRun(
    SessionRunContext& context, const SessionRunValues& values) {
  auto stale = FetchedGlobalStep(values.results, "StepCounterHook");
  if (!stale.ok()) co_return stale.status();
  const int64_t stale_global_step = *stale;
  if (timer_.ShouldTriggerForStep(estimate_.After(stale_global_step))) {
    // The real value, after this step's increment.
    auto global_step =
        co_await ReadGlobalStep(&context.session(), global_step_);
    if (!global_step.ok()) co_return global_step.status();
    estimate_.Learn(stale_global_step, *global_step);
    if (timer_.ShouldTriggerForStep(*global_step)) {
      auto elapsed = timer_.UpdateLastTriggeredStep(*global_step);
      if (elapsed && elapsed->time > absl::ZeroDuration()) {
        const double steps_per_sec = static_cast<double>(elapsed->steps) /
                                     absl::ToDoubleSeconds(elapsed->time);
        if (writer_ != nullptr) {
          writer_->AddScalar(kTag, static_cast<float>(steps_per_sec),
                             *global_step);
        }
        Log(absl::StrFormat("%s: %g", kTag, steps_per_sec));
      }
    }
  }
  if (last_global_step_ == stale_global_step && not_increasing_warnings_ < 5) {
    ++not_increasing_warnings_;
    Log(absl::StrCat(
        "WARNING: It seems that global step has not been increased. Current "
        "value (could be stable): ",
        stale_global_step, " vs previous value: ", *last_global_step_,
        ". You could increase the global step by adding an AssignAdd of "
        "global_step to the training op."));
  }
  last_global_step_ = stale_global_step;
  co_return absl::OkStatus();
}

boost::asio::awaitable<absl::Status> StepCounterHook::End(Session&) {
  if (writer_ == nullptr) co_return absl::OkStatus();
  co_return co_await writer_->AsyncFlush(boost::asio::use_awaitable);
}

}  // namespace cosession
