// Chrome trace JSON from run metadata: the fields Perfetto and
// chrome://tracing need, and the atomic write.
#include "cosession/io/chrome_trace.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/event_test_util.h"

namespace cosession::chrome_trace_test {
namespace {

using json = nlohmann::json;
using std::chrono::microseconds;
using std::chrono::nanoseconds;

RunMetadata TwoThreadMetadata() {
  const auto t0 =
      std::chrono::steady_clock::time_point(std::chrono::seconds(100));
  RunMetadata metadata;
  metadata.step_stats.node_stats = {
      {"dense/MatMul", "MatMul", t0 + microseconds(10), t0 + microseconds(35),
       2},
      {"x", "Placeholder", t0, t0 + nanoseconds(1500), 1},
      {"loss", "", t0 + microseconds(40), t0 + microseconds(41), 1},
  };
  return metadata;
}

std::vector<json> EventsWithPhase(const json& trace, const std::string& ph) {
  std::vector<json> out;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") == ph) out.push_back(e);
  }
  return out;
}

TEST(ChromeTrace, HasTopLevelTraceEventsAndNanosecondDisplayUnit) {
  json trace = ChromeTraceFromRunMetadata(TwoThreadMetadata());
  ASSERT_TRUE(trace.at("traceEvents").is_array());
  EXPECT_EQ(trace.at("displayTimeUnit"), "ns");
}

TEST(ChromeTrace, EachOpIsACompleteEventInMicrosecondsFromTheFirstStart) {
  // Round trip through text, as a viewer reads it.
  json trace =
      json::parse(ChromeTraceFromRunMetadata(TwoThreadMetadata()).dump());
  auto ops = EventsWithPhase(trace, "X");
  ASSERT_EQ(ops.size(), 3u);
  // Sorted by start.
  EXPECT_EQ(ops[0].at("args").at("name"), "x");
  EXPECT_EQ(ops[0].at("name"), "Placeholder");
  EXPECT_EQ(ops[0].at("ts"), 0.0);
  EXPECT_EQ(ops[0].at("dur"), 1.5);
  EXPECT_EQ(ops[0].at("tid"), 1);
  EXPECT_EQ(ops[1].at("name"), "MatMul");
  EXPECT_EQ(ops[1].at("args").at("name"), "dense/MatMul");
  EXPECT_EQ(ops[1].at("args").at("op"), "MatMul");
  EXPECT_EQ(ops[1].at("cat"), "Op");
  EXPECT_EQ(ops[1].at("ts"), 10.0);
  EXPECT_EQ(ops[1].at("dur"), 25.0);
  EXPECT_EQ(ops[1].at("tid"), 2);
  EXPECT_TRUE(ops[1].at("pid").is_number());
  EXPECT_TRUE(ops[1].at("ts").is_number());
  // No op type: named by the node.
  EXPECT_EQ(ops[2].at("name"), "loss");
}

TEST(ChromeTrace, MetadataEventsNameTheProcessAndEveryThread) {
  json trace = ChromeTraceFromRunMetadata(TwoThreadMetadata(),
                                          {.process_name = "step 7"});
  auto meta = EventsWithPhase(trace, "M");
  ASSERT_EQ(meta.size(), 3u);
  EXPECT_EQ(meta[0].at("name"), "process_name");
  EXPECT_EQ(meta[0].at("args").at("name"), "step 7");
  EXPECT_EQ(meta[1].at("name"), "thread_name");
  EXPECT_EQ(meta[1].at("tid"), 1);
  EXPECT_EQ(meta[2].at("tid"), 2);
  EXPECT_EQ(meta[2].at("args").at("name"), "thread 2");
}

TEST(ChromeTrace, AnUntracedStepGivesAValidTraceWithNoOps) {
  json trace = ChromeTraceFromRunMetadata(RunMetadata{});
  EXPECT_TRUE(EventsWithPhase(trace, "X").empty());
  EXPECT_EQ(EventsWithPhase(trace, "M").size(), 1u);
}

TEST(ChromeTrace, WriteChromeTraceLeavesOnlyTheParsableFile) {
  const std::string dir = testing::FreshTempDir("trace");
  const std::string path = dir + "/timeline-3.json";
  ASSERT_TRUE(WriteChromeTrace(TwoThreadMetadata(), path).ok());
  json trace = json::parse(testing::ReadFileBytes(path));
  EXPECT_EQ(EventsWithPhase(trace, "X").size(), 3u);
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 1);  // no temporary left behind
}

TEST(ChromeTrace, WriteChromeTraceIntoAMissingDirectoryFailsNamingThePath) {
  const std::string path =
      testing::FreshTempDir("trace_missing") + "/gone/timeline-1.json";
  absl::Status written = WriteChromeTrace(TwoThreadMetadata(), path);
  EXPECT_FALSE(written.ok());
  EXPECT_NE(written.message().find(path), std::string::npos) << written;
}

}  // namespace
}  // namespace cosession::chrome_trace_test
