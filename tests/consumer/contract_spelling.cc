// The public contract's spelling of the headers ("graph/...", "async/...",
// "hooks/..."), which cosession::cosession resolves to the same files as
// "cosession/<layer>/..." (main.cc's spelling; both appear below, as in a
// program whose files were written either way): a session stopped by a
// StopAtStepHook once the global step reached 2, and one made by the
// MonitoredTrainingSession factory, which the contract lists in
// "async/monitored_session.h" (no other header of cosession's is included
// for it).
#include "contract_spelling.h"

#include <boost/asio/use_awaitable.hpp>
#include <memory>

#include "async/coordinator.h"
#include "async/monitored_session.h"
#include "async/session.h"
#include "async/session_run_hook.h"
#include "cosession/graph/ops.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "graph/tensor.h"
#include "hooks/stop_at_step_hook.h"

namespace asio = boost::asio;
using namespace cosession;

namespace {

// Runs `increment` until the session stops (at most 10 steps) and closes
// it: the steps run, or -1 on an error.
asio::awaitable<int> StepsUntilStopped(MonitoredSession& session,
                                       Output increment) {
  int steps = 0;
  while (!session.ShouldStop() && steps < 10) {
    RunArgs args{.targets = {Operation(increment.node())}};
    auto ran = co_await session.Run(args, asio::use_awaitable);
    if (!ran.ok()) co_return -1;
    ++steps;
  }
  absl::Status closed = co_await session.Close(asio::use_awaitable);
  co_return closed.ok() ? steps : -1;
}

}  // namespace

asio::awaitable<int> StepsUntilStopAtStepTwo() {
  Graph graph;
  Output step = GetOrCreateGlobalStep(graph);
  Output increment = ops::AssignAdd(graph, step, ops::Const(graph, int64_t{1}));
  auto stop = StopAtStepHook::Create({.last_step = 2});
  if (!stop.ok()) co_return -1;
  MonitoredSession::Hooks hooks{*stop};
  MonitoredSessionOptions options;
  auto created = co_await MonitoredSession::Create(
      graph, hooks, std::make_shared<ChiefSessionCreator>(), options,
      asio::use_awaitable);
  if (!created.ok()) co_return -1;
  co_return co_await StepsUntilStopped(**created, increment);
}

asio::awaitable<int> TrainingStepsUntilMaxStepsThree() {
  Graph graph;
  Output step = GetOrCreateGlobalStep(graph);
  Output increment = ops::AssignAdd(graph, step, ops::Const(graph, int64_t{1}));
  MonitoredTrainingSessionOptions options;
  options.max_steps = 3;
  auto created =
      co_await MonitoredTrainingSession(graph, options, asio::use_awaitable);
  if (!created.ok()) co_return -1;
  co_return co_await StepsUntilStopped(**created, increment);
}
