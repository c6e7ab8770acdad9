// Benchmarks of the Session and executor, each beside its hand-written
// baseline. Names are stable so that versions can be compared; the targets
// in the README are ratios against the baselines in this binary.
//
// Every benchmark measures wall-clock time (UseRealTime): work runs on the
// pool's threads as well as on the calling one.
#include <benchmark/benchmark.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "cosession/async/executor.h"
#include "cosession/async/session.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/tensor_eigen.h"

namespace cosession {
namespace {

namespace asio = boost::asio;

using bench::RunCoroutine;

// Awaits `args` on `session` once per benchmark iteration.
asio::awaitable<void> RunLoop(benchmark::State& state, Session& session,
                              RunArgs args) {
  for (auto _ : state) {
    auto result = co_await session.Run(args, asio::use_awaitable);
    if (!result.ok()) {
      state.SkipWithError(result.status().ToString().c_str());
      break;
    }
  }
}

void InitializeOrSkip(benchmark::State& state, Session& session, Graph& g) {
  auto init = session.RunBlocking({.targets = {GlobalVariablesInitializer(g)}});
  if (!init.ok()) state.SkipWithError(init.status().ToString().c_str());
}

// ---- one AssignAdd on an int64 variable

void BM_SessionRun_Trivial(benchmark::State& state) {
  Graph g;
  Output step = ops::Variable(g, Tensor::Scalar<int64_t>(0), "step");
  Output inc = ops::AssignAdd(g, step, ops::Const(g, int64_t{1}));
  Session session(g);
  InitializeOrSkip(state, session, g);
  g.Finalize();
  RunCoroutine(RunLoop(state, session, {.targets = {Operation(inc.node())}}));
}
BENCHMARK(BM_SessionRun_Trivial)->UseRealTime();

asio::awaitable<void> IncrementByHand(int64_t& value) {
  ++value;
  benchmark::DoNotOptimize(value);
  co_return;
}

asio::awaitable<void> TrivialStepLoop(benchmark::State& state) {
  int64_t value = 0;
  for (auto _ : state) co_await IncrementByHand(value);
}

void BM_Baseline_TrivialStep(benchmark::State& state) {
  RunCoroutine(TrivialStepLoop(state));
}
BENCHMARK(BM_Baseline_TrivialStep)->UseRealTime();

// ---- a chain of scalar float adds

void BM_Executor_Chain(benchmark::State& state) {
  Graph g;
  Output one = ops::Const(g, 1.0f);
  Output x = ops::Const(g, 0.0f);
  for (int64_t i = 0; i < state.range(0); ++i) x = ops::Add(g, x, one);
  g.Finalize();
  Session session(g);
  RunCoroutine(RunLoop(state, session, {.fetches = {x}}));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Executor_Chain)->Arg(1000)->Arg(100000)->UseRealTime();

void BM_Baseline_Chain(benchmark::State& state) {
  float one = 1.0f;
  for (auto _ : state) {
    float x = 0.0f;
    for (int64_t i = 0; i < state.range(0); ++i) {
      benchmark::DoNotOptimize(one);
      x = x + one;
    }
    benchmark::DoNotOptimize(x);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Baseline_Chain)->Arg(1000)->Arg(100000)->UseRealTime();

// ---- building a graph and its first run's plan: a chain of N scalar adds
// (what a first Session::Run of a new graph pays before any op runs). Items
// are ops, so items_per_second of /1000 and /10000 show whether the cost
// per op grows with the graph.

void BM_Graph_BuildAndPlan(benchmark::State& state) {
  const int64_t n = state.range(0);
  for (auto _ : state) {
    Graph g;
    Output one = ops::Const(g, 1.0f);
    Output x = ops::Const(g, 0.0f);
    for (int64_t i = 0; i < n; ++i) x = ops::Add(g, x, one);
    g.Finalize();
    const Output fetches[] = {x};
    auto plan = ExecutionPlan::Build(g, {}, fetches, {});
    if (!plan.ok()) {
      state.SkipWithError(plan.status().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(*plan);
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_Graph_BuildAndPlan)->Arg(1000)->Arg(10000)->UseRealTime();

// ---- independent 64x64 MatMuls joined by AddN

std::vector<Tensor> RandomMatrices(int count, int64_t n) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<Tensor> out;
  for (int i = 0; i < count; ++i) {
    Tensor t = Tensor::Allocate(DType::kFloat, TensorShape{n, n});
    for (float& v : t.mutable_flat<float>()) v = dist(rng);
    out.push_back(std::move(t));
  }
  return out;
}

constexpr int64_t kFanOutSize = 64;

// `width` products of kFanOutSize-square matrices joined by AddN, run on
// `runtime`.
void RunFanOut(benchmark::State& state, Runtime& runtime) {
  const int width = static_cast<int>(state.range(0));
  std::vector<Tensor> lhs = RandomMatrices(width + 1, kFanOutSize);
  Graph g;
  Output rhs = ops::Const(g, lhs.back());
  std::vector<Output> products;
  for (int i = 0; i < width; ++i) {
    products.push_back(ops::MatMul(g, ops::Const(g, lhs[i]), rhs));
  }
  Output sum = ops::AddN(g, products);
  g.Finalize();
  Session session(g, runtime);
  RunCoroutine(RunLoop(state, session, {.fetches = {sum}}));
}

void BM_Executor_FanOut(benchmark::State& state) {
  RunFanOut(state, Runtime::Default());
}
BENCHMARK(BM_Executor_FanOut)->Arg(64)->UseRealTime();

// The same on a runtime whose pool threads are bound one to each CPU
// (RuntimeOptions::pin_threads).
void BM_Executor_FanOut_PinnedPool(benchmark::State& state) {
  Runtime runtime({.pin_threads = true});
  RunFanOut(state, runtime);
}
BENCHMARK(BM_Executor_FanOut_PinnedPool)->Arg(64)->UseRealTime();

void BM_Baseline_FanOut(benchmark::State& state) {
  const int width = static_cast<int>(state.range(0));
  std::vector<Tensor> lhs = RandomMatrices(width + 1, kFanOutSize);
  for (auto _ : state) {
    EigenMatrix<float> sum = EigenMatrix<float>::Zero(kFanOutSize, kFanOutSize);
    EigenMatrix<float> product(kFanOutSize, kFanOutSize);
    for (int i = 0; i < width; ++i) {
      product.noalias() =
          MatrixMap<float>(lhs[i]) * MatrixMap<float>(lhs.back());
      sum += product;
    }
    benchmark::DoNotOptimize(sum.data());
  }
}
BENCHMARK(BM_Baseline_FanOut)->Arg(64)->UseRealTime();

// The fan-out's data for the hand-written two-thread references: each
// product keeps its own buffer, so two threads can fill them at once.
class FanOutByHand {
 public:
  explicit FanOutByHand(int width)
      : lhs_(RandomMatrices(width + 1, kFanOutSize)),
        products_(width, EigenMatrix<float>(kFanOutSize, kFanOutSize)) {}

  // Computes products first, first + 2, first + 4, ...
  void MultiplyEveryOther(int first) {
    for (size_t i = static_cast<size_t>(first); i < products_.size(); i += 2) {
      products_[i].noalias() =
          MatrixMap<float>(lhs_[i]) * MatrixMap<float>(lhs_.back());
    }
  }

  void Sum(EigenMatrix<float>& sum) const {
    sum = products_[0];
    for (size_t i = 1; i < products_.size(); ++i) sum += products_[i];
  }

 private:
  std::vector<Tensor> lhs_;
  std::vector<EigenMatrix<float>> products_;
};

// What two threads can do by hand: a helper thread that never sleeps (it
// spins on an atomic between iterations) computes every other product, the
// benchmark's thread the rest, then sums all of them. The products keep
// their buffers, and each stays with the thread that computes it. A
// reference for BM_Executor_FanOut, which pays for waking pool threads,
// allocation and scheduling; not a baseline of the targets.
void BM_Baseline_FanOut_TwoThreads(benchmark::State& state) {
  FanOutByHand fan_out(static_cast<int>(state.range(0)));
  EigenMatrix<float> sum(kFanOutSize, kFanOutSize);
  std::atomic<int64_t> started{0};   // iterations handed to the helper
  std::atomic<int64_t> finished{0};  // iterations the helper finished
  std::atomic<bool> quit{false};
  std::thread helper([&] {
    for (int64_t done = 0;;) {
      while (started.load(std::memory_order_acquire) == done) {
        if (quit.load(std::memory_order_relaxed)) return;
      }
      fan_out.MultiplyEveryOther(1);
      finished.store(++done, std::memory_order_release);
    }
  });
  int64_t iteration = 0;
  for (auto _ : state) {
    started.store(++iteration, std::memory_order_release);
    fan_out.MultiplyEveryOther(0);
    while (finished.load(std::memory_order_acquire) != iteration) {
    }
    fan_out.Sum(sum);
    benchmark::DoNotOptimize(sum.data());
  }
  quit.store(true, std::memory_order_relaxed);
  helper.join();
}
BENCHMARK(BM_Baseline_FanOut_TwoThreads)->Arg(64)->UseRealTime();

// The fan-out by hand in the executor's shape: the benchmark's thread hands
// each iteration to two worker threads and sleeps until the last of them
// has summed the products, as a caller's event loop sleeps while a run is
// on the pool. Between iterations the workers sleep too, on a condition
// variable. Nothing else is paid (no graph, no allocation, no queue), so
// this is what any design whose threads sleep between runs can reach on
// the machine; on a VM, where waking a sleeping thread costs tens of µs,
// it sits well above BM_Baseline_FanOut_TwoThreads. A reference, not a
// baseline of the targets.
void BM_Baseline_FanOut_SleepingThreads(benchmark::State& state) {
  FanOutByHand fan_out(static_cast<int>(state.range(0)));
  EigenMatrix<float> sum(kFanOutSize, kFanOutSize);
  std::mutex mu;
  std::condition_variable work_ready;  // workers wait for a new iteration
  std::condition_variable sum_ready;   // the benchmark's thread waits here
  int64_t iteration = 0;               // all guarded by mu
  int64_t summed = 0;
  int workers_left = 0;
  bool quit = false;
  auto worker = [&](int first) {
    for (int64_t done = 0;;) {
      {
        std::unique_lock lock(mu);
        work_ready.wait(lock, [&] { return quit || iteration > done; });
        if (quit) return;
        done = iteration;
      }
      fan_out.MultiplyEveryOther(first);
      bool last;
      {
        std::lock_guard lock(mu);
        last = --workers_left == 0;
      }
      if (!last) continue;
      fan_out.Sum(sum);  // the last worker sums, as the executor's would
      {
        std::lock_guard lock(mu);
        summed = done;
      }
      sum_ready.notify_one();
    }
  };
  std::thread even(worker, 0);
  std::thread odd(worker, 1);
  for (auto _ : state) {
    std::unique_lock lock(mu);
    workers_left = 2;
    const int64_t this_iteration = ++iteration;
    work_ready.notify_all();
    sum_ready.wait(lock, [&] { return summed == this_iteration; });
    benchmark::DoNotOptimize(sum.data());
  }
  {
    std::lock_guard lock(mu);
    quit = true;
  }
  work_ready.notify_all();
  even.join();
  odd.join();
}
BENCHMARK(BM_Baseline_FanOut_SleepingThreads)->Arg(64)->UseRealTime();

}  // namespace
}  // namespace cosession
