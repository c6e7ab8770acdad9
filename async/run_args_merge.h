// Merging what a step's caller and its hooks ask for into one graph run,
// and handing each hook its own results -- TensorFlow's rule for
// SessionRunHook.before_run (semantics 3 and 4 of async/session_run_hook.h).
//
//   MergedRunArgs merged;
//   absl::Status s = MergeRunArgs(graph, caller_args, hook_args, merged);
//   ... run merged.args; `values` are its results ...
//   merged.TakeHookResults(values, h, hook_values.results);
//   values.resize(merged.caller_fetches);             // the caller's own
//
// Rules:
//   * fetches: the caller's first, in its order, then each hook's, in hook
//     order; a hook's fetch of a tensor already fetched (by the caller or an
//     earlier hook) shares its result instead of being fetched twice. Names
//     (fetch_names, target_names, feeds_by_name) are resolved in place.
//   * targets: all of them.
//   * feeds: the caller's and every hook's; a tensor fed twice (by two
//     hooks, or by a hook and the caller) is InvalidArgument naming the
//     tensor and the hook, and nothing is merged. The caller's args are not
//     modified.
//   * options: the highest trace level; the largest timeout among those set
//     (none set = no timeout).
// An unknown name is InvalidArgument naming it (async/run_args.h).
//
// Pure functions over plain values; thread safety as for any value.
#ifndef COSESSION_ASYNC_RUN_ARGS_MERGE_H_
#define COSESSION_ASYNC_RUN_ARGS_MERGE_H_

#include <cstddef>
#include <utility>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "cosession/async/run_args.h"
#include "cosession/graph/graph.h"
#include "cosession/graph/tensor.h"

namespace cosession {

struct MergedRunArgs {
  // What the graph runs: `args`; or, when the hooks asked only for fetches
  // (and the caller used no names), the caller's own args followed by
  // extra_fetches -- the common step, merged without copying the caller's.
  bool only_fetches = false;
  RunArgs args{};
  std::vector<Output> extra_fetches{};
  // Results [0, caller_fetches) are the caller's.
  size_t caller_fetches = 0;
  // Per hook, the range [first, second) of fetch_index that lists the
  // positions of its results among the run's, in the order it asked.
  std::vector<std::pair<size_t, size_t>> hook_fetches{};
  std::vector<size_t> fetch_index{};
  // Per hook, the hook whose results it gets: itself, or the hook before it
  // when both asked for exactly the same fetches in the same order (as the
  // standard hooks all ask for the global step), so that one copy of the
  // results serves both.
  std::vector<size_t> same_results_as{};

  // Of an only_fetches merge: the caller's fetches and each hook's, as they
  // were merged (the hooks' in hook order, hook_fetches delimiting them),
  // so that the next step asking for exactly the same keeps this merge.
  std::vector<Output> merged_caller_fetches{};
  std::vector<Output> merged_hook_fetches{};

  // Per entry of fetch_index: true when no one else gets that result (not
  // the caller, and no other hook with results of its own; nor the same
  // hook twice), so that TakeHookResults may move it.
  std::vector<char> sole_owner{};

  // Hook `h`'s results among the run's `values`, into `out` (its capacity
  // reused): moved out of `values` where sole_owner says so -- a result
  // handed on costs no reference count -- copied otherwise. Called once per
  // hook with results of its own (same_results_as[h] == h); the caller's
  // values stay.
  void TakeHookResults(absl::Span<Tensor> values, size_t h,
                       std::vector<Tensor>& out) const;
  bool HookFetchedNothing(size_t h) const {
    return hook_fetches[h].first == hook_fetches[h].second;
  }
};

// Merges `caller` and `hooks` (hook h's args at hooks[h]; their feeds are
// moved out and their names resolved in place) into `merged`, whose vectors
// are reused (a step that merges every time keeps their capacity). When
// `merged` holds an only_fetches merge of the same fetches -- the caller's
// and every hook's, equal one by one, as in the usual step of hooks that
// fetch the global step -- it is kept as it is, at the cost of comparing
// them. On error `merged` is unspecified. `caller` must outlive the run of
// `merged` (only_fetches refers to it).
absl::Status MergeRunArgs(const Graph& graph, const RunArgs& caller,
                          absl::Span<RunArgs> hooks, MergedRunArgs& merged);

// True when `args` asks for fetches by Output and for nothing else (no
// target, feed, name, trace or timeout), or for nothing at all. Inline, as
// the next two: called per hook and step (and forced: g++ 12 otherwise
// calls it out of line, 14 ns of BM_Step_DefaultHooks's step).
ABSL_ATTRIBUTE_ALWAYS_INLINE inline bool AsksOnlyForFetches(const RunArgs& a) {
  return a.targets.empty() && a.feeds.empty() && a.fetch_names.empty() &&
         a.target_names.empty() && a.feeds_by_name.empty() &&
         a.options.trace_level == RunOptions::kNoTrace &&
         !a.options.timeout.has_value();
}

// True when `args` asks for nothing: such a hook needs no merge.
inline bool AsksForNothing(const RunArgs& a) {
  return a.fetches.empty() && AsksOnlyForFetches(a);
}

// Empties `args`, keeping its vectors' capacity.
inline void ClearRunArgs(RunArgs& args) {
  args.fetches.clear();
  if (AsksOnlyForFetches(args)) return;  // the usual hook's: nothing else
  args.targets.clear();
  args.feeds.clear();
  args.options = RunOptions{};
  args.fetch_names.clear();
  args.target_names.clear();
  args.feeds_by_name.clear();
}

}  // namespace cosession

#endif  // COSESSION_ASYNC_RUN_ARGS_MERGE_H_
