// Test helpers for event files and the hooks that write them:
//   * an event-file reader independent of the library: its own TFRecord
//     framing parse, its own bitwise CRC-32C, its own protobuf wire decoder
//     of the Event fields TensorBoard uses (so a round trip checks the
//     library's writer against the format, not against itself);
//   * a training graph with a global step, and a MonitoredSession helper;
//   * fresh temporary directories.
#ifndef COSESSION_TESTS_EVENT_TEST_UTIL_H_
#define COSESSION_TESTS_EVENT_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cosession/async/monitored_session.h"
#include "cosession/graph/ops.h"
#include "tests/test_util.h"

namespace cosession::testing {

// ---- an independent reader

inline uint32_t BitwiseCrc32c(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : bytes) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;  // reflected
    }
  }
  return ~crc;
}

inline uint32_t TfRecordMask(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// `data` framed as one TFRecord, by hand (the format, not the library's
// writer): length, its masked CRC, the data, the data's masked CRC.
inline std::string TfRecordFrame(const std::string& data) {
  auto little_endian = [](uint64_t v, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
    return out;
  };
  const std::string length = little_endian(data.size(), 8);
  return length + little_endian(TfRecordMask(BitwiseCrc32c(length)), 4) + data +
         little_endian(TfRecordMask(BitwiseCrc32c(data)), 4);
}

inline uint64_t LittleEndian(const std::string& bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) {
    v |= uint64_t{static_cast<unsigned char>(bytes[at + i])} << (8 * i);
  }
  return v;
}

inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Records of a TFRecord file; adds a test failure (and stops) on any
// framing or CRC problem.
inline std::vector<std::string> ParseRecords(const std::string& bytes) {
  std::vector<std::string> records;
  size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) {
      ADD_FAILURE() << "truncated header at " << at;
      return records;
    }
    const uint64_t length = LittleEndian(bytes, at, 8);
    if (TfRecordMask(BitwiseCrc32c(bytes.substr(at, 8))) !=
        LittleEndian(bytes, at + 8, 4)) {
      ADD_FAILURE() << "length CRC mismatch at " << at;
      return records;
    }
    if (bytes.size() - at - 12 < length + 4) {
      ADD_FAILURE() << "truncated record at " << at;
      return records;
    }
    std::string data = bytes.substr(at + 12, length);
    if (TfRecordMask(BitwiseCrc32c(data)) !=
        LittleEndian(bytes, at + 12 + length, 4)) {
      ADD_FAILURE() << "data CRC mismatch at " << at;
      return records;
    }
    records.push_back(std::move(data));
    at += 12 + length + 4;
  }
  return records;
}

// One protobuf field: its number, wire type and value (varint, fixed bits,
// or the bytes of a length-delimited field).
struct WireField {
  uint32_t number = 0;
  uint32_t wire_type = 0;
  uint64_t integer = 0;
  std::string bytes;
};

inline std::vector<WireField> ParseWire(const std::string& message) {
  std::vector<WireField> fields;
  size_t at = 0;
  auto varint = [&]() -> uint64_t {
    uint64_t v = 0;
    for (int shift = 0; at < message.size() && shift < 64; shift += 7) {
      const unsigned char b = message[at++];
      v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) return v;
    }
    ADD_FAILURE() << "bad varint";
    return v;
  };
  while (at < message.size()) {
    WireField f;
    const uint64_t key = varint();
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire_type = static_cast<uint32_t>(key & 7);
    if (f.wire_type == 0) {
      f.integer = varint();
    } else if (f.wire_type == 1 || f.wire_type == 5) {
      const int n = f.wire_type == 1 ? 8 : 4;
      if (message.size() - at < static_cast<size_t>(n)) {
        ADD_FAILURE() << "truncated fixed field";
        return fields;
      }
      f.integer = LittleEndian(message, at, n);
      at += n;
    } else if (f.wire_type == 2) {
      const uint64_t length = varint();
      if (message.size() - at < length) {
        ADD_FAILURE() << "truncated length-delimited field";
        return fields;
      }
      f.bytes = message.substr(at, length);
      at += length;
    } else {
      ADD_FAILURE() << "unexpected wire type " << f.wire_type;
      return fields;
    }
    fields.push_back(std::move(f));
  }
  return fields;
}

inline double AsDouble(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}
inline float AsFloat(uint64_t bits) {
  const uint32_t b32 = static_cast<uint32_t>(bits);
  float f;
  std::memcpy(&f, &b32, sizeof f);
  return f;
}

struct DecodedHistogram {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit, bucket;
};
struct DecodedValue {
  std::string tag;
  std::optional<float> simple_value;
  std::optional<DecodedHistogram> histo;
};
struct DecodedEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::optional<std::string> file_version;
  std::vector<DecodedValue> summary;  // values of the summary, if any
  bool has_summary = false;
  std::optional<int> session_log_status;
  std::string checkpoint_path;
  std::optional<std::string> graph_def;         // serialized GraphDef
  std::optional<std::string> meta_graph_def;    // serialized MetaGraphDef
  std::optional<std::string> run_metadata_tag;  // tagged_run_metadata.tag
  std::string run_metadata;  // tagged_run_metadata.run_metadata (serialized)
};

inline std::vector<double> PackedDoubles(const std::string& bytes) {
  std::vector<double> out;
  for (size_t at = 0; at + 8 <= bytes.size(); at += 8) {
    out.push_back(AsDouble(LittleEndian(bytes, at, 8)));
  }
  return out;
}

