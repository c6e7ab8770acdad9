// A program of another project: a graph, a MonitoredSession with a hook,
// three steps awaited from a coroutine; then, from a file that includes the
// headers as the public contract spells them, a session stopped by a
// StopAtStepHook and one made by MonitoredTrainingSession. It links
// tcmalloc as the README advises, and checks that malloc is tcmalloc's.
// Exit code 0 when every value is the one expected.
#include <dlfcn.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdio>
#include <memory>

#include "contract_spelling.h"
#include "cosession/async/monitored_session.h"
#include "cosession/graph/ops.h"

namespace asio = boost::asio;
using namespace cosession;

// Counts its steps, and fetches `y` in each.
class CountingHook : public SyncSessionRunHook {
 public:
  explicit CountingHook(Output y) : y_(y) {}
  absl::Status BeforeRunSync(SessionRunContext&,
                             SessionRunArgs& args) override {
    args.fetches.push_back(y_);
    return absl::OkStatus();
  }
  absl::Status AfterRunSync(SessionRunContext&,
                            const SessionRunValues& values) override {
    last_y = values.results.at(0).scalar<float>();
    ++steps;
    return absl::OkStatus();
  }
  int steps = 0;
  float last_y = 0;

 private:
  Output y_;
};

asio::awaitable<int> Main() {
  Graph graph;
  Output x = ops::Placeholder(graph, DType::kFloat, TensorShape{}, "x");
  Output y = ops::Mul(graph, x, ops::Const(graph, 3.0f), "y");
  auto hook = std::make_shared<CountingHook>(y);
  MonitoredSession::Hooks hooks{hook};
  MonitoredSessionOptions options;
  auto created = co_await MonitoredSession::Create(
      graph, hooks, std::make_shared<ChiefSessionCreator>(), options,
      asio::use_awaitable);
  if (!created.ok()) {
    std::fprintf(stderr, "Create: %s\n", created.status().ToString().c_str());
    co_return 1;
  }
  MonitoredSession& session = **created;
  float sum = 0;
  for (int i = 1; i <= 3; ++i) {
    RunArgs args{.fetches = {y},
                 .feeds = {{x, Tensor::Scalar(static_cast<float>(i))}}};
    auto values = co_await session.Run(args, asio::use_awaitable);
    if (!values.ok()) {
      std::fprintf(stderr, "Run: %s\n", values.status().ToString().c_str());
      co_return 1;
    }
    sum += values->at(0).scalar<float>();
  }
  absl::Status closed = co_await session.Close(asio::use_awaitable);
  const int stopped_after = co_await StepsUntilStopAtStepTwo();
  const int trained = co_await TrainingStepsUntilMaxStepsThree();
  const bool right = closed.ok() && sum == 18.0f && hook->steps == 3 &&
                     hook->last_y == 9.0f && stopped_after == 2 && trained == 3;
  std::printf(
      "consumer: sum=%g steps=%d last_y=%g closed=%s stopped_after=%d "
      "trained=%d: %s\n",
      sum, hook->steps, hook->last_y, closed.ToString().c_str(), stopped_after,
      trained, right ? "ok" : "WRONG");
  co_return right ? 0 : 1;
}

int main() {
  void* tc_malloc = dlsym(RTLD_DEFAULT, "tc_malloc");
  if (tc_malloc == nullptr || dlsym(RTLD_DEFAULT, "malloc") != tc_malloc) {
    std::fprintf(stderr, "consumer: malloc is not tcmalloc's\n");
    return 1;
  }
  asio::io_context io;
  int code = 1;
  asio::co_spawn(io, Main(), [&](std::exception_ptr e, int result) {
    code = e ? 1 : result;
  });
  io.run();
  return code;
}
