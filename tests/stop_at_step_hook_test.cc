// StopAtStepHook: TensorFlow's StopAtStepTest cases (global step set by hand,
// a no-op step), then under a training loop and across recovery.
#include "cosession/hooks/stop_at_step_hook.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/asio/use_awaitable.hpp>
#include <vector>

#include "cosession/async/coordinator.h"
#include "tests/co_test.h"
#include "tests/hook_test_util.h"

namespace cosession::stop_at_step_hook_test {
namespace {

namespace asio = boost::asio;
using testing::CreateSessionOrFail;
using testing::HookList;
using testing::RawRun;
using testing::StepGraph;

std::shared_ptr<StopAtStepHook> MakeHook(StopAtStepHookOptions options) {
  auto hook = StopAtStepHook::Create(options);
  EXPECT_TRUE(hook.ok()) << hook.status();
  return hook.ok() ? *hook : nullptr;
}

TEST(StopAtStepHook, CreateRejectsBothNumStepsAndLastStep) {
  auto hook = StopAtStepHook::Create({.num_steps = 10, .last_step = 20});
  EXPECT_EQ(hook.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hook.status().message().find("num_steps"), std::string::npos);
}

TEST(StopAtStepHook, CreateRejectsNeitherNumStepsNorLastStep) {
  auto hook = StopAtStepHook::Create({});
  EXPECT_EQ(hook.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hook.status().message().find("last_step"), std::string::npos);
}

TEST(StopAtStepHook, CreateRejectsNegativeNumSteps) {
  auto hook = StopAtStepHook::Create({.num_steps = -1});
  EXPECT_EQ(hook.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hook.status().message().find("num_steps"), std::string::npos);
}

CO_TEST(StopAtStepHook, BeginFailsWithoutAGlobalStepNamingTheHook) {
  Graph g;
  ops::NoOp(g);
  auto hook = MakeHook({.last_step = 3});
  auto created = co_await MonitoredSession::Create(g, HookList(hook), nullptr,
                                                   testing::HookTestOptions(),
                                                   asio::use_awaitable);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(created.status().message().find("StopAtStepHook"),
            std::string::npos)
      << created.status();
}

// TF: test_stop_based_on_last_step.
CO_TEST(StopAtStepHook, StopsWhenTheGlobalStepReachesLastStep) {
  StepGraph graph;
  auto hook = MakeHook({.last_step = 10});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  co_await RawRun(ms->raw_session(), graph.SetStep(5));
  CO_ASSERT_OK(
      (co_await ms->Run(graph.Nothing(), asio::use_awaitable)).status());
  EXPECT_FALSE(ms->ShouldStop());
  // 9 + 1 reaches the last step, but the re-read step is still 9.
  co_await RawRun(ms->raw_session(), graph.SetStep(9));
  CO_ASSERT_OK(
      (co_await ms->Run(graph.Nothing(), asio::use_awaitable)).status());
  EXPECT_FALSE(ms->ShouldStop());
  co_await RawRun(ms->raw_session(), graph.SetStep(10));
  CO_ASSERT_OK(
      (co_await ms->Run(graph.Nothing(), asio::use_awaitable)).status());
  EXPECT_TRUE(ms->ShouldStop());
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(StopAtStepHook, StopsWhenTheGlobalStepIsAlreadyPastLastStep) {
  StepGraph graph;
  auto hook = MakeHook({.last_step = 10});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  co_await RawRun(ms->raw_session(), graph.SetStep(11));
  CO_ASSERT_OK(
      (co_await ms->Run(graph.Nothing(), asio::use_awaitable)).status());
  EXPECT_TRUE(ms->ShouldStop());
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

// TF: test_stop_based_on_num_step.
CO_TEST(StopAtStepHook, NumStepsCountFromTheStepAtSessionCreation) {
  StepGraph graph;
  auto hook = MakeHook({.num_steps = 10});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  EXPECT_EQ(hook->last_step(), 10);  // created at step 0
  co_await RawRun(ms->raw_session(), graph.SetStep(8));
  CO_ASSERT_OK(
      (co_await ms->Run(graph.Nothing(), asio::use_awaitable)).status());
  EXPECT_FALSE(ms->ShouldStop());
  co_await RawRun(ms->raw_session(), graph.SetStep(9));
  CO_ASSERT_OK(
      (co_await ms->Run(graph.Nothing(), asio::use_awaitable)).status());
  EXPECT_FALSE(ms->ShouldStop());
  co_await RawRun(ms->raw_session(), graph.SetStep(10));
  CO_ASSERT_OK(
      (co_await ms->Run(graph.Nothing(), asio::use_awaitable)).status());
  EXPECT_TRUE(ms->ShouldStop());
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

// TF: test_stop_based_with_multiple_steps (the step jumps past last_step).
CO_TEST(StopAtStepHook, StopsWhenTheStepJumpsPastLastStep) {
  StepGraph graph;
  auto hook = MakeHook({.num_steps = 10});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  CO_ASSERT_OK(
      (co_await ms->Run(graph.Nothing(), asio::use_awaitable)).status());
  EXPECT_FALSE(ms->ShouldStop());
  co_await RawRun(ms->raw_session(), graph.SetStep(15));
  CO_ASSERT_OK(
      (co_await ms->Run(graph.Nothing(), asio::use_awaitable)).status());
  EXPECT_TRUE(ms->ShouldStop());
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(StopAtStepHook, ATrainingLoopRunsExactlyNumSteps) {
  StepGraph graph;
  auto hook = MakeHook({.num_steps = 7});
  auto ms = co_await CreateSessionOrFail(graph.g, HookList(hook));
  CO_ASSERT_TRUE(ms != nullptr);
  int steps = 0;
  while (!ms->ShouldStop() && steps < 100) {
    CO_ASSERT_OK(
        (co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
    ++steps;
  }
  EXPECT_EQ(steps, 7);
  auto step = co_await RawRun(ms->raw_session(), graph.ReadStep());
  CO_ASSERT_TRUE(step.size() == 1);
  EXPECT_EQ(step[0].scalar<int64_t>(), 7);
  EXPECT_EQ(ms->stop_reason(),
            "hook 'StopAtStepHook' requested stop: global step 7 reached last "
            "step 7");
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

// Creates sessions whose global step starts at the next of `start_steps`
// (as a restore from a checkpoint would), initialising everything first.
class StartAtStepCreator : public SessionCreator {
 public:
  StartAtStepCreator(const StepGraph& graph, std::vector<int64_t> start_steps)
      : graph_(graph), start_steps_(std::move(start_steps)) {}
  void Prepare(Graph& g) override { init_ = GlobalVariablesInitializer(g); }
  asio::awaitable<absl::StatusOr<std::unique_ptr<Session>>> CreateSession(
      const Graph& g, Runtime& runtime) override {
    auto session = std::make_unique<Session>(g, runtime);
    RunArgs init{.targets = {init_}};
    auto inited = co_await session->Run(init, asio::use_awaitable);
    if (!inited.ok()) co_return inited.status();
    const int64_t start =
        start_steps_.at(std::min(created_++, start_steps_.size() - 1));
    auto set =
        co_await session->Run(graph_.SetStep(start), asio::use_awaitable);
    if (!set.ok()) co_return set.status();
    co_return session;
  }

 private:
  const StepGraph& graph_;
  std::vector<int64_t> start_steps_;
  size_t created_ = 0;
  Operation init_;
};

asio::awaitable<std::unique_ptr<MonitoredSession>> CreateStartingAt(
    StepGraph& graph, MonitoredSession::Hooks hooks,
    std::vector<int64_t> start_steps) {
  auto creator = std::make_shared<StartAtStepCreator>(graph, start_steps);
  auto created = co_await MonitoredSession::Create(
      graph.g, std::move(hooks), creator, testing::HookTestOptions(),
      asio::use_awaitable);
  if (!created.ok()) {
    ADD_FAILURE() << created.status();
    co_return nullptr;
  }
  co_return std::move(created).value();
}

CO_TEST(StopAtStepHook, NumStepsCountFromARestoredGlobalStep) {
  StepGraph graph;
  auto hook = MakeHook({.num_steps = 3});
  std::vector<int64_t> starts = {5};
  auto ms = co_await CreateStartingAt(graph, HookList(hook), starts);
  CO_ASSERT_TRUE(ms != nullptr);
  EXPECT_EQ(hook->last_step(), 8);
  int steps = 0;
  while (!ms->ShouldStop() && steps < 100) {
    CO_ASSERT_OK(
        (co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
    ++steps;
  }
  EXPECT_EQ(steps, 3);
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

// A hook that fails one AfterRun with Aborted, making the session recover.
class AbortOnceHook : public SessionRunHook {
 public:
  int after_create_calls = 0;
  bool aborted = false;
  asio::awaitable<absl::Status> AfterCreateSession(Session&,
                                                   Coordinator&) override {
    ++after_create_calls;
    co_return absl::OkStatus();
  }
  asio::awaitable<absl::Status> AfterRun(SessionRunContext&,
                                         const SessionRunValues&) override {
    if (aborted) co_return absl::OkStatus();
    aborted = true;
    co_return absl::AbortedError("worker lost");
  }
};

CO_TEST(StopAtStepHook, RecoveryKeepsTheLastStepComputedAtFirstCreation) {
  StepGraph graph;
  auto hook = MakeHook({.num_steps = 4});
  auto aborter = std::make_shared<AbortOnceHook>();
  // The first session starts at step 0, the re-created one at step 10 (as if
  // restored from a newer checkpoint): the goal stays 0 + 4, not 10 + 4.
  std::vector<int64_t> starts = {0, 10};
  auto ms = co_await CreateStartingAt(graph, HookList(hook, aborter), starts);
  CO_ASSERT_TRUE(ms != nullptr);
  EXPECT_EQ(hook->last_step(), 4);
  CO_ASSERT_OK((co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
  EXPECT_EQ(ms->recoveries(), 1);
  EXPECT_EQ(aborter->after_create_calls, 2);
  EXPECT_EQ(hook->last_step(), 4);
  // The recovered session is at 11 >= 4: the retried step asked to stop.
  EXPECT_TRUE(ms->ShouldStop());
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

}  // namespace
}  // namespace cosession::stop_at_step_hook_test
