// Saver: files and state file on disk, restore and its validation, fallback
// to an older checkpoint, retention, and saves that run on the pool.
#include "cosession/io/saver.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cosession/async/runtime.h"
#include "cosession/graph/ops.h"
#include "cosession/io/atomic_file.h"
#include "cosession/io/safetensors.h"
#include "tests/co_test.h"
#include "tests/independent_safetensors_reader.h"
#include "tests/scratch_dir.h"
#include "tests/test_util.h"

namespace cosession::saver_test {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using testing::TestRuntime;

using testing::ScratchDir;

// global_step, a float matrix, a double vector, an int32 and a bool, with
// ops to set them to new values.
struct Model {
  Model() {
    step = GetOrCreateGlobalStep(g);
    w = ops::Variable(
        g, Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, TensorShape{2, 3}),
        "w");
    b = ops::Variable(g, Tensor::FromVector<double>({0.5, 1.5, 2.5}), "b");
    n = ops::Variable(g, Tensor::Scalar<int32_t>(7), "n");
    flag = ops::Variable(g, Tensor::Scalar<bool>(true), "flag");
    step_value =
        ops::Placeholder(g, DType::kInt64, TensorShape{}, "step_value");
    set_step = ops::Assign(g, step, step_value);
    w_value = ops::Placeholder(g, DType::kFloat, TensorShape{2, 3}, "w_value");
    set_w = ops::Assign(g, w, w_value);
  }
  Graph g;
  Output step, w, b, n, flag, step_value, set_step, w_value, set_w;
};

Tensor Floats(float base) {
  return Tensor::FromVector<float>(
      {base, base + 1, base + 2, base + 3, base + 4, base + 5},
      TensorShape{2, 3});
}

// A session with the variables initialised.
asio::awaitable<std::unique_ptr<Session>> NewSession(Graph& g) {
  auto session = std::make_unique<Session>(g, TestRuntime());
  RunArgs init{.targets = {GlobalVariablesInitializer(g)}};
  auto ran = co_await session->Run(std::move(init), asio::use_awaitable);
  EXPECT_TRUE(ran.ok()) << ran.status();
  co_return session;
}

asio::awaitable<absl::Status> SetState(Session& session, Model& m, int64_t step,
                                       float w_base) {
  RunArgs args{
      .targets = {Operation(m.set_step.node()), Operation(m.set_w.node())},
      .feeds = {{m.step_value, Tensor::Scalar<int64_t>(step)},
                {m.w_value, Floats(w_base)}}};
  co_return (co_await session.Run(std::move(args), asio::use_awaitable))
      .status();
}

asio::awaitable<std::pair<int64_t, float>> GetState(Session& session,
                                                    Model& m) {
  RunArgs args{.fetches = {m.step, m.w}};
  auto values = co_await session.Run(std::move(args), asio::use_awaitable);
  EXPECT_TRUE(values.ok()) << values.status();
  if (!values.ok()) co_return std::pair<int64_t, float>{-1, -1};
  co_return std::pair<int64_t, float>{(*values)[0].scalar<int64_t>(),
                                      (*values)[1].flat<float>()[0]};
}

std::shared_ptr<Saver> MakeSaver(Graph& g, SaverOptions options = {}) {
  auto saver = Saver::Create(g, std::move(options));
  EXPECT_TRUE(saver.ok()) << saver.status();
  return saver.ok() ? *saver : nullptr;
}

void FlipByte(const std::string& path, long from_end) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-from_end, std::ios::end);
  char c;
  f.read(&c, 1);
  c ^= 0x40;
  f.seekp(-from_end, std::ios::end);
  f.write(&c, 1);
}

// Collects a Saver's warnings.
struct Warnings {
  std::shared_ptr<std::vector<std::string>> lines =
      std::make_shared<std::vector<std::string>>();
  std::function<void(const std::string&)> Sink() const {
    return [lines = lines](const std::string& line) { lines->push_back(line); };
  }
  bool Any(absl::string_view part) const {
    return std::any_of(lines->begin(), lines->end(), [&](const auto& line) {
      return absl::StrContains(line, part);
    });
  }
};

// Saves steps 10, 20 and 30 (w = 1, 2, 3) into `dir` with a Saver of its own.
asio::awaitable<void> SaveThreeSteps(const std::string& dir) {
  Model m;
  auto saver = MakeSaver(m.g);
  auto session = co_await NewSession(m.g);
  for (int i = 1; i <= 3; ++i) {
    EXPECT_TRUE((co_await SetState(*session, m, 10 * i, i)).ok());
    EXPECT_TRUE((co_await saver->Save(*session, dir, 10 * i)).ok());
  }
}

