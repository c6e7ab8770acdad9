// Serving predictions of a 784-128-10 MLP (relu, softmax) from one session:
//
//   BM_Serve_Unbatched/64   64 coroutines each await a 1-row prediction,
//                           each its own Session::Run (the baseline)
//   BM_Serve_Batched/64     the same 64 coroutines through a BatchingSession
//                           (max_batch_size 64): one run for all
//   BM_Serve_BatcherOverhead  64 one-row requests through the batcher
//   BM_Baseline_BatchedRun    the same 64 rows concatenated by hand and run
//                             once (the batcher's floor)
// Each iteration is the 64 requests, all in flight together; items are
// requests.
#include <benchmark/benchmark.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstring>
#include <memory>
#include <vector>

#include "bench/served_mlp.h"
#include "cosession/serving/batching_session.h"

namespace cosession {
namespace {

namespace asio = boost::asio;
using bench::kInputs;
using bench::kServedRows;
using bench::Model;
using bench::ServedMlp;

constexpr int kRequests = kServedRows;

std::unique_ptr<BatchingSession> MakeBatcher(ServedMlp& m) {
  return *BatchingSession::Create(
      *m.session, m.signature,
      {.max_batch_size = kRequests,
       .batch_timeout = std::chrono::milliseconds(1)});
}

void CheckedOk(benchmark::State& state, const absl::Status& s) {
  if (!s.ok()) state.SkipWithError(s.ToString().c_str());
}

asio::awaitable<void> PredictUnbatched(ServedMlp& m, int i,
                                       benchmark::State& state) {
  RunArgs args{.fetches = {m.probabilities, m.classes},
               .feeds = {{m.x, m.rows[i]}}};
  auto result = co_await m.session->Run(std::move(args), asio::use_awaitable);
  CheckedOk(state, result.status());
}

asio::awaitable<void> PredictBatched(ServedMlp& m, BatchingSession& batcher,
                                     int i, benchmark::State& state) {
  NamedTensors inputs{{"x", m.rows[i]}};
  auto result = co_await batcher.Run(std::move(inputs), RunOptions{},
                                     asio::use_awaitable);
  CheckedOk(state, result.status());
}

void BM_Serve_Unbatched(benchmark::State& state) {
  ServedMlp& m = Model();
  const int n = static_cast<int>(state.range(0));
  asio::io_context io;
  for (auto _ : state) {
    for (int i = 0; i < n; ++i) {
      asio::co_spawn(io, PredictUnbatched(m, i % kRequests, state),
                     asio::detached);
    }
    io.run();
    io.restart();
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_Serve_Unbatched)->Arg(kRequests)->UseRealTime();

void BM_Serve_Batched(benchmark::State& state) {
  ServedMlp& m = Model();
  const int n = static_cast<int>(state.range(0));
  auto batcher = MakeBatcher(m);
  asio::io_context io;
  for (auto _ : state) {
    for (int i = 0; i < n; ++i) {
      asio::co_spawn(io, PredictBatched(m, *batcher, i % kRequests, state),
                     asio::detached);
    }
    io.run();
    io.restart();
  }
  state.SetItemsProcessed(state.iterations() * n);
  const BatchingStats stats = batcher->stats();
  state.counters["mean_batch"] =
      static_cast<double>(stats.batched_requests) /
      static_cast<double>(std::max<int64_t>(stats.batches, 1));
}
BENCHMARK(BM_Serve_Batched)->Arg(kRequests)->UseRealTime();

void BM_Serve_BatcherOverhead(benchmark::State& state) {
  ServedMlp& m = Model();
  auto batcher = MakeBatcher(m);
  asio::io_context io;
  for (auto _ : state) {
    for (int i = 0; i < kRequests; ++i) {
      batcher->Run({{"x", m.rows[i]}}, {},
                   asio::bind_executor(io, [&state](BatchingSession::Result r) {
                     CheckedOk(state, r.status());
                   }));
    }
    io.run();
    io.restart();
  }
  state.SetItemsProcessed(state.iterations() * kRequests);
}
BENCHMARK(BM_Serve_BatcherOverhead)->UseRealTime();

void BM_Baseline_BatchedRun(benchmark::State& state) {
  ServedMlp& m = Model();
  asio::io_context io;
  const size_t row_bytes = kInputs * sizeof(float);
  for (auto _ : state) {
    Tensor batch =
        Tensor::Allocate(DType::kFloat, TensorShape{kRequests, kInputs});
    char* out = static_cast<char*>(batch.raw_data());
    for (int i = 0; i < kRequests; ++i) {
      std::memcpy(out + i * row_bytes, m.rows[i].raw_data(), row_bytes);
    }
    RunArgs args{.fetches = {m.probabilities, m.classes},
                 .feeds = {{m.x, std::move(batch)}}};
    m.session->Run(std::move(args),
                   asio::bind_executor(io, [&state](Session::RunResult r) {
                     CheckedOk(state, r.status());
                   }));
    io.run();
    io.restart();
  }
  state.SetItemsProcessed(state.iterations() * kRequests);
}
BENCHMARK(BM_Baseline_BatchedRun)->UseRealTime();

}  // namespace
}  // namespace cosession
