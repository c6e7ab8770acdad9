// cosession_train: trains a classifier on the UCI handwritten digits
// (data/digits.csv.gz, CC BY 4.0: see data/README.md) through
// MonitoredTrainingSession with the standard hooks, then prints the test-set
// accuracy on a line of its own: `test_accuracy=<value>`.
//
// The data: a seeded 80/20 train/test split of the 1,797 rows; training reads
// the train rows through the asynchronous input pipeline (shuffled each
// epoch, batched, prefetched by a coordinated task).
// The model: an MLP, 64-128-10 by default, trained with Adam.
// The hooks: a progress bar (plain lines when stdout is not a terminal),
// loss and accuracy logged every --log_every_n_steps, the step rate,
// checkpoints, TensorBoard summaries, a Chrome trace of one step every
// --profile_every_n_steps, and a NaN check of the loss.
//
// Files, in --checkpoint_dir (summaries in --summary_dir, default the same):
//   model.ckpt-<step>.safetensors, checkpoint   checkpoints (safetensors)
//   events.out.tfevents.*                       TensorBoard event files
//   timeline-<step>.json                        Chrome traces (Perfetto)
// Run it again with the same --checkpoint_dir and it resumes from the saved
// step (the input pipeline too, at the batch the saved step reached); raise
// --max_steps to train further.
//
//   cosession_train [--max_steps=2000] [--hidden_units=128] ...   (--help)
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "async/monitored_session.h"
#include "examples/mlp_classifier.h"
#include "graph/ops.h"
#include "graph/status.h"
#include "hooks/logging_tensor_hook.h"
#include "hooks/nan_tensor_hook.h"
#include "hooks/profiler_hook.h"
#include "hooks/progress_hook.h"
#include "pipeline/dataset.h"
#include "pipeline/dataset_iterator.h"
#include "training/dataset_hook.h"
#include "training/monitored_training_session.h"

ABSL_FLAG(std::string, data, COSESSION_DIGITS_CSV,
          "The digits CSV (plain or gzip): 64 pixel columns, then the label");
ABSL_FLAG(std::vector<std::string>, hidden_units, {"128"},
          "Sizes of the hidden layers, comma-separated (model size)");
ABSL_FLAG(std::string, optimizer, "adam", "adam, momentum or sgd");
ABSL_FLAG(double, learning_rate, 3e-3, "The optimizer's learning rate");
ABSL_FLAG(int64_t, max_steps, 2000, "Stop at this global step");
ABSL_FLAG(int64_t, batch_size, 32, "Examples per training step");
ABSL_FLAG(double, test_fraction, 0.2, "Fraction of the rows held out");
ABSL_FLAG(int64_t, seed, 42,
          "Seeds the split, the shuffling and the initial weights");
ABSL_FLAG(std::string, checkpoint_dir, "/tmp/cosession_train",
          "Checkpoints and traces; a second run resumes from it");
ABSL_FLAG(std::string, summary_dir, "",
          "TensorBoard event files; empty = --checkpoint_dir");
ABSL_FLAG(int64_t, log_every_n_steps, 200,
          "Log loss, accuracy and steps/s, and write summaries, this often");
ABSL_FLAG(int64_t, save_checkpoint_steps, 500, "Checkpoint this often");
ABSL_FLAG(int64_t, profile_every_n_steps, 1000,
          "Write a Chrome trace of one step this often");

namespace asio = boost::asio;
using namespace cosession;

