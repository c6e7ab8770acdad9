// MergeRunArgs: the caller's and the hooks' run arguments merged into one
// run, and each hook's results found again (semantics 3 and 4 of
// async/session_run_hook.h), as plain values.
#include "cosession/async/run_args_merge.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cosession/graph/ops.h"

namespace cosession::run_args_merge_test {
namespace {

using std::chrono::milliseconds;

struct Tensors {
  Tensors() {
    for (int i = 0; i < 40; ++i) {
      outs.push_back(
          ops::Const(g, static_cast<float>(i), absl::StrCat("c", i)));
    }
    x = ops::Placeholder(g, DType::kFloat, TensorShape{}, "x");
    op = ops::NoOp(g, {}, "op");
  }
  Graph g;
  std::vector<Output> outs;
  Output x;
  Operation op;
};

// The values a run would return for `merged`: each fetched tensor's index
// in `t.outs` as a float, so that tests can tell which result is whose.
std::vector<Tensor> ValuesOf(const Tensors& t, const MergedRunArgs& merged,
                             const RunArgs& caller) {
  std::vector<Output> fetched =
      merged.only_fetches ? caller.fetches : merged.args.fetches;
  if (merged.only_fetches) {
    fetched.insert(fetched.end(), merged.extra_fetches.begin(),
                   merged.extra_fetches.end());
  }
  std::vector<Tensor> values;
  for (const Output& out : fetched) {
    auto it = std::find(t.outs.begin(), t.outs.end(), out);
    values.push_back(Tensor::Scalar(static_cast<float>(it - t.outs.begin())));
  }
  return values;
}

std::vector<float> HookValues(const Tensors& t, const MergedRunArgs& merged,
                              const RunArgs& caller, size_t h) {
  std::vector<Tensor> values = ValuesOf(t, merged, caller);
  std::vector<Tensor> mine;
  merged.TakeHookResults(absl::MakeSpan(values), h, mine);
  std::vector<float> floats;
  for (const Tensor& v : mine) floats.push_back(v.scalar<float>());
  return floats;
}

TEST(MergeRunArgs, CallerFetchesComeFirstThenEachHooksInOrder) {
  Tensors t;
  RunArgs caller{.fetches = {t.outs[0], t.outs[1]}};
  std::vector<RunArgs> hooks(2);
  hooks[0].fetches = {t.outs[2]};
  hooks[1].fetches = {t.outs[3], t.outs[4]};
  MergedRunArgs merged;
  ASSERT_TRUE(MergeRunArgs(t.g, caller, absl::MakeSpan(hooks), merged).ok());
  EXPECT_EQ(merged.caller_fetches, 2u);
  EXPECT_EQ(HookValues(t, merged, caller, 0), (std::vector<float>{2}));
  EXPECT_EQ(HookValues(t, merged, caller, 1), (std::vector<float>{3, 4}));
  std::vector<Tensor> values = ValuesOf(t, merged, caller);
  EXPECT_EQ(values[0].scalar<float>(), 0);
  EXPECT_EQ(values[1].scalar<float>(), 1);
}

TEST(MergeRunArgs, AFetchAlreadyFetchedSharesItsResultInsteadOfAnotherFetch) {
  Tensors t;
  RunArgs caller{.fetches = {t.outs[0]}};
  std::vector<RunArgs> hooks(3);
  hooks[0].fetches = {t.outs[5]};
  hooks[1].fetches = {t.outs[5], t.outs[0]};  // an earlier hook's, the caller's
  hooks[2].fetches = {t.outs[6], t.outs[5]};
  MergedRunArgs merged;
  ASSERT_TRUE(MergeRunArgs(t.g, caller, absl::MakeSpan(hooks), merged).ok());
  ASSERT_TRUE(merged.only_fetches);
  EXPECT_EQ(merged.extra_fetches, (std::vector<Output>{t.outs[5], t.outs[6]}));
  EXPECT_EQ(HookValues(t, merged, caller, 0), (std::vector<float>{5}));
  EXPECT_EQ(HookValues(t, merged, caller, 1), (std::vector<float>{5, 0}));
  EXPECT_EQ(HookValues(t, merged, caller, 2), (std::vector<float>{6, 5}));
}

// A step that asks for what the last one asked keeps its merge; any
// change -- a hook's fetches, the caller's, a hook that now asks for more
// than fetches -- merges anew, as if the merge were made from scratch.
TEST(MergeRunArgs, TheNextStepMergesAnewWhateverChangedSinceTheLast) {
  Tensors t;
  MergedRunArgs merged;  // reused from step to step, as StepRunner does
  auto step = [&](const RunArgs& caller, std::vector<RunArgs> hooks) {
    EXPECT_TRUE(MergeRunArgs(t.g, caller, absl::MakeSpan(hooks), merged).ok());
    std::vector<std::vector<float>> per_hook;
    for (size_t h = 0; h < hooks.size(); ++h) {
      per_hook.push_back(HookValues(t, merged, caller, h));
    }
    return per_hook;
  };
  using Values = std::vector<std::vector<float>>;
  auto fetching = [](std::vector<Output> fetches) {
    return RunArgs{.fetches = std::move(fetches)};
  };
  const RunArgs caller;
  EXPECT_EQ(step(caller, {fetching({t.outs[5]}), fetching({t.outs[5]})}),
            (Values{{5}, {5}}));
  EXPECT_EQ(step(caller, {fetching({t.outs[5]}), fetching({t.outs[5]})}),
            (Values{{5}, {5}}));
  // The same number of fetches, another tensor.
  EXPECT_EQ(step(caller, {fetching({t.outs[5]}), fetching({t.outs[6]})}),
            (Values{{5}, {6}}));
  // A hook that asks for one more tensor (a summary step).
  EXPECT_EQ(
      step(caller, {fetching({t.outs[5]}), fetching({t.outs[5], t.outs[7]})}),
      (Values{{5}, {5, 7}}));
  EXPECT_EQ(merged.extra_fetches, (std::vector<Output>{t.outs[5], t.outs[7]}));
  EXPECT_EQ(step(caller, {fetching({t.outs[5]}), fetching({t.outs[6]})}),
            (Values{{5}, {6}}));
  // The caller now fetches the hooks' tensor: they share its result.
  const RunArgs fetching_caller = fetching({t.outs[6]});
  EXPECT_EQ(
      step(fetching_caller, {fetching({t.outs[5]}), fetching({t.outs[6]})}),
      (Values{{5}, {6}}));
  EXPECT_EQ(merged.caller_fetches, 1u);
  EXPECT_EQ(merged.extra_fetches, (std::vector<Output>{t.outs[5]}));
  // A hook that also asks for a target: no longer only fetches.
  RunArgs with_target = fetching({t.outs[5]});
  with_target.targets = {t.op};
  step(caller, {with_target, fetching({t.outs[6]})});
  EXPECT_FALSE(merged.only_fetches);
  EXPECT_EQ(merged.args.targets, (std::vector<Operation>{t.op}));
  // Back to fetches only, one hook fewer.
  EXPECT_EQ(step(caller, {fetching({t.outs[8]})}), (Values{{8}}));
  EXPECT_TRUE(merged.only_fetches);
}

TEST(MergeRunArgs, BeyondAFewFetchesTheSharingStillHolds) {
  Tensors t;
  RunArgs caller;
  for (int i = 0; i < 20; ++i) caller.fetches.push_back(t.outs[i]);
  std::vector<RunArgs> hooks(2);
  for (int i = 15; i < 30; ++i) hooks[0].fetches.push_back(t.outs[i]);
  for (int i = 25; i < 35; ++i) hooks[1].fetches.push_back(t.outs[i]);
  MergedRunArgs merged;
  ASSERT_TRUE(MergeRunArgs(t.g, caller, absl::MakeSpan(hooks), merged).ok());
  EXPECT_EQ(merged.extra_fetches.size(), 15u);  // outs 20..34, once each
  std::vector<float> expected0, expected1;
  for (int i = 15; i < 30; ++i) expected0.push_back(i);
  for (int i = 25; i < 35; ++i) expected1.push_back(i);
  EXPECT_EQ(HookValues(t, merged, caller, 0), expected0);
  EXPECT_EQ(HookValues(t, merged, caller, 1), expected1);
}

// Consecutive hooks that ask for exactly the same fetches (as the standard
// hooks all ask for the global step) are marked to share one copy of their
// results; any difference -- another tensor, another order, a hook between
// them that asks otherwise, no fetch at all -- keeps them apart. Both forms
// of the merge mark them.
TEST(MergeRunArgs, HooksAskingForTheSameFetchesShareOneCopyOfTheResults) {
  Tensors t;
  std::vector<RunArgs> hooks(8);
  hooks[0].fetches = {t.outs[1]};
  hooks[1].fetches = {t.outs[1]};             // as hook 0
  hooks[2].fetches = {t.outs[1]};             // as hooks 0 and 1
  hooks[3].fetches = {t.outs[1], t.outs[2]};  // more
  hooks[4].fetches = {t.outs[2], t.outs[1]};  // another order
  // hooks[5] asks for no fetch (nothing, or a target); hooks[6] follows it.
  hooks[6].fetches = {t.outs[2], t.outs[1]};
  hooks[7].fetches = {t.outs[2], t.outs[1]};  // as hook 6
  const std::vector<size_t> expected = {0, 0, 0, 3, 4, 5, 6, 6};
  for (const bool only_fetches : {true, false}) {
    SCOPED_TRACE(only_fetches ? "only fetches" : "a hook asks for a target");
    RunArgs caller{.fetches = {t.outs[1]}};
    std::vector<RunArgs> asked = hooks;
    if (!only_fetches) asked[5].targets = {t.op};
    MergedRunArgs merged;
    ASSERT_TRUE(MergeRunArgs(t.g, caller, absl::MakeSpan(asked), merged).ok());
    EXPECT_EQ(merged.only_fetches, only_fetches);
    EXPECT_EQ(merged.same_results_as, expected);
    for (size_t h = 0; h < hooks.size(); ++h) {
      EXPECT_EQ(HookValues(t, merged, caller, h),
                HookValues(t, merged, caller, merged.same_results_as[h]));
    }
  }
}

TEST(MergeRunArgs, AResultOnlyOneHookGetsIsMovedToItTheOthersAreCopied) {
  Tensors t;
  RunArgs caller{.fetches = {t.outs[0], t.outs[2]}};
  std::vector<RunArgs> hooks(5);
  hooks[0].fetches = {t.outs[1]};             // also hook 1's
  hooks[1].fetches = {t.outs[1], t.outs[2]};  // outs[2]: also the caller's
  hooks[2].fetches = {t.outs[3]};             // its own
  hooks[3].fetches = {t.outs[3]};             // as hook 2: shares its copy
  hooks[4].fetches = {t.outs[4], t.outs[4]};  // the same twice
  for (const bool only_fetches : {true, false}) {
    SCOPED_TRACE(only_fetches ? "only fetches"
                              : "the caller asks for a target");
    RunArgs asked_by_caller = caller;
    if (!only_fetches) asked_by_caller.targets = {t.op};
    std::vector<RunArgs> asked = hooks;
    MergedRunArgs merged;
    ASSERT_TRUE(
        MergeRunArgs(t.g, asked_by_caller, absl::MakeSpan(asked), merged).ok());
    std::vector<Tensor> values = ValuesOf(t, merged, asked_by_caller);
    std::vector<std::vector<float>> got(hooks.size());
    for (size_t h = 0; h < hooks.size(); ++h) {
      if (merged.same_results_as[h] != h) continue;
      std::vector<Tensor> mine;
      merged.TakeHookResults(absl::MakeSpan(values), h, mine);
      for (const Tensor& v : mine) got[h].push_back(v.scalar<float>());
    }
    EXPECT_EQ(got[0], (std::vector<float>{1}));
    EXPECT_EQ(got[1], (std::vector<float>{1, 2}));
    EXPECT_EQ(got[2], (std::vector<float>{3}));
    EXPECT_EQ(merged.same_results_as[3], 2u);
    EXPECT_EQ(got[4], (std::vector<float>{4, 4}));
    // Which values are left: the caller's, and those two hooks got (or one
    // hook twice); outs[3] was moved to hook 2 (hook 3 reads hook 2's).
    ASSERT_EQ(values.size(), 5u);  // outs 0, 2, then 1, 3, 4
    for (size_t i = 0; i < values.size(); ++i) {
      const bool moved = (i == 3);
      EXPECT_EQ(values[i].IsInitialized(), !moved) << "value " << i;
    }
  }
}

TEST(MergeRunArgs, TargetsFeedsAndOptionsOfTheHooksJoinTheCallers) {
  Tensors t;
  RunArgs caller{.fetches = {t.outs[0]},
                 .options = {.timeout = milliseconds(5)}};
  std::vector<RunArgs> hooks(2);
  hooks[0].targets = {t.op};
  hooks[0].fetches = {t.outs[1]};
  hooks[0].options.trace_level = RunOptions::kFullTrace;
  hooks[1].feeds = {{t.x, Tensor::Scalar(1.0f)}};
  hooks[1].options.timeout = milliseconds(20);
  MergedRunArgs merged;
  ASSERT_TRUE(MergeRunArgs(t.g, caller, absl::MakeSpan(hooks), merged).ok());
  ASSERT_FALSE(merged.only_fetches);
  EXPECT_EQ(merged.args.fetches, (std::vector<Output>{t.outs[0], t.outs[1]}));
  ASSERT_EQ(merged.args.targets.size(), 1u);
  EXPECT_EQ(merged.args.targets[0].node(), t.op.node());
  ASSERT_EQ(merged.args.feeds.size(), 1u);
  EXPECT_EQ(merged.args.feeds[0].first, t.x);
  EXPECT_EQ(merged.args.options.trace_level, RunOptions::kFullTrace);
  EXPECT_EQ(merged.args.options.timeout, milliseconds(20));  // the largest
  EXPECT_EQ(HookValues(t, merged, caller, 0), (std::vector<float>{1}));
  EXPECT_TRUE(merged.HookFetchedNothing(1));
  // The caller's own arguments are as they were.
  EXPECT_EQ(caller.fetches, (std::vector<Output>{t.outs[0]}));
  EXPECT_TRUE(caller.targets.empty());
  EXPECT_EQ(caller.options.trace_level, RunOptions::kNoTrace);
}

TEST(MergeRunArgs, ATimeoutSetByAHookAloneIsTheRunsTimeout) {
  Tensors t;
  RunArgs caller;
  std::vector<RunArgs> hooks(1);
  hooks[0].options.timeout = milliseconds(7);
  MergedRunArgs merged;
  ASSERT_TRUE(MergeRunArgs(t.g, caller, absl::MakeSpan(hooks), merged).ok());
  EXPECT_EQ(merged.args.options.timeout, milliseconds(7));
}

// As TensorFlow's merge: where the run's ops execute is the caller's choice;
// a hook's inter_op_thread_pool does not change it.
TEST(MergeRunArgs, TheCallersInterOpThreadPoolHoldsAndAHooksIsIgnored) {
  Tensors t;
  RunArgs caller{.fetches = {t.outs[0]},
                 .options = {.inter_op_thread_pool = -1}};
  std::vector<RunArgs> hooks(1);
  hooks[0].targets = {t.op};
  hooks[0].options.inter_op_thread_pool = 0;
  MergedRunArgs merged;
  ASSERT_TRUE(MergeRunArgs(t.g, caller, absl::MakeSpan(hooks), merged).ok());
  ASSERT_FALSE(merged.only_fetches);
  EXPECT_EQ(merged.args.options.inter_op_thread_pool, -1);

  caller.options.inter_op_thread_pool = 0;
  hooks[0].options.inter_op_thread_pool = -1;
  ASSERT_TRUE(MergeRunArgs(t.g, caller, absl::MakeSpan(hooks), merged).ok());
  EXPECT_EQ(merged.args.options.inter_op_thread_pool, 0);
}

TEST(MergeRunArgs, ATensorFedByTheCallerAndAHookIsInvalidArgumentNamingIt) {
  Tensors t;
  RunArgs caller{.feeds = {{t.x, Tensor::Scalar(1.0f)}}};
  std::vector<RunArgs> hooks(1);
  hooks[0].feeds = {{t.x, Tensor::Scalar(2.0f)}};
  MergedRunArgs merged;
  absl::Status s = MergeRunArgs(t.g, caller, absl::MakeSpan(hooks), merged);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'x:0' is fed twice: by hook 0"),
            absl::string_view::npos)
      << s;
}

TEST(MergeRunArgs, ATensorFedByTwoHooksIsInvalidArgumentNamingTheLaterHook) {
  Tensors t;
  RunArgs caller;
  std::vector<RunArgs> hooks(2);
  hooks[0].feeds = {{t.x, Tensor::Scalar(1.0f)}};
  hooks[1].feeds = {{t.x, Tensor::Scalar(2.0f)}};
  MergedRunArgs merged;
  absl::Status s = MergeRunArgs(t.g, caller, absl::MakeSpan(hooks), merged);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("by hook 1"), absl::string_view::npos) << s;
}

