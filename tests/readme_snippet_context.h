// What the README's C++ examples use without declaring: the headers a user
// would include, and the objects an example refers to as already made (a
// graph, a loss, a timer...). cmake/ReadmeSnippets.cmake turns each example
// into a coroutine in a file that includes this one; the build compiles it
// (tests/CMakeLists.txt: cosession_readme_snippets), never runs it, so the
// objects are only declared.
#ifndef COSESSION_TESTS_README_SNIPPET_CONTEXT_H_
#define COSESSION_TESTS_README_SNIPPET_CONTEXT_H_

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstdio>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cosession/async/monitored_session.h"
#include "cosession/async/session.h"
#include "cosession/graph/graph.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/optimizers.h"
#include "cosession/hooks/logging_tensor_hook.h"
#include "cosession/pipeline/csv_rows.h"
#include "cosession/pipeline/dataset.h"
#include "cosession/pipeline/dataset_iterator.h"
#include "cosession/serving/batching_session.h"
#include "cosession/serving/saved_model.h"
#include "cosession/training/dataset_hook.h"
#include "cosession/training/monitored_training_session.h"

namespace cosession::readme_snippets {

namespace asio = boost::asio;

extern Graph graph;
extern Output loss;
extern RunArgs args;
extern RunArgs train_args;
extern asio::any_io_executor executor;
extern asio::steady_timer timer;
extern absl::StatusOr<std::unique_ptr<MonitoredSession>> ms;
extern MonitoredTrainingSessionOptions options;

}  // namespace cosession::readme_snippets

#endif  // COSESSION_TESTS_README_SNIPPET_CONTEXT_H_
