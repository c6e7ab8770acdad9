// Shared by the hook tests: a small training graph (a global step, a train op
// that increments it, an op that sets it to a fed value, a no-op) and a
// MonitoredSession made for tests. Header-only: the test CMakeLists lists its
// helper sources by name.
#ifndef COSESSION_TESTS_HOOK_TEST_UTIL_H_
#define COSESSION_TESTS_HOOK_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cosession/async/monitored_session.h"
#include "cosession/graph/ops.h"
#include "tests/test_util.h"

namespace cosession::testing {

struct StepGraph {
  StepGraph() {
    global_step = GetOrCreateGlobalStep(g);
    train_op =
        ops::AssignAdd(g, global_step, ops::Const(g, int64_t{1}), "train_op");
    new_step = ops::Placeholder(g, DType::kInt64, TensorShape{}, "new_step");
    set_step = ops::Assign(g, global_step, new_step, "set_step");
    no_op = ops::NoOp(g, {}, "no_op");
  }
  // One training step: the global step goes up by one.
  RunArgs Train() const { return {.targets = {Operation(train_op.node())}}; }
  // A step that changes nothing.
  RunArgs Nothing() const { return {.targets = {no_op}}; }
  // Sets the global step (run on the raw session, without hooks).
  RunArgs SetStep(int64_t value) const {
    return {.targets = {Operation(set_step.node())},
            .feeds = {{new_step, Tensor::Scalar<int64_t>(value)}}};
  }
  RunArgs ReadStep() const { return {.fetches = {global_step}}; }

  Graph g;
  Output global_step, train_op, new_step, set_step;
  Operation no_op;
};

// A StepGraph with a float scalar `value` (named `name`) that each training
// step feeds: a loss or metric the test chooses step by step.
struct FedValueGraph : StepGraph {
  explicit FedValueGraph(const std::string& name) {
    input = ops::Placeholder(g, DType::kFloat, TensorShape{}, name + "_in");
    value = ops::Identity(g, input, name);
  }
  RunArgs TrainWith(float fed) const {
    RunArgs args = Train();
    args.feeds.emplace_back(input, Tensor::Scalar(fed));
    return args;
  }
  Output input, value;
};

inline MonitoredSessionOptions HookTestOptions() {
  MonitoredSessionOptions options;
  options.runtime = &TestRuntime();
  options.stop_grace_period = std::chrono::seconds(5);
  return options;
}

// A hook list built outside co_await expressions (docs/async_pitfalls.md, 8).
template <typename... H>
MonitoredSession::Hooks HookList(H... hooks) {
  return MonitoredSession::Hooks{hooks...};
}

inline boost::asio::awaitable<std::unique_ptr<MonitoredSession>>
CreateSessionOrFail(Graph& g, MonitoredSession::Hooks hooks) {
  auto created = co_await MonitoredSession::Create(
      g, std::move(hooks), std::make_shared<ChiefSessionCreator>(),
      HookTestOptions(), boost::asio::use_awaitable);
  if (!created.ok()) {
    ADD_FAILURE() << "Create failed: " << created.status();
    co_return nullptr;
  }
  co_return std::move(created).value();
}

// Runs `args` on the raw session (no hooks); fails the test on error.
inline boost::asio::awaitable<std::vector<Tensor>> RawRun(Session& session,
                                                          RunArgs args) {
  auto values =
      co_await session.Run(std::move(args), boost::asio::use_awaitable);
  if (!values.ok()) {
    ADD_FAILURE() << "raw run failed: " << values.status();
    co_return std::vector<Tensor>{};
  }
  co_return std::move(values).value();
}

// Collects log lines.
struct CapturedLog {
  std::shared_ptr<std::vector<std::string>> lines =
      std::make_shared<std::vector<std::string>>();
  std::function<void(std::string)> Sink() const {
    return [lines = lines](std::string line) {
      lines->push_back(std::move(line));
    };
  }
  std::string Joined() const {
    std::string all;
    for (const auto& line : *lines) all += line + "\n";
    return all;
  }
};

}  // namespace cosession::testing

#endif  // COSESSION_TESTS_HOOK_TEST_UTIL_H_
