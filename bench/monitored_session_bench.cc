// Benchmarks of the monitored step: what MonitoredSession adds to a
// Session::Run, and what each hook costs. Baselines in the same binary.
#include <benchmark/benchmark.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <exception>
#include <memory>
#include <vector>

#include "bench/bench_util.h"
#include "cosession/async/monitored_session.h"
#include "cosession/graph/ops.h"
#include "cosession/training/monitored_training_session.h"

namespace cosession {
namespace {

namespace asio = boost::asio;

// Four methods that complete without suspending (Begin, AfterCreateSession
// and End are SessionRunHook's no-ops), written as a SyncSessionRunHook.
class SyncHook : public SyncSessionRunHook {
 public:
  absl::Status BeforeRunSync(SessionRunContext&, SessionRunArgs&) override {
    ++calls;
    return absl::OkStatus();
  }
  absl::Status AfterRunSync(SessionRunContext&,
                            const SessionRunValues&) override {
    ++calls;
    return absl::OkStatus();
  }
  int64_t calls = 0;
};

// The same four methods as coroutines that never suspend.
class CoroutineHook : public SessionRunHook {
 public:
  asio::awaitable<absl::StatusOr<SessionRunArgs>> BeforeRun(
      SessionRunContext&) override {
    ++calls;
    co_return SessionRunArgs{};
  }
  asio::awaitable<absl::Status> AfterRun(SessionRunContext&,
                                         const SessionRunValues&) override {
    ++calls;
    co_return absl::OkStatus();
  }
  bool MaySuspend() const override { return false; }
  int64_t calls = 0;
};

// BeforeRun suspends once: a post to its executor.
class AsyncHook : public CoroutineHook {
 public:
  asio::awaitable<absl::StatusOr<SessionRunArgs>> BeforeRun(
      SessionRunContext&) override {
    co_await asio::post(co_await asio::this_coro::executor,
                        asio::use_awaitable);
    ++calls;
    co_return SessionRunArgs{};
  }
  bool MaySuspend() const override { return true; }
};

using bench::RunCoroutine;

// Times one Run per iteration of the created session, then closes it.
asio::awaitable<void> TimeSteps(benchmark::State& state,
                                MonitoredSession::CreateResult created,
                                RunArgs args) {
  if (!created.ok()) {
    state.SkipWithError(created.status().ToString().c_str());
    co_return;
  }
  auto& session = **created;
  for (auto _ : state) {
    auto result = co_await session.Run(args, asio::use_awaitable);
    if (!result.ok()) {
      state.SkipWithError(result.status().ToString().c_str());
      break;
    }
  }
  (void)co_await session.Close(asio::use_awaitable);
}

asio::awaitable<void> StepLoop(benchmark::State& state,
                               MonitoredSession::Hooks hooks) {
  Graph g;
  Output step = ops::Variable(g, Tensor::Scalar<int64_t>(0), "step");
  Output inc = ops::AssignAdd(g, step, ops::Const(g, int64_t{1}));
  MonitoredSessionOptions options;  // named: docs/async_pitfalls.md, 8
  auto created = co_await MonitoredSession::Create(
      g, std::move(hooks), std::make_shared<ChiefSessionCreator>(), options,
      asio::use_awaitable);
  RunArgs args{.targets = {Operation(inc.node())}};
  co_await TimeSteps(state, std::move(created), std::move(args));
}

template <typename HookType>
MonitoredSession::Hooks MakeHooks(int n) {
  MonitoredSession::Hooks hooks;
  for (int i = 0; i < n; ++i) hooks.push_back(std::make_shared<HookType>());
  return hooks;
}

void BM_Step_NoHooks(benchmark::State& state) {
  RunCoroutine(StepLoop(state, {}));
}
BENCHMARK(BM_Step_NoHooks)->UseRealTime();

void BM_Step_SyncHooks(benchmark::State& state) {
  RunCoroutine(StepLoop(state, MakeHooks<SyncHook>(state.range(0))));
}
BENCHMARK(BM_Step_SyncHooks)->Arg(1)->Arg(10)->Arg(100)->UseRealTime();

// The hooks as coroutines that complete without suspending: what a hook
// costs when it does not use SyncSessionRunHook.
void BM_Step_CoroutineHooks(benchmark::State& state) {
  RunCoroutine(StepLoop(state, MakeHooks<CoroutineHook>(state.range(0))));
}
BENCHMARK(BM_Step_CoroutineHooks)->Arg(10)->UseRealTime();

void BM_Step_AsyncHooks(benchmark::State& state) {
  RunCoroutine(StepLoop(state, MakeHooks<AsyncHook>(state.range(0))));
}
BENCHMARK(BM_Step_AsyncHooks)->Arg(10)->UseRealTime();

// MonitoredTrainingSession's default hooks (step counter and summaries every
// 100 steps, a checkpoint at creation and every 600 s) on the trivial graph:
// most steps write nothing to disk. Compare with BM_Step_NoHooks.
asio::awaitable<void> DefaultHooksLoop(benchmark::State& state,
                                       std::string dir) {
  Graph g;
  Output step = GetOrCreateGlobalStep(g);
  Output inc = ops::AssignAdd(g, step, ops::Const(g, int64_t{1}));
  MonitoredTrainingSessionOptions options;
  options.checkpoint_dir = dir;
  options.summary_scalars = {{"global_step", step}};
  options.session.runtime = &Runtime::Default();
  options.log = [](const std::string&) {};  // keep the report readable
  auto created =
      co_await MonitoredTrainingSession(g, options, asio::use_awaitable);
  RunArgs args{.targets = {Operation(inc.node())}};
  co_await TimeSteps(state, std::move(created), std::move(args));
}

void BM_Step_DefaultHooks(benchmark::State& state) {
  bench::ScratchDir dir("default_hooks_bench");
  RunCoroutine(DefaultHooksLoop(state, dir.path()));
}
BENCHMARK(BM_Step_DefaultHooks)->UseRealTime();

// What the hand-written hook-call baselines pass their hooks: a context
// over an empty graph's session, and no values.
struct HookCallFixture {
  Graph graph;
  Session session{graph};
  RunArgs args;
  SessionRunContext context{args, session};
  SessionRunValues values;
};

// The same ten BeforeRunSync/AfterRunSync calls as BM_Step_SyncHooks,
// made by hand in a coroutine loop.
asio::awaitable<void> HookCallLoop(
    benchmark::State& state, std::vector<std::shared_ptr<SyncHook>> hooks) {
  HookCallFixture f;
  for (auto _ : state) {
    for (auto& hook : hooks) {
      SessionRunArgs asked;
      absl::Status s = hook->BeforeRunSync(f.context, asked);
      benchmark::DoNotOptimize(s);
      benchmark::DoNotOptimize(asked);
    }
    for (auto& hook : hooks) {
      absl::Status s = hook->AfterRunSync(f.context, f.values);
      benchmark::DoNotOptimize(s);
    }
  }
  co_return;
}

void BM_Baseline_HookCalls(benchmark::State& state) {
  std::vector<std::shared_ptr<SyncHook>> hooks;
  for (int i = 0; i < state.range(0); ++i) {
    hooks.push_back(std::make_shared<SyncHook>());
  }
  RunCoroutine(HookCallLoop(state, std::move(hooks)));
}
BENCHMARK(BM_Baseline_HookCalls)->Arg(10)->UseRealTime();

// The ten calls of BM_Step_CoroutineHooks, awaited by hand.
asio::awaitable<void> CoroutineHookCallLoop(benchmark::State& state,
                                            MonitoredSession::Hooks hooks) {
  HookCallFixture f;
  for (auto _ : state) {
    for (auto& hook : hooks) {
      auto r = co_await hook->BeforeRun(f.context);
      benchmark::DoNotOptimize(r);
    }
    for (auto& hook : hooks) {
      auto s = co_await hook->AfterRun(f.context, f.values);
      benchmark::DoNotOptimize(s);
    }
  }
}

void BM_Baseline_CoroutineHookCalls(benchmark::State& state) {
  RunCoroutine(
      CoroutineHookCallLoop(state, MakeHooks<CoroutineHook>(state.range(0))));
}
BENCHMARK(BM_Baseline_CoroutineHookCalls)->Arg(10)->UseRealTime();

}  // namespace
}  // namespace cosession
