// cosession_train: trains a classifier on the UCI handwritten digits
// (data/digits.csv.gz, CC BY 4.0: see data/README.md) through
// MonitoredTrainingSession with the standard hooks, then prints the test-set
// accuracy on a line of its own: `test_accuracy=<value>`.
//
// The data: a seeded 80/20 train/test split of the 1,797 rows; training reads
// the train rows through the asynchronous input pipeline (shuffled each
// epoch, batched, prefetched by a coordinated task). With
// --data=tcp://HOST:PORT it trains on the CSV rows read from that
// connection (pipeline/stream_source.h), on the program's event loop,
// until the peer closes it or --max_steps; test_accuracy is then measured
// on --eval_data (default: the shipped digits' held-out split).
//   zcat data/digits.csv.gz | nc -l -p 5000 &
//   cosession_train --data=tcp://127.0.0.1:5000
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
// and with --export_dir, the model for serving (serving/saved_model.h):
//   <export_dir>/<global step>/model.json, variables.safetensors
// Run it again with the same --checkpoint_dir and it resumes from the saved
// step (the input pipeline too, at the batch the checkpoint saved); raise
// --max_steps to train further (a run that starts at --max_steps or past
// it trains no step, as Estimator.train skips training then).
//
// Ctrl-C or SIGTERM stops it cleanly: the step loop ends, every hook's End
// runs (a final checkpoint), and it exits with 130 or 143; a second Ctrl-C
// exits at once. A bad flag value exits with 2 and a message naming the
// flag. The progress bar and the log lines share the terminal through one
// Console (io/console.h), which redraws the bar below each log line and on
// resize.
//
//   cosession_train [--max_steps=2000] [--hidden_units=128] ...   (--help)
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "cosession/async/monitored_session.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/status.h"
#include "cosession/hooks/logging_tensor_hook.h"
#include "cosession/hooks/nan_tensor_hook.h"
#include "cosession/hooks/profiler_hook.h"
#include "cosession/hooks/progress_hook.h"
#include "cosession/io/console.h"
#include "cosession/pipeline/csv_dataset.h"
#include "cosession/pipeline/csv_rows.h"
#include "cosession/pipeline/dataset_iterator.h"
#include "cosession/pipeline/stream_source.h"
#include "cosession/serving/saved_model.h"
#include "cosession/training/dataset_hook.h"
#include "cosession/training/monitored_training_session.h"
#include "cosession/training/stop_on_signals.h"
#include "examples/flags_usage.h"
#include "examples/mlp_classifier.h"
#include "examples/strict_flags.h"

ABSL_FLAG(std::string, data, COSESSION_DIGITS_CSV,
          "The digits CSV (plain or gzip): 64 pixel columns, then the label; "
          "or tcp://HOST:PORT to train on the rows read from that connection "
          "until the peer closes it");
ABSL_FLAG(std::string, eval_data, "",
          "With --data=tcp://...: the CSV to measure test_accuracy on "
          "(empty = the held-out split of the shipped digits)");
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
ABSL_FLAG(std::string, export_dir, "",
          "After training, export the model for serving to "
          "<export_dir>/<global step>/ (signature serving_default: input x, "
          "outputs probabilities and classes; and classification, for "
          ":classify); empty = no export");
ABSL_FLAG(int64_t, max_timelines, 5,
          "Keep only the newest this many Chrome traces in --checkpoint_dir "
          "(0 = all)");

namespace asio = boost::asio;
using namespace cosession;

