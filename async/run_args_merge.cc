#include "cosession/async/run_args_merge.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "cosession/graph/status.h"

namespace cosession {

void MergedRunArgs::TakeHookResults(absl::Span<Tensor> values, size_t h,
                                    std::vector<Tensor>& out) const {
  out.clear();
  const auto [begin, end] = hook_fetches[h];
  for (size_t i = begin; i < end; ++i) {
    Tensor& value = values[fetch_index[i]];
    if (sole_owner[i]) {
      out.push_back(std::move(value));
    } else {
      out.push_back(value);
    }
  }
}

namespace {

// ResolveNames, called only when there are names (the common step has none).
absl::Status ResolveAnyNames(const Graph& graph, RunArgs& args) {
  if (args.fetch_names.empty() && args.target_names.empty() &&
      args.feeds_by_name.empty()) {
    return absl::OkStatus();
  }
  return ResolveNames(graph, args);
}

// Finds fetches already in the run: a scan while they are few (the usual
// step fetches a handful), a hash map beyond.
class FetchPositions {
 public:
  static constexpr size_t kScanLimit = 16;

  // The run fetches `first` (fixed) and then `added` (grown here).
  FetchPositions(absl::Span<const Output> first, std::vector<Output>& added)
      : first_(first), added_(added) {}

  // The position of `out` among the run's fetches, added when new.
  size_t Find(const Output& out) {
    const size_t total = first_.size() + added_.size();
    if (total <= kScanLimit) {
      auto it = std::find(first_.begin(), first_.end(), out);
      if (it != first_.end()) return it - first_.begin();
      auto jt = std::find(added_.begin(), added_.end(), out);
      if (jt != added_.end()) return first_.size() + (jt - added_.begin());
    } else {
      if (index_.empty()) {
        for (size_t i = 0; i < total; ++i) index_.emplace(At(i), i);
      }
      auto it = index_.find(out);
      if (it != index_.end()) return it->second;
    }
    added_.push_back(out);
    if (!index_.empty()) index_.emplace(out, total);
    return total;
  }

