// Test helpers: evaluate fetches of a graph in a fresh Session, and run a
// coroutine body to completion with a time bound (so a hang fails the test
// instead of stalling CI).
#ifndef COSESSION_TESTS_TEST_UTIL_H_
#define COSESSION_TESTS_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "cosession/async/session.h"
#include "cosession/graph/graph.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/status.h"
#include "cosession/graph/tensor.h"

namespace cosession::testing {

// Runs GlobalVariablesInitializer (when the graph has variables, and
// `initialize` is true), then fetches `fetches` with `feeds`, in a new
// Session on a shared test Runtime.
absl::StatusOr<std::vector<Tensor>> Eval(
    Graph& graph, std::vector<Output> fetches,
    std::vector<std::pair<Output, Tensor>> feeds = {}, bool initialize = true);

// Eval of one fetch.
absl::StatusOr<Tensor> EvalOne(
    Graph& graph, Output fetch,
    std::vector<std::pair<Output, Tensor>> feeds = {});

// The cost function (graph/kernel.h CostFn) of `y`'s op on concrete inputs.
int64_t CostOf(Output y, std::vector<Tensor> inputs);

// Runs `fn`, expects it to throw StatusError, and returns the error's status
// (an OK status when nothing or something else was thrown, after recording a
// failure).
template <typename Fn>
absl::Status StatusThrownBy(Fn&& fn) {
  try {
    fn();
  } catch (const StatusError& e) {
    return e.status();
  } catch (...) {
    ADD_FAILURE() << "threw something other than StatusError";
    return absl::OkStatus();
  }
  ADD_FAILURE() << "did not throw";
  return absl::OkStatus();
}

// The Runtime shared by tests (2 threads).
Runtime& TestRuntime();

// An io_context shared by the tests of one process, restarted by each test,
// and destroyed only after TestRuntime's threads were joined: a pool thread
// that posted a completion to it may still be inside Asio's wake-up call
// after the handler ran, so a per-test io_context would be torn down under
// it.
boost::asio::io_context& TestIo();

// A one-shot event for plain threads (std::mutex and condition_variable,
// which ThreadSanitizer sees through; Debian's Abseil is not instrumented).
class Latch {
 public:
  void Notify() {
    std::lock_guard lock(mu_);
    done_ = true;
    cv_.notify_all();
  }
  // False on timeout.
  bool WaitFor(std::chrono::seconds limit) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return done_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

}  // namespace cosession::testing

#endif  // COSESSION_TESTS_TEST_UTIL_H_
