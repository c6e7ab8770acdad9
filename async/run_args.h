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
};

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
