// Ops for executor and session tests, registered once on first use:
//   TestCount(inputs...)  sync: counts its runs (TestEvents::runs), appends
//                         its name to TestEvents::order, outputs float 1.
//   TestPair(inputs...)   sync: blocks until a second TestPair kernel runs
//                         at the same time (arrivals pair up in order: 1st
//                         with 2nd, 3rd with 4th...); fails with
//                         DeadlineExceeded after 10 s alone. Outputs float 1.
//   TestFail(inputs...)   sync: fails with Internal "TestFail '<name>' failed".
//   TestThrow()           sync: throws std::runtime_error.
//   TestWait()            async: sends its name on `started`, then waits for
//                         one token on `trigger`; outputs float 1.
//   TestNever()           async: sends its name on `started`, then waits on a
//                         channel nobody sends to (until cancelled).
//   TestAsyncFail()       async: yields once, then fails with Unavailable.
//   TestMaybeReady()      async, with a synchronous attempt: when
//                         TestEvents::ready_now is set, the attempt
//                         finishes it (records its thread in
//                         TestEvents::attempt_thread, outputs float 2; with
//                         TestEvents::attempt_fails, fails with Internal
//                         instead); otherwise the coroutine runs: yields
//                         once, outputs float 1.
//   TestKeep(x)           sync: keeps a copy of x in TestEvents::kept;
//                         outputs float 1.
//   TestKeptIsSole(...)   sync: outputs float 1 when nothing but
//                         TestEvents::kept holds the kept tensor's buffer
//                         (the run dropped its own), else 0.
// The ops reach the per-test TestEvents through TestEvents::Current().
#ifndef COSESSION_TESTS_TEST_OPS_H_
#define COSESSION_TESTS_TEST_OPS_H_

#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/system/error_code.hpp>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "cosession/graph/graph.h"

namespace cosession::testing {

using NameChannel = boost::asio::experimental::concurrent_channel<void(
    boost::system::error_code, std::string)>;
using TokenChannel = boost::asio::experimental::concurrent_channel<void(
    boost::system::error_code)>;

// Created by a test; installs itself as Current() for its lifetime.
class TestEvents {
 public:
  TestEvents();
  ~TestEvents();
  static TestEvents& Current();

  int runs(const std::string& name) {
    std::lock_guard lock(mu);
    return run_counts[name];
  }
  std::vector<std::string> order_snapshot() {
    std::lock_guard lock(mu);
    return order;
  }

  NameChannel started;
  TokenChannel trigger;
  TokenChannel never;

  std::mutex mu;  // not absl::Mutex: TSan cannot see into Debian's Abseil
  absl::flat_hash_map<std::string, int> run_counts ABSL_GUARDED_BY(mu);
  std::vector<std::string> order ABSL_GUARDED_BY(mu);
  std::condition_variable pair_arrived;  // with mu
  int pair_arrivals ABSL_GUARDED_BY(mu) = 0;
  Tensor kept ABSL_GUARDED_BY(mu);
  bool ready_now ABSL_GUARDED_BY(mu) = false;
  bool attempt_fails ABSL_GUARDED_BY(mu) = false;
  std::thread::id attempt_thread ABSL_GUARDED_BY(mu);
};

void RegisterTestOps();

// Builders.
Output TestCount(Graph& g, std::vector<Output> inputs = {},
                 std::vector<Operation> control_inputs = {},
                 std::string name = "");
Output TestPair(Graph& g, std::vector<Output> inputs, std::string name);
Output TestFail(Graph& g, std::vector<Output> inputs = {},
                std::string name = "");
Output TestThrow(Graph& g, std::string name = "");
Output TestWait(Graph& g, std::string name = "");
Output TestNever(Graph& g, std::string name = "");
Output TestAsyncFail(Graph& g, std::string name = "");
Output TestMaybeReady(Graph& g, std::string name = "");
Output TestKeep(Graph& g, Output x, std::string name = "");
Output TestKeptIsSole(Graph& g, std::vector<Operation> control_inputs,
                      std::string name = "");

}  // namespace cosession::testing

#endif  // COSESSION_TESTS_TEST_OPS_H_
