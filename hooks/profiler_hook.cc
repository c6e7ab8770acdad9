#include "hooks/profiler_hook.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "graph/status.h"

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
  COSESSION_RETURN_IF_ERROR(step_.Find(graph, "ProfilerHook"));
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

absl::Status ProfilerHook::BeforeRunSync(SessionRunContext&,
                                         SessionRunArgs& args) {
  request_trace_ = WantsTrace();
  step_.AddFetch(args);
  if (request_trace_) args.options.trace_level = RunOptions::kFullTrace;
  return absl::OkStatus();
}

absl::Status ProfilerHook::WriteTrace(const SessionRunValues& values,
                                      int64_t global_step) {
  timer_.UpdateLastTriggeredStep(global_step);
  return WriteChromeTrace(values.run_metadata, TimelinePath(global_step),
                          options_.trace);
}

absl::Status ProfilerHook::AfterRunSync(SessionRunContext&,
                                        const SessionRunValues& values) {
  COSESSION_RETURN_IF_ERROR(step_.TakeFetched(values).status());
  const int64_t global_step = step_.EstimatedAfter();
  if (request_trace_)
    COSESSION_RETURN_IF_ERROR(WriteTrace(values, global_step));
  next_step_ = global_step + 1;
  return absl::OkStatus();
}

boost::asio::awaitable<absl::Status> ProfilerHook::AfterRun(
    SessionRunContext& context, const SessionRunValues& values) {
  absl::Status fetched = step_.TakeFetched(values).status();
  if (!fetched.ok()) co_return fetched;
  if (!next_step_.has_value()) {
    // Learn where the fetch stands (once), then start the timer at the step
    // before this run, so that it fires only after N steps or seconds.
    absl::StatusOr<int64_t> real = co_await step_.Read(context.session());
    if (!real.ok()) co_return real.status();
    timer_.UpdateLastTriggeredStep(step_.EstimatedBefore());
  }
  int64_t global_step = step_.EstimatedAfter();
  if (request_trace_) {
    absl::StatusOr<int64_t> real = co_await step_.Read(context.session());
    if (!real.ok()) co_return real.status();
    global_step = *real;
    absl::Status written = WriteTrace(values, global_step);
    if (!written.ok()) co_return written;
  }
  next_step_ = global_step + 1;
  co_return absl::OkStatus();
}

}  // namespace cosession