namespace {

constexpr int64_t kDigitsColumns = 65;  // 8x8 pixels + the label
constexpr double kPixelScale = 1.0 / 16.0;

struct Flags {
  std::string data;
  MlpClassifierOptions model;
  int64_t max_steps;
  int64_t batch_size;
  double test_fraction;
  int64_t seed;
  std::string checkpoint_dir;
  std::string summary_dir;
  int64_t log_every_n_steps;
  int64_t save_checkpoint_steps;
  int64_t profile_every_n_steps;
};

absl::StatusOr<Flags> ReadFlags() {
  Flags f;
  f.data = absl::GetFlag(FLAGS_data);
  f.model.hidden_units.clear();
  for (const std::string& units : absl::GetFlag(FLAGS_hidden_units)) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(units, &n) || n < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--hidden_units: '", units, "' is not a positive integer"));
    }
    f.model.hidden_units.push_back(n);
  }
  f.model.num_classes = 10;
  f.model.input_scale = kPixelScale;
  f.model.optimizer = absl::GetFlag(FLAGS_optimizer);
  f.model.learning_rate = absl::GetFlag(FLAGS_learning_rate);
  f.max_steps = absl::GetFlag(FLAGS_max_steps);
  f.batch_size = absl::GetFlag(FLAGS_batch_size);
  f.test_fraction = absl::GetFlag(FLAGS_test_fraction);
  f.seed = absl::GetFlag(FLAGS_seed);
  f.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  f.summary_dir = absl::GetFlag(FLAGS_summary_dir);
  f.log_every_n_steps = absl::GetFlag(FLAGS_log_every_n_steps);
  f.save_checkpoint_steps = absl::GetFlag(FLAGS_save_checkpoint_steps);
  f.profile_every_n_steps = absl::GetFlag(FLAGS_profile_every_n_steps);
  auto positive = [](int64_t value, const char* flag) -> absl::Status {
    if (value >= 1) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " must be >= 1, got ", value));
  };
  COSESSION_RETURN_IF_ERROR(positive(f.max_steps, "max_steps"));
  COSESSION_RETURN_IF_ERROR(positive(f.batch_size, "batch_size"));
  COSESSION_RETURN_IF_ERROR(positive(f.log_every_n_steps, "log_every_n_steps"));
  COSESSION_RETURN_IF_ERROR(
      positive(f.save_checkpoint_steps, "save_checkpoint_steps"));
  COSESSION_RETURN_IF_ERROR(
      positive(f.profile_every_n_steps, "profile_every_n_steps"));
  if (!(f.test_fraction > 0 && f.test_fraction < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--test_fraction must be in (0, 1), got ", f.test_fraction));
  }
  if (f.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError("--checkpoint_dir must not be empty");
  }
  return f;
}

// The train rows' dataset, and the test rows as one batch. Reads the file
// here, before training starts: counting the rows needs it once.
struct Data {
  std::shared_ptr<const CsvDataset> train;
  DatasetBatch test;
  int64_t num_train = 0;
};

absl::StatusOr<Data> LoadData(const Flags& f) {
  CsvDatasetOptions all{.files = {f.data}, .num_columns = kDigitsColumns};
  COSESSION_ASSIGN_OR_RETURN(auto everything, CsvDataset::Create(all));
  COSESSION_ASSIGN_OR_RETURN(auto rows, everything->Load());
  COSESSION_ASSIGN_OR_RETURN(RowSplit split,
                             SeededRowSplit(rows->size(), 1.0 - f.test_fraction,
                                            static_cast<uint64_t>(f.seed)));
  Data data;
  data.num_train = static_cast<int64_t>(split.first.size());
  CsvDatasetOptions train = all;
  train.keep_rows = std::move(split.first);
  train.shuffle_seed = static_cast<uint64_t>(f.seed);
  train.batch_size = f.batch_size;
  train.num_epochs = -1;  // max_steps ends training
  COSESSION_ASSIGN_OR_RETURN(data.train, CsvDataset::Create(train));

  CsvDatasetOptions test = all;
  test.batch_size = static_cast<int64_t>(split.second.size());
  test.keep_rows = std::move(split.second);
  COSESSION_ASSIGN_OR_RETURN(auto test_dataset, CsvDataset::Create(test));
  COSESSION_ASSIGN_OR_RETURN(auto test_rows, test_dataset->Load());
  DatasetStream stream(test_dataset, test_rows, 0);
  COSESSION_ASSIGN_OR_RETURN(data.test, stream.Next());
  return data;
}

// Everything training needs, built before the first co_await (the status
// macros cannot return from a coroutine).
struct Setup {
  Data data;
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  DatasetOutputs batch;
  MlpClassifier model;
  std::shared_ptr<DatasetHook> input;
  MonitoredTrainingSessionOptions options;
};

