// Test helpers: evaluate fetches of a graph in a fresh Session, and run a
// coroutine body to completion with a time bound (so a hang fails the test
// instead of stalling CI).
#ifndef COSESSION_TESTS_TEST_UTIL_H_
#define COSESSION_TESTS_TEST_UTIL_H_

#include <chrono>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "async/session.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "graph/tensor.h"

namespace cosession::testing {

// Runs GlobalVariablesInitializer (when the graph has variables, and
// `initialize` is true), then fetches `fetches` with `feeds`, in a new
// Session on a shared test Runtime.
absl::StatusOr<std::vector<Tensor>> Eval(
    Graph& graph, std::vector<Output> fetches,
    std::vector<std::pair<Output, Tensor>> feeds = {}, bool initialize = true);

// Eval of one fetch.
absl::StatusOr<Tensor> EvalOne(Graph& graph, Output fetch,
                               std::vector<std::pair<Output, Tensor>> feeds = {});

// The Runtime shared by tests (2 threads).
Runtime& TestRuntime();

}  // namespace cosession::testing

#endif  // COSESSION_TESTS_TEST_UTIL_H_
