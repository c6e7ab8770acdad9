// Session creators: ChiefSessionCreator restoring its checkpoint_dir with
// Scaffold::saver (TensorFlow's checkpoint_dir), a singular session given a
// creator, and a restore that waits for a save in flight into the same
// directory by another Saver.
#include "cosession/async/session_creator.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cosession/async/monitored_session.h"
#include "cosession/async/runtime.h"
#include "cosession/graph/ops.h"
#include "cosession/io/saver.h"
#include "tests/co_test.h"
#include "tests/scratch_dir.h"
#include "tests/test_util.h"

namespace cosession::session_creator_test {
namespace {

namespace asio = boost::asio;
using testing::ScratchDir;
using testing::TestRuntime;

// A float variable `v` (initially 1) and an op that sets it to a fed value.
struct Model {
  Model() {
    v = ops::Variable(g, Tensor::Scalar(1.0f), "v");
    value = ops::Placeholder(g, DType::kFloat, TensorShape{}, "value");
    set_v = ops::Assign(g, v, value, "set_v");
  }
  RunArgs Set(float x) const {
    RunArgs args;
    args.targets.push_back(Operation(set_v.node()));
    args.feeds.emplace_back(value, Tensor::Scalar(x));
    return args;
  }
  RunArgs Read() const {
    RunArgs args;
    args.fetches.push_back(v);
    return args;
  }
  Graph g;
  Output v, value, set_v;
};

MonitoredSessionOptions TestOptions() {
  MonitoredSessionOptions options;
  options.runtime = &TestRuntime();
  options.stop_grace_period = std::chrono::seconds(5);
  return options;
}

// Writes a checkpoint of `model` with v = `x` into `dir`, through a session
// of its own.
asio::awaitable<absl::Status> SaveCheckpoint(Model& model, Saver& saver,
                                             std::string dir, float x) {
  Session session(model.g, TestRuntime());
  RunArgs init_args;
  init_args.targets.push_back(GlobalVariablesInitializer(model.g));
  auto init = co_await session.Run(init_args, asio::use_awaitable);
  if (!init.ok()) co_return init.status();
  auto set = co_await session.Run(model.Set(x), asio::use_awaitable);
  if (!set.ok()) co_return set.status();
  auto saved = co_await saver.Save(session, dir, 1);
  co_return saved.status();
}

// The value of v in `ms`'s session.
asio::awaitable<float> ValueOfV(MonitoredSession& ms, const Model& model) {
  auto values =
      co_await ms.raw_session().Run(model.Read(), asio::use_awaitable);
  if (!values.ok()) {
    ADD_FAILURE() << values.status();
    co_return -1;
  }
  co_return values->at(0).scalar<float>();
}

CO_TEST(ChiefSessionCreator, RestoresTheLatestCheckpointOfItsCheckpointDir) {
  ScratchDir dir;
  Model model;
  auto saver = Saver::Create(model.g);
  CO_ASSERT_OK(saver.status());
  CO_ASSERT_OK(co_await SaveCheckpoint(model, **saver, dir.path(), 5.0f));
  Scaffold scaffold;
  scaffold.saver = *saver;
  auto creator = std::make_shared<ChiefSessionCreator>(
      scaffold, ChiefSessionCreatorOptions{.checkpoint_dir = dir.path()});
  MonitoredSession::Hooks hooks;
  auto ms = co_await MonitoredSession::Create(
      model.g, hooks, creator, TestOptions(), asio::use_awaitable);
  CO_ASSERT_OK(ms.status());
  EXPECT_EQ(co_await ValueOfV(**ms, model), 5.0f);
  CO_ASSERT_OK(co_await (*ms)->Close(asio::use_awaitable));
}

CO_TEST(ChiefSessionCreator, InitialisesWhenItsCheckpointDirHoldsNone) {
  ScratchDir dir;
  Model model;
  auto saver = Saver::Create(model.g);
  CO_ASSERT_OK(saver.status());
  Scaffold scaffold;
  scaffold.saver = *saver;
  auto creator = std::make_shared<ChiefSessionCreator>(
      scaffold, ChiefSessionCreatorOptions{.checkpoint_dir = dir.path()});
  MonitoredSession::Hooks hooks;
  auto ms = co_await MonitoredSession::Create(
      model.g, hooks, creator, TestOptions(), asio::use_awaitable);
  CO_ASSERT_OK(ms.status());
  EXPECT_EQ(co_await ValueOfV(**ms, model), 1.0f);
  CO_ASSERT_OK(co_await (*ms)->Close(asio::use_awaitable));
}

CO_TEST(ChiefSessionCreator, ACheckpointDirWithoutASaverIsInvalidArgument) {
  ScratchDir dir;
  Model model;
  auto creator = std::make_shared<ChiefSessionCreator>(
      Scaffold{}, ChiefSessionCreatorOptions{.checkpoint_dir = dir.path()});
  MonitoredSession::Hooks hooks;
  auto ms = co_await MonitoredSession::Create(
      model.g, hooks, creator, TestOptions(), asio::use_awaitable);
  EXPECT_EQ(ms.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ms.status().message().find("Scaffold::saver"),
            absl::string_view::npos)
      << ms.status();
}

// TensorFlow's SingularMonitoredSession takes a scaffold and a
// checkpoint_dir; here, the creator that has them.
CO_TEST(SingularMonitoredSession, RestoresThroughTheCreatorItIsGiven) {
  ScratchDir dir;
  Model model;
  auto saver = Saver::Create(model.g);
  CO_ASSERT_OK(saver.status());
  CO_ASSERT_OK(co_await SaveCheckpoint(model, **saver, dir.path(), 3.0f));
  Scaffold scaffold;
  scaffold.saver = *saver;
  auto creator = std::make_shared<ChiefSessionCreator>(
      scaffold, ChiefSessionCreatorOptions{.checkpoint_dir = dir.path()});
  MonitoredSession::Hooks hooks;
  auto ms = co_await CreateSingularMonitoredSession(
      model.g, hooks, creator, TestOptions(), asio::use_awaitable);
  CO_ASSERT_OK(ms.status());
  EXPECT_EQ(co_await ValueOfV(**ms, model), 3.0f);
  CO_ASSERT_OK(co_await (*ms)->Close(asio::use_awaitable));
}

// A restore of a directory must not read it while another Saver (say, the
// CheckpointSaverHook's) still writes a checkpoint into it: it would restore
// an older state, or none. The write is held back by keeping the only
// thread of its Runtime busy; the restore must wait until it is released.
TEST(CheckpointRestore, WaitsForASaveInFlightIntoTheSameDirectory) {
  ScratchDir dir;
  Model model;
  auto writer = Saver::Create(model.g);
  ASSERT_TRUE(writer.ok()) << writer.status();
  model.g.Finalize();
  auto reader = Saver::Create(model.g);  // another Saver, same variables
  ASSERT_TRUE(reader.ok()) << reader.status();

  Runtime write_runtime(RuntimeOptions{.num_threads = 1});
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  asio::post(write_runtime.executor(), [released] { released.wait(); });

  asio::io_context io;
  std::shared_ptr<PendingSave> in_flight;
  std::optional<absl::StatusOr<bool>> restored;
  std::optional<float> value;
  Session session(model.g, TestRuntime());
  auto start_save = [&]() -> asio::awaitable<void> {
    std::vector<Tensor> snapshot{Tensor::Scalar(9.0f)};
    auto pending = co_await (*writer)->StartSave(
        write_runtime, std::move(snapshot), dir.path(), 7);
    if (pending.ok()) in_flight = *pending;
  };
  asio::co_spawn(io, start_save(), [](std::exception_ptr) {});
  io.run_for(std::chrono::seconds(10));
  ASSERT_NE(in_flight, nullptr);
  ASSERT_FALSE(in_flight->done());

  auto restore = [&]() -> asio::awaitable<void> {
    restored = co_await (*reader)->RestoreLatestIfAny(session, dir.path());
    auto v = co_await session.Run(model.Read(), asio::use_awaitable);
    if (v.ok()) value = v->at(0).scalar<float>();
  };
  asio::co_spawn(io, restore(), [](std::exception_ptr) {});
  io.restart();
  io.poll();  // everything the restore can do before the write finished
  EXPECT_FALSE(restored.has_value())
      << "the restore did not wait for the save in flight";

  release.set_value();
  io.restart();
  io.run_for(std::chrono::seconds(10));
  ASSERT_TRUE(restored.has_value());
  ASSERT_TRUE(restored->ok()) << restored->status();
  EXPECT_TRUE(**restored);
  EXPECT_EQ(value, 9.0f);
}

}  // namespace
}  // namespace cosession::session_creator_test
