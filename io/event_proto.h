// TensorFlow's Event protobuf (tensorflow/core/util/event.proto and
// tensorflow/core/framework/summary.proto), the part TensorBoard needs for
// scalars, histograms, session logs and traced runs, encoded by hand in the
// protobuf wire format -- no protobuf dependency. Field numbers, as in
// TensorFlow:
//
//   Event          { double wall_time = 1; int64 step = 2;
//                    oneof what { string file_version = 3;
//                                 bytes graph_def = 4; Summary summary = 5;
//                                 SessionLog session_log = 7;
//                                 TaggedRunMetadata tagged_run_metadata = 8;
//                                 bytes meta_graph_def = 9; } }
//   Summary        { repeated Value value = 1; }
//   Summary.Value  { string tag = 1;
//                    oneof value { float simple_value = 2;
//                                  HistogramProto histo = 5; } }
//   HistogramProto { double min = 1, max = 2, num = 3, sum = 4,
//                    sum_squares = 5;
//                    repeated double bucket_limit = 6 [packed];
//                    repeated double bucket = 7 [packed]; }
//   SessionLog     { SessionStatus status = 1; string checkpoint_path = 2;
//                    string msg = 3; }   START = 1, STOP = 2, CHECKPOINT = 3
//   TaggedRunMetadata { string tag = 1; bytes run_metadata = 2; }
//                    (a serialized RunMetadata: io/run_metadata_proto.h)
//
// (session_log is field 7: field 6 is the deprecated LogMessage.)
//
// Histograms are bucketed as TensorFlow's summary op does (tensorflow/core/
// lib/histogram): bucket limits growing by 10% from 1e-12 to 1e20, mirrored
// for negatives, 0 in the middle, DBL_MAX last; bucket i counts the values
// in [limit[i-1], limit[i]); runs of empty buckets are collapsed into one, so
// TensorBoard draws them as it draws TensorFlow's.
//
// Pure functions and value types; thread safe.
#ifndef COSESSION_IO_EVENT_PROTO_H_
#define COSESSION_IO_EVENT_PROTO_H_

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cosession/graph/tensor.h"

namespace cosession {

struct HistogramProto {
  double min = 0;
  double max = 0;
  double num = 0;
  double sum = 0;
  double sum_squares = 0;
  std::vector<double> bucket_limit{};
  std::vector<double> bucket{};
};

struct SummaryValue {
  std::string tag{};
  std::variant<float, HistogramProto> value{};
};

struct Summary {
  std::vector<SummaryValue> value{};
};

struct SessionLog {
  enum SessionStatus {
    kStatusUnspecified = 0,
    kStart = 1,
    kStop = 2,
    kCheckpoint = 3,
  };
  SessionStatus status = kStatusUnspecified;
  std::string checkpoint_path;
  std::string msg;
};

struct FileVersion {
  std::string version{};  // "brain.Event:2" for the files we write
};

// A serialized GraphDef or MetaGraphDef (io/graph_def_proto.h).
struct SerializedGraphDef {
  std::string bytes{};
};
struct SerializedMetaGraphDef {
  std::string bytes{};
};

// A traced step's RunMetadata under a tag ("step_<global step>" from
// ProfilerHook), as TensorFlow's FileWriter.add_run_metadata writes it.
struct TaggedRunMetadata {
  std::string tag{};
  std::string run_metadata{};  // serialized (io/run_metadata_proto.h)
};

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::variant<std::monostate, FileVersion, Summary, SessionLog,
               SerializedGraphDef, SerializedMetaGraphDef, TaggedRunMetadata>
      what{};
};

// The event's wire-format bytes (a record's data in an event file).
std::string EncodeEvent(const Event& event);

// TensorFlow's default histogram bucket limits (built once; never freed).
const std::vector<double>& DefaultHistogramBucketLimits();

// The histogram of `values` with the default buckets. InvalidArgument for a
// NaN or an infinity (TensorFlow's histogram summary rejects them too).
absl::StatusOr<HistogramProto> MakeHistogram(absl::Span<const double> values);
// Of a tensor's elements (any dtype; bool counts as 0/1).
absl::StatusOr<HistogramProto> MakeHistogram(const Tensor& values);

}  // namespace cosession

#endif  // COSESSION_IO_EVENT_PROTO_H_
