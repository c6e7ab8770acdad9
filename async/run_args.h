// What a step is asked for (RunArgs, RunOptions) and what it reports besides
// its values (RunMetadata). Plain value types.
#ifndef COSESSION_ASYNC_RUN_ARGS_H_
#define COSESSION_ASYNC_RUN_ARGS_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "cosession/graph/graph.h"
#include "cosession/graph/tensor.h"

namespace cosession {

struct RunOptions {
  enum TraceLevel { kNoTrace = 0, kFullTrace = 1 };
  TraceLevel trace_level = kNoTrace;
  // The run completes with DeadlineExceeded when it takes longer. Unset = no
  // limit.
  std::optional<std::chrono::nanoseconds> timeout{};
  // Where the run's ops execute, as TensorFlow's RunOptions field of this
  // name: 0 = the session's Runtime pool takes every op whose cost is above
  // RuntimeOptions::inline_cost_threshold (the default); -1 = every op runs
  // on the thread that started the run, which then holds that thread until
  // the graph is done (or an asynchronous kernel suspends it: the ops after
  // that run where the kernel resumes, a thread of the pool). Intra-op
  // parallelism (RuntimeOptions::min_parallel_piece_cost) still uses the
  // pool. -1 saves the two hand-offs between the caller and the pool per
  // run (a wake-up of a sleeping thread each, ~15 µs on the project's VMs),
  // which a graph that is one serial chain does not earn back; as
  // TensorFlow says of it, use it only when that hand-off is comparable to
  // the run, and never on an event loop whose other work must not wait for
  // the graph. Any other value is InvalidArgument naming this field. Of a
  // MonitoredSession's run, the caller's value counts; a hook's is ignored
  // (TensorFlow's merge of the hooks' options ignores it too).
  int32_t inter_op_thread_pool = 0;
};

// OK, or InvalidArgument naming the field that holds a value no run accepts
// (RunOptions::inter_op_thread_pool other than 0 or -1).
absl::Status ValidateRunOptions(const RunOptions& options);

// One op's execution in a traced run.
struct NodeExecStats {
  std::string node_name{};
  std::string op{};
  std::chrono::steady_clock::time_point start{};
  std::chrono::steady_clock::time_point end{};
  // A small number per thread (stable for the thread's lifetime), for
  // timelines.
  uint64_t thread_id = 0;
};

struct StepStats {
  std::vector<NodeExecStats> node_stats{};
};

struct RunMetadata {
  // Empty unless the run asked for RunOptions::kFullTrace.
  StepStats step_stats{};
};

// What a caller (or a hook) asks of a step. Results come back in the order of
// `fetches`, then `fetch_names`.
struct RunArgs {
  std::vector<Output> fetches{};
  std::vector<Operation> targets{};
  std::vector<std::pair<Output, Tensor>> feeds{};
  RunOptions options{};
  // The same by name ("op" or "op:1"), as TensorFlow's session.run accepted;
  // an unknown name is InvalidArgument naming it.
  std::vector<std::string> fetch_names{};
  std::vector<std::string> target_names{};
  std::vector<std::pair<std::string, Tensor>> feeds_by_name{};
};

// Moves feeds_by_name, fetch_names and target_names into feeds, fetches
// and targets (after those already there). InvalidArgument naming an unknown
// name.
absl::Status ResolveNames(const Graph& graph, RunArgs& args);

// The values of a run's fetches and its metadata.
struct RunOutputs {
  std::vector<Tensor> values{};
  RunMetadata metadata{};
};

}  // namespace cosession

#endif  // COSESSION_ASYNC_RUN_ARGS_H_
