// Chrome trace JSON (the Trace Event Format read by ui.perfetto.dev and
// chrome://tracing) from a traced step's RunMetadata, as TensorFlow's
// timeline.Timeline(step_stats).generate_chrome_trace_format():
//
//   {"traceEvents": [
//      {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": ...}},
//      {"name": "thread_name", "ph": "M", "pid": 0, "tid": T,
//       "args": {"name": "thread T"}},            // one per thread seen
//      {"name": <op type>, "cat": "Op", "ph": "X", "pid": 0, "tid": T,
//       "ts": <us>, "dur": <us>, "args": {"name": <node>, "op": <op type>}},
//      ...],
//    "displayTimeUnit": "ns"}
//
// One complete ("X") event per op execution, named by op type as
// TensorFlow's are (the node name is in args; a missing op type falls back
// to the node name). ts is microseconds since the step's first op started,
// dur microseconds (fractional, as numbers). Events are sorted by ts.
//
// WriteChromeTrace writes the JSON atomically: a temporary file in the same
// directory, fsync, rename -- a reader never sees half a trace.
//
// Pure functions (WriteChromeTrace touches only its files); thread safe.
#ifndef COSESSION_IO_CHROME_TRACE_H_
#define COSESSION_IO_CHROME_TRACE_H_

#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/status.h"
#include "cosession/async/run_args.h"

namespace cosession {

struct ChromeTraceOptions {
  // The name of the (single) process lane.
  std::string process_name = "cosession step";
};

nlohmann::json ChromeTraceFromRunMetadata(
    const RunMetadata& metadata, const ChromeTraceOptions& options = {});

// Writes ChromeTraceFromRunMetadata(metadata) to `path` atomically; an I/O
// error names the path (and leaves no temporary file behind).
absl::Status WriteChromeTrace(const RunMetadata& metadata,
                              const std::string& path,
                              const ChromeTraceOptions& options = {});

}  // namespace cosession

#endif  // COSESSION_IO_CHROME_TRACE_H_
