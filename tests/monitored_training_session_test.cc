// MonitoredTrainingSession: TF's default hooks, their order (docs/design.md
// semantics point 13), its defaults, the worker set-up, and a run that stops
// at max_steps and resumes from its checkpoint.
#include "cosession/training/monitored_training_session.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/experimental/channel.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "cosession/graph/ops.h"
#include "cosession/hooks/checkpoint_saver_hook.h"
#include "cosession/hooks/step_counter_hook.h"
#include "cosession/hooks/stop_at_step_hook.h"
#include "cosession/hooks/summary_saver_hook.h"
#include "cosession/io/saver.h"
#include "tests/co_test.h"
#include "tests/scratch_dir.h"
#include "tests/test_util.h"

namespace cosession::monitored_training_session_test {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using testing::TestRuntime;

using testing::ScratchDir;

class MarkerHook : public SessionRunHook {
 public:
  bool MaySuspend() const override { return false; }
};

// A global step and a train op that advances it.
struct TrainingGraph {
  TrainingGraph() {
    global_step = GetOrCreateGlobalStep(g);
    weight = ops::Variable(g, Tensor::Scalar<float>(1.0f), "weight");
    Output decay = ops::AssignSub(g, weight, ops::Const(g, 0.01f));
    train = ops::Group(
        g,
        {Operation(decay.node()),
         Operation(
             ops::AssignAdd(g, global_step, ops::Const(g, int64_t{1})).node())},
        "train");
  }
  Graph g;
  Output global_step, weight;
  Operation train;
};

MonitoredTrainingSessionOptions ChiefOptions(const std::string& dir) {
  MonitoredTrainingSessionOptions options;
  options.checkpoint_dir = dir;
  options.session.runtime = &TestRuntime();
  options.stop_grace_period = std::chrono::seconds(5);
  return options;
}

TEST(MonitoredTrainingSession, DefaultsAreTensorFlows) {
  MonitoredTrainingSessionOptions options;
  EXPECT_TRUE(options.is_chief);
  EXPECT_EQ(options.save_summaries_steps, 100);
  EXPECT_EQ(options.save_checkpoint_secs, absl::Seconds(600));
  EXPECT_FALSE(options.save_checkpoint_steps.has_value());
  EXPECT_EQ(options.log_step_count_steps, 100);
  EXPECT_EQ(options.stop_grace_period, std::chrono::seconds(120));
}

TEST(MonitoredTrainingSession, ChiefHooksComeInTensorFlowsOrder) {
  ScratchDir dir;
  TrainingGraph graph;
  auto chief_only = std::make_shared<MarkerHook>();
  auto user = std::make_shared<MarkerHook>();
  MonitoredTrainingSessionOptions options = ChiefOptions(dir.path());
  options.chief_only_hooks = {chief_only};
  options.hooks = {user};
  options.summary_scalars = {{"weight", graph.weight}};
  options.max_steps = 10;
  auto setup = SetUpMonitoredTrainingSession(graph.g, options);
  ASSERT_TRUE(setup.ok()) << setup.status();
  const auto& hooks = setup->hooks;
  ASSERT_EQ(hooks.size(), 6u);
  EXPECT_EQ(hooks[0], chief_only);
  EXPECT_NE(std::dynamic_pointer_cast<StepCounterHook>(hooks[1]), nullptr);
  EXPECT_NE(std::dynamic_pointer_cast<SummarySaverHook>(hooks[2]), nullptr);
  EXPECT_NE(std::dynamic_pointer_cast<CheckpointSaverHook>(hooks[3]), nullptr);
  EXPECT_NE(std::dynamic_pointer_cast<StopAtStepHook>(hooks[4]), nullptr);
  EXPECT_EQ(hooks[5], user);
  EXPECT_NE(std::dynamic_pointer_cast<ChiefSessionCreator>(setup->creator),
            nullptr);
  EXPECT_EQ(setup->options.stop_grace_period, std::chrono::seconds(5));
}

TEST(MonitoredTrainingSession, WithoutDirectoriesTheChiefGetsOnlyItsHooks) {
  TrainingGraph graph;
  auto chief_only = std::make_shared<MarkerHook>();
  auto user = std::make_shared<MarkerHook>();
  MonitoredTrainingSessionOptions options = ChiefOptions("");
  options.chief_only_hooks = {chief_only};
  options.hooks = {user};
  auto setup = SetUpMonitoredTrainingSession(graph.g, options);
  ASSERT_TRUE(setup.ok()) << setup.status();
  EXPECT_EQ(setup->hooks, (MonitoredSession::Hooks{chief_only, user}));
}

TEST(MonitoredTrainingSession, AWorkerGetsTheUserHooksAndAWorkerCreator) {
  ScratchDir dir;
  TrainingGraph graph;
  auto chief_only = std::make_shared<MarkerHook>();
  auto user = std::make_shared<MarkerHook>();
  MonitoredTrainingSessionOptions options = ChiefOptions(dir.path());
  options.is_chief = false;
  options.shared_resources = std::make_shared<ResourceManager>();
  options.chief_only_hooks = {chief_only};
  options.hooks = {user};
  auto setup = SetUpMonitoredTrainingSession(graph.g, options);
  ASSERT_TRUE(setup.ok()) << setup.status();
  EXPECT_EQ(setup->hooks, (MonitoredSession::Hooks{user}));
  EXPECT_NE(std::dynamic_pointer_cast<WorkerSessionCreator>(setup->creator),
            nullptr);
}

TEST(MonitoredTrainingSession, AWorkerWithoutTheChiefsVariablesIsInvalid) {
  TrainingGraph graph;
  MonitoredTrainingSessionOptions options = ChiefOptions("");
  options.is_chief = false;
  auto setup = SetUpMonitoredTrainingSession(graph.g, options);
  EXPECT_EQ(setup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(setup.status().message().find("shared_resources"),
            std::string::npos);
}

TEST(MonitoredTrainingSession, ABadHookOptionIsNamed) {
  ScratchDir dir;
  TrainingGraph graph;
  MonitoredTrainingSessionOptions options = ChiefOptions(dir.path());
  options.summary_scalars = {{"nothing", Output()}};
  auto setup = SetUpMonitoredTrainingSession(graph.g, options);
  EXPECT_EQ(setup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(setup.status().message().find("save_summaries"), std::string::npos)
      << setup.status();
}

// Completes as MonitoredSession::Create does: with the result alone (no
// exception_ptr first), once, through the handler's executor and never
// inline -- bad options too.
CO_TEST(MonitoredTrainingSession,
        CompletesWithItsResultThroughTheHandlersExecutor) {
  ScratchDir dir;
  struct Completion {
    std::optional<MonitoredSession::CreateResult> result;
    int calls = 0;
    bool returned = false;  // MonitoredTrainingSession returned
    bool inline_call = false;
    bool off_io = false;
  };
  asio::experimental::channel<void(boost::system::error_code)> done(
      co_test::Io(), 2);
  auto create = [&](Graph& g, MonitoredTrainingSessionOptions options,
                    Completion& c) {
    MonitoredTrainingSession(
        g, std::move(options),
        asio::bind_executor(
            co_test::Io(), [&c, &done](MonitoredSession::CreateResult result) {
              ++c.calls;
              c.inline_call = !c.returned;
              c.off_io = !co_test::Io().get_executor().running_in_this_thread();
              c.result = std::move(result);
              done.try_send(boost::system::error_code{});
            }));
    c.returned = true;
  };
  TrainingGraph bad_graph;
  MonitoredTrainingSessionOptions bad = ChiefOptions(dir.path());
  bad.summary_scalars = {{"nothing", Output()}};
  Completion refused;
  create(bad_graph.g, bad, refused);
  co_await done.async_receive(asio::use_awaitable);
  CO_ASSERT_TRUE(refused.result.has_value());
  EXPECT_EQ(refused.result->status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.result->status().message().find("save_summaries"),
            std::string::npos)
      << refused.result->status();
  TrainingGraph graph;
  Completion created;
  create(graph.g, ChiefOptions(dir.path()), created);
  co_await done.async_receive(asio::use_awaitable);
  CO_ASSERT_TRUE(created.result.has_value());
  CO_ASSERT_OK(created.result->status());
  CO_ASSERT_OK(co_await (**created.result)->Close(asio::use_awaitable));
  for (const Completion* c : {&refused, &created}) {
    EXPECT_EQ(c->calls, 1);
    EXPECT_FALSE(c->inline_call);
    EXPECT_FALSE(c->off_io);
  }
}

// Runs the chief until ShouldStop, then closes; returns the steps run.
asio::awaitable<int> TrainUntilStopped(TrainingGraph& graph,
                                       MonitoredTrainingSessionOptions options,
                                       int64_t* final_step) {
  auto created =
      co_await MonitoredTrainingSession(graph.g, options, asio::use_awaitable);
  if (!created.ok()) {
    ADD_FAILURE() << created.status();
    co_return -1;
  }
  MonitoredSession& session = **created;
  int steps = 0;
  RunArgs train{.targets = {graph.train}};
  while (!session.ShouldStop() && steps < 1000) {
    auto ran = co_await session.Run(train, asio::use_awaitable);
    if (!ran.ok()) {
      ADD_FAILURE() << ran.status();
      break;
    }
    ++steps;
  }
  RunArgs read{.fetches = {graph.global_step}};
  auto step = co_await session.raw_session().Run(read, asio::use_awaitable);
  if (step.ok()) *final_step = step->front().scalar<int64_t>();
  absl::Status closed = co_await session.Close(asio::use_awaitable);
  EXPECT_TRUE(closed.ok()) << closed;
  co_return steps;
}

CO_TEST(MonitoredTrainingSession, StopsAtMaxStepsAndResumesFromItsCheckpoint) {
  ScratchDir dir;
  int64_t final_step = -1;
  {
    TrainingGraph graph;
    MonitoredTrainingSessionOptions options = ChiefOptions(dir.path());
    options.save_checkpoint_steps = 4;
    options.max_steps = 10;
    int steps = co_await TrainUntilStopped(graph, options, &final_step);
    EXPECT_EQ(steps, 10);
    EXPECT_EQ(final_step, 10);
  }
  auto latest = LatestCheckpoint(dir.path());
  CO_ASSERT_TRUE(latest.ok());
  EXPECT_NE(latest->find("model.ckpt-10"), std::string::npos) << *latest;
  {
    // A new process, as it were: a fresh graph, restored from step 10.
    TrainingGraph graph;
    MonitoredTrainingSessionOptions options = ChiefOptions(dir.path());
    options.max_steps = 15;
    int steps = co_await TrainUntilStopped(graph, options, &final_step);
    EXPECT_EQ(steps, 5);
    EXPECT_EQ(final_step, 15);
  }
}

}  // namespace
}  // namespace cosession::monitored_training_session_test
