#include "cosession/hooks/progress_hook.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cosession/graph/status.h"
#include "cosession/hooks/detail/hook_util.h"

namespace cosession {
namespace {

// "17s", "2m05s", "1h02m".
std::string FormatEta(double seconds) {
  const int64_t s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
}

std::string FormatMetric(const Output& metric, const Tensor& value) {
  std::string text;
  auto number = hooks_detail::ScalarAsDouble(value, metric.name());
  if (number.ok()) {
    text = absl::StrFormat("%.4g", *number);
  } else {
    text = value.DebugString(4);
  }
  return absl::StrCat(hooks_detail::DisplayName(metric), "=", text);
}

}  // namespace

absl::StatusOr<std::shared_ptr<ProgressHook>> ProgressHook::Create(
    ProgressHookOptions options) {
  if (options.every_n_steps && options.every_n_secs) {
    return absl::InvalidArgumentError(
        "ProgressHook: set at most one of every_n_steps and every_n_secs");
  }
  if (!options.every_n_steps && !options.every_n_secs) {
    options.every_n_steps = 100;
  }
  if (options.every_n_steps && *options.every_n_steps <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ProgressHook: every_n_steps must be positive, got ",
                     *options.every_n_steps));
  }
  if (options.every_n_secs && *options.every_n_secs <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ProgressHook: every_n_secs must be positive, got ",
                     absl::FormatDuration(*options.every_n_secs)));
  }
  if (options.bar_width < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ProgressHook: bar_width must be >= 1, got ", options.bar_width));
  }
  for (const Output& m : options.metrics) {
    if (!m.valid()) {
      return absl::InvalidArgumentError(
          "ProgressHook: metrics holds an empty Output");
    }
  }
  Clock& clock = options.clock ? *options.clock : SystemClock();
  auto timer = SecondOrStepTimer::Create(options.every_n_secs,
                                         options.every_n_steps, clock);
  if (!timer.ok()) return timer.status();
  return std::shared_ptr<ProgressHook>(
      new ProgressHook(std::move(options), *timer));
}

ProgressHook::ProgressHook(ProgressHookOptions options, SecondOrStepTimer timer)
    : options_(std::move(options)),
      timer_(timer),
      console_(options_.console ? options_.console : &Console::Stdout()),
      clock_(options_.clock ? options_.clock : &SystemClock()) {}

absl::Status ProgressHook::Begin(Graph& graph) {
  COSESSION_RETURN_IF_ERROR(step_.Find(graph, "ProgressHook"));
  timer_.Reset();
  next_step_.reset();
  first_step_.reset();
  metric_values_.clear();
  return absl::OkStatus();
}

absl::Status ProgressHook::BeforeRunSync(SessionRunContext&,
                                         SessionRunArgs& args) {
  step_.AddFetch(args);
  args.fetches.insert(args.fetches.end(), options_.metrics.begin(),
                      options_.metrics.end());
  return absl::OkStatus();
}

absl::Status ProgressHook::TakeMetrics(const SessionRunValues& values) {
  COSESSION_RETURN_IF_ERROR(step_.TakeFetched(values).status());
  if (values.results.size() != 1 + options_.metrics.size()) {
    return absl::InternalError(
        absl::StrCat("ProgressHook: expected ", 1 + options_.metrics.size(),
                     " results, got ", values.results.size()));
  }
  metric_values_.assign(values.results.begin() + 1, values.results.end());
  return absl::OkStatus();
}

void ProgressHook::MaybeDraw(int64_t step) {
  next_step_ = step + 1;
  if (!timer_.ShouldTriggerForStep(step)) return;
  auto elapsed = timer_.UpdateLastTriggeredStep(step);
  std::optional<double> rate;
  if (elapsed && elapsed->time > absl::ZeroDuration()) {
    rate = elapsed->steps / absl::ToDoubleSeconds(elapsed->time);
  }
  if (!first_step_) {
    first_step_ = step;
    first_time_ = clock_->Now();
  }
  console_->SetStatus(Format(step, rate));
}

absl::Status ProgressHook::AfterRunSync(SessionRunContext&,
                                        const SessionRunValues& values) {
  COSESSION_RETURN_IF_ERROR(TakeMetrics(values));
  // A step that was not to draw draws if a time-based timer fired during
  // it, at the estimated global step.
  MaybeDraw(step_.EstimatedAfter());
  return absl::OkStatus();
}

boost::asio::awaitable<absl::Status> ProgressHook::AfterRun(
    SessionRunContext& context, const SessionRunValues& values) {
  absl::Status taken = TakeMetrics(values);
  if (!taken.ok()) co_return taken;
  // The value fetched may or may not include this step's update.
  absl::StatusOr<int64_t> step = co_await step_.Read(context.session());
  if (!step.ok()) co_return step.status();
  MaybeDraw(*step);
  co_return absl::OkStatus();
}

boost::asio::awaitable<absl::Status> ProgressHook::End(Session& session) {
  absl::StatusOr<int64_t> step = co_await step_.Read(session);
  if (!step.ok()) co_return step.status();
  std::optional<double> rate;
  if (first_step_) {
    const absl::Duration took = clock_->Now() - first_time_;
    if (took > absl::ZeroDuration() && *step > *first_step_) {
      rate = (*step - *first_step_) / absl::ToDoubleSeconds(took);
    }
  }
  console_->FinishStatus(Format(*step, rate));
  co_return absl::OkStatus();
}

std::string ProgressHook::Format(int64_t step,
                                 std::optional<double> steps_per_sec) const {
  std::vector<std::string> parts;
  const std::optional<int64_t>& last = options_.last_step;
  const bool bar = console_->status_on_terminal() && last && *last > 0;
  const double fraction =
      bar ? std::clamp(static_cast<double>(step) / *last, 0.0, 1.0) : 0.0;
  if (bar) {
    parts.push_back(absl::StrFormat("%d/%d %d%%", step, *last,
                                    static_cast<int>(fraction * 100)));
  } else if (last) {
    parts.push_back(absl::StrCat("step ", step, "/", *last));
  } else {
    parts.push_back(absl::StrCat("step ", step));
  }
  if (steps_per_sec) {
    parts.push_back(absl::StrFormat("%.1f steps/s", *steps_per_sec));
    if (last && *steps_per_sec > 0 && step < *last) {
      parts.push_back(
          absl::StrCat("eta ", FormatEta((*last - step) / *steps_per_sec)));
    }
  }
  for (size_t i = 0; i < metric_values_.size(); ++i) {
    parts.push_back(FormatMetric(options_.metrics[i], metric_values_[i]));
  }
  std::string text = absl::StrJoin(parts, ", ");
  if (!bar) return text;
  // "[" bar "] " text, the bar as wide as the terminal leaves room for,
  // between 5 and bar_width; the Console cuts what still does not fit.
  constexpr int kNarrowestBar = 5;
  const int room = console_->StatusWidth() - static_cast<int>(text.size()) - 3;
  const int width = std::clamp(room, kNarrowestBar, options_.bar_width);
  const int filled = static_cast<int>(fraction * width);
  std::string drawn(width, ' ');
  std::fill(drawn.begin(), drawn.begin() + filled, '=');
  if (filled < width) drawn[filled] = '>';
  return absl::StrCat("[", drawn, "] ", text);
}

}  // namespace cosession
