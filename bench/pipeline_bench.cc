// The input pipeline's cost, each against a hand-written baseline doing the
// same work without the pipeline:
//   BM_Pipeline_Stages / BM_Baseline_PipelineLoop   Range -> Map identity ->
//       Batch(32) -> Prefetch(2), elements/s (the per-element overhead);
//       BM_Pipeline_StagesWithoutPrefetch, the chain without its Prefetch
//       (what the hand-off between threads costs is the difference)
//   BM_Pipeline_CsvFile/<parallelism> / BM_Baseline_CsvParse   the digits
//       CSV (gzip) read, parsed and batched, rows/s
//   BM_Pipeline_Socket / BM_Baseline_SocketRead   the digits rows over
//       loopback TCP, parsed and batched, rows/s
//   BM_Train_FromPipeline / BM_Train_FromFeeds   the digits MLP step fed by
//       the pipeline against the same step fed the same batches by
//       placeholders (the input never stalls the step)
#include <benchmark/benchmark.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <charconv>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "cosession/async/coordinator.h"
#include "cosession/async/monitored_session.h"
#include "cosession/async/runtime.h"
#include "cosession/graph/ops.h"
#include "cosession/io/csv_reader.h"
#include "cosession/io/line_file_reader.h"
#include "cosession/pipeline/csv_rows.h"
#include "cosession/pipeline/dataset.h"
#include "cosession/pipeline/dataset_iterator.h"
#include "cosession/pipeline/stream_source.h"
#include "cosession/training/dataset_hook.h"
#include "examples/mlp_classifier.h"