// ---- a lost or damaged state file (a new user deleted "checkpoint")

CO_TEST(Saver, WithoutTheStateFileRestoreFindsTheNewestCheckpoint) {
  ScratchDir dir;
  co_await SaveThreeSteps(dir.path());
  fs::remove(dir / "checkpoint");
  Model m;
  Warnings warnings;
  auto saver = MakeSaver(m.g, {.warn = warnings.Sink()});
  auto session = co_await NewSession(m.g);
  auto restored = co_await saver->RestoreLatest(*session, dir.path());
  CO_ASSERT_OK(restored.status());
  EXPECT_EQ(*restored, dir / "model.ckpt-30");
  auto [step, w] = co_await GetState(*session, m);
  EXPECT_EQ(step, 30);
  EXPECT_EQ(w, 3.0f);
  EXPECT_TRUE(warnings.Any("is missing"))
      << absl::StrJoin(*warnings.lines, "\n");
  // The same through the CheckpointRestorer interface a session creator
  // uses: there is something to restore.
  auto again = co_await saver->RestoreLatestIfAny(*session, dir.path());
  CO_ASSERT_OK(again.status());
  EXPECT_TRUE(*again);
}

CO_TEST(Saver, ATruncatedStateFileFallsBackToTheNewestCheckpoint) {
  ScratchDir dir;
  co_await SaveThreeSteps(dir.path());
  {
    std::ofstream truncated(dir / "checkpoint", std::ios::trunc);
    truncated << "model_checkpoint_path: \"model.ck";
  }
  Model m;
  Warnings warnings;
  auto saver = MakeSaver(m.g, {.warn = warnings.Sink()});
  auto session = co_await NewSession(m.g);
  auto restored = co_await saver->RestoreLatest(*session, dir.path());
  CO_ASSERT_OK(restored.status());
  EXPECT_EQ(*restored, dir / "model.ckpt-30");
  EXPECT_TRUE(warnings.Any("is unreadable"))
      << absl::StrJoin(*warnings.lines, "\n");
}

CO_TEST(Saver, ANewStateFileListsTheCheckpointsItFound) {
  ScratchDir dir;
  co_await SaveThreeSteps(dir.path());
  fs::remove(dir / "checkpoint");
  Model m;
  auto saver = MakeSaver(m.g, {.max_to_keep = 3, .warn = [](auto&) {}});
  auto session = co_await NewSession(m.g);
  CO_ASSERT_OK(co_await SetState(*session, m, 40, 4));
  CO_ASSERT_OK((co_await saver->Save(*session, dir.path(), 40)).status());
  auto state = ReadCheckpointState(dir.path());
  CO_ASSERT_OK(state.status());
  // Retention went on from what was on disk: 10 is the one beyond three.
  EXPECT_EQ(state->all_model_checkpoint_paths,
            (std::vector<std::string>{"model.ckpt-20", "model.ckpt-30",
                                      "model.ckpt-40"}));
  EXPECT_FALSE(fs::exists(dir / "model.ckpt-10.safetensors"));
}

CO_TEST(Saver, ReplacingACheckpointOfAnotherRunSaysSo) {
  ScratchDir dir;
  co_await SaveThreeSteps(dir.path());
  Model m;
  Warnings warnings;
  auto saver = MakeSaver(m.g, {.warn = warnings.Sink()});
  auto session = co_await NewSession(m.g);  // starts from scratch
  CO_ASSERT_OK(co_await SetState(*session, m, 20, 9));
  CO_ASSERT_OK((co_await saver->Save(*session, dir.path(), 20)).status());
  EXPECT_TRUE(warnings.Any("replacing '" + dir / "model.ckpt-20.safetensors"))
      << absl::StrJoin(*warnings.lines, "\n");
}

CO_TEST(Saver, SavingAgainTheStepItRestoredFromIsSilent) {
  ScratchDir dir;
  co_await SaveThreeSteps(dir.path());
  Model m;
  Warnings warnings;
  auto saver = MakeSaver(m.g, {.warn = warnings.Sink()});
  auto session = co_await NewSession(m.g);
  CO_ASSERT_OK((co_await saver->RestoreLatest(*session, dir.path())).status());
  CO_ASSERT_OK((co_await saver->Save(*session, dir.path(), 30)).status());
  CO_ASSERT_OK(co_await SetState(*session, m, 40, 4));
  CO_ASSERT_OK((co_await saver->Save(*session, dir.path(), 40)).status());
  CO_ASSERT_OK((co_await saver->Save(*session, dir.path(), 40)).status());
  EXPECT_TRUE(warnings.lines->empty()) << absl::StrJoin(*warnings.lines, "\n");
}

