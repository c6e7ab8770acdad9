// cosession_train as its user meets it, run as a child process:
//   * --help lists the program's flags with their help text;
//   * every bad flag value exits with 2 and a message naming the flag;
//   * SIGINT and SIGTERM stop training cleanly: End runs, a final
//     checkpoint of the step reached is written, the exit code is 130/143;
//   * a label out of range in the held-out rows fails before training
//     starts, naming the file and line;
//   * temporary files a killed run left are removed at start, and only the
//     newest --max_timelines Chrome traces are kept;
//   * a checkpoint written before the input pipeline had a position
//     still resumes (the position starts at 0, with a warning);
//   * --export_dir writes a model that this (another) process loads and
//     that predicts what the trained variables predict.
// The tests wait for what the child prints, each wait bounded.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cosession/graph/ops.h"
#include "cosession/io/csv_reader.h"
#include "cosession/io/safetensors.h"
#include "cosession/io/saver.h"
#include "cosession/serving/saved_model.h"
#include "examples/mlp_classifier.h"
#include "tests/child_process.h"
#include "tests/co_test.h"
#include "tests/scratch_dir.h"
#include "tests/test_util.h"

namespace cosession::train_cli_test {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::ChildProcess;
using testing::ExitCodeOf;
using testing::ScratchDir;

constexpr char kTrain[] = COSESSION_TRAIN_BINARY;
// Generous: a sanitizer build on a loaded 2-core machine trains slowly.
constexpr auto kLimit = 120s;

struct Finished {
  int exit_code = -1;
  std::string output;
};

Finished RunTrain(std::vector<std::string> args) {
  args.insert(args.begin(), kTrain);
  ChildProcess child(args);
  EXPECT_TRUE(child.started()) << child.error();
  std::optional<int> status = child.Wait(kLimit);
  EXPECT_TRUE(status.has_value()) << "cosession_train did not finish:\n"
                                  << child.output();
  return {status ? ExitCodeOf(*status) : -1, child.output()};
}

TEST(TrainCli, HelpListsTheFlagsWithTheirHelpText) {
  Finished run = RunTrain({"--help"});
  EXPECT_EQ(run.output.find("No flags matched"), std::string::npos)
      << run.output;
  for (const char* text :
       {"--learning_rate", "The optimizer's learning rate", "--max_steps",
        "--checkpoint_dir", "--max_timelines", "--data", "--optimizer"}) {
    EXPECT_NE(run.output.find(text), std::string::npos)
        << "--help does not show '" << text << "':\n"
        << run.output;
  }
}

TEST(TrainCli, EveryBadFlagValueExitsWith2NamingTheFlag) {
  ScratchDir dir;
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--learning_rate=nan", "--learning_rate"},
      {"--learning_rate=-1", "--learning_rate"},
      {"--learning_rate=fast", "--learning_rate"},
      {"--max_steps=0", "--max_steps"},
      {"--max_steps=ten", "--max_steps"},
      {"--batch_size=0", "--batch_size"},
      {"--optimizer=adagrad", "--optimizer"},
      {"--hidden_units=64,x", "--hidden_units"},
      {"--test_fraction=1.5", "--test_fraction"},
      {"--max_timelines=-1", "--max_timelines"},
      {"--save_checkpoint_steps=0", "--save_checkpoint_steps"},
      {"--data=" + (dir / "missing.csv"), "--data"},
      {"--no_such_flag=1", "--no_such_flag"},
      {"--data=tcp://localhost", "--data"},
      {"--data=tcp://localhost:99999", "--data"},
      {"--eval_data=" + (dir / "missing.csv"), "--eval_data"},
  };
  for (const auto& [arg, flag] : bad) {
    Finished run = RunTrain({arg, "--checkpoint_dir=" + (dir / "ckpt")});
    EXPECT_EQ(run.exit_code, 2) << arg << ":\n" << run.output;
    EXPECT_NE(run.output.find(flag), std::string::npos)
        << arg << ": the message does not name " << flag << ":\n"
        << run.output;
  }
  EXPECT_FALSE(fs::exists(dir / "ckpt")) << "a bad flag started training";
}