namespace {

constexpr int64_t kDigitsColumns = 65;  // 8x8 pixels + the label
constexpr int64_t kNumClasses = 10;
constexpr double kPixelScale = 1.0 / 16.0;

struct Flags {
  std::string data;
  // Set when --data=tcp://HOST:PORT.
  std::string tcp_host;
  uint16_t tcp_port = 0;
  std::string eval_data;
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
  int64_t max_timelines;
  std::string export_dir;
};

// A flag's bad value: the program's usage error (exit code 2).
absl::Status FlagError(absl::string_view flag, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", problem));
}

absl::StatusOr<Flags> ReadFlags() {
  Flags f;
  f.data = absl::GetFlag(FLAGS_data);
  f.model.hidden_units.clear();
  for (const std::string& units : absl::GetFlag(FLAGS_hidden_units)) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(units, &n) || n < 1) {
      return FlagError("hidden_units",
                       absl::StrCat("'", units, "' is not a positive integer"));
    }
    f.model.hidden_units.push_back(n);
  }
  f.model.num_classes = kNumClasses;
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
  f.max_timelines = absl::GetFlag(FLAGS_max_timelines);
  f.export_dir = absl::GetFlag(FLAGS_export_dir);
  auto positive = [](int64_t value, const char* flag) -> absl::Status {
    if (value >= 1) return absl::OkStatus();
    return FlagError(flag, absl::StrCat("must be >= 1, got ", value));
  };
  if (f.model.hidden_units.empty()) {
    return FlagError("hidden_units", "lists no layer");
  }
  if (f.model.optimizer != "adam" && f.model.optimizer != "momentum" &&
      f.model.optimizer != "sgd") {
    return FlagError("optimizer",
                     absl::StrCat("'", f.model.optimizer,
                                  "' is none of adam, momentum, sgd"));
  }
  if (!std::isfinite(f.model.learning_rate) || f.model.learning_rate <= 0) {
    return FlagError("learning_rate",
                     absl::StrCat("must be a finite number > 0, got ",
                                  f.model.learning_rate));
  }
  if (f.max_timelines < 0) {
    return FlagError("max_timelines",
                     absl::StrCat("must be >= 0, got ", f.max_timelines));
  }
  f.eval_data = absl::GetFlag(FLAGS_eval_data);
  if (absl::string_view address = f.data;
      absl::ConsumePrefix(&address, "tcp://")) {
    const size_t colon = address.rfind(':');
    int port = 0;
    if (colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 ||
        port > 65535) {
      return FlagError("data",
                       absl::StrCat("'", f.data, "' is not tcp://HOST:PORT"));
    }
    f.tcp_host = std::string(address.substr(0, colon));
    f.tcp_port = static_cast<uint16_t>(port);
  } else if (::access(f.data.c_str(), R_OK) != 0) {
    return FlagError("data", absl::StrCat("cannot read '", f.data,
                                          "': ", std::strerror(errno)));
  }
  if (!f.eval_data.empty() && ::access(f.eval_data.c_str(), R_OK) != 0) {
    return FlagError("eval_data", absl::StrCat("cannot read '", f.eval_data,
                                               "': ", std::strerror(errno)));
  }
  COSESSION_RETURN_IF_ERROR(positive(f.max_steps, "max_steps"));
  COSESSION_RETURN_IF_ERROR(positive(f.batch_size, "batch_size"));
  COSESSION_RETURN_IF_ERROR(positive(f.log_every_n_steps, "log_every_n_steps"));
  COSESSION_RETURN_IF_ERROR(
      positive(f.save_checkpoint_steps, "save_checkpoint_steps"));
  COSESSION_RETURN_IF_ERROR(
      positive(f.profile_every_n_steps, "profile_every_n_steps"));
  if (!(f.test_fraction > 0 && f.test_fraction < 1)) {
    return FlagError("test_fraction",
                     absl::StrCat("must be in (0, 1), got ", f.test_fraction));
  }
  if (f.checkpoint_dir.empty()) {
    return FlagError("checkpoint_dir", "must not be empty");
  }
  return f;
}

// The train batches' dataset, and the test rows as one batch. Reads the
// file here, before training starts: counting the rows needs it once.
struct Data {
  Dataset train;
  DatasetBatch test;
  // What training reads, for the log: "1438 rows", "tcp host:port".
  std::string source;
};

