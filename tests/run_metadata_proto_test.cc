// RunMetadata's encoding (io/run_metadata_proto.h), decoded by the
// independent wire reader of tests/event_test_util.h against TensorFlow's
// field numbers.
#include "cosession/io/run_metadata_proto.h"

#include <gtest/gtest.h>

#include <map>

#include "tests/event_test_util.h"

namespace cosession::run_metadata_proto_test {
namespace {

using std::chrono::nanoseconds;
using std::chrono::seconds;
using testing::ParseWire;
using testing::WireField;

// The fields of `message` by number (the last of each; the repeated ones
// are read with ParseWire directly).
std::map<uint32_t, WireField> ByNumber(const std::string& message) {
  std::map<uint32_t, WireField> fields;
  for (WireField& f : ParseWire(message)) fields[f.number] = std::move(f);
  return fields;
}

// The one DeviceStepStats of an encoded RunMetadata.
std::vector<WireField> DeviceFields(const std::string& run_metadata) {
  std::vector<WireField> run = ParseWire(run_metadata);
  EXPECT_EQ(run.size(), 1u);
  if (run.size() != 1 || run[0].number != 1) return {};  // step_stats
  std::vector<WireField> step_stats = ParseWire(run[0].bytes);
  EXPECT_EQ(step_stats.size(), 1u);
  if (step_stats.size() != 1 || step_stats[0].number != 1) return {};
  return ParseWire(step_stats[0].bytes);  // dev_stats[0]
}

TEST(RunMetadataProto, EachOpIsANodeExecStatsOfTheCpuWithAbsoluteStarts) {
  const std::chrono::steady_clock::time_point t0{seconds(100)};
  RunMetadata metadata;
  metadata.step_stats.node_stats.push_back(
      {.node_name = "dense/MatMul",
       .op = "MatMul",
       .start = t0 + nanoseconds(2'500),
       .end = t0 + nanoseconds(2'500 + 3'000'700),
       .thread_id = 2});
  metadata.step_stats.node_stats.push_back(
      {.node_name = "x", .start = t0, .end = t0, .thread_id = 0});
  const std::string bytes =
      EncodeRunMetadata(metadata, {.steady_to_unix = seconds(1'700'000'000)});

  std::vector<std::string> devices;
  std::vector<std::string> nodes;
  std::map<uint64_t, std::string> thread_names;
  for (const WireField& f : DeviceFields(bytes)) {
    if (f.number == 1) devices.push_back(f.bytes);
    if (f.number == 2) nodes.push_back(f.bytes);
    if (f.number == 3) {
      auto entry = ByNumber(f.bytes);
      thread_names[entry[1].integer] = entry[2].bytes;
    }
  }
  EXPECT_EQ(devices, std::vector<std::string>{
                         "/job:localhost/replica:0/task:0/device:CPU:0"});
  EXPECT_EQ(thread_names, (std::map<uint64_t, std::string>{{0, "thread 0"},
                                                           {2, "thread 2"}}));
  ASSERT_EQ(nodes.size(), 2u);

  auto matmul = ByNumber(nodes[0]);
  EXPECT_EQ(matmul[1].bytes, "dense/MatMul");
  EXPECT_EQ(matmul[2].integer, 1'700'000'100'000'002u);   // all_start_micros
  EXPECT_FALSE(matmul.contains(3));                       // op_start_rel: 0
  EXPECT_EQ(matmul[4].integer, 3'000u);                   // op_end_rel_micros
  EXPECT_EQ(matmul[5].integer, 3'000u);                   // all_end_rel_micros
  EXPECT_EQ(matmul[8].bytes, "dense/MatMul = MatMul()");  // timeline_label
  EXPECT_EQ(matmul[10].integer, 2u);                      // thread_id
  EXPECT_EQ(matmul[13].integer, 1'700'000'100'000'002'500u);  // all_start_nanos
  EXPECT_EQ(matmul[15].integer, 3'000'700u);  // op_end_rel_nanos
  EXPECT_EQ(matmul[16].integer, 3'000'700u);  // all_end_rel_nanos

  // No op type: the label falls back to the node name; zeros are omitted.
  auto x = ByNumber(nodes[1]);
  EXPECT_EQ(x[2].integer, 1'700'000'100'000'000u);
  EXPECT_EQ(x[8].bytes, "x = x()");
  for (uint32_t zero : {4u, 5u, 10u, 15u, 16u}) {
    EXPECT_FALSE(x.contains(zero)) << "field " << zero;
  }
}

TEST(RunMetadataProto, AnUntracedStepIsAnEmptyRunMetadata) {
  EXPECT_EQ(EncodeRunMetadata(RunMetadata{}), "");
}

// Without an anchor, the starts are the system clock's: a stat taken now
// encodes as about now since the epoch.
TEST(RunMetadataProto, TheDefaultAnchorIsTheSystemClock) {
  const auto now = std::chrono::steady_clock::now();
  RunMetadata metadata;
  metadata.step_stats.node_stats.push_back(
      {.node_name = "n", .op = "NoOp", .start = now, .end = now});
  const auto unix_now = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  std::vector<WireField> device = DeviceFields(EncodeRunMetadata(metadata));
  ASSERT_GE(device.size(), 2u);
  auto node = ByNumber(device[1].bytes);
  const int64_t start = static_cast<int64_t>(node[2].integer);
  EXPECT_LT(std::abs(start - unix_now.count()), 60'000'000) << start;
}

}  // namespace
}  // namespace cosession::run_metadata_proto_test