// A peer that serves `text` to the first connection on a loopback port,
// then closes it: what `zcat digits.csv.gz | nc -l -p PORT` does.
class OneShotServer {
 public:
  explicit OneShotServer(std::string text) : text_(std::move(text)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof(address);
    if (listener_ < 0 ||
        ::bind(listener_, reinterpret_cast<sockaddr*>(&address), size) != 0 ||
        ::listen(listener_, 1) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address),
                      &size) != 0) {
      return;
    }
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] {
      const int peer = ::accept(listener_, nullptr, nullptr);
      if (peer < 0) return;
      size_t sent = 0;
      while (sent < text_.size()) {
        const ssize_t n =
            ::write(peer, text_.data() + sent, text_.size() - sent);
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
      }
      ::close(peer);
    });
  }
  ~OneShotServer() {
    // Unblocks an accept that never got its connection.
    if (listener_ >= 0) ::shutdown(listener_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    if (listener_ >= 0) ::close(listener_);
  }
  int port() const { return port_; }

 private:
  std::string text_;
  int listener_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST(TrainCli, TrainsOnRowsFromATcpPeerUntilItCloses) {
  absl::StatusOr<std::string> digits = ReadMaybeGzipFile(COSESSION_DIGITS_CSV);
  ASSERT_TRUE(digits.ok()) << digits.status();
  OneShotServer server(*digits);
  ASSERT_NE(server.port(), 0);
  ScratchDir dir;
  Finished run =
      RunTrain({absl::StrCat("--data=tcp://127.0.0.1:", server.port()),
                "--checkpoint_dir=" + (dir / "ckpt"), "--max_steps=100000",
                "--batch_size=32"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find(absl::StrCat("training on rows from tcp 127.0.0.1:",
                                         server.port())),
            std::string::npos)
      << run.output;
  // 1797 rows in batches of 32: 57 steps, then the peer's close ends it.
  EXPECT_NE(run.output.find("stopped at global step 57 "), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("test_accuracy="), std::string::npos) << run.output;
  auto latest = LatestCheckpoint(dir / "ckpt");
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_NE(latest->find("model.ckpt-57"), std::string::npos) << *latest;
}

// examples/stream_train.cc: its own sender streams the digits into its own
// training over loopback, on one event loop, until the sender closes.
TEST(StreamTrain, TrainsOnRowsItStreamsToItselfUntilTheSenderCloses) {
  ChildProcess child({COSESSION_STREAM_TRAIN_BINARY});
  ASSERT_TRUE(child.started()) << child.error();
  std::optional<int> status = child.Wait(kLimit);
  ASSERT_TRUE(status.has_value()) << child.output();
  EXPECT_EQ(ExitCodeOf(*status), 0) << child.output();
  // 1797 rows in batches of 32.
  EXPECT_NE(child.output().find("trained 57 steps on rows streamed over tcp"),
            std::string::npos)
      << child.output();
  EXPECT_NE(child.output().find("step 50: loss"), std::string::npos)
      << child.output();
}

// The global step in the last "stopped at global step N" line.
int64_t StoppedAt(const std::string& output) {
  const std::string marker = "stopped at global step ";
  const size_t at = output.rfind(marker);
  if (at == std::string::npos) return -1;
  int64_t step = -1;
  std::vector<std::string> words =
      absl::StrSplit(output.substr(at + marker.size()), ' ');
  if (words.empty() || !absl::SimpleAtoi(words[0], &step)) return -1;
  return step;
}

void ExpectACleanStopOn(int signal, int expected_exit_code) {
  ScratchDir dir;
  ChildProcess child({kTrain, "--checkpoint_dir=" + dir.path(),
                      "--max_steps=1000000000", "--log_every_n_steps=20",
                      "--save_checkpoint_steps=1000000000",
                      "--profile_every_n_steps=1000000000"});
  ASSERT_TRUE(child.started()) << child.error();
  // Training is under way once step 20 is logged; no periodic checkpoint
  // comes after the one at step 0, so a later one is the final checkpoint.
  ASSERT_TRUE(child.WaitForOutput("Tensor<int64 []: 20>", kLimit))
      << child.output();
  child.Signal(signal);
  std::optional<int> status = child.Wait(kLimit);
  ASSERT_TRUE(status.has_value()) << "no exit after the signal:\n"
                                  << child.output();
  EXPECT_EQ(ExitCodeOf(*status), expected_exit_code) << child.output();
  EXPECT_NE(child.output().find("stopping after this step"), std::string::npos)
      << child.output();
  const int64_t stopped = StoppedAt(child.output());
  EXPECT_GE(stopped, 20) << child.output();

  auto latest = LatestCheckpoint(dir.path());
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, dir / absl::StrCat("model.ckpt-", stopped))
      << "the final checkpoint is not the step training stopped at";
  EXPECT_TRUE(fs::exists(CheckpointFilePath(*latest)));
}

TEST(TrainCli, SigintStopsCleanlyWithAFinalCheckpointAndExits130) {
  ExpectACleanStopOn(SIGINT, 130);
}

TEST(TrainCli, SigtermStopsCleanlyWithAFinalCheckpointAndExits143) {
  ExpectACleanStopOn(SIGTERM, 143);
}

// 40 rows of 64 pixels and a label; row `bad_line` (1-based) has label 15.
void WriteDigits(const std::string& path, int bad_line) {
  std::ofstream out(path);
  for (int line = 1; line <= 40; ++line) {
    for (int pixel = 0; pixel < 64; ++pixel) out << (line + pixel) % 17 << ",";
    out << (line == bad_line ? 15 : line % 10) << "\n";
  }
}

TEST(TrainCli, ALabelOutOfRangeAnywhereFailsBeforeTrainingNamingFileAndLine) {
  ScratchDir dir;
  // Whichever split a row lands in, the run fails before the first step.
  for (int bad_line : {1, 17, 40}) {
    const std::string csv = dir / absl::StrCat("bad", bad_line, ".csv");
    WriteDigits(csv, bad_line);
    Finished run =
        RunTrain({"--data=" + csv, "--checkpoint_dir=" + (dir / "ckpt"),
                  "--max_steps=5"});
    EXPECT_EQ(run.exit_code, 1) << run.output;
    EXPECT_NE(run.output.find(absl::StrCat(csv, ":", bad_line, ":")),
              std::string::npos)
        << run.output;
    EXPECT_NE(run.output.find("label 15"), std::string::npos) << run.output;
    EXPECT_EQ(run.output.find("training on"), std::string::npos)
        << "training started before the data was checked:\n"
        << run.output;
  }
  EXPECT_FALSE(fs::exists(dir / "ckpt"));
}

std::vector<std::string> FilesStartingWith(const std::string& dir,
                                           const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) names.push_back(name);
  }
  return names;
}

