// CheckpointSaverHook: TensorFlow's trigger steps and listener call counts
// (basic_session_run_hooks_test.py's CheckpointSaverHookTest, ported to a
// MonitoredSession, which always calls AfterCreateSession), stop requests
// from AfterSave, and resuming from a checkpoint.
#include "cosession/hooks/checkpoint_saver_hook.h"

#include <gtest/gtest.h>

#include <boost/asio/use_awaitable.hpp>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "cosession/async/monitored_session.h"
#include "cosession/graph/ops.h"
#include "cosession/io/atomic_file.h"
#include "cosession/io/graph_def_proto.h"
#include "cosession/io/safetensors.h"
#include "tests/co_test.h"
#include "tests/event_test_util.h"
#include "tests/scratch_dir.h"
#include "tests/test_util.h"

namespace cosession::checkpoint_saver_hook_test {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using testing::TestRuntime;

using testing::ScratchDir;

// Counts calls as TF's MockCheckpointSaverListener; may ask to stop.
class CountingListener : public CheckpointSaverListener {
 public:
  std::map<std::string, int> counts;
  bool ask_for_stop = false;
  std::vector<int64_t> saved_steps;
  // Checked in AfterSave: the checkpoint of that step is on disk and loads.
  std::string dir;
  std::vector<std::string> problems;

