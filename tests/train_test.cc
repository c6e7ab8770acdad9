// Training end to end on the UCI digits (data/digits.csv.gz): the input
// pipeline, the MLP of examples/mlp_classifier.h, gradients, Adam, and
// MonitoredTrainingSession with checkpoints.
//   * a few hundred steps bring the held-out loss under a threshold;
//   * 2N steps with a restart from the checkpoint at step N end with exactly
//     the variables (Adam's slots and powers included) of 2N steps straight
//     -- one pool thread, the same seed;
//   * a malformed CSV stops training with InvalidArgument naming file and
//     line, and Close reports it.
#include <gtest/gtest.h>

#include <boost/asio/use_awaitable.hpp>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cosession/async/monitored_session.h"
#include "cosession/async/runtime.h"
#include "cosession/graph/graph.h"
#include "cosession/graph/ops.h"
#include "cosession/io/saver.h"
#include "cosession/pipeline/csv_dataset.h"
#include "cosession/pipeline/csv_rows.h"
#include "cosession/pipeline/dataset_iterator.h"
#include "cosession/training/dataset_hook.h"
#include "cosession/training/monitored_training_session.h"
#include "examples/mlp_classifier.h"
#include "tests/co_test.h"
#include "tests/scratch_dir.h"
#include "tests/test_util.h"

namespace cosession::train_test {
namespace {

namespace asio = boost::asio;
using testing::ScratchDir;

constexpr char kDigits[] = COSESSION_DIGITS_CSV;
constexpr int64_t kColumns = 65;
constexpr uint64_t kSeed = 7;

struct Split {
  std::vector<int64_t> train, test;
};

Split DigitsSplit() {
  auto all = CsvDataset::Create({.files = {kDigits}, .num_columns = kColumns});
  EXPECT_TRUE(all.ok()) << all.status();
  auto rows = (*all)->Load();
  EXPECT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ((*rows)->size(), 1797);
  auto split = SeededRowSplit((*rows)->size(), 0.8, kSeed);
  EXPECT_TRUE(split.ok()) << split.status();
  return {split->first, split->second};
}

// The held-out rows as one batch.
DatasetBatch TestBatch(const Split& split) {
  auto dataset = CsvDataset::Create(
      {.files = {kDigits}, .num_columns = kColumns, .keep_rows = split.test});
  EXPECT_TRUE(dataset.ok()) << dataset.status();
  auto batch = (*dataset)->LoadBatch();
  EXPECT_TRUE(batch.ok()) << batch.status();
  return *batch;
}

// One training run in a graph of its own.
struct Trainer {
  Trainer(std::string file, std::vector<int64_t> keep_rows) {
    g.set_seed(static_cast<int64_t>(kSeed));
    auto dataset = CsvDataset::Create({.files = {std::move(file)},
                                       .num_columns = kColumns,
                                       .keep_rows = std::move(keep_rows),
                                       .shuffle_seed = kSeed,
                                       .batch_size = 32,
                                       .num_epochs = -1});
    EXPECT_TRUE(dataset.ok()) << dataset.status();
    batch = DatasetIteratorGetNext(g, *dataset);
    BuildModel({.get_next = batch.features, .resume_from_global_step = true});
  }

  // The same model fed by a stage pipeline: lines parsed by a parallel
  // map, a shuffle buffer, batches, forever; resumed from the iterator's
  // checkpointed position.
  explicit Trainer(const Dataset& batches) {
    g.set_seed(static_cast<int64_t>(kSeed));
    std::vector<Output> xy = IteratorGetNext(g, batches, "batch");
    batch = {.features = xy[0], .labels = xy[1]};
    BuildModel({.get_next = batch.features, .resume_from_checkpoint = true});
  }

  // The model over `batch`, and the hook that starts its iterator.
  void BuildModel(DatasetHookOptions hook_options) {
    auto built = BuildMlpClassifier(g, batch.features, batch.labels,
                                    {.hidden_units = {32},
                                     .input_scale = 1.0 / 16,
                                     .optimizer = "adam",
                                     .learning_rate = 3e-3});
    EXPECT_TRUE(built.ok()) << built.status();
    model = *built;
    auto hook = DatasetHook::Create(std::move(hook_options));
    EXPECT_TRUE(hook.ok()) << hook.status();
    input = *hook;
  }