namespace cosession {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

constexpr char kDigits[] = COSESSION_DIGITS_CSV;
constexpr int64_t kDigitsColumns = 65;
constexpr int64_t kBatch = 32;

// Drains `dataset`, counting its elements' leading dimension (rows).
asio::awaitable<int64_t> DrainRows(Dataset dataset, Coordinator* coordinator,
                                   benchmark::State* state) {
  auto it = dataset.MakeIterator(
      {.pool = Runtime::Default().executor(), .coordinator = coordinator});
  if (!it.ok()) {
    state->SkipWithError(it.status().ToString().c_str());
    co_return 0;
  }
  int64_t rows = 0;
  while (true) {
    ElementIterator::Result next = co_await NextOf(**it);
    if (!next.ok()) {
      state->SkipWithError(next.status().ToString().c_str());
      co_return rows;
    }
    if (!next->has_value()) co_return rows;
    rows += (*next)->tensor(0).shape().dim_size(0);
  }
}

// ---- Stages

constexpr int64_t kStageElements = 32 * 1024;

asio::awaitable<void> PipelineStages(benchmark::State& state, bool prefetch) {
  asio::any_io_executor loop = co_await asio::this_coro::executor;
  Coordinator coordinator(loop);
  Dataset chain =
      Dataset::Range(kStageElements)
          .Map([](Element e) -> absl::StatusOr<Element> { return e; },
               {.output_spec =
                    ElementSpec{ComponentSpec::Scalar(DType::kInt64)}})
          .Batch(kBatch);
  if (prefetch) chain = chain.Prefetch(2);
  for (auto _ : state) {
    int64_t rows = co_await DrainRows(chain, &coordinator, &state);
    benchmark::DoNotOptimize(rows);
  }
  state.SetItemsProcessed(state.iterations() * kStageElements);
  coordinator.RequestStop().IgnoreError();
  (void)co_await coordinator.Join(std::chrono::seconds(10),
                                  asio::use_awaitable);
}

void BM_Pipeline_Stages(benchmark::State& state) {
  bench::RunCoroutine(PipelineStages(state, /*prefetch=*/true));
}
BENCHMARK(BM_Pipeline_Stages)->UseRealTime();

// The same chain without its Prefetch, drained on the caller's thread: the
// stages' own cost, without the hand-off of batches between two threads.
void BM_Pipeline_StagesWithoutPrefetch(benchmark::State& state) {
  bench::RunCoroutine(PipelineStages(state, /*prefetch=*/false));
}
BENCHMARK(BM_Pipeline_StagesWithoutPrefetch)->UseRealTime();

// The same elements made, passed through a function and stacked 32 at a
// time into batch tensors, in a loop.
void BM_Baseline_PipelineLoop(benchmark::State& state) {
  for (auto _ : state) {
    int64_t rows = 0;
    for (int64_t begin = 0; begin < kStageElements; begin += kBatch) {
      const int64_t n = std::min(kBatch, kStageElements - begin);
      Tensor batch = Tensor::Allocate(DType::kInt64, TensorShape{n});
      absl::Span<int64_t> out = batch.mutable_flat<int64_t>();
      for (int64_t i = 0; i < n; ++i) {
        Tensor element = Tensor::Scalar<int64_t>(begin + i);
        benchmark::DoNotOptimize(element);
        out[i] = element.flat<int64_t>()[0];
      }
      benchmark::DoNotOptimize(batch);
      rows += n;
    }
    benchmark::DoNotOptimize(rows);
  }
  state.SetItemsProcessed(state.iterations() * kStageElements);
}
BENCHMARK(BM_Baseline_PipelineLoop)->UseRealTime();

// ---- The digits CSV file

Dataset DigitsRows(Dataset lines, int64_t parallelism) {
  return CsvRows(std::move(lines),
                 {.num_columns = kDigitsColumns, .parallelism = parallelism})
      .Batch(kBatch);
}

asio::awaitable<void> PipelineCsvFile(benchmark::State& state) {
  Dataset rows = DigitsRows(Dataset::TextLines({kDigits}), state.range(0));
  int64_t total = 0;
  for (auto _ : state) total += co_await DrainRows(rows, nullptr, &state);
  state.SetItemsProcessed(total);
}

void BM_Pipeline_CsvFile(benchmark::State& state) {
  bench::RunCoroutine(PipelineCsvFile(state));
}
BENCHMARK(BM_Pipeline_CsvFile)->Arg(1)->Arg(2)->UseRealTime();

// Parses one line of numbers into `features` (all but the last) and the
// label, by hand.
bool ParseDigitsLine(absl::string_view line, float* features, int32_t& label) {
  const char* p = line.data();
  const char* end = p + line.size();
  for (int64_t c = 0; c < kDigitsColumns; ++c) {
    double value = 0;
    auto [next, ec] = std::from_chars(p, end, value);
    if (ec != std::errc()) return false;
    if (c + 1 < kDigitsColumns) {
      features[c] = static_cast<float>(value);
    } else {
      label = static_cast<int32_t>(value);
    }
    p = next;
    if (p < end && *p == ',') ++p;
  }
  return true;
}

// Batches of parsed lines, built by hand.
class HandBatcher {
 public:
  void Add(absl::string_view line) {
    if (line.empty()) return;
    if (n_ == 0) {
      features_ = Tensor::Allocate(DType::kFloat,
                                   TensorShape{kBatch, kDigitsColumns - 1});
      labels_ = Tensor::Allocate(DType::kInt32, TensorShape{kBatch});
    }
    float* f =
        features_.mutable_flat<float>().data() + n_ * (kDigitsColumns - 1);
    if (!ParseDigitsLine(line, f, labels_.mutable_flat<int32_t>()[n_])) return;
    ++rows_;
    if (++n_ == kBatch) Flush();
  }
  void Flush() {
    benchmark::DoNotOptimize(features_);
    benchmark::DoNotOptimize(labels_);
    n_ = 0;
  }
  int64_t rows() const { return rows_; }

