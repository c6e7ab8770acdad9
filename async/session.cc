#include "cosession/async/session.h"

#include <condition_variable>
#include <mutex>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "cosession/graph/status.h"

namespace cosession {
namespace detail {

// What a Session owns; runs in flight share it.
struct SessionState {
  SessionState(const Graph& g, Runtime& r,
               std::shared_ptr<ResourceManager> shared)
      : graph(g),
        runtime(r),
        resources(shared ? std::move(shared)
                         : std::make_shared<ResourceManager>()) {}

  // Plans cached by the run's signature: feeds, fetches and targets as
  // (node id, output index) codes with separators.
  using PlanKey = absl::InlinedVector<int64_t, 8>;

  const Graph& graph;
  Runtime& runtime;
  std::shared_ptr<ResourceManager> resources;
  std::mutex mu;  // not absl::Mutex: see graph/resource_manager.h
  absl::flat_hash_map<PlanKey, std::shared_ptr<const ExecutionPlan>> plans
      ABSL_GUARDED_BY(mu);
  // The plan found last: a loop that runs the same step needs no hashing.
  PlanKey last_key ABSL_GUARDED_BY(mu);
  std::shared_ptr<const ExecutionPlan> last_plan ABSL_GUARDED_BY(mu);
};

}  // namespace detail

namespace {

int64_t Code(const Output& out) {
  return (static_cast<int64_t>(out.node()->id()) << 16) | out.index();
}

// The plan of `args` whose fetches are followed by `extra_fetches`.
absl::StatusOr<std::shared_ptr<const ExecutionPlan>> FindOrBuildPlan(
    detail::SessionState& state, const RunArgs& args,
    absl::Span<const Output> extra_fetches, absl::Span<const Output> feeds) {
  detail::SessionState::PlanKey key;
  for (const Output& feed : feeds)
    key.push_back(feed.valid() ? Code(feed) : -2);
  key.push_back(-1);
  for (const Output& fetch : args.fetches) {
    key.push_back(fetch.valid() ? Code(fetch) : -2);
  }
  for (const Output& fetch : extra_fetches) {
    key.push_back(fetch.valid() ? Code(fetch) : -2);
  }
  key.push_back(-1);
  for (const Operation& target : args.targets) {
    key.push_back(target.valid() ? target.node()->id() : -2);
  }
  {
    std::lock_guard lock(state.mu);
    if (state.last_plan != nullptr && state.last_key == key) {
      return state.last_plan;
    }
    auto it = state.plans.find(key);
    if (it != state.plans.end()) {
      state.last_key = std::move(key);
      state.last_plan = it->second;
      return it->second;
    }
  }
  absl::InlinedVector<Output, 8> fetches(args.fetches.begin(),
                                         args.fetches.end());
  fetches.insert(fetches.end(), extra_fetches.begin(), extra_fetches.end());
  COSESSION_ASSIGN_OR_RETURN(
      std::shared_ptr<const ExecutionPlan> plan,
      ExecutionPlan::Build(state.graph, feeds, fetches, args.targets));
  std::lock_guard lock(state.mu);
  state.plans.emplace(std::move(key), plan);
  return plan;
}

}  // namespace

absl::Status ResolveNames(const Graph& graph, RunArgs& args) {
  if (args.feeds_by_name.empty() && args.fetch_names.empty() &&
      args.target_names.empty()) {
    return absl::OkStatus();
  }
  auto resolve = [&](const std::string& name,
                     absl::string_view role) -> absl::StatusOr<Output> {
    absl::StatusOr<Output> out = graph.FindOutput(name);
    if (!out.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Cannot ", role, " '", name, "': ", out.status().message()));
    }
    return out;
  };
  for (auto& [name, value] : args.feeds_by_name) {
    COSESSION_ASSIGN_OR_RETURN(Output out, resolve(name, "feed"));
    args.feeds.emplace_back(out, std::move(value));
  }
  for (const std::string& name : args.fetch_names) {
    COSESSION_ASSIGN_OR_RETURN(Output out, resolve(name, "fetch"));
    args.fetches.push_back(out);
  }
  for (const std::string& name : args.target_names) {
    absl::StatusOr<Operation> op = graph.FindOperation(name);
    if (!op.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Cannot run target '", name, "': ", op.status().message()));
    }
    args.targets.push_back(*op);
  }
  args.feeds_by_name.clear();
  args.fetch_names.clear();
  args.target_names.clear();
  return absl::OkStatus();
}

Session::Session(const Graph& graph, Runtime& runtime)
    : Session(graph, runtime, nullptr) {}

Session::Session(const Graph& graph, Runtime& runtime,
                 std::shared_ptr<ResourceManager> shared_resources)
    : state_(std::make_shared<detail::SessionState>(
          graph, runtime, std::move(shared_resources))) {}

Session::~Session() = default;

const Graph& Session::graph() const { return state_->graph; }
Runtime& Session::runtime() const { return state_->runtime; }
ResourceManager& Session::resources() const { return *state_->resources; }
const std::shared_ptr<ResourceManager>& Session::shared_resources() const {
  return state_->resources;
}

void Session::StartRun(std::shared_ptr<detail::SessionState> state,
                       const RunArgs& borrowed_args,
                       boost::asio::cancellation_slot slot,
                       RunDoneCallback done) {
  StartRun(std::move(state), borrowed_args, {}, slot, std::move(done));
}

void Session::StartRun(std::shared_ptr<detail::SessionState> state,
                       const RunArgs& borrowed_args,
                       absl::Span<const Output> extra_fetches,
                       boost::asio::cancellation_slot slot,
                       RunDoneCallback done) {
  PreparedRun run = Prepare(*state, borrowed_args, extra_fetches);
  StartPrepared(std::move(state), std::move(run), slot, std::move(done));
}

Session::PreparedRun Session::Prepare(detail::SessionState& state,
                                      const RunArgs& borrowed_args,
                                      absl::Span<const Output> extra_fetches) {
  PreparedRun run;
  const RunArgs* resolved = &borrowed_args;
  std::optional<RunArgs> with_names_resolved;  // made only when names are used
  if (!borrowed_args.feeds_by_name.empty() ||
      !borrowed_args.fetch_names.empty() ||
      !borrowed_args.target_names.empty()) {
    with_names_resolved = borrowed_args;
    run.status = ResolveNames(state.graph, *with_names_resolved);
    if (!run.status.ok()) return run;
    resolved = &*with_names_resolved;
  }
  const RunArgs& args = *resolved;
  absl::InlinedVector<Output, 4> feeds;
  feeds.reserve(args.feeds.size());
  run.feed_values.reserve(args.feeds.size());
  for (const auto& [out, value] : args.feeds) {
    feeds.push_back(out);
    run.feed_values.push_back(value);
  }
  absl::StatusOr<std::shared_ptr<const ExecutionPlan>> plan =
      FindOrBuildPlan(state, args, extra_fetches, feeds);
  if (!plan.ok()) {
    run.status = plan.status();
    return run;
  }
  run.status = (*plan)->ValidateFeeds(run.feed_values);
  run.plan = *std::move(plan);
  run.options = args.options;
  return run;
}

void Session::StartPrepared(std::shared_ptr<detail::SessionState> state,
                            PreparedRun run,
                            boost::asio::cancellation_slot slot,
                            RunDoneCallback done) {
  if (!run.status.ok()) {
    done(std::move(run.status));
    return;
  }
  std::shared_ptr<ResourceManager> resources = state->resources;
  Runtime& runtime = state->runtime;
  Execute(std::move(run.plan), std::move(run.feed_values), std::move(resources),
          runtime, run.options, slot, std::move(done));
}

Session::RunResult Session::RunBlocking(RunArgs args) {
  if (state_->runtime.InPoolThread()) {
    return absl::FailedPreconditionError(
        "Session::RunBlocking was called on a pool thread of the session's "
        "Runtime, where it would wait for work queued behind itself; "
        "co_await Session::Run instead");
  }
  // std::mutex and condition_variable rather than absl::Notification:
  // ThreadSanitizer sees through them (Debian's Abseil is not instrumented).
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  RunResult result;
  StartRun(state_, std::move(args), boost::asio::cancellation_slot(),
           [&](absl::StatusOr<RunOutputs> outputs) {
             std::lock_guard lock(mu);
             if (outputs.ok()) {
               result = std::move(outputs->values);
             } else {
               result = std::move(outputs).status();
             }
             finished = true;
             cv.notify_one();
           });
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return finished; });
  return result;
}

}  // namespace cosession