TEST(TrainCli, RemovesAKilledRunsTemporaryFilesAndKeepsTheNewestTimelines) {
  ScratchDir dir;
  // What a run killed mid-write leaves: "<file>.tmp.<pid>.<n>".
  const std::vector<std::string> stale = {
      "model.ckpt-5.safetensors.tmp.999999.0", "checkpoint.tmp.999999.1",
      "timeline-4.json.tmp.999999.2"};
  for (const std::string& name : stale) std::ofstream(dir / name) << "partial";
  Finished run = RunTrain({"--checkpoint_dir=" + dir.path(), "--max_steps=20",
                           "--profile_every_n_steps=2", "--max_timelines=3"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (const std::string& name : stale) {
    EXPECT_FALSE(fs::exists(dir / name)) << name << " was left behind";
  }
  std::vector<std::string> timelines =
      FilesStartingWith(dir.path(), "timeline-");
  std::sort(timelines.begin(), timelines.end());
  EXPECT_EQ(timelines,
            (std::vector<std::string>{"timeline-16.json", "timeline-18.json",
                                      "timeline-20.json"}));
}

TEST(TrainCli, ResumesFromACheckpointWrittenBeforeThePipelineHadAPosition) {
  ScratchDir dir;
  Finished first =
      RunTrain({"--checkpoint_dir=" + dir.path(), "--max_steps=20"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  // What an older cosession_train wrote: the same variables but the
  // iterator's position.
  const std::string file = dir / "model.ckpt-20.safetensors";
  auto contents = ReadSafetensorsFile(file);
  ASSERT_TRUE(contents.ok()) << contents.status();
  std::vector<std::pair<std::string, Tensor>> kept;
  for (const auto& [name, tensor] : contents->tensors) {
    if (name != "train_batch/position") kept.emplace_back(name, tensor);
  }
  ASSERT_EQ(kept.size() + 1, contents->tensors.size());
  std::map<std::string, std::string> metadata = contents->metadata;
  metadata.erase(std::string(kSafetensorsCrcKey));
  auto old = BuildSafetensors(kept, metadata);
  ASSERT_TRUE(old.ok()) << old.status();
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      << SerializeSafetensors(*old);

  Finished resumed =
      RunTrain({"--checkpoint_dir=" + dir.path(), "--max_steps=30"});
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("has no value for 'train_batch/position'"),
            std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("starting at batch 0"), std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("stopped at global step 30"), std::string::npos)
      << resumed.output;
}

// Rows of pixel values 0..16, as the digits have.
Tensor PixelRows(int n) {
  std::vector<float> values(static_cast<size_t>(n) * 64);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<float>((i * 7 + i / 64) % 17);
  }
  return Tensor::FromVector(values, TensorShape{n, 64});
}

CO_TEST(TrainCli, ExportsAModelAnotherProcessLoadsAndThatPredictsTheSame) {
  ScratchDir dir;
  Finished run =
      RunTrain({"--checkpoint_dir=" + (dir / "ckpt"),
                "--export_dir=" + (dir / "export"), "--max_steps=40"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  CO_ASSERT_TRUE(run.exit_code == 0);
  EXPECT_NE(run.output.find("exported the model for serving to " +
                            (dir / "export/40")),
            std::string::npos)
      << run.output;
  auto loaded =
      co_await LoadSavedModel(dir / "export/40", testing::TestRuntime());
  CO_ASSERT_OK(loaded.status());
  const Signature* sig = (*loaded)->FindSignature("serving_default");
  CO_ASSERT_TRUE(sig != nullptr);
  EXPECT_EQ(sig->inputs.at("x").shape.DebugString(), "[?,64]");
  EXPECT_EQ(sig->outputs.at("probabilities").shape.DebugString(), "[?,10]");
  EXPECT_EQ(sig->outputs.at("classes").dtype, DType::kInt64);
  EXPECT_EQ(sig->outputs.at("classes").shape.DebugString(), "[?]");

  // The trained variables, from the final checkpoint of the same step, in
  // the model built as cosession_train builds it.
  Graph g;
  Output x = ops::Placeholder(g, DType::kFloat, TensorShape{-1, 64}, "x");
  Output labels = ops::Placeholder(g, DType::kInt64, TensorShape{-1}, "y");
  auto model = BuildMlpClassifier(
      g, x, labels, {.hidden_units = {128}, .input_scale = 1.0 / 16});
  CO_ASSERT_OK(model.status());
  Output probabilities = ops::Softmax(g, model->logits);
  auto saver = Saver::Create(g);
  CO_ASSERT_OK(saver.status());
  g.Finalize();
  Session trained(g, testing::TestRuntime());
  auto restored = co_await (*saver)->RestoreLatest(trained, dir / "ckpt");
  CO_ASSERT_OK(restored.status());

  const Tensor rows = PixelRows(50);
  RunArgs want_args{.fetches = {probabilities, model->predictions},
                    .feeds = {{x, rows}}};
  auto want = co_await trained.Run(want_args, asio::use_awaitable);
  CO_ASSERT_OK(want.status());
  RunArgs got_args{.fetches = {sig->outputs.at("probabilities").tensor,
                               sig->outputs.at("classes").tensor},
                   .feeds = {{sig->inputs.at("x").tensor, rows}}};
  auto got = co_await (*loaded)->session->Run(got_args, asio::use_awaitable);
  CO_ASSERT_OK(got.status());
  EXPECT_EQ((*want)[0].DebugString(1000), (*got)[0].DebugString(1000));
  EXPECT_EQ((*want)[1].DebugString(1000), (*got)[1].DebugString(1000));

  // A rerun resumes at --max_steps and trains no further (as
  // Estimator.train skips training; the stop-at-step hook alone would run
  // one more step): version 40 exists, and is left as it is.
  const std::string variables = dir / "export/40/variables.safetensors";
  const auto written = fs::last_write_time(variables);
  Finished rerun =
      RunTrain({"--checkpoint_dir=" + (dir / "ckpt"),
                "--export_dir=" + (dir / "export"), "--max_steps=40"});
  EXPECT_EQ(rerun.exit_code, 0) << rerun.output;
  EXPECT_NE(rerun.output.find("skipping training: the checkpoint in " +
                              (dir / "ckpt") +
                              " is at global step 40, --max_steps=40 reached"),
            std::string::npos)
      << rerun.output;
  EXPECT_NE(rerun.output.find("not exported: version 40 already exists"),
            std::string::npos)
      << rerun.output;
  EXPECT_NE(rerun.output.find("stopped at global step 40"), std::string::npos)
      << rerun.output;
  EXPECT_FALSE(fs::exists(dir / "export/41"));
  EXPECT_FALSE(fs::exists(dir / "ckpt/model.ckpt-41.safetensors"));
  EXPECT_EQ(fs::last_write_time(variables), written);
}

}  // namespace
}  // namespace cosession::train_cli_test
