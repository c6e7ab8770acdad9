#include "cosession/hooks/profiler_hook.h"

#include <algorithm>
#include <boost/asio/use_awaitable.hpp>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "cosession/graph/status.h"
#include "cosession/hooks/detail/hook_util.h"
#include "cosession/io/atomic_file.h"
#include "cosession/io/run_metadata_proto.h"

namespace cosession {
namespace {

constexpr absl::string_view kTimelinePrefix = "timeline-";

}  // namespace

absl::StatusOr<std::shared_ptr<ProfilerHook>> ProfilerHook::Create(
    ProfilerHookOptions options) {
  if (options.save_steps.has_value() == options.save_secs.has_value()) {
    return absl::InvalidArgumentError(
        "ProfilerHook: exactly one of save_steps and save_secs must be set");
  }
  if (options.output_dir.empty()) {
    return absl::InvalidArgumentError("ProfilerHook: output_dir is empty");
  }
  if (options.max_timelines < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ProfilerHook: max_timelines must be >= 0, got ",
                     options.max_timelines));
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
  return absl::StrCat(options_.output_dir, "/", kTimelinePrefix, global_step,
                      ".json");
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
  RemoveStaleTempFiles(options_.output_dir, kTimelinePrefix);
  auto writer = hooks_detail::SummaryWriterFor(options_.summary_writer,
                                               options_.output_dir);
  if (!writer.ok()) return writer.status();
  writer_ = *std::move(writer);
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
  COSESSION_RETURN_IF_ERROR(WriteChromeTrace(
      values.run_metadata, TimelinePath(global_step), options_.trace));
  writer_->AddEvent(
      Event{.what = TaggedRunMetadata{absl::StrCat("step_", global_step),
                                      EncodeRunMetadata(values.run_metadata)}});
  if (options_.max_timelines > 0) RemoveOldTimelines();
  return absl::OkStatus();
}

void ProfilerHook::RemoveOldTimelines() const {
  std::vector<std::pair<int64_t, std::filesystem::path>> timelines;
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator(options_.output_dir, ec)) {
    const std::string name = entry.path().filename().string();
    absl::string_view step = name;
    int64_t n;
    if (absl::ConsumePrefix(&step, kTimelinePrefix) &&
        absl::ConsumeSuffix(&step, ".json") && absl::SimpleAtoi(step, &n)) {
      timelines.emplace_back(n, entry.path());
    }
  }
  if (timelines.size() <= static_cast<size_t>(options_.max_timelines)) return;
  std::sort(timelines.begin(), timelines.end());
  const size_t doomed = timelines.size() - options_.max_timelines;
  for (size_t i = 0; i < doomed; ++i) {
    std::filesystem::remove(timelines[i].second, ec);  // best effort
  }
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

boost::asio::awaitable<absl::Status> ProfilerHook::End(Session&) {
  if (writer_ == nullptr) co_return absl::OkStatus();
  co_return co_await writer_->AsyncFlush(boost::asio::use_awaitable);
}

}  // namespace cosession
