// TensorFlow's RunMetadata protobuf (tensorflow/core/protobuf/config.proto,
// tensorflow/core/framework/step_stats.proto), the part a traced step fills,
// encoded by hand in the protobuf wire format (io/proto_wire.h). It is the
// payload of an event file's tagged_run_metadata (io/event_proto.h), which
// TensorBoard's graph dashboard lists as a session run and overlays on the
// graph (compute time per node). Field numbers, as in TensorFlow:
//
//   RunMetadata     { StepStats step_stats = 1; }
//   StepStats       { repeated DeviceStepStats dev_stats = 1; }
//   DeviceStepStats { string device = 1;
//                     repeated NodeExecStats node_stats = 2;
//                     map<uint32, string> thread_names = 3; }
//   NodeExecStats   { string node_name = 1; int64 all_start_micros = 2;
//                     int64 op_start_rel_micros = 3;
//                     int64 op_end_rel_micros = 4;
//                     int64 all_end_rel_micros = 5;
//                     string timeline_label = 8; uint32 thread_id = 10;
//                     int64 all_start_nanos = 13;
//                     int64 op_start_rel_nanos = 14;
//                     int64 op_end_rel_nanos = 15;
//                     int64 all_end_rel_nanos = 16; }
//
// Every op of the step is one NodeExecStats of one device, TensorFlow's name
// for the local CPU ("/job:localhost/replica:0/task:0/device:CPU:0"): the
// graph runs on the host's thread pool, and TensorFlow's own CPU-only
// traces look the same. The start times are absolute (microseconds and
// nanoseconds since the Unix epoch, as TensorFlow's), the others relative
// to the start; timeline_label is "<node> = <op>()", the form TensorFlow's
// timeline.py parses (cosession's stats carry no input names). Fields that
// are zero are omitted, as proto3 writes them.
//
// Pure functions; thread safe.
#ifndef COSESSION_IO_RUN_METADATA_PROTO_H_
#define COSESSION_IO_RUN_METADATA_PROTO_H_

#include <chrono>
#include <optional>
#include <string>

#include "cosession/async/run_args.h"

namespace cosession {

struct RunMetadataEncoding {
  std::string device = "/job:localhost/replica:0/task:0/device:CPU:0";
  // What to add to a steady_clock reading to get the time since the Unix
  // epoch. Unset: measured when encoding (the system clock's now minus the
  // steady clock's now). A test sets it to get exact figures.
  std::optional<std::chrono::nanoseconds> steady_to_unix{};
};

// The serialized RunMetadata of a traced step (empty StepStats when the
// step was not traced: no device entry then).
std::string EncodeRunMetadata(const RunMetadata& metadata,
                              const RunMetadataEncoding& encoding = {});

}  // namespace cosession

#endif  // COSESSION_IO_RUN_METADATA_PROTO_H_
