// ProfilerHook: TensorFlow's ProfilerHookTest cases (nothing on the first
// step, save_steps and save_secs periods with a ManualClock), the trace
// file's contents, and the traces' tagged_run_metadata in the event file.
#include "cosession/hooks/profiler_hook.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/asio/use_awaitable.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/co_test.h"
#include "tests/event_test_util.h"

namespace cosession::profiler_hook_test {
namespace {

namespace asio = boost::asio;
using testing::FreshTempDir;
using testing::TrainGraph;

// The timeline files in `dir`, sorted.
std::vector<std::string> Timelines(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::string name = entry.path().filename().string();
    if (name.starts_with("timeline-")) names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

// A session with one ProfilerHook that the test steps by hand.
struct Profiled {
  TrainGraph graph;
  ManualClock clock;
  std::string dir = FreshTempDir("profiler");
  std::unique_ptr<MonitoredSession> session;

  asio::awaitable<absl::Status> Start(ProfilerHookOptions options) {
    options.output_dir = dir;
    options.clock = &clock;
    auto hook = ProfilerHook::Create(std::move(options));
    if (!hook.ok()) co_return hook.status();
    MonitoredSession::Hooks hooks{*hook};
    auto created =
        co_await testing::CreateMonitoredSession(&graph.g, std::move(hooks));
    if (!created.ok()) co_return created.status();
    session = *std::move(created);
    co_return absl::OkStatus();
  }
  asio::awaitable<absl::Status> Step() {
    auto ran = co_await session->Run(graph.Train(), asio::use_awaitable);
    co_return ran.status();
  }
  asio::awaitable<absl::Status> Close() {
    co_return co_await session->Close(asio::use_awaitable);
  }
};

TEST(ProfilerHook, RejectsBadOptionsNamingThem) {
  auto neither = ProfilerHook::Create({.output_dir = "/tmp/x"});
  EXPECT_NE(neither.status().message().find("save_steps"), std::string::npos);
  auto both = ProfilerHook::Create(
      {.save_steps = 1, .save_secs = absl::Seconds(1), .output_dir = "/tmp/x"});
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
  auto no_dir = ProfilerHook::Create({.save_steps = 1});
  EXPECT_NE(no_dir.status().message().find("output_dir"), std::string::npos);
}

CO_TEST(ProfilerHook, SaveStepsDoesNotSaveInTheFirstStep) {
  Profiled p;
  ProfilerHookOptions options{.save_steps = 1};
  CO_ASSERT_OK(co_await p.Start(options));
  CO_ASSERT_OK(co_await p.Step());
  EXPECT_TRUE(Timelines(p.dir).empty());
  CO_ASSERT_OK(co_await p.Close());
}

CO_TEST(ProfilerHook, SaveSecsDoesNotSaveInTheFirstStep) {
  Profiled p;
  ProfilerHookOptions options{.save_secs = absl::Seconds(2)};
  CO_ASSERT_OK(co_await p.Start(options));
  CO_ASSERT_OK(co_await p.Step());
  EXPECT_TRUE(Timelines(p.dir).empty());
  CO_ASSERT_OK(co_await p.Close());
}

CO_TEST(ProfilerHook, SaveStepsTwoSavesEveryOtherStepNamedByGlobalStep) {
  Profiled p;
  ProfilerHookOptions options{.save_steps = 2};
  CO_ASSERT_OK(co_await p.Start(options));
  std::vector<size_t> counts;
  for (int i = 0; i < 5; ++i) {
    CO_ASSERT_OK(co_await p.Step());
    counts.push_back(Timelines(p.dir).size());
  }
  EXPECT_EQ(counts, (std::vector<size_t>{0, 1, 1, 2, 2}));
  EXPECT_EQ(Timelines(p.dir),
            (std::vector<std::string>{"timeline-2.json", "timeline-4.json"}));
  CO_ASSERT_OK(co_await p.Close());
}

// A directory of many runs keeps only the newest max_timelines traces:
// those of earlier runs count too.
CO_TEST(ProfilerHook, MaxTimelinesKeepsOnlyTheNewestTraces) {
  Profiled p;
  std::ofstream(p.dir + "/timeline-1.json") << "{}";  // an earlier run's
  ProfilerHookOptions options{.save_steps = 2, .max_timelines = 2};
  CO_ASSERT_OK(co_await p.Start(options));
  for (int i = 0; i < 7; ++i) CO_ASSERT_OK(co_await p.Step());
  EXPECT_EQ(Timelines(p.dir),
            (std::vector<std::string>{"timeline-4.json", "timeline-6.json"}));
  CO_ASSERT_OK(co_await p.Close());
}

// A process killed while writing a trace leaves "<name>.tmp.<pid>.<n>":
// the next run's Begin removes it (this process's own temporaries stay).
CO_TEST(ProfilerHook, BeginRemovesTheTemporaryFilesOfAKilledRun) {
  Profiled p;
  const std::string stale = p.dir + "/timeline-8.json.tmp.999999999.1";
  std::ofstream(stale) << "half a trace";
  ProfilerHookOptions options{.save_steps = 2};
  CO_ASSERT_OK(co_await p.Start(options));
  EXPECT_FALSE(std::filesystem::exists(stale));
  CO_ASSERT_OK(co_await p.Close());
}

TEST(ProfilerHook, ANegativeMaxTimelinesIsInvalidArgument) {
  auto hook = ProfilerHook::Create(
      {.save_steps = 1, .output_dir = "/tmp/x", .max_timelines = -1});
  EXPECT_NE(hook.status().message().find("max_timelines"), std::string::npos);
}

CO_TEST(ProfilerHook, SaveSecsSavesPeriodically) {
  Profiled p;
  const absl::Time start = p.clock.Now();
  ProfilerHookOptions options{.save_secs = absl::Seconds(2)};
  CO_ASSERT_OK(co_await p.Start(options));
  CO_ASSERT_OK(co_await p.Step());  // not saved
  EXPECT_EQ(Timelines(p.dir).size(), 0u);
  p.clock.Set(start + absl::Milliseconds(2500));
  CO_ASSERT_OK(co_await p.Step());  // saved
  EXPECT_EQ(Timelines(p.dir).size(), 1u);
  p.clock.Set(start + absl::Milliseconds(2600));
  CO_ASSERT_OK(co_await p.Step());  // not saved
  p.clock.Set(start + absl::Milliseconds(4400));
  CO_ASSERT_OK(co_await p.Step());  // not saved: just before the edge
  EXPECT_EQ(Timelines(p.dir).size(), 1u);
  p.clock.Set(start + absl::Milliseconds(4500));
  CO_ASSERT_OK(co_await p.Step());  // saved
  EXPECT_EQ(Timelines(p.dir),
            (std::vector<std::string>{"timeline-2.json", "timeline-5.json"}));
  CO_ASSERT_OK(co_await p.Close());
}

CO_TEST(ProfilerHook, TheTimelineIsAChromeTraceOfTheTracedStepsOps) {
  Profiled p;
  ProfilerHookOptions options{.save_steps = 1};
  CO_ASSERT_OK(co_await p.Start(options));
  CO_ASSERT_OK(co_await p.Step());
  CO_ASSERT_OK(co_await p.Step());
  auto trace = nlohmann::json::parse(
      testing::ReadFileBytes(p.dir + "/timeline-2.json"), nullptr,
      /*allow_exceptions=*/false);
  CO_ASSERT_TRUE(!trace.is_discarded());
  bool saw_train = false;
  for (const auto& event : trace.at("traceEvents")) {
    if (event.at("ph") != "X") continue;
    EXPECT_TRUE(event.at("ts").is_number());
    EXPECT_TRUE(event.at("dur").is_number());
    if (event.at("args").at("name") == "train") {
      saw_train = true;
      EXPECT_EQ(event.at("name"), "AssignAdd");
    }
  }
  EXPECT_TRUE(saw_train) << trace.dump();
  CO_ASSERT_OK(co_await p.Close());
}

// As TensorFlow's ProfilerHook adds each trace to the summary writer of
// output_dir: tagged "step_<global step>", with no step of its own, holding
// the traced ops.
CO_TEST(ProfilerHook, EachTraceIsTaggedRunMetadataInTheEventFile) {
  Profiled p;
  ProfilerHookOptions options{.save_steps = 2};
  CO_ASSERT_OK(co_await p.Start(options));
  for (int i = 0; i < 5; ++i) CO_ASSERT_OK(co_await p.Step());
  CO_ASSERT_OK(co_await p.Close());  // End flushes the event file

  const std::vector<std::string> files = testing::EventFiles(p.dir);
  CO_ASSERT_TRUE(files.size() == 1u);
  std::vector<std::string> tags;
  for (const auto& event : testing::ReadEventsForTest(files[0])) {
    if (!event.run_metadata_tag.has_value()) continue;
    tags.push_back(*event.run_metadata_tag);
    EXPECT_EQ(event.step, 0);
    // RunMetadata.step_stats(1).dev_stats(1).node_stats(2).node_name(1)
    std::vector<std::string> node_names;
    for (const auto& step_stats : testing::ParseWire(event.run_metadata)) {
      for (const auto& device : testing::ParseWire(step_stats.bytes)) {
        for (const auto& field : testing::ParseWire(device.bytes)) {
          if (field.number != 2) continue;
          for (const auto& node : testing::ParseWire(field.bytes)) {
            if (node.number == 1) node_names.push_back(node.bytes);
          }
        }
      }
    }
    EXPECT_NE(std::find(node_names.begin(), node_names.end(), "train"),
              node_names.end())
        << *event.run_metadata_tag;
  }
  EXPECT_EQ(tags, (std::vector<std::string>{"step_2", "step_4"}));
}

CO_TEST(ProfilerHook, BeginWithoutAGlobalStepFailsCreate) {
  Graph g;
  ops::Const(g, 1.0f, "c");
  auto hook = ProfilerHook::Create(
      {.save_steps = 1, .output_dir = FreshTempDir("profiler_no_step")});
  CO_ASSERT_TRUE(hook.ok());
  MonitoredSession::Hooks hooks{*hook};
  auto ms = co_await testing::CreateMonitoredSession(&g, std::move(hooks));
  EXPECT_EQ(ms.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace cosession::profiler_hook_test