// ---- files

CO_TEST(Saver, SaveWritesACheckpointThatAnIndependentReaderAccepts) {
  ScratchDir dir;
  Model m;
  auto saver = MakeSaver(m.g);
  auto session = co_await NewSession(m.g);
  CO_ASSERT_OK(co_await SetState(*session, m, 42, 10.0f));
  auto saved = co_await saver->Save(*session, dir.path(), 42);
  CO_ASSERT_OK(saved.status());
  EXPECT_EQ(*saved, dir / "model.ckpt-42");
  testing::MiniFile file = testing::ReadIndependently(
      testing::ReadWholeFile(dir / "model.ckpt-42.safetensors"));
  EXPECT_EQ(file.metadata["global_step"], "42");
  EXPECT_EQ(file.tensors.size(), 5u);
  EXPECT_EQ(file.tensors["w"].dtype, "F32");
  EXPECT_EQ(file.tensors["w"].bytes,
            testing::BytesOf(std::vector<float>{10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(file.tensors["global_step"].bytes,
            testing::BytesOf(std::vector<int64_t>{42}));
  EXPECT_EQ(file.tensors["b"].dtype, "F64");
  EXPECT_EQ(file.tensors["n"].dtype, "I32");
  EXPECT_EQ(file.tensors["flag"].bytes, std::string("\x01", 1));
}

CO_TEST(Saver, StateFileListsKeptCheckpointsOldestFirstWithTimestamps) {
  ScratchDir dir;
  Model m;
  ManualClock clock(absl::FromUnixSeconds(1700000000));
  auto saver = MakeSaver(m.g, {.clock = &clock});
  auto session = co_await NewSession(m.g);
  CO_ASSERT_OK((co_await saver->Save(*session, dir.path(), 1)).status());
  clock.Advance(absl::Seconds(1.5));
  CO_ASSERT_OK((co_await saver->Save(*session, dir.path(), 2)).status());
  EXPECT_EQ(testing::ReadWholeFile(dir / "checkpoint"),
            "model_checkpoint_path: \"model.ckpt-2\"\n"
            "all_model_checkpoint_paths: \"model.ckpt-1\"\n"
            "all_model_checkpoint_paths: \"model.ckpt-2\"\n"
            "all_model_checkpoint_timestamps: 1700000000.000\n"
            "all_model_checkpoint_timestamps: 1700000001.500\n");
  auto latest = LatestCheckpoint(dir.path());
  CO_ASSERT_OK(latest.status());
  EXPECT_EQ(*latest, dir / "model.ckpt-2");
}

// A save written on the pool uses nothing of the Graph: a session that
// failed closes without waiting for its last save (End is not called), and
// its graph may be gone before the write runs. The pool's only thread is
// held until the graph is destroyed, so the write surely runs after it (a
// use-after-free under ASan before the Saver copied the names and dtypes).
CO_TEST(Saver, APendingSaveOutlivesItsGraph) {
  Runtime runtime({.num_threads = 1});
  testing::Latch graph_gone;
  asio::post(runtime.executor(),
             [&] { graph_gone.WaitFor(std::chrono::seconds(20)); });
  ScratchDir dir;
  std::shared_ptr<Saver> saver;
  std::shared_ptr<PendingSave> pending;
  {
    auto graph = std::make_unique<Graph>();
    ops::Variable(*graph, Tensor::FromVector<float>({1, 2, 3}), "w");
    auto created = Saver::Create(*graph);
    CO_ASSERT_OK(created.status());
    saver = *created;
    std::vector<Tensor> snapshot = {Tensor::FromVector<float>({4, 5, 6})};
    auto started =
        co_await saver->StartSave(runtime, std::move(snapshot), dir.path(), 7);
    CO_ASSERT_OK(started.status());
    pending = *started;
  }  // the graph is destroyed while the write waits for the pool
  graph_gone.Notify();
  auto written = co_await pending->Wait();
  CO_ASSERT_OK(written.status());
  auto latest = LatestCheckpoint(dir.path());
  CO_ASSERT_OK(latest.status());
  EXPECT_EQ(*latest, *written);
}

TEST(Saver, LatestCheckpointOfAnEmptyDirectoryIsNotFound) {
  ScratchDir dir;
  EXPECT_EQ(LatestCheckpoint(dir.path()).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(Saver, CorruptStateFileIsDataLossNamingIt) {
  ScratchDir dir;
  ASSERT_TRUE(
      WriteFileAtomically(dir / "checkpoint", "model_checkpoint_path ").ok());
  auto latest = LatestCheckpoint(dir.path());
  EXPECT_EQ(latest.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(latest.status().message(), dir / "checkpoint"));
}

TEST(Saver, StateFileNamingAMissingCheckpointIsNotFound) {
  ScratchDir dir;
  ASSERT_TRUE(WriteFileAtomically(dir / "checkpoint",
                                  "model_checkpoint_path: \"model.ckpt-9\"\n")
                  .ok());
  EXPECT_EQ(LatestCheckpoint(dir.path()).status().code(),
            absl::StatusCode::kNotFound);
}

// ---- retention

CO_TEST(Saver, MaxToKeepDeletesTheOldestCheckpoints) {
  ScratchDir dir;
  Model m;
  auto saver = MakeSaver(m.g, {.max_to_keep = 2});
  auto session = co_await NewSession(m.g);
  for (int64_t step = 1; step <= 4; ++step) {
    CO_ASSERT_OK((co_await saver->Save(*session, dir.path(), step)).status());
  }
  EXPECT_FALSE(fs::exists(dir / "model.ckpt-1.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "model.ckpt-2.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "model.ckpt-3.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "model.ckpt-4.safetensors"));
  auto state = ReadCheckpointState(dir.path());
  CO_ASSERT_OK(state.status());
  EXPECT_EQ(state->all_model_checkpoint_paths,
            (std::vector<std::string>{"model.ckpt-3", "model.ckpt-4"}));
}

// As TF's Saver (max_to_keep 0 or None): no file is deleted, and the state
// file lists only the newest, so it does not grow with every save.
CO_TEST(Saver, MaxToKeepZeroKeepsEveryCheckpointAndListsTheNewest) {
  ScratchDir dir;
  Model m;
  auto saver = MakeSaver(m.g, {.max_to_keep = 0});
  auto session = co_await NewSession(m.g);
  for (int64_t step = 1; step <= 7; ++step) {
    CO_ASSERT_OK((co_await saver->Save(*session, dir.path(), step)).status());
  }
  for (int step = 1; step <= 7; ++step) {
    EXPECT_TRUE(
        fs::exists(dir / absl::StrCat("model.ckpt-", step, ".safetensors")));
  }
  auto state = ReadCheckpointState(dir.path());
  CO_ASSERT_OK(state.status());
  EXPECT_EQ(state->model_checkpoint_path, "model.ckpt-7");
  EXPECT_EQ(state->all_model_checkpoint_paths,
            (std::vector<std::string>{"model.ckpt-7"}));
  EXPECT_EQ(state->all_model_checkpoint_timestamps.size(), 1u);
}

CO_TEST(Saver, KeepCheckpointEveryNHoursPreservesOnePerPeriod) {
  ScratchDir dir;
  Model m;
  ManualClock clock;
  auto saver = MakeSaver(m.g, {.max_to_keep = 1,
                               .keep_checkpoint_every_n_hours = absl::Hours(1),
                               .clock = &clock});
  auto session = co_await NewSession(m.g);
  // Saved at 0, 40, 80, 120 and 160 minutes. TF's rule: a checkpoint leaving
  // the list is kept when saved after the next preservation time (first 60
  // minutes after the Saver started, then one period later each time).
  for (int64_t step = 1; step <= 5; ++step) {
    CO_ASSERT_OK((co_await saver->Save(*session, dir.path(), step)).status());
    clock.Advance(absl::Minutes(40));
  }
  EXPECT_FALSE(fs::exists(dir / "model.ckpt-1.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "model.ckpt-2.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "model.ckpt-3.safetensors"));  // 80 min
  EXPECT_FALSE(fs::exists(dir / "model.ckpt-4.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "model.ckpt-5.safetensors"));
  auto state = ReadCheckpointState(dir.path());
  CO_ASSERT_OK(state.status());
  EXPECT_EQ(state->all_model_checkpoint_paths,
            std::vector<std::string>{"model.ckpt-5"});
  EXPECT_TRUE(state->last_preserved_timestamp.has_value());
}

CO_TEST(Saver, ANewSaverAdoptsTheRetentionListOfTheDirectory) {
  ScratchDir dir;
  Model m;
  auto session = co_await NewSession(m.g);
  {
    auto first = MakeSaver(m.g, {.max_to_keep = 2});
    for (int64_t step = 1; step <= 3; ++step) {
      CO_ASSERT_OK((co_await first->Save(*session, dir.path(), step)).status());
    }
  }
  auto second = MakeSaver(m.g, {.max_to_keep = 2});  // as after a restart
  CO_ASSERT_OK((co_await second->Save(*session, dir.path(), 4)).status());
  EXPECT_FALSE(fs::exists(dir / "model.ckpt-2.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "model.ckpt-3.safetensors"));
  auto state = ReadCheckpointState(dir.path());
  CO_ASSERT_OK(state.status());
  EXPECT_EQ(state->all_model_checkpoint_paths,
            (std::vector<std::string>{"model.ckpt-3", "model.ckpt-4"}));
}

TEST(Saver, StaleTempFilesOfDeadWritersAreRemovedOnTheFirstWrite) {
  ScratchDir dir;
  Model m;
  auto saver = MakeSaver(m.g);
  ASSERT_TRUE(WriteFileAtomically(
                  dir / "model.ckpt-3.safetensors.tmp.999999999.0", "junk")
                  .ok());
  std::vector<Tensor> snapshot{Tensor::Scalar<int64_t>(1), Floats(0),
                               Tensor::FromVector<double>({1, 2, 3}),
                               Tensor::Scalar<int32_t>(1),
                               Tensor::Scalar<bool>(false)};
  ASSERT_TRUE(saver->WriteCheckpoint(snapshot, dir.path(), 1).ok());
  EXPECT_FALSE(fs::exists(dir / "model.ckpt-3.safetensors.tmp.999999999.0"));
}

// A file written piece by piece appears whole at Commit, or not at all.
TEST(AtomicFileWriter, CommitsWholeOrLeavesNothing) {
  ScratchDir dir;
  auto names = [&] {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir.path())) {
      out.push_back(e.path().filename().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  auto contents = [](const std::string& path) {
    absl::StatusOr<std::string> read = ReadFileToString(path);
    return read.ok() ? *read : read.status().ToString();
  };
  {
    auto dropped = AtomicFileWriter::Create(dir / "data");
    ASSERT_TRUE(dropped.ok()) << dropped.status();
    ASSERT_TRUE((*dropped)->Append("partial").ok());
    EXPECT_EQ(names().size(), 1u);  // the temporary file
  }
  EXPECT_TRUE(names().empty());
  auto first = AtomicFileWriter::Create(dir / "data");
  auto second = AtomicFileWriter::Create(dir / "data");
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_TRUE((*first)->Append("first ").ok());
  ASSERT_TRUE((*first)->Append("writer").ok());
  ASSERT_TRUE((*second)->Append("second writer").ok());
  EXPECT_FALSE(fs::exists(dir / "data"));
  using Existing = AtomicFileWriter::Existing;
  ASSERT_TRUE((*first)->Commit(Existing::kKeepExisting).ok());
  EXPECT_EQ(contents(dir / "data"), "first writer");
  // The first to finish stays; the second's file is dropped.
  ASSERT_TRUE((*second)->Commit(Existing::kKeepExisting).ok());
  EXPECT_EQ(contents(dir / "data"), "first writer");
  EXPECT_EQ(names(), std::vector<std::string>{"data"});
  EXPECT_TRUE(absl::IsFailedPrecondition((*second)->Append("more")));
  auto replacing = AtomicFileWriter::Create(dir / "data");
  ASSERT_TRUE(replacing.ok());
  ASSERT_TRUE((*replacing)->Append("third").ok());
  ASSERT_TRUE((*replacing)->Commit(Existing::kReplace).ok());
  EXPECT_EQ(contents(dir / "data"), "third");
  EXPECT_EQ(names(), std::vector<std::string>{"data"});
  auto nowhere = AtomicFileWriter::Create(dir / "missing/data");
  EXPECT_TRUE(absl::IsNotFound(nowhere.status())) << nowhere.status();
}

// ---- restore

CO_TEST(Saver, RestoreAssignsTheSavedValues) {
  ScratchDir dir;
  Model m;
  auto saver = MakeSaver(m.g);
  auto session = co_await NewSession(m.g);
  CO_ASSERT_OK(co_await SetState(*session, m, 5, 50.0f));
  auto saved = co_await saver->Save(*session, dir.path(), 5);
  CO_ASSERT_OK(saved.status());
  auto fresh = co_await NewSession(m.g);
  CO_ASSERT_OK(co_await saver->Restore(*fresh, *saved));
  auto state = co_await GetState(*fresh, m);
  EXPECT_EQ(state.first, 5);
  EXPECT_EQ(state.second, 50.0f);
}

CO_TEST(Saver, RestoreLatestRestoresTheNewestCheckpoint) {
  ScratchDir dir;
  Model m;
  auto saver = MakeSaver(m.g);
  auto session = co_await NewSession(m.g);
  for (int64_t step = 1; step <= 3; ++step) {
    CO_ASSERT_OK(co_await SetState(*session, m, step, step * 10.0f));
    CO_ASSERT_OK((co_await saver->Save(*session, dir.path(), step)).status());
  }
  auto fresh = co_await NewSession(m.g);
  auto restored = co_await saver->RestoreLatest(*fresh, dir.path());
  CO_ASSERT_OK(restored.status());
  EXPECT_EQ(*restored, dir / "model.ckpt-3");
  EXPECT_EQ((co_await GetState(*fresh, m)).second, 30.0f);
}

CO_TEST(Saver, RestoreLatestFallsBackToThePreviousCheckpointWithAWarning) {
  ScratchDir dir;
  Model m;
  auto saver = MakeSaver(m.g);
  auto session = co_await NewSession(m.g);
  for (int64_t step = 1; step <= 2; ++step) {
    CO_ASSERT_OK(co_await SetState(*session, m, step, step * 10.0f));
    CO_ASSERT_OK((co_await saver->Save(*session, dir.path(), step)).status());
  }
  FlipByte(dir / "model.ckpt-2.safetensors", 3);
  auto fresh = co_await NewSession(m.g);
  ::testing::internal::CaptureStderr();
  auto restored = co_await saver->RestoreLatest(*fresh, dir.path());
  std::string warnings = ::testing::internal::GetCapturedStderr();
  CO_ASSERT_OK(restored.status());
  EXPECT_EQ(*restored, dir / "model.ckpt-1");
  auto state = co_await GetState(*fresh, m);
  EXPECT_EQ(state.first, 1);
  EXPECT_EQ(state.second, 10.0f);
  EXPECT_TRUE(absl::StrContains(warnings, "model.ckpt-2")) << warnings;
  EXPECT_TRUE(absl::StrContains(warnings, "restored the older checkpoint"))
      << warnings;
}

CO_TEST(Saver, RestoreLatestIsDataLossWhenNoCheckpointLoads) {
  ScratchDir dir;
  Model m;
  auto saver = MakeSaver(m.g);
  auto session = co_await NewSession(m.g);
  for (int64_t step = 1; step <= 2; ++step) {
    CO_ASSERT_OK((co_await saver->Save(*session, dir.path(), step)).status());
  }
  FlipByte(dir / "model.ckpt-1.safetensors", 2);
  fs::resize_file(dir / "model.ckpt-2.safetensors", 5);
  ::testing::internal::CaptureStderr();
  auto restored = co_await saver->RestoreLatest(*session, dir.path());
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(restored.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(restored.status().message(), "model.ckpt-1"));
  EXPECT_TRUE(absl::StrContains(restored.status().message(), "model.ckpt-2"));
}

CO_TEST(Saver, RestoringACorruptFileIsDataLossAndChangesNothing) {
  ScratchDir dir;
  Model m;
  auto saver = MakeSaver(m.g);
  auto session = co_await NewSession(m.g);
  CO_ASSERT_OK(co_await SetState(*session, m, 9, 90.0f));
  CO_ASSERT_OK((co_await saver->Save(*session, dir.path(), 9)).status());
  FlipByte(dir / "model.ckpt-9.safetensors", 1);
  CO_ASSERT_OK(co_await SetState(*session, m, 1, 1.0f));
  absl::Status s = co_await saver->Restore(*session, dir / "model.ckpt-9");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(s.message(), "model.ckpt-9.safetensors")) << s;
  EXPECT_EQ((co_await GetState(*session, m)).first, 1);
}

// A checkpoint file written by hand with the given tensors.
void WriteCheckpointFile(const std::string& path,
                         std::vector<std::pair<std::string, Tensor>> tensors) {
  auto file = BuildSafetensors(tensors, {{"global_step", "3"}});
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE(WriteFileAtomically(path, SerializeSafetensors(*file)).ok());
}

std::vector<std::pair<std::string, Tensor>> ModelTensors() {
  return {{"global_step", Tensor::Scalar<int64_t>(3)},
          {"w", Floats(3)},
          {"b", Tensor::FromVector<double>({1, 2, 3})},
          {"n", Tensor::Scalar<int32_t>(3)},
          {"flag", Tensor::Scalar<bool>(false)}};
}

CO_TEST(Saver, AVariableMissingFromTheFileIsNotFoundNamingIt) {
  ScratchDir dir;
  Model m;
  auto saver = MakeSaver(m.g);
  auto tensors = ModelTensors();
  tensors.erase(tensors.begin() + 2);  // "b"
  WriteCheckpointFile(dir / "x.safetensors", tensors);
  auto session = co_await NewSession(m.g);
  absl::Status s = co_await saver->Restore(*session, dir / "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(s.message(), "'b'")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "x.safetensors")) << s;
}

CO_TEST(Saver, AnOptionalVariableMissingFromTheFileStartsFromItsInitializer) {
  ScratchDir dir;
  // A checkpoint written before the graph had "position".
  {
    Model m;
    auto saver = MakeSaver(m.g);
    auto session = co_await NewSession(m.g);
    CO_ASSERT_OK(co_await SetState(*session, m, 40, 4));
    CO_ASSERT_OK((co_await saver->Save(*session, dir.path(), 40)).status());
  }
  Model m;
  Output position =
      ops::Variable(m.g, Tensor::Scalar<int64_t>(7), "position", false);
  m.g.AddToCollection(kRestoreOptionalCollection, position.node());
  Warnings warnings;
  auto saver = MakeSaver(m.g, {.warn = warnings.Sink()});
  Session session(m.g, TestRuntime());  // nothing initialised
  auto restored = co_await saver->RestoreLatest(session, dir.path());
  CO_ASSERT_OK(restored.status());
  EXPECT_EQ((co_await GetState(session, m)),
            (std::pair<int64_t, float>{40, 4}));
  RunArgs read{.fetches = {position}};
  auto value = co_await session.Run(read, asio::use_awaitable);
  CO_ASSERT_OK(value.status());
  EXPECT_EQ((*value)[0].scalar<int64_t>(), 7);
  EXPECT_TRUE(warnings.Any("has no value for 'position'"))
      << absl::StrJoin(*warnings.lines, "\n");
}

CO_TEST(Saver, AWrongDtypeIsInvalidArgumentNamingTheVariableAndFile) {
  ScratchDir dir;
  Model m;
  auto saver = MakeSaver(m.g);
  auto tensors = ModelTensors();
  tensors[3].second = Tensor::Scalar<int64_t>(3);  // n is int32
  WriteCheckpointFile(dir / "x.safetensors", tensors);
  auto session = co_await NewSession(m.g);
  absl::Status s = co_await saver->Restore(*session, dir / "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "'n'")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "x.safetensors")) << s;
}

CO_TEST(Saver, AShapeMismatchIsInvalidArgumentAndAssignsNothing) {
  ScratchDir dir;
  Model m;
  auto saver = MakeSaver(m.g);
  auto tensors = ModelTensors();
  tensors[1].second = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6});  // [6]
  WriteCheckpointFile(dir / "x.safetensors", tensors);
  auto session = co_await NewSession(m.g);
  CO_ASSERT_OK(co_await SetState(*session, m, 77, 7.0f));
  absl::Status s = co_await saver->Restore(*session, dir / "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "'w'")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "[6]")) << s;
  EXPECT_EQ((co_await GetState(*session, m)).first, 77);
}

// ---- creation

TEST(Saver, BadOptionsAreInvalidArgumentNamingTheOption) {
  Model m;
  auto negative = Saver::Create(m.g, {.max_to_keep = -1});
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(negative.status().message(), "max_to_keep"));
  auto slash = Saver::Create(m.g, {.filename_prefix = "a/b"});
  EXPECT_TRUE(absl::StrContains(slash.status().message(), "filename_prefix"));
  auto hours = Saver::Create(
      m.g, {.keep_checkpoint_every_n_hours = absl::ZeroDuration()});
  EXPECT_TRUE(absl::StrContains(hours.status().message(),
                                "keep_checkpoint_every_n_hours"));
  auto not_variable = Saver::Create(m.g, {.variables = {m.step_value}});
  EXPECT_EQ(not_variable.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Saver, AGraphWithoutVariablesIsInvalidArgument) {
  Graph g;
  ops::Const(g, 1.0f);
  EXPECT_EQ(Saver::Create(g).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Saver, OnAFinalizedGraphCreateReusesTheOpsOfAnEarlierSaverOrFails) {
  Model m;
  Graph other;
  GetOrCreateGlobalStep(other);
  other.Finalize();
  EXPECT_EQ(Saver::Create(other).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(Saver::Create(m.g).ok());
  const int nodes = m.g.num_nodes();
  m.g.Finalize();
  auto again = Saver::Create(m.g);
  EXPECT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(m.g.num_nodes(), nodes);
}

// ---- saves on the pool

CO_TEST(Saver, StartSaveReturnsBeforeTheWriteWhichRunsOnThePool) {
  ScratchDir dir;
  Model m;
  auto saver = MakeSaver(m.g);
  auto session = co_await NewSession(m.g);
  RunArgs fetch{.fetches = saver->variables()};
  auto snapshot = co_await session->Run(std::move(fetch), asio::use_awaitable);
  CO_ASSERT_OK(snapshot.status());
  // A one-thread pool kept busy until the test lets it go.
  Runtime pool(RuntimeOptions{.num_threads = 1});
  auto release = std::make_shared<testing::Latch>();
  auto block_pool = [release] { release->WaitFor(std::chrono::seconds(15)); };
  asio::post(pool.executor(), block_pool);
  auto started = co_await saver->StartSave(pool, *snapshot, dir.path(), 8);
  CO_ASSERT_OK(started.status());
  EXPECT_FALSE((*started)->done());
  EXPECT_FALSE(fs::exists(dir / "model.ckpt-8.safetensors"));
  release->Notify();
  CO_ASSERT_OK(co_await saver->WaitForPendingSave());
  EXPECT_TRUE((*started)->done());
  EXPECT_TRUE(fs::exists(dir / "model.ckpt-8.safetensors"));
}

CO_TEST(Saver, ASecondStartSaveWaitsForTheSaveInFlight) {
  ScratchDir dir;
  Model m;
  auto saver = MakeSaver(m.g);
  auto session = co_await NewSession(m.g);
  RunArgs fetch{.fetches = saver->variables()};
  auto snapshot = co_await session->Run(std::move(fetch), asio::use_awaitable);
  CO_ASSERT_OK(snapshot.status());
  Runtime pool(RuntimeOptions{.num_threads = 1});
  auto release = std::make_shared<testing::Latch>();
  auto block_pool = [release] { release->WaitFor(std::chrono::seconds(15)); };
  asio::post(pool.executor(), block_pool);
  auto first = co_await saver->StartSave(pool, *snapshot, dir.path(), 1);
  CO_ASSERT_OK(first.status());
  auto second_started = std::make_shared<bool>(false);
  auto second = [&]() -> asio::awaitable<void> {
    auto s = co_await saver->StartSave(pool, *snapshot, dir.path(), 2);
    EXPECT_TRUE(s.ok());
    EXPECT_TRUE((*first)->done()) << "started before the first save finished";
    *second_started = true;
  };
  // Named first: a capturing lambda inside a co_await expression is freed
  // twice by g++ 12 (docs/async_pitfalls.md, 4).
  auto executor = co_await asio::this_coro::executor;
  asio::co_spawn(executor, second(), asio::detached);
  for (int i = 0; i < 20; ++i) {
    co_await asio::post(co_await asio::this_coro::executor,
                        asio::use_awaitable);
  }
  EXPECT_FALSE(*second_started);
  release->Notify();
  while (!*second_started) {
    co_await asio::post(co_await asio::this_coro::executor,
                        asio::use_awaitable);
  }
  CO_ASSERT_OK(co_await saver->WaitForPendingSave());
  auto state = ReadCheckpointState(dir.path());
  CO_ASSERT_OK(state.status());
  EXPECT_EQ(state->all_model_checkpoint_paths,
            (std::vector<std::string>{"model.ckpt-1", "model.ckpt-2"}));
}

CO_TEST(Saver, MakeRestoreFunctionIsFalseWithoutACheckpointAndTrueWithOne) {
  ScratchDir dir;
  Model m;
  auto saver = MakeSaver(m.g);
  auto restore = MakeRestoreFunction(saver, dir.path());
  auto session = co_await NewSession(m.g);
  auto none = co_await restore(*session);
  CO_ASSERT_OK(none.status());
  EXPECT_FALSE(*none);
  CO_ASSERT_OK(co_await SetState(*session, m, 11, 1.0f));
  CO_ASSERT_OK((co_await saver->Save(*session, dir.path(), 11)).status());
  auto fresh = co_await NewSession(m.g);
  auto some = co_await restore(*fresh);
  CO_ASSERT_OK(some.status());
  EXPECT_TRUE(*some);
  EXPECT_EQ((co_await GetState(*fresh, m)).first, 11);
}

}  // namespace
}  // namespace cosession::saver_test