 private:
  Tensor features_;
  Tensor labels_;
  int64_t n_ = 0;
  int64_t rows_ = 0;
};

void BM_Baseline_CsvParse(benchmark::State& state) {
  int64_t total = 0;
  for (auto _ : state) {
    auto reader = LineFileReader::Open(kDigits);
    if (!reader.ok()) {
      state.SkipWithError(reader.status().ToString().c_str());
      return;
    }
    HandBatcher batcher;
    while (true) {
      absl::StatusOr<LineFileReader::Line> line = (*reader)->NextBuffered();
      if (!line.ok()) break;
      if (line->state == LineFileReader::State::kEnd) break;
      if (line->state == LineFileReader::State::kNeedsRead) {
        if (!(*reader)->ReadChunk().ok()) break;
        continue;
      }
      batcher.Add(line->text);
    }
    batcher.Flush();
    total += batcher.rows();
  }
  state.SetItemsProcessed(total);
}
BENCHMARK(BM_Baseline_CsvParse)->UseRealTime();

// ---- Loopback TCP

// The digits rows as text, 4 times over (about 1 MB).
const std::string& DigitsText() {
  static const std::string text = [] {
    absl::StatusOr<std::string> once = ReadMaybeGzipFile(kDigits);
    std::string all;
    for (int i = 0; i < 4 && once.ok(); ++i) all += *once;
    return all;
  }();
  return text;
}

// Writes the text into a connected socket from a thread of its own and
// closes it: the sender both benchmarks share.
std::thread Sender(int fd) {
  return std::thread([fd] {
    const std::string& text = DigitsText();
    size_t sent = 0;
    while (sent < text.size()) {
      const ssize_t n = ::write(fd, text.data() + sent, text.size() - sent);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    ::close(fd);
  });
}

asio::awaitable<void> PipelineSocket(benchmark::State& state) {
  auto executor = co_await asio::this_coro::executor;
  tcp::acceptor acceptor(executor, {asio::ip::address_v4::loopback(), 0});
  int64_t total = 0;
  for (auto _ : state) {
    tcp::socket writer(executor);
    writer.connect(acceptor.local_endpoint());
    auto reader = std::make_shared<tcp::socket>(executor);
    co_await acceptor.async_accept(*reader, asio::use_awaitable);
    std::thread sender = Sender(writer.release());
    Dataset rows = DigitsRows(ReadLines(reader, {.name = "loopback"}), 1);
    total += co_await DrainRows(rows, nullptr, &state);
    sender.join();
  }
  state.SetItemsProcessed(total);
}

void BM_Pipeline_Socket(benchmark::State& state) {
  bench::RunCoroutine(PipelineSocket(state));
}
BENCHMARK(BM_Pipeline_Socket)->UseRealTime();

// The same bytes read with blocking reads and parsed by hand.
void BM_Baseline_SocketRead(benchmark::State& state) {
  asio::io_context io;
  tcp::acceptor acceptor(io, {asio::ip::address_v4::loopback(), 0});
  int64_t total = 0;
  std::string buffer(1 << 16, '\0');
  for (auto _ : state) {
    tcp::socket writer(io);
    writer.connect(acceptor.local_endpoint());
    tcp::socket reader = acceptor.accept();
    std::thread sender = Sender(writer.release());
    HandBatcher batcher;
    std::string pending;
    while (true) {
      boost::system::error_code ec;
      const size_t n = reader.read_some(asio::buffer(buffer), ec);
      if (ec) break;
      pending.append(buffer.data(), n);
      size_t start = 0;
      for (size_t eol; (eol = pending.find('\n', start)) != std::string::npos;
           start = eol + 1) {
        batcher.Add(absl::string_view(pending).substr(start, eol - start));
      }
      pending.erase(0, start);
    }
    if (!pending.empty()) batcher.Add(pending);
    batcher.Flush();
    total += batcher.rows();
    sender.join();
  }
  state.SetItemsProcessed(total);
}
BENCHMARK(BM_Baseline_SocketRead)->UseRealTime();

// ---- Training fed by the pipeline or by placeholders

struct DigitsTensors {
  Tensor x;  // float [N, 64]
  Tensor y;  // int32 [N]
};

const DigitsTensors& Digits() {
  static const DigitsTensors digits = [] {
    DigitsTensors d;
    absl::StatusOr<CsvTable> table =
        ReadCsvFile(kDigits, {.num_columns = kDigitsColumns});
    if (!table.ok()) return d;
    const int64_t n = table->num_rows();
    d.x = Tensor::Allocate(DType::kFloat, TensorShape{n, kDigitsColumns - 1});
    d.y = Tensor::Allocate(DType::kInt32, TensorShape{n});
    for (int64_t r = 0; r < n; ++r) {
      absl::Span<const double> row = table->row(r);
      for (int64_t c = 0; c + 1 < kDigitsColumns; ++c) {
        d.x.mutable_flat<float>()[r * (kDigitsColumns - 1) + c] =
            static_cast<float>(row[c]);
      }
      d.y.mutable_flat<int32_t>()[r] = static_cast<int32_t>(row.back());
    }
    return d;
  }();
  return digits;
}

// The batches FromTensorSlices(...).Batch(32) yields, made by hand.
std::vector<std::pair<Tensor, Tensor>> DigitsBatches() {
  const DigitsTensors& d = Digits();
  const int64_t n = d.y.shape().dim_size(0);
  const int64_t f = kDigitsColumns - 1;
  std::vector<std::pair<Tensor, Tensor>> batches;
  for (int64_t begin = 0; begin + kBatch <= n; begin += kBatch) {
    Tensor x = Tensor::Allocate(DType::kFloat, TensorShape{kBatch, f});
    Tensor y = Tensor::Allocate(DType::kInt32, TensorShape{kBatch});
    std::copy_n(d.x.flat<float>().data() + begin * f, kBatch * f,
                x.mutable_flat<float>().data());
    std::copy_n(d.y.flat<int32_t>().data() + begin, kBatch,
                y.mutable_flat<int32_t>().data());
    batches.emplace_back(std::move(x), std::move(y));
  }
  return batches;
}

MlpClassifierOptions DigitsModel() {
  return {.hidden_units = {128},
          .input_scale = 1.0 / 16,
          .optimizer = "sgd",
          .learning_rate = 0.01};
}

asio::awaitable<void> TrainFromPipeline(benchmark::State& state) {
  Graph g;
  g.set_seed(42);
  const DigitsTensors& d = Digits();
  std::vector<Tensor> columns{d.x, d.y};
  std::vector<Output> xy = IteratorGetNext(
      g, Dataset::FromTensorSlices(columns).Batch(kBatch, true).Repeat(),
      "batch");
  auto model = BuildMlpClassifier(g, xy[0], xy[1], DigitsModel());
  auto hook = DatasetHook::Create({.get_next = xy[0]});
  if (!model.ok() || !hook.ok()) {
    state.SkipWithError("building the model failed");
    co_return;
  }
  MonitoredSession::Hooks hooks{*hook};
  MonitoredSessionOptions options;
  auto created = co_await MonitoredSession::Create(
      g, hooks, std::make_shared<ChiefSessionCreator>(), options,
      asio::use_awaitable);
  if (!created.ok()) {
    state.SkipWithError(created.status().ToString().c_str());
    co_return;
  }
  MonitoredSession& session = **created;
  RunArgs step{.targets = {model->train}};
  for (auto _ : state) {
    auto ran = co_await session.Run(step, asio::use_awaitable);
    if (!ran.ok()) {
      state.SkipWithError(ran.status().ToString().c_str());
      break;
    }
  }
  (void)co_await session.Close(asio::use_awaitable);
}

void BM_Train_FromPipeline(benchmark::State& state) {
  bench::RunCoroutine(TrainFromPipeline(state));
}
BENCHMARK(BM_Train_FromPipeline)->UseRealTime();

asio::awaitable<void> TrainFromFeeds(benchmark::State& state) {
  Graph g;
  g.set_seed(42);
  Output x = ops::Placeholder(g, DType::kFloat,
                              TensorShape{kBatch, kDigitsColumns - 1}, "x");
  Output y = ops::Placeholder(g, DType::kInt32, TensorShape{kBatch}, "y");
  auto model = BuildMlpClassifier(g, x, y, DigitsModel());
  if (!model.ok()) {
    state.SkipWithError(model.status().ToString().c_str());
    co_return;
  }
  MonitoredSession::Hooks no_hooks;
  MonitoredSessionOptions options;
  auto created = co_await MonitoredSession::Create(
      g, no_hooks, std::make_shared<ChiefSessionCreator>(), options,
      asio::use_awaitable);
  if (!created.ok()) {
    state.SkipWithError(created.status().ToString().c_str());
    co_return;
  }
  MonitoredSession& session = **created;
  const std::vector<std::pair<Tensor, Tensor>> batches = DigitsBatches();
  size_t next = 0;
  for (auto _ : state) {
    RunArgs step{
        .targets = {model->train},
        .feeds = {{x, batches[next].first}, {y, batches[next].second}}};
    next = (next + 1) % batches.size();
    auto ran = co_await session.Run(step, asio::use_awaitable);
    if (!ran.ok()) {
      state.SkipWithError(ran.status().ToString().c_str());
      break;
    }
  }
  (void)co_await session.Close(asio::use_awaitable);
}

void BM_Train_FromFeeds(benchmark::State& state) {
  bench::RunCoroutine(TrainFromFeeds(state));
}
BENCHMARK(BM_Train_FromFeeds)->UseRealTime();

}  // namespace
}  // namespace cosession
