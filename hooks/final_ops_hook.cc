#include "cosession/hooks/final_ops_hook.h"

#include <boost/asio/use_awaitable.hpp>

namespace cosession {

absl::StatusOr<std::shared_ptr<FinalOpsHook>> FinalOpsHook::Create(
    FinalOpsHookOptions options) {
  if (options.final_ops.empty() && options.final_targets.empty()) {
    return absl::InvalidArgumentError(
        "FinalOpsHook: final_ops and final_targets are both empty");
  }
  for (const Output& op : options.final_ops) {
    if (!op.valid()) {
      return absl::InvalidArgumentError(
          "FinalOpsHook: final_ops holds an empty Output");
    }
  }
  for (const Operation& op : options.final_targets) {
    if (!op.valid()) {
      return absl::InvalidArgumentError(
          "FinalOpsHook: final_targets holds an empty Operation");
    }
  }
  for (const auto& [out, value] : options.feeds) {
    if (!out.valid()) {
      return absl::InvalidArgumentError(
          "FinalOpsHook: feeds holds an empty Output");
    }
  }
  options.sink = SinkOrStderr(std::move(options.sink));
  return std::shared_ptr<FinalOpsHook>(new FinalOpsHook(std::move(options)));
}

boost::asio::awaitable<absl::Status> FinalOpsHook::End(Session& session) {
  RunArgs args;
  args.fetches = options_.final_ops;
  args.targets = options_.final_targets;
  args.feeds = options_.feeds;
  auto values =
      co_await session.Run(std::move(args), boost::asio::use_awaitable);
  if (absl::IsOutOfRange(values.status())) {
    options_.sink(
        "FinalOpsHook: running the final ops raised OutOfRange. This "
        "typically means they have a dependency back to some input source, "
        "which should not happen: final ops (e.g. a metric's value op) should "
        "only read variables, not another batch of input.");
  }
  if (!values.ok()) co_return values.status();
  values_ = std::move(values).value();
  co_return absl::OkStatus();
}

}  // namespace cosession