// The held-out split of `file` (or, with `all_rows`, every row) as one
// batch; every row is checked, so a label out of range names its file and
// line before training starts.
absl::StatusOr<DatasetBatch> LoadTestBatch(const std::string& file,
                                           bool all_rows, const Flags& f) {
  CsvDatasetOptions all{.files = {file},
                        .num_columns = kDigitsColumns,
                        .num_classes = kNumClasses};
  COSESSION_ASSIGN_OR_RETURN(auto everything, CsvDataset::Create(all));
  COSESSION_ASSIGN_OR_RETURN(auto rows, everything->Load());
  CsvDatasetOptions test = all;
  if (!all_rows) {
    COSESSION_ASSIGN_OR_RETURN(
        RowSplit split, SeededRowSplit(rows->size(), 1.0 - f.test_fraction,
                                       static_cast<uint64_t>(f.seed)));
    test.keep_rows = std::move(split.second);
  }
  COSESSION_ASSIGN_OR_RETURN(auto test_dataset, CsvDataset::Create(test));
  return test_dataset->LoadBatch();
}

absl::StatusOr<Data> LoadData(const Flags& f) {
  if (!f.tcp_host.empty()) {
    Data data;
    data.source = absl::StrCat("rows from tcp ", f.tcp_host, ":", f.tcp_port);
    // Rows as they arrive, parsed and batched; the stream ends when the
    // peer closes the connection.
    data.train =
        CsvRows(TcpLines(f.tcp_host, f.tcp_port),
                {.num_columns = kDigitsColumns, .num_classes = kNumClasses})
            .Batch(f.batch_size);
    const bool shipped = f.eval_data.empty();
    COSESSION_ASSIGN_OR_RETURN(
        data.test,
        LoadTestBatch(shipped ? std::string(COSESSION_DIGITS_CSV) : f.eval_data,
                      /*all_rows=*/!shipped, f));
    return data;
  }
  // Every row is checked here, the held-out ones too, before training:
  // a label out of range names its file and line.
  CsvDatasetOptions all{.files = {f.data},
                        .num_columns = kDigitsColumns,
                        .num_classes = kNumClasses};
  COSESSION_ASSIGN_OR_RETURN(auto everything, CsvDataset::Create(all));
  COSESSION_ASSIGN_OR_RETURN(auto rows, everything->Load());
  COSESSION_ASSIGN_OR_RETURN(RowSplit split,
                             SeededRowSplit(rows->size(), 1.0 - f.test_fraction,
                                            static_cast<uint64_t>(f.seed)));
  Data data;
  data.source = absl::StrCat(split.first.size(), " rows");
  CsvDatasetOptions train = all;
  train.keep_rows = std::move(split.first);
  train.shuffle_seed = static_cast<uint64_t>(f.seed);
  train.batch_size = f.batch_size;
  train.num_epochs = -1;  // max_steps ends training
  COSESSION_ASSIGN_OR_RETURN(auto train_dataset, CsvDataset::Create(train));
  data.train = CsvBatches(std::move(train_dataset));

  CsvDatasetOptions test = all;
  test.keep_rows = std::move(split.second);
  COSESSION_ASSIGN_OR_RETURN(auto test_dataset, CsvDataset::Create(test));
  COSESSION_ASSIGN_OR_RETURN(data.test, test_dataset->LoadBatch());
  return data;
}

// Everything training needs, built before the first co_await (the status
// macros cannot return from a coroutine).
struct Setup {
  Data data;
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  DatasetOutputs batch;
  MlpClassifier model;
  Output probabilities;  // softmax of the logits, for the exported model
  Output class_labels;   // int64 [batch, classes]: 0..classes-1 in each row
  std::shared_ptr<DatasetHook> input;
  MonitoredTrainingSessionOptions options;
};