absl::StatusOr<Setup> BuildTraining(const Flags& f) {
  Setup setup;
  COSESSION_ASSIGN_OR_RETURN(setup.data, LoadData(f));
  Graph& g = *setup.graph;
  g.set_seed(f.seed);
  try {
    setup.batch = DatasetIteratorGetNext(g, setup.data.train, "train_batch");
  } catch (const StatusError& e) {
    return e.status();
  }
  COSESSION_ASSIGN_OR_RETURN(
      setup.model,
      BuildMlpClassifier(g, setup.batch.features, setup.batch.labels, f.model));
  const MlpClassifier& model = setup.model;
  COSESSION_ASSIGN_OR_RETURN(
      setup.input, DatasetHook::Create({.get_next = setup.batch.features,
                                        .resume_from_global_step = true}));
  COSESSION_ASSIGN_OR_RETURN(
      auto progress,
      ProgressHook::Create({.last_step = f.max_steps,
                            .metrics = {model.loss, model.accuracy},
                            .every_n_secs = absl::Milliseconds(200)}));
  COSESSION_ASSIGN_OR_RETURN(
      auto logging,
      LoggingTensorHook::Create(
          {.tensors = {model.global_step, model.loss, model.accuracy},
           .every_n_iter = f.log_every_n_steps}));
  COSESSION_ASSIGN_OR_RETURN(auto nan,
                             NanTensorHook::Create({.loss = model.loss}));
  COSESSION_ASSIGN_OR_RETURN(
      auto profiler,
      ProfilerHook::Create({.save_steps = f.profile_every_n_steps,
                            .output_dir = f.checkpoint_dir}));

  MonitoredTrainingSessionOptions& options = setup.options;
  options.checkpoint_dir = f.checkpoint_dir;
  options.summary_dir = f.summary_dir;
  options.save_checkpoint_steps = f.save_checkpoint_steps;
  options.save_summaries_steps = f.log_every_n_steps;
  options.summary_scalars = {{"loss", model.loss},
                             {"accuracy", model.accuracy}};
  options.summary_histograms = {{"layer1/weights", model.weights.front()}};
  options.log_step_count_steps = f.log_every_n_steps;
  options.max_steps = f.max_steps;
  options.hooks = {setup.input, progress, logging, nan, profiler};
  return setup;
}

asio::awaitable<absl::Status> Train(Flags f) {
  absl::StatusOr<Setup> built = BuildTraining(f);
  if (!built.ok()) co_return built.status();
  Setup& setup = *built;
  Graph& g = *setup.graph;
  const Data& data = setup.data;
  const DatasetOutputs& batch = setup.batch;
  const MlpClassifier& model = setup.model;
  const std::shared_ptr<DatasetHook>& input = setup.input;
  MonitoredTrainingSessionOptions options = setup.options;
  auto created =
      co_await MonitoredTrainingSession(g, options, asio::use_awaitable);
  if (!created.ok()) co_return created.status();
  MonitoredSession& session = **created;
  // The input pipeline started at the restored global step (one batch per
  // step), so this is also where a resumed run picks up.
  std::printf("training on %lld rows, starting at global step %lld\n",
              static_cast<long long>(data.num_train),
              static_cast<long long>(input->last_start_batch()));
  std::fflush(stdout);

  const auto start = std::chrono::steady_clock::now();
  RunArgs step{.targets = {model.train}};
  absl::Status failure;
  while (!session.ShouldStop()) {
    auto ran = co_await session.Run(step, asio::use_awaitable);
    if (!ran.ok() && !absl::IsOutOfRange(ran.status())) {
      failure = ran.status();
      break;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();

  // Evaluate on the held-out rows: feeding the pipeline's outputs cuts the
  // graph there, so this run reads no training batch.
  RunArgs evaluate{.fetches = {model.accuracy, model.loss, model.global_step},
                   .feeds = {{batch.features, data.test.features},
                             {batch.labels, data.test.labels}}};
  auto evaluated =
      co_await session.raw_session().Run(evaluate, asio::use_awaitable);
  absl::Status closed = co_await session.Close(asio::use_awaitable);
  if (!failure.ok()) co_return failure;
  if (!closed.ok()) co_return closed;
  if (!evaluated.ok()) co_return evaluated.status();
  std::printf("stopped at global step %lld after %.2f s (%s)\n",
              static_cast<long long>((*evaluated)[2].scalar<int64_t>()),
              seconds, session.stop_reason().c_str());
  std::printf("test_loss=%.4f\n", (*evaluated)[1].scalar<float>());
  std::printf("test_accuracy=%.4f\n", (*evaluated)[0].scalar<float>());
  std::printf(
      "checkpoints and Chrome traces (timeline-<step>.json) are in %s; "
      "TensorBoard event files in %s\n",
      f.checkpoint_dir.c_str(),
      (f.summary_dir.empty() ? f.checkpoint_dir : f.summary_dir).c_str());
  co_return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Trains an MLP on the UCI handwritten digits with cosession's "
      "MonitoredTrainingSession; prints test_accuracy=<value>.");
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<Flags> flags = ReadFlags();
  if (!flags.ok()) {
    std::fprintf(stderr, "cosession_train: %s\n",
                 flags.status().ToString().c_str());
    return 2;
  }
  asio::io_context io;
  absl::Status result = absl::InternalError("training did not finish");
  asio::co_spawn(io, Train(*std::move(flags)),
                 [&](std::exception_ptr e, absl::Status status) {
                   result = e ? absl::InternalError("training threw")
                              : std::move(status);
                 });
  io.run();
  if (!result.ok()) {
    std::fprintf(stderr, "cosession_train: %s\n", result.ToString().c_str());
    return 1;
  }
  return 0;
}
