#include "async/run_args_merge.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "graph/status.h"

namespace cosession {

bool AsksForNothing(const RunArgs& a) {
  return a.fetches.empty() && a.targets.empty() && a.feeds.empty() &&
         a.fetch_names.empty() && a.target_names.empty() &&
         a.feeds_by_name.empty() &&
         a.options.trace_level == RunOptions::kNoTrace &&
         !a.options.timeout.has_value();
}

absl::Status MergeRunArgs(const Graph& graph, const RunArgs& caller,
                          absl::Span<RunArgs> hooks, MergedRunArgs& merged) {
  merged.args = caller;
  COSESSION_RETURN_IF_ERROR(ResolveNames(graph, merged.args));
  merged.caller_fetches = merged.args.fetches.size();
  merged.hook_fetches.clear();
  // Fed tensors are few: a linear scan beats a hash set's allocation.
  auto fed = [&](const Output& out) {
    return std::any_of(merged.args.feeds.begin(), merged.args.feeds.end(),
                       [&](const auto& feed) { return feed.first == out; });
  };
  RunOptions& options = merged.args.options;
  for (size_t h = 0; h < hooks.size(); ++h) {
    RunArgs& hook = hooks[h];
    COSESSION_RETURN_IF_ERROR(ResolveNames(graph, hook));
    const size_t begin = merged.args.fetches.size();
    merged.args.fetches.insert(merged.args.fetches.end(), hook.fetches.begin(),
                               hook.fetches.end());
    merged.hook_fetches.emplace_back(begin, merged.args.fetches.size());
    merged.args.targets.insert(merged.args.targets.end(), hook.targets.begin(),
                               hook.targets.end());
    for (auto& [out, value] : hook.feeds) {
      if (fed(out)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Tensor '", out.valid() ? out.name() : std::string("<empty>"),
            "' is fed twice: by hook ", h,
            " and by the caller or an earlier hook"));
      }
      merged.args.feeds.emplace_back(out, std::move(value));
    }
    options.trace_level =
        std::max(options.trace_level, hook.options.trace_level);
    if (hook.options.timeout.has_value()) {
      options.timeout = options.timeout.has_value()
                            ? std::max(*options.timeout, *hook.options.timeout)
                            : *hook.options.timeout;
    }
  }
  return absl::OkStatus();
}

}  // namespace cosession