  // Trains until global step `max_steps` (restoring from and checkpointing
  // into `dir`), and returns every variable's value by name.
  asio::awaitable<std::map<std::string, Tensor>> Run(const std::string& dir,
                                                     int64_t max_steps,
                                                     Runtime& runtime) {
    MonitoredTrainingSessionOptions options;
    options.checkpoint_dir = dir;
    options.save_checkpoint_secs.reset();
    options.save_checkpoint_steps = max_steps;
    options.save_summaries_steps.reset();
    options.log_step_count_steps.reset();
    options.max_steps = max_steps;
    options.hooks = {input};
    options.session.runtime = &runtime;
    options.stop_grace_period = std::chrono::seconds(10);
    auto created =
        co_await MonitoredTrainingSession(g, options, asio::use_awaitable);
    EXPECT_TRUE(created.ok()) << created.status();
    std::map<std::string, Tensor> variables;
    if (!created.ok()) co_return variables;
    MonitoredSession& session = **created;
    RunArgs step{.targets = {model.train}};
    while (!session.ShouldStop()) {
      auto ran = co_await session.Run(step, asio::use_awaitable);
      if (!ran.ok()) {
        final_status = ran.status();
        break;
      }
    }
    RunArgs read;
    for (Node* node : g.GetCollection(kVariablesCollection)) {
      read.fetches.emplace_back(node, 0);
    }
    auto values = co_await session.raw_session().Run(read, asio::use_awaitable);
    close_status = co_await session.Close(asio::use_awaitable);
    if (!values.ok()) co_return variables;
    for (size_t i = 0; i < read.fetches.size(); ++i) {
      variables[read.fetches[i].node()->name()] = (*values)[i];
    }
    co_return variables;
  }