TEST(MergeRunArgs, NamesAreResolvedAndAnUnknownOneIsInvalidArgument) {
  Tensors t;
  RunArgs caller{.fetch_names = {"c1"}};
  std::vector<RunArgs> hooks(1);
  hooks[0].fetch_names = {"c2:0"};
  MergedRunArgs merged;
  ASSERT_TRUE(MergeRunArgs(t.g, caller, absl::MakeSpan(hooks), merged).ok());
  EXPECT_EQ(merged.args.fetches, (std::vector<Output>{t.outs[1], t.outs[2]}));
  EXPECT_EQ(merged.caller_fetches, 1u);

  hooks.assign(1, RunArgs{});
  hooks[0].fetch_names = {"no_such_tensor"};
  absl::Status s = MergeRunArgs(t.g, caller, absl::MakeSpan(hooks), merged);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("no_such_tensor"), absl::string_view::npos) << s;
}

TEST(MergeRunArgs, ClearRunArgsEmptiesEverything) {
  Tensors t;
  RunArgs args{.fetches = {t.outs[0]},
               .targets = {t.op},
               .feeds = {{t.x, Tensor::Scalar(1.0f)}},
               .options = {.trace_level = RunOptions::kFullTrace,
                           .timeout = milliseconds(1)},
               .fetch_names = {"c1"},
               .target_names = {"op"},
               .feeds_by_name = {{"x", Tensor::Scalar(1.0f)}}};
  EXPECT_FALSE(AsksForNothing(args));
  ClearRunArgs(args);
  EXPECT_TRUE(AsksForNothing(args));
}

}  // namespace
}  // namespace cosession::run_args_merge_test
