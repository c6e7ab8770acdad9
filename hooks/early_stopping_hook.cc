#include "cosession/hooks/early_stopping_hook.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "cosession/hooks/detail/hook_util.h"

namespace cosession {

absl::StatusOr<std::shared_ptr<EarlyStoppingHook>> EarlyStoppingHook::Create(
    EarlyStoppingHookOptions options) {
  if (!options.metric.valid()) {
    return absl::InvalidArgumentError(
        "EarlyStoppingHook: metric is an empty Output");
  }
  if (options.metric.dtype() == DType::kBool) {
    return absl::InvalidArgumentError(
        absl::StrCat("EarlyStoppingHook: metric '", options.metric.name(),
                     "' must be numeric"));
  }
  if (options.patience < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "EarlyStoppingHook: patience must be >= 1, got ", options.patience));
  }
  if (options.every_n_steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("EarlyStoppingHook: every_n_steps must be >= 1, got ",
                     options.every_n_steps));
  }
  if (!(options.min_delta >= 0.0)) {  // also rejects NaN
    return absl::InvalidArgumentError(absl::StrCat(
        "EarlyStoppingHook: min_delta must be >= 0, got ", options.min_delta));
  }
  options.sink = SinkOrStderr(std::move(options.sink));
  return std::shared_ptr<EarlyStoppingHook>(
      new EarlyStoppingHook(std::move(options)));
}

absl::Status EarlyStoppingHook::Begin(Graph& graph) {
  return step_.Find(graph, "EarlyStoppingHook");
}

boost::asio::awaitable<absl::StatusOr<SessionRunArgs>>
EarlyStoppingHook::BeforeRun(SessionRunContext&) {
  evaluate_ = iteration_ % options_.every_n_steps == 0;
  SessionRunArgs args;
  if (evaluate_) args.fetches.push_back(options_.metric);
  co_return args;
}

bool EarlyStoppingHook::Improves(double value) const {
  if (!best_value_) return !std::isnan(value);
  if (options_.mode == EarlyStoppingMode::kMin) {
    return value < *best_value_ - options_.min_delta;
  }
  return value > *best_value_ + options_.min_delta;
}

boost::asio::awaitable<absl::Status> EarlyStoppingHook::AfterRun(
    SessionRunContext& context, const SessionRunValues& values) {
  ++iteration_;
  if (!evaluate_) co_return absl::OkStatus();
  const std::string name = hooks_detail::DisplayName(options_.metric);
  auto value = hooks_detail::ScalarAsDouble(
      values.results.at(0),
      absl::StrCat("EarlyStoppingHook: metric '", name, "'"));
  if (!value.ok()) co_return value.status();
  absl::StatusOr<int64_t> step = co_await step_.Read(context.session());
  if (!step.ok()) co_return step.status();
  ++evaluations_;
  if (Improves(*value)) {
    best_value_ = *value;
    best_step_ = *step;
    without_ = 0;
    co_return absl::OkStatus();
  }
  ++without_;
  if (without_ < options_.patience) co_return absl::OkStatus();
  std::string why = absl::StrCat("'", name, "' did not improve for ", without_,
                                 " evaluations");
  if (best_value_) {
    absl::StrAppend(&why, " (best ", *best_value_, " at step ", *best_step_,
                    ")");
  }
  options_.sink(
      absl::StrCat("EarlyStoppingHook: stopping at step ", *step, ": ", why));
  context.RequestStop(
      absl::StrCat("hook 'EarlyStoppingHook' requested stop: ", why));
  co_return absl::OkStatus();
}

}  // namespace cosession
