#include "hooks/progress_hook.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "graph/status.h"
#include "hooks/detail/hook_util.h"

namespace cosession {
namespace {

bool StreamIsTerminal(std::ostream* out) {
  if (out == &std::cout) return isatty(STDOUT_FILENO) == 1;
  if (out == &std::cerr || out == &std::clog) {
    return isatty(STDERR_FILENO) == 1;
  }
  return false;
}

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
  if (options.output == nullptr) options.output = &std::cout;
  const bool terminal = options.is_terminal.has_value()
                            ? *options.is_terminal
                            : StreamIsTerminal(options.output);
  Clock& clock = options.clock ? *options.clock : SystemClock();
  auto timer = SecondOrStepTimer::Create(options.every_n_secs,
                                         options.every_n_steps, clock);
  if (!timer.ok()) return timer.status();
  return std::shared_ptr<ProgressHook>(
      new ProgressHook(std::move(options), *timer, terminal));
}

ProgressHook::ProgressHook(ProgressHookOptions options, SecondOrStepTimer timer,
                           bool terminal)
    : options_(std::move(options)),
      timer_(timer),
      terminal_(terminal),
      clock_(options_.clock ? options_.clock : &SystemClock()) {}

absl::Status ProgressHook::Begin(Graph& graph) {
  COSESSION_RETURN_IF_ERROR(step_.Find(graph, "ProgressHook"));
  timer_.Reset();
  next_step_.reset();
  first_step_.reset();
  return absl::OkStatus();
}

boost::asio::awaitable<absl::StatusOr<SessionRunArgs>> ProgressHook::BeforeRun(
    SessionRunContext&) {
  fetch_metrics_ = WantsMetrics();
  SessionRunArgs args;
  step_.AddFetch(args);
  if (fetch_metrics_) {
    args.fetches.insert(args.fetches.end(), options_.metrics.begin(),
                        options_.metrics.end());
  }
  co_return args;
}

boost::asio::awaitable<absl::Status> ProgressHook::AfterRun(
    SessionRunContext& context, const SessionRunValues& values) {
  absl::Status fetched = step_.TakeFetched(values).status();
  if (!fetched.ok()) co_return fetched;
  int64_t step = step_.EstimatedAfter();
  if (fetch_metrics_) {
    // The value fetched may or may not include this step's update.
    absl::StatusOr<int64_t> fresh = co_await step_.Read(context.session());
    if (!fresh.ok()) co_return fresh.status();
    step = *fresh;
    if (timer_.ShouldTriggerForStep(step)) {
      metric_text_.clear();
      for (size_t i = 0; i < options_.metrics.size(); ++i) {
        metric_text_.push_back(
            FormatMetric(options_.metrics[i], values.results.at(i + 1)));
      }
      auto elapsed = timer_.UpdateLastTriggeredStep(step);
      std::optional<double> rate;
      if (elapsed && elapsed->time > absl::ZeroDuration()) {
        rate = elapsed->steps / absl::ToDoubleSeconds(elapsed->time);
      }
      if (!first_step_) {
        first_step_ = step;
        first_time_ = clock_->Now();
      }
      Draw(step, rate, /*final=*/false);
    }
  }
  next_step_ = step + 1;
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
  Draw(*step, rate, /*final=*/true);
  co_return absl::OkStatus();
}

std::string ProgressHook::Format(int64_t step,
                                 std::optional<double> steps_per_sec) const {
  std::vector<std::string> parts;
  const std::optional<int64_t>& last = options_.last_step;
  if (terminal_ && last && *last > 0) {
    const double fraction =
        std::clamp(static_cast<double>(step) / *last, 0.0, 1.0);
    const int width = options_.bar_width;
    const int filled = static_cast<int>(fraction * width);
    std::string bar(width, ' ');
    std::fill(bar.begin(), bar.begin() + filled, '=');
    if (filled < width) bar[filled] = '>';
    parts.push_back(absl::StrFormat("[%s] %d/%d %d%%", bar, step, *last,
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
  std::string text = absl::StrJoin(parts, ", ");
  if (!metric_text_.empty()) {
    absl::StrAppend(&text, ", ", absl::StrJoin(metric_text_, ", "));
  }
  return text;
}

void ProgressHook::Draw(int64_t step, std::optional<double> steps_per_sec,
                        bool final) {
  std::ostream& out = *options_.output;
  const std::string text = Format(step, steps_per_sec);
  if (terminal_) {
    out << '\r' << text << "\x1b[K";
    if (final) out << '\n';
  } else {
    out << text << '\n';
  }
  out.flush();
}

}  // namespace cosession