 private:
  const Output& At(size_t i) const {
    return i < first_.size() ? first_[i] : added_[i - first_.size()];
  }
  absl::Span<const Output> first_;
  std::vector<Output>& added_;
  absl::flat_hash_map<Output, size_t> index_;
};

// True when `merged` is an only_fetches merge of exactly these fetches,
// which the caller and the hooks ask for by Output only.
bool SameOnlyFetchesMerge(const RunArgs& caller,
                          absl::Span<const RunArgs> hooks,
                          const MergedRunArgs& merged) {
  if (!merged.only_fetches || merged.hook_fetches.size() != hooks.size() ||
      !caller.fetch_names.empty() ||
      !std::equal(caller.fetches.begin(), caller.fetches.end(),
                  merged.merged_caller_fetches.begin(),
                  merged.merged_caller_fetches.end())) {
    return false;
  }
  for (size_t h = 0; h < hooks.size(); ++h) {
    const RunArgs& hook = hooks[h];
    const auto [begin, end] = merged.hook_fetches[h];
    if (!AsksOnlyForFetches(hook) ||
        !std::equal(hook.fetches.begin(), hook.fetches.end(),
                    merged.merged_hook_fetches.begin() + begin,
                    merged.merged_hook_fetches.begin() + end)) {
      return false;
    }
  }
  return true;
}

// Fills merged.sole_owner from fetch_index and same_results_as: a result
// is its hook's alone when it is not the caller's and it appears once among
// the entries of the hooks that get results of their own.
void NoteResultsWithOneOwner(MergedRunArgs& merged) {
  const size_t n = merged.hook_fetches.size();
  size_t positions = 0;
  for (size_t pos : merged.fetch_index) {
    positions = std::max(positions, pos + 1);
  }
  std::vector<int> owners(positions, 0);
  for (size_t h = 0; h < n; ++h) {
    if (merged.same_results_as[h] != h) continue;
    const auto [begin, end] = merged.hook_fetches[h];
    for (size_t i = begin; i < end; ++i) ++owners[merged.fetch_index[i]];
  }
  merged.sole_owner.assign(merged.fetch_index.size(), 0);
  for (size_t i = 0; i < merged.fetch_index.size(); ++i) {
    const size_t pos = merged.fetch_index[i];
    merged.sole_owner[i] = pos >= merged.caller_fetches && owners[pos] == 1;
  }
}

// Fills merged.same_results_as from merged.hook_fetches and fetch_index,
// then merged.sole_owner.
void NoteHooksWithTheSameResults(MergedRunArgs& merged) {
  const size_t n = merged.hook_fetches.size();
  merged.same_results_as.resize(n);
  for (size_t h = 0; h < n; ++h) {
    merged.same_results_as[h] = h;
    if (h == 0) continue;
    const auto [begin, end] = merged.hook_fetches[h];
    const auto [prev_begin, prev_end] = merged.hook_fetches[h - 1];
    if (begin != end && std::equal(merged.fetch_index.begin() + begin,
                                   merged.fetch_index.begin() + end,
                                   merged.fetch_index.begin() + prev_begin,
                                   merged.fetch_index.begin() + prev_end)) {
      merged.same_results_as[h] = merged.same_results_as[h - 1];
    }
  }
  NoteResultsWithOneOwner(merged);
}

}  // namespace

absl::Status MergeRunArgs(const Graph& graph, const RunArgs& caller,
                          absl::Span<RunArgs> hooks, MergedRunArgs& merged) {
  if (SameOnlyFetchesMerge(caller, hooks, merged)) return absl::OkStatus();
  merged.hook_fetches.clear();
  merged.fetch_index.clear();
  merged.extra_fetches.clear();
  merged.merged_caller_fetches.clear();
  merged.merged_hook_fetches.clear();
  merged.only_fetches =
      caller.fetch_names.empty() &&
      std::all_of(hooks.begin(), hooks.end(), &AsksOnlyForFetches);
  if (merged.only_fetches) {
    merged.caller_fetches = caller.fetches.size();
    merged.merged_caller_fetches = caller.fetches;
    FetchPositions positions(caller.fetches, merged.extra_fetches);
    for (size_t h = 0; h < hooks.size(); ++h) {
      const size_t begin = merged.fetch_index.size();
      for (const Output& fetch : hooks[h].fetches) {
        merged.fetch_index.push_back(positions.Find(fetch));
        merged.merged_hook_fetches.push_back(fetch);
      }
      merged.hook_fetches.emplace_back(begin, merged.fetch_index.size());
    }
    NoteHooksWithTheSameResults(merged);
    return absl::OkStatus();
  }
  merged.args = caller;
  COSESSION_RETURN_IF_ERROR(ResolveAnyNames(graph, merged.args));
  merged.caller_fetches = merged.args.fetches.size();
  // The caller's fetches are copied into merged.args; the hooks' go after.
  std::vector<Output> caller_fetches = std::move(merged.args.fetches);
  merged.args.fetches.clear();
  FetchPositions positions(caller_fetches, merged.args.fetches);
  // Fed tensors are few: a scan beats a hash set's allocation.
  auto fed = [&](const Output& out) {
    return std::any_of(merged.args.feeds.begin(), merged.args.feeds.end(),
                       [&](const auto& feed) { return feed.first == out; });
  };
  RunOptions& options = merged.args.options;
  for (size_t h = 0; h < hooks.size(); ++h) {
    RunArgs& hook = hooks[h];
    COSESSION_RETURN_IF_ERROR(ResolveAnyNames(graph, hook));
    const size_t begin = merged.fetch_index.size();
    for (const Output& fetch : hook.fetches) {
      merged.fetch_index.push_back(positions.Find(fetch));
    }
    merged.hook_fetches.emplace_back(begin, merged.fetch_index.size());
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
  caller_fetches.insert(caller_fetches.end(), merged.args.fetches.begin(),
                        merged.args.fetches.end());
  merged.args.fetches = std::move(caller_fetches);
  NoteHooksWithTheSameResults(merged);
  return absl::OkStatus();
}

}  // namespace cosession
