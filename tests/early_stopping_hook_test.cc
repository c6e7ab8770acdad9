// EarlyStoppingHook: evaluations, improvement rules (mode, min_delta,
// patience, every_n_steps), the stop reason, and the error paths.
#include "cosession/hooks/early_stopping_hook.h"

#include <gtest/gtest.h>

#include <boost/asio/use_awaitable.hpp>
#include <cmath>
#include <vector>

#include "tests/co_test.h"
#include "tests/hook_test_util.h"

namespace cosession::early_stopping_hook_test {
namespace {

namespace asio = boost::asio;
using testing::CapturedLog;
using testing::CreateSessionOrFail;
using testing::HookList;
using testing::StepGraph;

// metric = the value fed with each training step.
struct MetricGraph : testing::FedValueGraph {
  MetricGraph() : FedValueGraph("val_loss") {}
};

std::shared_ptr<EarlyStoppingHook> MakeHook(EarlyStoppingHookOptions options) {
  if (!options.sink) options.sink = CapturedLog().Sink();
  auto hook = EarlyStoppingHook::Create(std::move(options));
  EXPECT_TRUE(hook.ok()) << hook.status();
  return hook.ok() ? *hook : nullptr;
}

// Runs one training step per value until the session stops; returns how many
// steps ran.
asio::awaitable<int> TrainUntilStop(MonitoredSession& ms,
                                    const MetricGraph& graph,
                                    std::vector<float> values) {
  int steps = 0;
  for (float v : values) {
    if (ms.ShouldStop()) break;
    auto result = co_await ms.Run(graph.TrainWith(v), asio::use_awaitable);
    EXPECT_TRUE(result.ok()) << result.status();
    ++steps;
  }
  co_return steps;
}

TEST(EarlyStoppingHook, CreateRejectsAnEmptyMetric) {
  auto hook = EarlyStoppingHook::Create({});
  EXPECT_EQ(hook.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hook.status().message().find("metric"), std::string::npos);
}

TEST(EarlyStoppingHook, CreateRejectsBadOptionsNamingEach) {
  MetricGraph graph;
  struct Case {
    EarlyStoppingHookOptions options;
    std::string option;
  };
  std::vector<Case> cases = {
      {{.metric = graph.value, .patience = 0}, "patience"},
      {{.metric = graph.value, .every_n_steps = 0}, "every_n_steps"},
      {{.metric = graph.value, .min_delta = -0.1}, "min_delta"},
      {{.metric = graph.value, .min_delta = std::nan("")}, "min_delta"},
      {{.metric = ops::Const(graph.g, true, "flag")}, "flag:0"},
  };
  for (const auto& c : cases) {
    auto hook = EarlyStoppingHook::Create(c.options);
    EXPECT_EQ(hook.status().code(), absl::StatusCode::kInvalidArgument)
        << c.option;
    EXPECT_NE(hook.status().message().find(c.option), std::string::npos)
        << hook.status();
  }
}

CO_TEST(EarlyStoppingHook, BeginFailsWithoutAGlobalStepNamingTheHook) {
  Graph g;
  Output m = ops::Const(g, 1.0f, "m");
  auto hook = MakeHook({.metric = m});
  auto created = co_await MonitoredSession::Create(g, HookList(hook), nullptr,
                                                   testing::HookTestOptions(),
                                                   asio::use_awaitable);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(created.status().message().find("EarlyStoppingHook"),
            std::string::npos);
}

CO_TEST(EarlyStoppingHook, StopsAfterPatienceEvaluationsWithoutImprovement) {
  MetricGraph graph;
  CapturedLog log;
  auto hook =
      MakeHook({.metric = graph.value, .patience = 3, .sink = log.Sink()});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  std::vector<float> values = {5, 4, 4.5, 4.2, 4.1, 1, 1};
  int steps = co_await TrainUntilStop(*ms, graph, values);
  EXPECT_EQ(steps, 5);
  EXPECT_TRUE(ms->ShouldStop());
  EXPECT_EQ(hook->best_value(), 4.0);
  EXPECT_EQ(hook->best_step(), 2);
  EXPECT_EQ(hook->evaluations_without_improvement(), 3);
  EXPECT_EQ(ms->stop_reason(),
            "hook 'EarlyStoppingHook' requested stop: 'val_loss' did not "
            "improve for 3 evaluations (best 4 at step 2)");
  EXPECT_EQ(log.lines->size(), 1u);
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(EarlyStoppingHook, AnImprovementRestartsTheCount) {
  MetricGraph graph;
  auto hook = MakeHook({.metric = graph.value, .patience = 2});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  std::vector<float> values = {5, 6, 3, 7, 2, 8};
  int steps = co_await TrainUntilStop(*ms, graph, values);
  EXPECT_EQ(steps, 6);
  EXPECT_FALSE(ms->ShouldStop());
  EXPECT_EQ(hook->best_value(), 2.0);
  EXPECT_EQ(hook->evaluations_without_improvement(), 1);
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(EarlyStoppingHook, ASmallerChangeThanMinDeltaIsNoImprovement) {
  MetricGraph graph;
  auto hook =
      MakeHook({.metric = graph.value, .min_delta = 0.5, .patience = 5});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  std::vector<float> values = {5, 4.75};
  co_await TrainUntilStop(*ms, graph, values);
  EXPECT_EQ(hook->best_value(), 5.0);
  EXPECT_EQ(hook->evaluations_without_improvement(), 1);
  values = {4.25};
  co_await TrainUntilStop(*ms, graph, values);
  EXPECT_EQ(hook->best_value(), 4.25);
  EXPECT_EQ(hook->evaluations_without_improvement(), 0);
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(EarlyStoppingHook, MaxModeWantsHigherValues) {
  MetricGraph graph;
  auto hook = MakeHook(
      {.metric = graph.value, .mode = EarlyStoppingMode::kMax, .patience = 1});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  std::vector<float> values = {0.5, 0.75, 0.75, 0.9};
  int steps = co_await TrainUntilStop(*ms, graph, values);
  EXPECT_EQ(steps, 3);
  EXPECT_EQ(hook->best_value(), 0.75);
  EXPECT_EQ(hook->best_step(), 2);
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(EarlyStoppingHook, EveryNStepsEvaluatesAtLocalIterationsZeroNTwoN) {
  MetricGraph graph;
  auto hook =
      MakeHook({.metric = graph.value, .patience = 2, .every_n_steps = 3});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  // Only 5, 6 and 7 are seen; the 1s in between would have improved.
  std::vector<float> values = {5, 1, 1, 6, 1, 1, 7, 1};
  int steps = co_await TrainUntilStop(*ms, graph, values);
  EXPECT_EQ(steps, 7);
  EXPECT_EQ(hook->evaluations(), 3);
  EXPECT_EQ(hook->best_value(), 5.0);
  EXPECT_EQ(hook->best_step(), 1);
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(EarlyStoppingHook, ANaNNeverImproves) {
  MetricGraph graph;
  auto hook = MakeHook({.metric = graph.value, .patience = 2});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  std::vector<float> values = {std::nanf(""), 3, std::nanf(""), std::nanf("")};
  int steps = co_await TrainUntilStop(*ms, graph, values);
  EXPECT_EQ(steps, 4);
  EXPECT_TRUE(ms->ShouldStop());
  EXPECT_EQ(hook->best_value(), 3.0);
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(EarlyStoppingHook, AMetricWithSeveralValuesFailsTheStepNamingIt) {
  StepGraph graph;
  Output pair = ops::Const(graph.g, Tensor::FromVector<float>({1, 2}), "pair");
  auto hook = MakeHook({.metric = pair});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  auto result = co_await ms->Run(graph.Train(), asio::use_awaitable);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("'pair'"), std::string::npos)
      << result.status();
}

}  // namespace
}  // namespace cosession::early_stopping_hook_test