  absl::Status Begin(Graph&) override {
    ++counts["begin"];
    return absl::OkStatus();
  }
  asio::awaitable<absl::Status> BeforeSave(Session&, int64_t) override {
    ++counts["before_save"];
    co_return absl::OkStatus();
  }
  asio::awaitable<absl::StatusOr<bool>> AfterSave(Session&,
                                                  int64_t step) override {
    ++counts["after_save"];
    saved_steps.push_back(step);
    if (!dir.empty()) {
      auto file = ReadSafetensorsFile(
          absl::StrCat(dir, "/model.ckpt-", step, ".safetensors"));
      if (!file.ok()) problems.push_back(file.status().ToString());
    }
    co_return ask_for_stop;
  }
  asio::awaitable<absl::Status> End(Session&, int64_t) override {
    ++counts["end"];
    co_return absl::OkStatus();
  }
};

using Counts = std::map<std::string, int>;

// global_step with its increment (TF's _increment_global_step) and a
// variable that follows it.
struct TrainGraph {
  TrainGraph() {
    step = GetOrCreateGlobalStep(g);
    w = ops::Variable(g, Tensor::Scalar<float>(0), "w");
    auto one = ops::Const(g, int64_t{1});
    train = ops::Group(
        g, {Operation(ops::AssignAdd(g, step, one).node()),
            Operation(ops::AssignAdd(g, w, ops::Const(g, 0.5f)).node())});
  }
  RunArgs Train() const { return {.targets = {train}}; }
  Graph g;
  Output step, w;
  Operation train;
};

MonitoredSessionOptions TestOptions() {
  MonitoredSessionOptions options;
  options.runtime = &TestRuntime();
  options.stop_grace_period = std::chrono::seconds(5);
  options.max_recovery_attempts = 0;  // SingularMonitoredSession
  return options;
}

std::shared_ptr<CheckpointSaverHook> MakeHook(
    CheckpointSaverHookOptions options) {
  auto hook = CheckpointSaverHook::Create(std::move(options));
  EXPECT_TRUE(hook.ok()) << hook.status();
  return hook.ok() ? *hook : nullptr;
}

asio::awaitable<std::unique_ptr<MonitoredSession>> Start(
    Graph& g, std::shared_ptr<CheckpointSaverHook> hook,
    std::shared_ptr<SessionCreator> creator = nullptr) {
  MonitoredSession::Hooks hooks{hook};
  auto created =
      co_await MonitoredSession::Create(g, std::move(hooks), std::move(creator),
                                        TestOptions(), asio::use_awaitable);
  if (!created.ok()) {
    ADD_FAILURE() << "Create failed: " << created.status();
    co_return nullptr;
  }
  co_return std::move(created).value();
}

// Runs `steps` training steps; the first error, if any.
asio::awaitable<absl::Status> TrainSteps(MonitoredSession& ms,
                                         const TrainGraph& graph, int steps) {
  for (int i = 0; i < steps; ++i) {
    auto ran = co_await ms.Run(graph.Train(), asio::use_awaitable);
    if (!ran.ok()) co_return ran.status();
  }
  co_return absl::OkStatus();
}

// The step of the newest checkpoint of `dir` (-1 when there is none), once
// the save in flight finished.
asio::awaitable<int64_t> LatestSavedStep(CheckpointSaverHook& hook) {
  (void)co_await hook.saver()->WaitForPendingSave();
  auto latest = LatestCheckpoint(hook.checkpoint_dir());
  if (!latest.ok()) co_return -1;
  auto file = ReadSafetensorsFile(CheckpointFilePath(*latest));
  if (!file.ok()) {
    ADD_FAILURE() << file.status();
    co_return -1;
  }
  int64_t step = -1;
  EXPECT_TRUE(absl::SimpleAtoi(file->metadata.at("global_step"), &step));
  EXPECT_EQ(file->tensors.at("global_step").scalar<int64_t>(), step);
  co_return step;
}

// ---- trigger steps (TF: test_save_steps_saves_periodically,
// test_summary_writer_defs)

CO_TEST(CheckpointSaverHook, SaveStepsSavesAtCreationThenEveryNSteps) {
  ScratchDir dir;
  TrainGraph graph;
  auto hook = MakeHook({.checkpoint_dir = dir.path(), .save_steps = 2});
  auto ms = co_await Start(graph.g, hook);
  CO_ASSERT_TRUE(ms != nullptr);
  EXPECT_EQ(co_await LatestSavedStep(*hook), 0);  // at session creation
  std::vector<int64_t> latest;
  for (int i = 0; i < 5; ++i) {
    CO_ASSERT_OK(
        (co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
    latest.push_back(co_await LatestSavedStep(*hook));
  }
  EXPECT_EQ(latest, (std::vector<int64_t>{0, 2, 2, 4, 4}));
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  EXPECT_EQ(co_await LatestSavedStep(*hook), 5);  // End saves the last step
}

// As TensorFlow's CheckpointSaverHook._save: every save is logged as a
// SessionLog CHECKPOINT in the checkpoint directory's event file, at the
// saved step, with the save path (no step) as checkpoint_path.
CO_TEST(CheckpointSaverHook, EachSaveIsLoggedAsASessionLogCheckpointEvent) {
  ScratchDir dir;
  TrainGraph graph;
  auto hook = MakeHook({.checkpoint_dir = dir.path(), .save_steps = 2});
  auto ms = co_await Start(graph.g, hook);
  CO_ASSERT_TRUE(ms != nullptr);
  CO_ASSERT_OK(co_await TrainSteps(*ms, graph, 5));
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  const std::vector<std::string> files = testing::EventFiles(dir.path());
  CO_ASSERT_TRUE(files.size() == 1u);
  std::vector<int64_t> steps;
  for (const testing::DecodedEvent& e : testing::ReadEventsForTest(files[0])) {
    if (e.session_log_status != 3) continue;  // CHECKPOINT
    steps.push_back(e.step);
    EXPECT_EQ(e.checkpoint_path, dir.path() + "/model.ckpt");
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 2, 4, 5}));
}

// As TensorFlow's after_create_session: the graph is written as
// <checkpoint_dir>/graph.pbtxt and as a graph_def and a meta_graph_def
// event (what TensorBoard's Graphs dashboard reads), before the first
// save's CHECKPOINT.
CO_TEST(CheckpointSaverHook, WritesTheGraphForTensorBoard) {
  ScratchDir dir;
  TrainGraph graph;
  auto hook = MakeHook({.checkpoint_dir = dir.path(), .save_steps = 100});
  auto ms = co_await Start(graph.g, hook);
  CO_ASSERT_TRUE(ms != nullptr);
  CO_ASSERT_OK(co_await TrainSteps(*ms, graph, 1));
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));

  const std::string text = testing::ReadFileBytes(dir.path() + "/graph.pbtxt");
  EXPECT_EQ(text, GraphDefText(graph.g));
  EXPECT_TRUE(absl::StrContains(text, "  name: \"global_step\"\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "  name: \"w\"\n")) << text;

  const std::vector<std::string> files = testing::EventFiles(dir.path());
  CO_ASSERT_TRUE(files.size() == 1u);
  int graphs = 0, meta_graphs = 0;
  bool checkpoint_seen = false;
  for (const testing::DecodedEvent& e : testing::ReadEventsForTest(files[0])) {
    if (e.session_log_status == 3) checkpoint_seen = true;
    if (e.graph_def) {
      ++graphs;
      EXPECT_FALSE(checkpoint_seen) << "the graph comes before the first save";
      EXPECT_EQ(*e.graph_def, EncodeGraphDef(graph.g));
    }
    if (e.meta_graph_def) {
      ++meta_graphs;
      EXPECT_EQ(*e.meta_graph_def, EncodeMetaGraphDef(EncodeGraphDef(graph.g)));
    }
  }
  EXPECT_EQ(graphs, 1);
  EXPECT_EQ(meta_graphs, 1);
  EXPECT_TRUE(checkpoint_seen);
}

