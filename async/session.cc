#include "cosession/async/session.h"

#include <atomic>
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
  struct CachedPlan {
    PlanKey key;
    std::shared_ptr<const ExecutionPlan> plan;
  };

  const Graph& graph;
  Runtime& runtime;
  std::shared_ptr<ResourceManager> resources;
  std::mutex mu;  // not absl::Mutex: see graph/resource_manager.h
  // Never erased, and each entry never changed once inserted, so that a
  // CachedPlan, once published in `last`, can be read without the lock for
  // the session's life.
  absl::flat_hash_map<PlanKey, std::unique_ptr<const CachedPlan>> plans
      ABSL_GUARDED_BY(mu);
  // The plan found last: a loop that runs the same step compares its
  // arguments with this one's key and takes the plan, without the lock and
  // without building a key (release on store, acquire on load: the entry's
  // contents are visible to whoever sees the pointer).
  std::atomic<const CachedPlan*> last{nullptr};
};

}  // namespace detail

namespace {

int64_t Code(const Output& out) {
  return (static_cast<int64_t>(out.node()->id()) << 16) | out.index();
}

// Calls `code` with each element of the plan key of a run with these
// feeds, fetches (`fetches` then `extra_fetches`) and targets, in order;
// stops, returning false, at the first call that returns false.
template <typename CodeFn>
bool ForEachKeyCode(absl::Span<const Output> feeds,
                    absl::Span<const Output> fetches,
                    absl::Span<const Output> extra_fetches,
                    absl::Span<const Operation> targets, CodeFn code) {
  auto of = [](const Output& out) { return out.valid() ? Code(out) : -2; };
  for (const Output& feed : feeds) {
    if (!code(of(feed))) return false;
  }
  if (!code(-1)) return false;
  for (const Output& fetch : fetches) {
    if (!code(of(fetch))) return false;
  }
  for (const Output& fetch : extra_fetches) {
    if (!code(of(fetch))) return false;
  }
  if (!code(-1)) return false;
  for (const Operation& target : targets) {
    if (!code(target.valid() ? target.node()->id() : -2)) return false;
  }
  return true;
}

// The plan of `args` whose fetches are followed by `extra_fetches`.
absl::StatusOr<std::shared_ptr<const ExecutionPlan>> FindOrBuildPlan(
    detail::SessionState& state, const RunArgs& args,
    absl::Span<const Output> extra_fetches, absl::Span<const Output> feeds) {
  using CachedPlan = detail::SessionState::CachedPlan;
  if (const CachedPlan* last = state.last.load(std::memory_order_acquire)) {
    size_t i = 0;
    const bool same =
        ForEachKeyCode(feeds, args.fetches, extra_fetches, args.targets,
                       [&](int64_t code) {
                         return i < last->key.size() && last->key[i++] == code;
                       }) &&
        i == last->key.size();
    if (same) return last->plan;
  }
  detail::SessionState::PlanKey key;
  ForEachKeyCode(feeds, args.fetches, extra_fetches, args.targets,
                 [&](int64_t code) {
                   key.push_back(code);
                   return true;
                 });
  {
    std::lock_guard lock(state.mu);
    auto it = state.plans.find(key);
    if (it != state.plans.end()) {
      state.last.store(it->second.get(), std::memory_order_release);
      return it->second->plan;
    }
  }
  absl::InlinedVector<Output, 8> fetches(args.fetches.begin(),
                                         args.fetches.end());
  fetches.insert(fetches.end(), extra_fetches.begin(), extra_fetches.end());
  COSESSION_ASSIGN_OR_RETURN(
      std::shared_ptr<const ExecutionPlan> plan,
      ExecutionPlan::Build(state.graph, feeds, fetches, args.targets));
  std::lock_guard lock(state.mu);
  // Another thread may have built the same plan meanwhile: the first one
  // stays, so that a published entry never changes.
  auto [it, inserted] = state.plans.try_emplace(key, nullptr);
  if (inserted) {
    it->second = std::make_unique<const CachedPlan>(
        CachedPlan{std::move(key), std::move(plan)});
  }
  state.last.store(it->second.get(), std::memory_order_release);
  return it->second->plan;
}

}  // namespace

absl::Status ValidateRunOptions(const RunOptions& options) {
  if (options.inter_op_thread_pool != 0 && options.inter_op_thread_pool != -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RunOptions.inter_op_thread_pool is ", options.inter_op_thread_pool,
        ": a session has one pool, 0, or the caller's thread, -1"));
  }
  return absl::OkStatus();
}

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
  if (!args.feeds.empty()) {
    feeds.reserve(args.feeds.size());
    run.feed_values.reserve(args.feeds.size());
    for (const auto& [out, value] : args.feeds) {
      feeds.push_back(out);
      run.feed_values.push_back(value);
    }
  }
  absl::StatusOr<std::shared_ptr<const ExecutionPlan>> plan =
      FindOrBuildPlan(state, args, extra_fetches, feeds);
  if (!plan.ok()) {
    run.status = plan.status();
    return run;
  }
  run.status = (*plan)->ValidateFeeds(run.feed_values);
  if (run.status.ok()) run.status = ValidateRunOptions(args.options);
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