inline DecodedEvent DecodeEventForTest(const std::string& record) {
  DecodedEvent event;
  for (const WireField& f : ParseWire(record)) {
    switch (f.number) {
      case 1:
        event.wall_time = AsDouble(f.integer);
        break;
      case 2:
        event.step = static_cast<int64_t>(f.integer);
        break;
      case 3:
        event.file_version = f.bytes;
        break;
      case 4:
        event.graph_def = f.bytes;
        break;
      case 9:
        event.meta_graph_def = f.bytes;
        break;
      case 5:
        event.has_summary = true;
        for (const WireField& v : ParseWire(f.bytes)) {
          if (v.number != 1) continue;
          DecodedValue value;
          for (const WireField& vf : ParseWire(v.bytes)) {
            if (vf.number == 1) value.tag = vf.bytes;
            if (vf.number == 2) {
              EXPECT_EQ(vf.wire_type, 5u) << "simple_value is a fixed32 float";
              value.simple_value = AsFloat(vf.integer);
            }
            if (vf.number == 5) {
              DecodedHistogram h;
              for (const WireField& hf : ParseWire(vf.bytes)) {
                if (hf.number <= 5) {
                  EXPECT_EQ(hf.wire_type, 1u)
                      << "histogram field " << hf.number;
                }
                const double d = AsDouble(hf.integer);
                switch (hf.number) {
                  case 1:
                    h.min = d;
                    break;
                  case 2:
                    h.max = d;
                    break;
                  case 3:
                    h.num = d;
                    break;
                  case 4:
                    h.sum = d;
                    break;
                  case 5:
                    h.sum_squares = d;
                    break;
                  case 6:
                    h.bucket_limit = PackedDoubles(hf.bytes);
                    break;
                  case 7:
                    h.bucket = PackedDoubles(hf.bytes);
                    break;
                }
              }
              value.histo = h;
            }
          }
          event.summary.push_back(std::move(value));
        }
        break;
      case 8:
        event.run_metadata_tag = "";
        for (const WireField& rf : ParseWire(f.bytes)) {
          if (rf.number == 1) event.run_metadata_tag = rf.bytes;
          if (rf.number == 2) event.run_metadata = rf.bytes;
        }
        break;
      case 7:
        event.session_log_status = 0;
        for (const WireField& lf : ParseWire(f.bytes)) {
          if (lf.number == 1)
            event.session_log_status = static_cast<int>(lf.integer);
          if (lf.number == 2) event.checkpoint_path = lf.bytes;
        }
        break;
    }
  }
  return event;
}

inline std::vector<DecodedEvent> ReadEventsForTest(const std::string& path) {
  std::vector<DecodedEvent> events;
  for (const std::string& record : ParseRecords(ReadFileBytes(path))) {
    events.push_back(DecodeEventForTest(record));
  }
  return events;
}

// The event files in `dir`.
inline std::vector<std::string> EventFiles(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().starts_with("events.out.tfevents.")) {
      files.push_back(entry.path().string());
    }
  }
  return files;
}

// (step, value) of every scalar with `tag`.
inline std::vector<std::pair<int64_t, float>> ScalarsTagged(
    const std::vector<DecodedEvent>& events, const std::string& tag) {
  std::vector<std::pair<int64_t, float>> out;
  for (const DecodedEvent& e : events) {
    for (const DecodedValue& v : e.summary) {
      if (v.tag == tag && v.simple_value)
        out.emplace_back(e.step, *v.simple_value);
    }
  }
  return out;
}

// ---- directories, graphs, sessions

// A new empty directory under the test temp dir.
inline std::string FreshTempDir(const std::string& name) {
  static std::atomic<int> counter{0};
  std::string dir = absl::StrCat(::testing::TempDir(), "/cosession_", name, "_",
                                 getpid(), "_", counter.fetch_add(1));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A global step and a train op that adds `increment` to it.
struct TrainGraph {
  explicit TrainGraph(int64_t increment = 1) {
    global_step = GetOrCreateGlobalStep(g);
    train = ops::AssignAdd(g, global_step, ops::Const(g, increment), "train");
  }
  RunArgs Train() const {
    RunArgs args;
    args.targets.push_back(Operation(train.node()));
    return args;
  }
  Graph g;
  Output global_step;
  Output train;
};

inline MonitoredSessionOptions EventTestOptions() {
  MonitoredSessionOptions options;
  options.runtime = &TestRuntime();
  options.stop_grace_period = std::chrono::seconds(5);
  return options;
}

inline boost::asio::awaitable<absl::StatusOr<std::unique_ptr<MonitoredSession>>>
CreateMonitoredSession(Graph* g, MonitoredSession::Hooks hooks,
                       Scaffold scaffold) {
  auto creator = std::make_shared<ChiefSessionCreator>(std::move(scaffold));
  co_return co_await MonitoredSession::Create(
      *g, std::move(hooks), std::move(creator), EventTestOptions(),
      boost::asio::use_awaitable);
}

inline boost::asio::awaitable<absl::StatusOr<std::unique_ptr<MonitoredSession>>>
CreateMonitoredSession(Graph* g, MonitoredSession::Hooks hooks) {
  co_return co_await CreateMonitoredSession(g, std::move(hooks), Scaffold{});
}

}  // namespace cosession::testing

#endif  // COSESSION_TESTS_EVENT_TEST_UTIL_H_