absl::StatusOr<Setup> BuildTraining(const Flags& f) {
  Setup setup;
  COSESSION_ASSIGN_OR_RETURN(setup.data, LoadData(f));
  Graph& g = *setup.graph;
  g.set_seed(f.seed);
  try {
    std::vector<Output> batch =
        IteratorGetNext(g, setup.data.train, "train_batch", /*buffer_size=*/2);
    setup.batch = {.features = batch[0], .labels = batch[1]};
  } catch (const StatusError& e) {
    return e.status();
  }
  COSESSION_ASSIGN_OR_RETURN(
      setup.model,
      BuildMlpClassifier(g, setup.batch.features, setup.batch.labels, f.model));
  const MlpClassifier& model = setup.model;
  try {
    setup.probabilities = ops::Softmax(g, model.logits, "probabilities");
    // The classification signature's "classes": every label, each row
    // beside its scores (a [classes] constant broadcast to the batch).
    const int64_t classes = f.model.num_classes;
    std::vector<int64_t> labels(classes);
    for (int64_t c = 0; c < classes; ++c) labels[c] = c;
    setup.class_labels = ops::Add(
        g, ops::ZerosLike(g, ops::Cast(g, setup.probabilities, DType::kInt64)),
        ops::Const(g,
                   Tensor::FromVector<int64_t>(labels, TensorShape{classes})),
        "class_labels");
  } catch (const StatusError& e) {
    return e.status();
  }
  COSESSION_ASSIGN_OR_RETURN(
      setup.input, DatasetHook::Create({.get_next = setup.batch.features,
                                        .resume_from_checkpoint = true}));
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
      auto profiler, ProfilerHook::Create(
                         {.save_steps = f.profile_every_n_steps,
                          .output_dir = f.checkpoint_dir,
                          .max_timelines = static_cast<int>(f.max_timelines)}));

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

// Prints a line of the program's own through the Console, so that it lands
// above the progress bar.
void Say(const std::string& line) {
  Console::Stdout().Log(line, Console::kStdout);
}

// What a signal asks of the running training: the session to stop (set
// once the session exists; a signal that came before stops it at once).
struct Interrupt {
  MonitoredSession* session = nullptr;
  int signal = 0;
  void Stop() {
    if (session == nullptr || signal == 0) return;
    session->coordinator()
        .RequestStop(absl::OkStatus(),
                     absl::StrCat("interrupted by ", strsignal(signal)))
        .IgnoreError();
  }
};