  Graph g;
  DatasetOutputs batch;
  MlpClassifier model;
  std::shared_ptr<DatasetHook> input;
  absl::Status final_status;
  absl::Status close_status;
};

CO_TEST(TrainDigits, AFewHundredStepsBringTheHeldOutLossDown) {
  const Split split = DigitsSplit();
  const DatasetBatch test = TestBatch(split);
  ScratchDir dir("train_digits");
  Trainer trainer(kDigits, split.train);

  // Before training: chance level (ln 10 = 2.3).
  RunArgs evaluate{.fetches = {trainer.model.loss, trainer.model.accuracy},
                   .feeds = {{trainer.batch.features, test.features},
                             {trainer.batch.labels, test.labels}}};
  {
    Session fresh(trainer.g, testing::TestRuntime());
    RunArgs init{.targets = {GlobalVariablesInitializer(trainer.g)}};
    CO_ASSERT_TRUE((co_await fresh.Run(init, asio::use_awaitable)).ok());
    auto before = co_await fresh.Run(evaluate, asio::use_awaitable);
    CO_ASSERT_OK(before.status());
    EXPECT_GT((*before)[0].scalar<float>(), 1.5f);
  }

  auto variables =
      co_await trainer.Run(dir.path(), 300, testing::TestRuntime());
  CO_ASSERT_OK(trainer.final_status);
  CO_ASSERT_OK(trainer.close_status);
  EXPECT_EQ(variables["global_step"].scalar<int64_t>(), 300);

  // After: evaluate the held-out rows in a session restored from the final
  // checkpoint.
  auto saver = Saver::Create(trainer.g);
  CO_ASSERT_OK(saver.status());
  Session restored(trainer.g, testing::TestRuntime());
  auto restore = co_await (*saver)->RestoreLatest(restored, dir.path());
  CO_ASSERT_OK(restore.status());
  auto after = co_await restored.Run(evaluate, asio::use_awaitable);
  CO_ASSERT_OK(after.status());
  EXPECT_LT((*after)[0].scalar<float>(), 0.35f);
  EXPECT_GT((*after)[1].scalar<float>(), 0.9f);
}

CO_TEST(TrainDigits, ARestartInTheMiddleEndsWithTheSameVariables) {
  constexpr int64_t kHalf = 40;
  const Split split = DigitsSplit();
  Runtime single_thread({.num_threads = 1});

  ScratchDir straight_dir("train_straight");
  Trainer straight(kDigits, split.train);
  auto expected =
      co_await straight.Run(straight_dir.path(), 2 * kHalf, single_thread);
  CO_ASSERT_OK(straight.close_status);

  ScratchDir restart_dir("train_restart");
  {
    Trainer first(kDigits, split.train);
    auto half = co_await first.Run(restart_dir.path(), kHalf, single_thread);
    CO_ASSERT_OK(first.close_status);
    EXPECT_EQ(half["global_step"].scalar<int64_t>(), kHalf);
  }
  Trainer second(kDigits, split.train);
  auto resumed =
      co_await second.Run(restart_dir.path(), 2 * kHalf, single_thread);
  CO_ASSERT_OK(second.close_status);
  EXPECT_EQ(second.input->last_start_batch(), kHalf);

  // Every variable: weights, biases, Adam's m and v of each, the beta
  // powers, the global step -- bit for bit.
  EXPECT_EQ(resumed.size(), expected.size());
  CO_ASSERT_TRUE((resumed.size()) == (expected.size()));
  EXPECT_TRUE(expected.contains("layer1/weights/Adam_1"));
  EXPECT_TRUE(expected.contains("beta2_power"));
  for (const auto& [name, value] : expected) {
    EXPECT_TRUE(resumed.contains(name)) << name;
    CO_ASSERT_TRUE(resumed.contains(name));
    EXPECT_TRUE(resumed[name].IsSameAs(value))
        << name << ": " << resumed[name].DebugString() << " vs "
        << value.DebugString();
  }
  EXPECT_EQ(expected["global_step"].scalar<int64_t>(), 2 * kHalf);
}

Dataset ShuffledParsedDigits() {
  return CsvRows(Dataset::TextLines({kDigits}),
                 {.num_columns = kColumns, .parallelism = 2})
      .Shuffle(256, kSeed)
      .Batch(32)
      .Repeat();
}

CO_TEST(TrainDigits, APipelineResumesFromItsCheckpointedPosition) {
  constexpr int64_t kHalf = 30;
  Runtime single_thread({.num_threads = 1});
  ScratchDir straight_dir("pipeline_straight");
  Trainer straight(ShuffledParsedDigits());
  auto expected =
      co_await straight.Run(straight_dir.path(), 2 * kHalf, single_thread);
  CO_ASSERT_OK(straight.close_status);

  ScratchDir restart_dir("pipeline_restart");
  {
    Trainer first(ShuffledParsedDigits());
    auto half = co_await first.Run(restart_dir.path(), kHalf, single_thread);
    CO_ASSERT_OK(first.close_status);
    EXPECT_EQ(half["batch/position"].scalar<int64_t>(), kHalf);
  }
  Trainer second(ShuffledParsedDigits());
  auto resumed =
      co_await second.Run(restart_dir.path(), 2 * kHalf, single_thread);
  CO_ASSERT_OK(second.close_status);
  // The position came from the checkpoint (the variable), not the step.
  EXPECT_EQ(second.input->last_start_batch(), kHalf);
  CO_ASSERT_TRUE(resumed.size() == expected.size());
  for (const auto& [name, value] : expected) {
    CO_ASSERT_TRUE(resumed.contains(name));
    EXPECT_TRUE(resumed[name].IsSameAs(value))
        << name << ": " << resumed[name].DebugString() << " vs "
        << value.DebugString();
  }
  EXPECT_EQ(expected["batch/position"].scalar<int64_t>(), 2 * kHalf);
}

CO_TEST(TrainDigits, AMalformedCsvStopsTrainingWithFileAndLine) {
  ScratchDir dir("train_malformed");
  const std::string file = dir.path() + "/bad.csv";
  {
    std::ofstream out(file);
    std::string row;
    for (int i = 0; i < 64; ++i) row += "1,";
    out << row << "3\n" << row << "3\n";
    out << row << "x\n";  // line 3: the label is not a number
  }
  Trainer trainer(file, {0, 1, 2});
  co_await trainer.Run(dir.path() + "/ckpt", 10, testing::TestRuntime());
  // The producer reads the whole file before the first batch and fails;
  // its error stops the session (possibly before the first step ran) and
  // Close reports it. A step in flight then failed with that error or was
  // cancelled by the stop; a step started after the stop (between the
  // loop's ShouldStop() and Run) is FailedPrecondition naming the cause.
  EXPECT_EQ(trainer.close_status.code(), absl::StatusCode::kInvalidArgument)
      << trainer.close_status;
  EXPECT_NE(trainer.close_status.message().find("bad.csv:3"), std::string::npos)
      << trainer.close_status;
  if (absl::IsFailedPrecondition(trainer.final_status)) {
    EXPECT_NE(trainer.final_status.message().find("bad.csv:3"),
              std::string::npos)
        << trainer.final_status;
  } else if (!trainer.final_status.ok() &&
             !absl::IsCancelled(trainer.final_status)) {
    EXPECT_EQ(trainer.final_status, trainer.close_status);
  }
}

}  // namespace
}  // namespace cosession::train_test
