// Checkpoint write throughput: BM_CheckpointSave (64 MB of float variables
// through Saver::Save: fetch, safetensors layout, CRC-32C, write, fsync,
// rename, directory fsync, state file) against BM_Baseline_WriteFsync (the
// same bytes with one write() and one fsync() by hand, in the same
// directory). Both report bytes/s.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/use_awaitable.hpp>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "cosession/async/session.h"
#include "cosession/graph/ops.h"
#include "cosession/io/saver.h"

namespace cosession {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;

constexpr int kVariables = 16;
constexpr int64_t kFloatsPerVariable = 1 << 20;  // 4 MB each, 64 MB in all
constexpr int64_t kBytes = kVariables * kFloatsPerVariable * 4;

using bench::ScratchDir;

void BM_CheckpointSave(benchmark::State& state) {
  ScratchDir dir("checkpoint_bench");
  Graph g;
  GetOrCreateGlobalStep(g);
  for (int i = 0; i < kVariables; ++i) {
    ops::Variable(g,
                  ops::RandomUniform(g, TensorShape{kFloatsPerVariable},
                                     DType::kFloat, /*seed=*/i + 1),
                  absl::StrCat("w", i));
  }
  auto saver = Saver::Create(g, {.max_to_keep = 1});
  if (!saver.ok()) {
    state.SkipWithError(saver.status().ToString().c_str());
    return;
  }
  Runtime runtime;
  Session session(g, runtime);
  Operation init = GlobalVariablesInitializer(g);
  if (!session.RunBlocking({.targets = {init}}).ok()) {
    state.SkipWithError("init failed");
    return;
  }
  int64_t step = 0;
  for (auto _ : state) {
    absl::Status status;
    bench::RunCoroutine([&]() -> asio::awaitable<void> {
      auto saved = co_await (*saver)->Save(session, dir.path(), ++step);
      status = saved.status();
    }());
    if (!status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      return;
    }
  }
  state.SetBytesProcessed(state.iterations() * kBytes);
}
BENCHMARK(BM_CheckpointSave)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Baseline_WriteFsync(benchmark::State& state) {
  ScratchDir dir("checkpoint_bench");
  std::vector<char> bytes(kBytes, 1);
  const std::string path = absl::StrCat(dir.path(), "/baseline.bin");
  for (auto _ : state) {
    int fd =
        ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      state.SkipWithError("open failed");
      return;
    }
    ssize_t written = ::write(fd, bytes.data(), bytes.size());
    int synced = ::fsync(fd);
    ::close(fd);
    if (written != kBytes || synced != 0) {
      state.SkipWithError("write or fsync failed");
      return;
    }
  }
  state.SetBytesProcessed(state.iterations() * kBytes);
}
BENCHMARK(BM_Baseline_WriteFsync)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace cosession
