#include "cosession/hooks/logging_tensor_hook.h"

#include <boost/asio/use_awaitable.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace cosession {

absl::StatusOr<std::shared_ptr<LoggingTensorHook>> LoggingTensorHook::Create(
    LoggingTensorHookOptions options) {
  if (options.tensors.empty() && options.tensor_names.empty()) {
    return absl::InvalidArgumentError(
        "LoggingTensorHook: tensors and tensor_names are both empty");
  }
  for (const Output& t : options.tensors) {
    if (!t.valid()) {
      return absl::InvalidArgumentError(
          "LoggingTensorHook: tensors holds an empty Output");
    }
  }
  const bool only_at_end =
      options.at_end && !options.every_n_iter && !options.every_n_secs;
  if (!only_at_end &&
      options.every_n_iter.has_value() == options.every_n_secs.has_value()) {
    return absl::InvalidArgumentError(
        "LoggingTensorHook: set at_end and/or exactly one of every_n_iter and "
        "every_n_secs");
  }
  if (options.every_n_iter && *options.every_n_iter <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoggingTensorHook: every_n_iter must be positive, got ",
                     *options.every_n_iter));
  }
  if (options.every_n_secs && *options.every_n_secs <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoggingTensorHook: every_n_secs must be positive, got ",
                     absl::FormatDuration(*options.every_n_secs)));
  }
  std::optional<SecondOrStepTimer> timer;
  if (!only_at_end) {
    Clock& clock = options.clock ? *options.clock : SystemClock();
    auto made = SecondOrStepTimer::Create(options.every_n_secs,
                                          options.every_n_iter, clock);
    if (!made.ok()) return made.status();
    timer = *made;
  }
  options.sink = SinkOrStderr(std::move(options.sink));
  return std::shared_ptr<LoggingTensorHook>(
      new LoggingTensorHook(std::move(options), std::move(timer)));
}

LoggingTensorHook::LoggingTensorHook(LoggingTensorHookOptions options,
                                     std::optional<SecondOrStepTimer> timer)
    : options_(std::move(options)), timer_(std::move(timer)) {}

absl::Status LoggingTensorHook::Begin(Graph& graph) {
  if (timer_) timer_->Reset();
  iteration_ = 0;
  tags_.clear();
  fetches_.clear();
  for (const Output& t : options_.tensors) {
    tags_.push_back(t.name());
    fetches_.push_back(t);
  }
  for (const std::string& name : options_.tensor_names) {
    auto found = graph.FindOutput(name);
    if (!found.ok()) {
      return absl::Status(
          found.status().code(),
          absl::StrCat("LoggingTensorHook: ", found.status().message()));
    }
    tags_.push_back(name);
    fetches_.push_back(*found);
  }
  return absl::OkStatus();
}

absl::Status LoggingTensorHook::BeforeRunSync(SessionRunContext&,
                                              SessionRunArgs& args) {
  should_trigger_ = timer_ && timer_->ShouldTriggerForStep(iteration_);
  if (should_trigger_) args.fetches = fetches_;
  return absl::OkStatus();
}

absl::Status LoggingTensorHook::AfterRunSync(SessionRunContext&,
                                             const SessionRunValues& values) {
  if (should_trigger_) Log(values.results);
  ++iteration_;
  return absl::OkStatus();
}

boost::asio::awaitable<absl::Status> LoggingTensorHook::End(Session& session) {
  if (!options_.at_end) co_return absl::OkStatus();
  RunArgs args;
  args.fetches = fetches_;
  auto values =
      co_await session.Run(std::move(args), boost::asio::use_awaitable);
  if (!values.ok()) co_return values.status();
  Log(*values);
  co_return absl::OkStatus();
}

void LoggingTensorHook::Log(const std::vector<Tensor>& values) {
  std::optional<SecondOrStepTimer::Elapsed> elapsed;
  if (timer_) elapsed = timer_->UpdateLastTriggeredStep(iteration_);
  if (options_.formatter) {
    TensorValues by_tag;
    for (size_t i = 0; i < tags_.size() && i < values.size(); ++i) {
      by_tag.emplace(tags_[i], values[i]);
    }
    options_.sink(options_.formatter(by_tag));
    return;
  }
  std::vector<std::string> parts;
  for (size_t i = 0; i < tags_.size() && i < values.size(); ++i) {
    parts.push_back(absl::StrCat(tags_[i], " = ", values[i].DebugString()));
  }
  std::string line = absl::StrJoin(parts, ", ");
  if (elapsed) {
    absl::StrAppend(
        &line,
        absl::StrFormat(" (%.3f sec)", absl::ToDoubleSeconds(elapsed->time)));
  }
  options_.sink(std::move(line));
}

}  // namespace cosession