asio::awaitable<absl::Status> Train(Flags f, Interrupt* interrupt) {
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
  interrupt->session = &session;
  interrupt->Stop();  // a signal that came while the session was created
  // The input pipeline started at the batch the restored checkpoint
  // reached, so this is also where a resumed run picks up.
  Say(absl::StrFormat("training on %s, starting at batch %d", data.source,
                      input->last_start_batch()));

  // A run resumed at --max_steps or past it trains no further, as
  // Estimator.train skips training then: the stop-at-step hook, like
  // TensorFlow's, would run one step before it stops.
  RunArgs read_step{.fetches = {model.global_step}};
  auto restored =
      co_await session.raw_session().Run(read_step, asio::use_awaitable);
  if (!restored.ok()) co_return restored.status();
  const int64_t restored_step = (*restored)[0].scalar<int64_t>();
  const bool trained_already = restored_step >= f.max_steps;
  if (trained_already) {
    Say(
        absl::StrFormat("skipping training: the checkpoint in %s is at global "
                        "step %d, --max_steps=%d reached",
                        f.checkpoint_dir, restored_step, f.max_steps));
  }

  const auto start = std::chrono::steady_clock::now();
  RunArgs step{.targets = {model.train}};
  absl::Status failure;
  while (!trained_already && !session.ShouldStop()) {
    auto ran = co_await session.Run(step, asio::use_awaitable);
    if (!ran.ok() && !absl::IsOutOfRange(ran.status()) &&
        !(absl::IsCancelled(ran.status()) && interrupt->signal != 0)) {
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
  // The export reads the variables as training left them, before Close
  // (whose final checkpoint holds the same values).
  absl::StatusOr<std::string> exported;
  if (!f.export_dir.empty() && failure.ok() && evaluated.ok()) {
    std::map<std::string, ExportSignature> signatures{
        {kDefaultServingSignature,
         {.inputs = {{"x", batch.features}},
          .outputs = {{"probabilities", setup.probabilities},
                      {"classes", model.predictions}}}},
        // For :classify: every digit with its probability.
        {"classification",
         {.inputs = {{"x", batch.features}},
          .outputs = {{"classes", setup.class_labels},
                      {"scores", setup.probabilities}},
          .method_name = kClassifyMethodName}}};
    exported = co_await ExportSavedModel(session.raw_session(),
                                         std::move(signatures), f.export_dir,
                                         (*evaluated)[2].scalar<int64_t>());
  }
  absl::Status closed = co_await session.Close(asio::use_awaitable);
  interrupt->session = nullptr;
  if (!failure.ok()) co_return failure;
  if (!closed.ok()) co_return closed;
  if (!evaluated.ok()) co_return evaluated.status();
  if (!f.export_dir.empty()) {
    if (exported.ok()) {
      Say(absl::StrCat("exported the model for serving to ", *exported));
    } else if (absl::IsAlreadyExists(exported.status())) {
      // A rerun that trained no further: the version is already there.
      Say(absl::StrCat("not exported: ", exported.status().message()));
    } else {
      co_return exported.status();
    }
  }
  Say(absl::StrFormat("stopped at global step %d after %.2f s (%s)",
                      (*evaluated)[2].scalar<int64_t>(), seconds,
                      session.stop_reason()));
  Say(absl::StrFormat("test_loss=%.4f", (*evaluated)[1].scalar<float>()));
  Say(absl::StrFormat("test_accuracy=%.4f", (*evaluated)[0].scalar<float>()));
  Say(absl::StrFormat(
      "checkpoints and Chrome traces (timeline-<step>.json) are in %s; "
      "TensorBoard event files in %s",
      f.checkpoint_dir,
      f.summary_dir.empty() ? f.checkpoint_dir : f.summary_dir));
  co_return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Trains an MLP on the UCI handwritten digits with cosession's "
      "MonitoredTrainingSession; prints test_accuracy=<value>.\n"
      "Usage: cosession_train [--flag=value ...]");
  SetFlagsUsage("cosession_train", "examples/train.cc");
  ExitOnUnparsableFlags("cosession_train", argc, argv);
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<Flags> flags = ReadFlags();
  if (!flags.ok()) {
    std::fprintf(stderr, "cosession_train: %s\n",
                 std::string(flags.status().message()).c_str());
    return 2;
  }

  asio::io_context io;
  // Ctrl-C and SIGTERM: a clean stop, on this event loop; a second one
  // exits at once.
  Interrupt interrupt;
  StopOnSignals signals(io.get_executor(), [&](int signal) {
    interrupt.signal = signal;
    Say(absl::StrCat("cosession_train: ", strsignal(signal),
                     ": stopping after this step (again to quit at once)"));
    interrupt.Stop();
  });
  // A resized terminal gets its progress bar redrawn at the new width.
  asio::signal_set resized(io, SIGWINCH);
  std::function<void()> watch_resize = [&] {
    resized.async_wait([&](boost::system::error_code ec, int) {
      if (ec) return;
      Console::Stdout().Redraw();
      watch_resize();
    });
  };
  watch_resize();

  absl::Status result = absl::InternalError("training did not finish");
  asio::co_spawn(io, Train(*std::move(flags), &interrupt),
                 [&](std::exception_ptr e, absl::Status status) {
                   result = e ? absl::InternalError("training threw")
                              : std::move(status);
                   resized.cancel();
                   signals.Cancel();
                 });
  io.run();
  if (!result.ok()) {
    Console::Stdout().Log(absl::StrCat("cosession_train: ", result.ToString()),
                          Console::kStderr);
    return 1;
  }
  return signals.exit_code();
}
