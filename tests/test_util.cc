#include "tests/test_util.h"

#include "cosession/graph/kernel.h"
#include "cosession/graph/resource_manager.h"

namespace cosession::testing {

Runtime& TestRuntime() {
  // The context is constructed first so that it is destroyed last, after the
  // pool's threads (which post to it) were joined.
  TestIo();
  static Runtime runtime(RuntimeOptions{.num_threads = 2});
  return runtime;
}

boost::asio::io_context& TestIo() {
  static boost::asio::io_context io;
  return io;
}

absl::StatusOr<std::vector<Tensor>> Eval(
    Graph& graph, std::vector<Output> fetches,
    std::vector<std::pair<Output, Tensor>> feeds, bool initialize) {
  Session session(graph, TestRuntime());
  if (initialize &&
      !graph.GetCollection(kVariableInitializersCollection).empty()) {
    Operation init = GlobalVariablesInitializer(graph);
    auto status = session.RunBlocking({.targets = {init}});
    if (!status.ok()) return status.status();
  }
  return session.RunBlocking(
      {.fetches = std::move(fetches), .feeds = std::move(feeds)});
}

int64_t CostOf(Output y, std::vector<Tensor> inputs) {
  std::vector<const Tensor*> pointers;
  for (const Tensor& t : inputs) pointers.push_back(&t);
  std::vector<Tensor> outputs(y.node()->num_outputs());
  ResourceManager resources;
  KernelContext ctx(*y.node(), pointers, outputs.data(), resources, nullptr);
  return y.node()->op_def().cost(ctx);
}

absl::StatusOr<Tensor> EvalOne(Graph& graph, Output fetch,
                               std::vector<std::pair<Output, Tensor>> feeds) {
  auto values = Eval(graph, {fetch}, std::move(feeds));
  if (!values.ok()) return values.status();
  return std::move((*values)[0]);
}

}  // namespace cosession::testing