// save_graph_def false, as TensorFlow's: checkpoints only.
CO_TEST(CheckpointSaverHook, SaveGraphDefFalseWritesNoGraph) {
  ScratchDir dir;
  TrainGraph graph;
  auto hook = MakeHook({.checkpoint_dir = dir.path(),
                        .save_steps = 100,
                        .save_graph_def = false});
  auto ms = co_await Start(graph.g, hook);
  CO_ASSERT_TRUE(ms != nullptr);
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  EXPECT_FALSE(fs::exists(dir.path() + "/graph.pbtxt"));
  const std::vector<std::string> files = testing::EventFiles(dir.path());
  CO_ASSERT_TRUE(files.size() == 1u);
  int checkpoints = 0;
  for (const testing::DecodedEvent& e : testing::ReadEventsForTest(files[0])) {
    EXPECT_FALSE(e.graph_def.has_value());
    EXPECT_FALSE(e.meta_graph_def.has_value());
    checkpoints += e.session_log_status == 3;
  }
  EXPECT_GT(checkpoints, 0);
}

CO_TEST(CheckpointSaverHook, SaveSecsSavesWhenThePeriodElapsed) {
  // TF: test_save_secs_saves_periodically, with a ManualClock.
  ScratchDir dir;
  TrainGraph graph;
  ManualClock clock;
  auto hook = MakeHook({.checkpoint_dir = dir.path(),
                        .save_secs = absl::Seconds(2),
                        .clock = &clock});
  auto ms = co_await Start(graph.g, hook);
  CO_ASSERT_TRUE(ms != nullptr);
  std::vector<int64_t> latest;
  for (double at : {0.5, 2.5, 2.6, 2.7, 10.0}) {
    clock.Set(absl::UnixEpoch() + absl::Hours(1) + absl::Seconds(at));
    CO_ASSERT_OK(
        (co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
    latest.push_back(co_await LatestSavedStep(*hook));
  }
  EXPECT_EQ(latest, (std::vector<int64_t>{0, 2, 2, 2, 5}));
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(CheckpointSaverHook, EndSavesTheLastStepWhenTheLastSaveIsOlder) {
  // TF: test_save_saves_at_end.
  ScratchDir dir;
  TrainGraph graph;
  ManualClock clock;
  auto hook = MakeHook({.checkpoint_dir = dir.path(),
                        .save_secs = absl::Seconds(2),
                        .clock = &clock});
  auto ms = co_await Start(graph.g, hook);
  CO_ASSERT_TRUE(ms != nullptr);
  CO_ASSERT_OK(co_await TrainSteps(*ms, graph, 2));
  EXPECT_EQ(co_await LatestSavedStep(*hook), 0);
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  EXPECT_EQ(co_await LatestSavedStep(*hook), 2);
}

// ---- listeners (TF: test_listener_with_monitored_session,
// test_two_listeners_with_default_saver,
// test_save_secs_calls_listeners_at_begin_and_end)

CO_TEST(CheckpointSaverHook, ListenerCountsMatchTensorFlowWithSaveStepsOne) {
  ScratchDir dir;
  TrainGraph graph;
  auto first = std::make_shared<CountingListener>();
  auto second = std::make_shared<CountingListener>();
  auto hook = MakeHook({.checkpoint_dir = dir.path(),
                        .save_steps = 1,
                        .listeners = {first, second}});
  auto ms = co_await Start(graph.g, hook);
  CO_ASSERT_TRUE(ms != nullptr);
  CO_ASSERT_OK(co_await TrainSteps(*ms, graph, 2));
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  const Counts expected{
      {"begin", 1}, {"before_save", 3}, {"after_save", 3}, {"end", 1}};
  EXPECT_EQ(first->counts, expected);
  EXPECT_EQ(second->counts, expected);
  EXPECT_EQ(first->saved_steps, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(co_await LatestSavedStep(*hook), 2);
}

CO_TEST(CheckpointSaverHook, SaveSecsCallsListenersAtCreationAndEnd) {
  ScratchDir dir;
  TrainGraph graph;
  ManualClock clock;
  auto listener = std::make_shared<CountingListener>();
  auto hook = MakeHook({.checkpoint_dir = dir.path(),
                        .save_secs = absl::Seconds(2),
                        .listeners = {listener},
                        .clock = &clock});
  auto ms = co_await Start(graph.g, hook);
  CO_ASSERT_TRUE(ms != nullptr);
  CO_ASSERT_OK(co_await TrainSteps(*ms, graph, 2));
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  EXPECT_EQ(
      listener->counts,
      (Counts{
          {"begin", 1}, {"before_save", 2}, {"after_save", 2}, {"end", 1}}));
}

CO_TEST(CheckpointSaverHook, AfterSaveRunsOnlyOnceTheCheckpointIsOnDisk) {
  ScratchDir dir;
  TrainGraph graph;
  auto listener = std::make_shared<CountingListener>();
  listener->dir = dir.path();
  auto hook = MakeHook(
      {.checkpoint_dir = dir.path(), .save_steps = 1, .listeners = {listener}});
  auto ms = co_await Start(graph.g, hook);
  CO_ASSERT_TRUE(ms != nullptr);
  CO_ASSERT_OK(co_await TrainSteps(*ms, graph, 4));
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  EXPECT_EQ(listener->saved_steps, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(listener->problems.empty()) << listener->problems.front();
}

// ---- stop requests (TF: test_listener_stops_training_in_after_save)

CO_TEST(CheckpointSaverHook,
        AfterSaveAskingToStopStopsTheSessionWithWaitForWrite) {
  ScratchDir dir;
  TrainGraph graph;
  auto listener = std::make_shared<CountingListener>();
  auto hook = MakeHook({.checkpoint_dir = dir.path(),
                        .save_steps = 1,
                        .listeners = {listener},
                        .wait_for_write = true});
  auto ms = co_await Start(graph.g, hook);
  CO_ASSERT_TRUE(ms != nullptr);
  CO_ASSERT_OK((co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
  EXPECT_FALSE(ms->ShouldStop());
  CO_ASSERT_OK((co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
  EXPECT_FALSE(ms->ShouldStop());
  listener->ask_for_stop = true;
  CO_ASSERT_OK((co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
  EXPECT_TRUE(ms->ShouldStop());
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

CO_TEST(CheckpointSaverHook, AfterSaveAskingToStopStopsTheStepThatDeliversIt) {
  // Without wait_for_write, AfterSave of the save made at session creation
  // runs in the first step that finds its write finished, and stops there.
  ScratchDir dir;
  TrainGraph graph;
  auto listener = std::make_shared<CountingListener>();
  auto hook = MakeHook({.checkpoint_dir = dir.path(),
                        .save_steps = 10,
                        .listeners = {listener}});
  auto ms = co_await Start(graph.g, hook);
  CO_ASSERT_TRUE(ms != nullptr);
  CO_ASSERT_OK(co_await hook->saver()->WaitForPendingSave());
  listener->ask_for_stop = true;
  CO_ASSERT_OK((co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
  EXPECT_TRUE(ms->ShouldStop());
  EXPECT_EQ(listener->counts["after_save"], 1);
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
}

// ---- resuming

CO_TEST(CheckpointSaverHook, ARestartedSessionResumesAtTheSavedGlobalStep) {
  ScratchDir dir;
  {
    TrainGraph graph;
    auto hook = MakeHook({.checkpoint_dir = dir.path(), .save_steps = 100});
    auto ms = co_await Start(graph.g, hook);
    CO_ASSERT_TRUE(ms != nullptr);
    CO_ASSERT_OK(co_await TrainSteps(*ms, graph, 3));
    CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));  // saves step 3
  }
  TrainGraph graph;  // a new process, in effect
  auto hook = MakeHook({.checkpoint_dir = dir.path(), .save_steps = 100});
  auto creator = std::make_shared<ChiefSessionCreator>(
      Scaffold{.restore = MakeRestoreFunction(hook)});
  auto ms = co_await Start(graph.g, hook, creator);
  CO_ASSERT_TRUE(ms != nullptr);
  RunArgs read{.fetches = {graph.step, graph.w}};
  auto values = co_await ms->Run(std::move(read), asio::use_awaitable);
  CO_ASSERT_OK(values.status());
  EXPECT_EQ((*values)[0].scalar<int64_t>(), 3);
  EXPECT_EQ((*values)[1].scalar<float>(), 1.5f);
  CO_ASSERT_OK((co_await ms->Run(graph.Train(), asio::use_awaitable)).status());
  CO_ASSERT_OK(co_await ms->Close(asio::use_awaitable));
  EXPECT_EQ(co_await LatestSavedStep(*hook), 4);
}

// ---- errors

CO_TEST(CheckpointSaverHook, AGraphWithoutAGlobalStepFailsCreateFromBegin) {
  ScratchDir dir;
  Graph g;
  ops::Variable(g, Tensor::Scalar<float>(0), "w");
  auto hook = MakeHook({.checkpoint_dir = dir.path(), .save_steps = 1});
  MonitoredSession::Hooks hooks{hook};
  auto created = co_await MonitoredSession::Create(
      g, std::move(hooks), nullptr, TestOptions(), asio::use_awaitable);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(created.status().message(), "global step"))
      << created.status();
}

TEST(CheckpointSaverHook, BadOptionsAreInvalidArgumentNamingThem) {
  auto no_dir = CheckpointSaverHook::Create({.save_steps = 1});
  EXPECT_EQ(no_dir.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(no_dir.status().message(), "checkpoint_dir"));
  auto both = CheckpointSaverHook::Create({.checkpoint_dir = "/tmp/x",
                                           .save_secs = absl::Seconds(1),
                                           .save_steps = 1});
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(both.status().message(), "save_secs"));
  auto neither = CheckpointSaverHook::Create({.checkpoint_dir = "/tmp/x"});
  EXPECT_EQ(neither.status().code(), absl::StatusCode::kInvalidArgument);
  auto null_listener = CheckpointSaverHook::Create(
      {.checkpoint_dir = "/tmp/x", .save_steps = 1, .listeners = {nullptr}});
  EXPECT_TRUE(absl::StrContains(null_listener.status().message(), "listeners"));
}

CO_TEST(CheckpointSaverHook, AFailedWriteIsTheErrorOfTheCallThatDeliversIt) {
  ScratchDir dir;
  TrainGraph graph;
  // A directory where step 1's checkpoint should go: its write fails, on
  // the pool, after the step that started it.
  const std::string blocked = JoinPath(dir.path(), "model.ckpt-1.safetensors");
  fs::create_directories(JoinPath(blocked, "in_the_way"));
  auto hook = MakeHook({.checkpoint_dir = dir.path(), .save_steps = 1});
  MonitoredSession::Hooks hooks{hook};
  auto created = co_await MonitoredSession::Create(
      graph.g, std::move(hooks), nullptr, TestOptions(), asio::use_awaitable);
  CO_ASSERT_TRUE(created.ok());
  absl::Status failed;
  for (int i = 0; i < 3 && failed.ok(); ++i) {
    auto ran = co_await (*created)->Run(graph.Train(), asio::use_awaitable);
    failed = ran.status();
  }
  EXPECT_FALSE(failed.ok());
  EXPECT_TRUE(absl::StrContains(failed.message(), "model.ckpt-1")) << failed;
  (void)co_await (*created)->Close(asio::use_awaitable);
}

// A checkpoint directory that cannot be made fails the session's creation,
// naming it: the graph is written there first, as TensorFlow's
// after_create_session writes graph.pbtxt.
CO_TEST(CheckpointSaverHook, AnUnwritableDirectoryFailsTheSessionsCreation) {
  ScratchDir dir;
  TrainGraph graph;
  const std::string blocked = JoinPath(dir.path(), "blocked");
  CO_ASSERT_OK(WriteFileAtomically(blocked, "not a directory"));
  auto hook = MakeHook({.checkpoint_dir = blocked, .save_steps = 1});
  MonitoredSession::Hooks hooks{hook};
  auto created = co_await MonitoredSession::Create(
      graph.g, std::move(hooks), nullptr, TestOptions(), asio::use_awaitable);
  CO_ASSERT_TRUE(!created.ok());
  EXPECT_TRUE(absl::StrContains(created.status().message(), "blocked"))
      << created.status();
}

}  // namespace
}  // namespace cosession::checkpoint_saver_hook_test
