#include "cosession/async/session_creator.h"

#include <algorithm>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "cosession/async/timer_executor.h"
#include "cosession/graph/ops.h"

namespace cosession {
namespace asio = boost::asio;

void Scaffold::Finalize(Graph& graph) {
  // One default op of each kind per graph, found again by later sessions
  // once the graph is finalized.
  constexpr absl::string_view kInitOpCollection = "scaffold_init_op";
  constexpr absl::string_view kReadyOpCollection = "scaffold_ready_op";
  if (!init_op.valid()) {
    if (auto existing = graph.GetCollection(kInitOpCollection);
        !existing.empty()) {
      init_op = Operation(existing.front());
    } else if (!graph.finalized()) {
      init_op = GlobalVariablesInitializer(graph);
      graph.AddToCollection(kInitOpCollection, init_op.node());
    }
  }
  if (!ready_op.valid()) {
    if (auto existing = graph.GetCollection(kReadyOpCollection);
        !existing.empty()) {
      ready_op = Output(existing.front(), 0);
    } else if (!graph.finalized()) {
      ready_op = ReportUninitializedVariables(graph);
      graph.AddToCollection(kReadyOpCollection, ready_op.node());
    }
  }
}

namespace {

// Runs `op` alone in `session`; nothing when it is unset.
asio::awaitable<absl::Status> RunTarget(Session& session, Operation op) {
  if (!op.valid()) co_return absl::OkStatus();
  RunArgs args;
  args.targets.push_back(op);
  auto ran = co_await session.Run(std::move(args), asio::use_awaitable);
  co_return ran.status();
}

}  // namespace

asio::awaitable<absl::StatusOr<std::unique_ptr<Session>>>
ChiefSessionCreator::CreateSession(const Graph& graph, Runtime& runtime) {
  const bool from_directory =
      !scaffold_.restore && !options_.checkpoint_dir.empty();
  if (from_directory && scaffold_.saver == nullptr) {
    co_return absl::InvalidArgumentError(absl::StrCat(
        "ChiefSessionCreator: checkpoint_dir '", options_.checkpoint_dir,
        "' is set but Scaffold::saver is not (give it a Saver, io/saver.h)"));
  }
  auto session =
      std::make_unique<Session>(graph, runtime, options_.shared_resources);
  bool restored = false;
  if (scaffold_.restore || from_directory) {
    absl::StatusOr<bool> r;
    if (scaffold_.restore) {
      r = co_await scaffold_.restore(*session);
    } else {
      r = co_await scaffold_.saver->RestoreLatestIfAny(*session,
                                                       options_.checkpoint_dir);
    }
    if (!r.ok()) co_return r.status();
    restored = *r;
  }
  if (!restored) {
    absl::Status s = co_await RunTarget(*session, scaffold_.init_op);
    if (!s.ok()) co_return s;
  }
  absl::Status s = co_await RunTarget(*session, scaffold_.local_init_op);
  if (!s.ok()) co_return s;
  co_return session;
}

asio::awaitable<absl::StatusOr<std::unique_ptr<Session>>>
WorkerSessionCreator::CreateSession(const Graph& graph, Runtime& runtime) {
  if (!shared_resources_) {
    co_return absl::InvalidArgumentError(
        "WorkerSessionCreator needs the chief's shared ResourceManager (a "
        "worker with variables of its own would wait forever)");
  }
  auto session = std::make_unique<Session>(graph, runtime, shared_resources_);
  if (scaffold_.ready_op.valid()) {
    asio::steady_timer timer(
        TimerExecutorFor(co_await asio::this_coro::executor));
    const auto deadline = std::chrono::steady_clock::now() + options_.max_wait;
    while (true) {
      RunArgs args;
      args.fetches.push_back(scaffold_.ready_op);
      auto report = co_await session->Run(std::move(args), asio::use_awaitable);
      if (!report.ok()) co_return report.status();
      std::vector<std::string> uninitialized =
          UninitializedVariableNames(graph, report->front());
      if (uninitialized.empty()) break;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        co_return absl::DeadlineExceededError(absl::StrCat(
            "WorkerSessionCreator: the chief did not initialise ",
            absl::StrJoin(uninitialized, ", "), " within ",
            absl::FormatDuration(absl::FromChrono(options_.max_wait))));
      }
      timer.expires_at(std::min(now + options_.poll_interval, deadline));
      co_await timer.async_wait(asio::use_awaitable);
    }
  }
  absl::Status s = co_await RunTarget(*session, scaffold_.local_init_op);
  if (!s.ok()) co_return s;
  co_return session;
}

}  // namespace cosession
