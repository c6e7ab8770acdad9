#include "hooks/profiler_hook.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "graph/ops.h"
#include "hooks/global_step_read.h"

namespace cosession {

absl::StatusOr<std::shared_ptr<ProfilerHook>> ProfilerHook::Create(
    ProfilerHookOptions options) {
  if (options.save_steps.has_value() == options.save_secs.has_value()) {
    return absl::InvalidArgumentError(
        "ProfilerHook: exactly one of save_steps and save_secs must be set");
  }
  if (options.output_dir.empty()) {
    return absl::InvalidArgumentError("ProfilerHook: output_dir is empty");
  }
  Clock& clock = options.clock != nullptr ? *options.clock : SystemClock();
  auto timer =
      SecondOrStepTimer::Create(options.save_secs, options.save_steps, clock);
  if (!timer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ProfilerHook: ", timer.status().message()));
  }
  return std::shared_ptr<ProfilerHook>(
      new ProfilerHook(std::move(options), *std::move(timer)));
}

std::string ProfilerHook::TimelinePath(int64_t global_step) const {
  return absl::StrCat(options_.output_dir, "/timeline-", global_step, ".json");
}

absl::Status ProfilerHook::Begin(Graph& graph) {
  auto global_step = GetGlobalStep(graph);
  if (!global_step.ok()) {
    return absl::Status(global_step.status().code(),
                        absl::StrCat("ProfilerHook needs a global step: ",
                                     global_step.status().message()));
  }
  global_step_ = *global_step;
  std::error_code ec;
  std::filesystem::create_directories(options_.output_dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("ProfilerHook: cannot create '", options_.output_dir,
                     "': ", ec.message()));
  }
  next_step_.reset();
  return absl::OkStatus();
}

boost::asio::awaitable<absl::StatusOr<SessionRunArgs>> ProfilerHook::BeforeRun(
    SessionRunContext&) {
  request_trace_ =
      next_step_.has_value() && timer_.ShouldTriggerForStep(*next_step_);
  SessionRunArgs args;
  args.fetches.push_back(global_step_);
  if (request_trace_) args.options.trace_level = RunOptions::kFullTrace;
  co_return args;
}

boost::asio::awaitable<absl::Status> ProfilerHook::AfterRun(
    SessionRunContext& context, const SessionRunValues& values) {
  auto stale = FetchedGlobalStep(values.results, "ProfilerHook");
  if (!stale.ok()) co_return stale.status();
  if (!next_step_.has_value()) {
    // Learn where the fetch stands (once), then start the timer at the step
    // before this run, so that it fires only after N steps or seconds.
    auto real = co_await ReadGlobalStep(&context.session(), global_step_);
    if (!real.ok()) co_return real.status();
    estimate_.Learn(*stale, *real);
    timer_.UpdateLastTriggeredStep(estimate_.Before(*stale));
  }
  int64_t global_step = estimate_.After(*stale);
  if (request_trace_) {
    auto real = co_await ReadGlobalStep(&context.session(), global_step_);
    if (!real.ok()) co_return real.status();
    global_step = *real;
    estimate_.Learn(*stale, global_step);
    timer_.UpdateLastTriggeredStep(global_step);
    absl::Status written = WriteChromeTrace(
        values.run_metadata, TimelinePath(global_step), options_.trace);
    if (!written.ok()) co_return written;
  }
  next_step_ = global_step + 1;
  co_return absl::OkStatus();
}

}  // namespace cosession
