#include "cosession/hooks/summary_saver_hook.h"

#include <boost/asio/use_awaitable.hpp>

#include "absl/strings/str_cat.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/status.h"
#include "cosession/hooks/detail/hook_util.h"

namespace cosession {
namespace {

absl::Status CheckTensors(
    const std::vector<std::pair<std::string, Output>>& tensors,
    const char* option) {
  for (const auto& [tag, output] : tensors) {
    if (tag.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("SummarySaverHook: an empty tag in ", option));
    }
    if (!output.valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SummarySaverHook: ", option, " '", tag, "' has no tensor"));
    }
  }
  return absl::OkStatus();
}

float ScalarAsFloat(const Tensor& t) {
  return VisitDType(t.dtype(), [&]<typename T>() {
    return static_cast<float>(t.flat<T>()[0]);
  });
}

}  // namespace

absl::StatusOr<std::shared_ptr<SummarySaverHook>> SummarySaverHook::Create(
    SummarySaverHookOptions options) {
  if (options.save_steps.has_value() == options.save_secs.has_value()) {
    return absl::InvalidArgumentError(
        "SummarySaverHook: exactly one of save_steps and save_secs must be "
        "set");
  }
  if (options.scalars.empty() && options.histograms.empty()) {
    return absl::InvalidArgumentError(
        "SummarySaverHook: no scalars or histograms to summarise");
  }
  if (options.output_dir.empty() && options.summary_writer == nullptr) {
    return absl::InvalidArgumentError(
        "SummarySaverHook: one of output_dir and summary_writer must be set");
  }
  if (auto s = CheckTensors(options.scalars, "scalars"); !s.ok()) return s;
  if (auto s = CheckTensors(options.histograms, "histograms"); !s.ok()) {
    return s;
  }
  Clock& clock = options.clock != nullptr ? *options.clock : SystemClock();
  auto timer =
      SecondOrStepTimer::Create(options.save_secs, options.save_steps, clock);
  if (!timer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SummarySaverHook: ", timer.status().message()));
  }
  return std::shared_ptr<SummarySaverHook>(
      new SummarySaverHook(std::move(options), *std::move(timer)));
}

absl::Status SummarySaverHook::Begin(Graph& graph) {
  COSESSION_RETURN_IF_ERROR(step_.Find(graph, "SummarySaverHook"));
  auto writer = hooks_detail::SummaryWriterFor(options_.summary_writer,
                                               options_.output_dir);
  if (!writer.ok()) return writer.status();
  writer_ = *std::move(writer);
  next_step_.reset();
  return absl::OkStatus();
}

boost::asio::awaitable<absl::Status> SummarySaverHook::AfterCreateSession(
    Session&, Coordinator&) {
  start_pending_ = true;
  co_return absl::OkStatus();
}

bool SummarySaverHook::WantsSummaries() const {
  return !next_step_.has_value() || timer_.ShouldTriggerForStep(*next_step_);
}

absl::Status SummarySaverHook::BeforeRunSync(SessionRunContext&,
                                             SessionRunArgs& args) {
  request_summary_ = WantsSummaries();
  step_.AddFetch(args);
  if (request_summary_) {
    for (const auto& [tag, output] : options_.scalars) {
      args.fetches.push_back(output);
    }
    for (const auto& [tag, output] : options_.histograms) {
      args.fetches.push_back(output);
    }
  }
  return absl::OkStatus();
}

absl::Status SummarySaverHook::Write(const SessionRunValues& values,
                                     int64_t global_step) {
  if (start_pending_) {
    writer_->AddSessionLog(SessionLog::kStart, global_step);
    start_pending_ = false;
  }
  if (request_summary_) {
    timer_.UpdateLastTriggeredStep(global_step);
    const size_t expected =
        1 + options_.scalars.size() + options_.histograms.size();
    if (values.results.size() != expected) {
      return absl::InternalError(absl::StrCat("SummarySaverHook: expected ",
                                              expected, " results, got ",
                                              values.results.size()));
    }
    size_t i = 1;
    for (const auto& [tag, output] : options_.scalars) {
      const Tensor& value = values.results[i++];
      if (value.NumElements() != 1 || !value.IsInitialized()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "SummarySaverHook: scalar '", tag, "' is a tensor of shape ",
            value.shape().DebugString(), ", not a single value"));
      }
      writer_->AddScalar(tag, ScalarAsFloat(value), global_step);
    }
    for (const auto& [tag, output] : options_.histograms) {
      COSESSION_RETURN_IF_ERROR(
          writer_->AddHistogram(tag, values.results[i++], global_step));
    }
  }
  next_step_ = global_step + 1;
  return absl::OkStatus();
}

absl::Status SummarySaverHook::AfterRunSync(SessionRunContext&,
                                            const SessionRunValues& values) {
  COSESSION_RETURN_IF_ERROR(step_.TakeFetched(values).status());
  return Write(values, step_.EstimatedAfter());
}

boost::asio::awaitable<absl::Status> SummarySaverHook::AfterRun(
    SessionRunContext& context, const SessionRunValues& values) {
  absl::Status fetched = step_.TakeFetched(values).status();
  if (!fetched.ok()) co_return fetched;
  int64_t global_step = step_.EstimatedAfter();
  if (!next_step_.has_value() || request_summary_ || start_pending_) {
    absl::StatusOr<int64_t> real = co_await step_.Read(context.session());
    if (!real.ok()) co_return real.status();
    global_step = *real;
  }
  co_return Write(values, global_step);
}

boost::asio::awaitable<absl::Status> SummarySaverHook::End(Session&) {
  co_return co_await writer_->AsyncFlush(boost::asio::use_awaitable);
}

}  // namespace cosession
