// Crash consistency: a child process saves checkpoints in a loop and is
// killed with SIGKILL at seeded random instants; after every kill the latest
// checkpoint must load and hold exactly the values of its step, and no save
// the child finished may be lost.
//
// The child is this very test binary, started with posix_spawn (safe from a
// multi-threaded parent, unlike fork) and an environment variable that turns
// CheckpointCrashChild.SavesCheckpointsUntilKilled from a skipped test into
// the save loop. It reports "S <step>" before each save and "D <step>" after
// it on a pipe; the parent kills it after a random number of saves started
// plus a random delay of up to a few milliseconds (randomising where in a
// save the crash lands, not ordering events).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cosession/graph/ops.h"
#include "cosession/io/safetensors.h"
#include "cosession/io/saver.h"

extern char** environ;

namespace cosession::checkpoint_crash_test {
namespace {

namespace fs = std::filesystem;

constexpr char kDirEnv[] = "COSESSION_CRASH_CHILD_DIR";
constexpr char kFdEnv[] = "COSESSION_CRASH_CHILD_FD";
constexpr int kChildFd = 100;
constexpr int kFloats = 64 * 1024;  // 256 KB a checkpoint, plus the rest

struct CrashModel {
  CrashModel() {
    step = GetOrCreateGlobalStep(g);
    w = ops::Variable(g, Tensor(DType::kFloat, TensorShape{kFloats}), "w");
    b = ops::Variable(g, Tensor(DType::kInt64, TensorShape{1000}), "b");
  }
  // The values every variable holds at `k`.
  std::vector<Tensor> SnapshotAt(int64_t k) const {
    Tensor wt = Tensor::Allocate(DType::kFloat, TensorShape{kFloats});
    for (float& x : wt.mutable_flat<float>()) x = static_cast<float>(k);
    Tensor bt = Tensor::Allocate(DType::kInt64, TensorShape{1000});
    for (int64_t& x : bt.mutable_flat<int64_t>()) x = k;
    return {Tensor::Scalar<int64_t>(k), wt, bt};  // collection order
  }
  Graph g;
  Output step, w, b;
};

void Report(int fd, char what, int64_t step) {
  std::string line = absl::StrCat(std::string(1, what), " ", step, "\n");
  // Small writes to a pipe are atomic; a failure means the parent is gone.
  if (::write(fd, line.data(), line.size()) < 0) std::_Exit(1);
}

TEST(CheckpointCrashChild, SavesCheckpointsUntilKilled) {
  const char* dir = std::getenv(kDirEnv);
  const char* fd_text = std::getenv(kFdEnv);
  if (dir == nullptr || fd_text == nullptr) {
    GTEST_SKIP()
        << "the child of CheckpointCrash; runs only when spawned by it";
  }
  int fd = std::atoi(fd_text);
  CrashModel model;
  auto saver = Saver::Create(model.g, {.max_to_keep = 3});
  ASSERT_TRUE(saver.ok()) << saver.status();
  int64_t step = 0;
  if (auto latest = LatestCheckpoint(dir); latest.ok()) {
    auto file = ReadSafetensorsFile(CheckpointFilePath(*latest));
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_TRUE(absl::SimpleAtoi(file->metadata.at("global_step"), &step));
  }
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < give_up) {
    ++step;
    Report(fd, 'S', step);
    auto written = (*saver)->WriteCheckpoint(model.SnapshotAt(step), dir, step);
    ASSERT_TRUE(written.ok()) << written.status();
    Report(fd, 'D', step);
  }
}

// Reads "<c> <step>" lines from the pipe.
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  // False on timeout or end of input.
  bool Next(std::string& line, int timeout_ms) {
    while (true) {
      size_t newline = buffer_.find('\n');
      if (newline != std::string::npos) {
        line = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        return true;
      }
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, timeout_ms) <= 0) return false;
      char chunk[4096];
      ssize_t n = ::read(fd_, chunk, sizeof(chunk));
      if (n <= 0) return false;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  int fd_;
  std::string buffer_;
};

pid_t SpawnChild(const std::string& dir, int pipe_write) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    // The child must not write the parent's test report or skip its test
    // under sharding.
    if (absl::StartsWith(*e, "GTEST_")) continue;
    env_strings.emplace_back(*e);
  }
  env_strings.push_back(absl::StrCat(kDirEnv, "=", dir));
  env_strings.push_back(absl::StrCat(kFdEnv, "=", kChildFd));
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::string exe = fs::read_symlink("/proc/self/exe").string();
  std::string filter =
      "--gtest_filter=CheckpointCrashChild.SavesCheckpointsUntilKilled";
  std::vector<char*> argv{exe.data(), filter.data(), nullptr};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_write, kChildFd);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null",
                                   O_WRONLY, 0);
  pid_t pid = -1;
  int error = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(),
                          envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    ADD_FAILURE() << "posix_spawn: " << std::strerror(error);
    return -1;
  }
  return pid;
}

// The latest checkpoint loads, holds the values of its step everywhere, and
// is not older than the last save the child finished.
void ExpectLatestCheckpointIsWhole(const std::string& dir, int64_t last_done,
                                   int kill) {
  auto latest = LatestCheckpoint(dir);
  if (last_done == 0 && absl::IsNotFound(latest.status())) return;
  ASSERT_TRUE(latest.ok()) << "after kill " << kill << ": " << latest.status();
  auto file = ReadSafetensorsFile(CheckpointFilePath(*latest));
  ASSERT_TRUE(file.ok()) << "after kill " << kill << ": " << file.status();
  int64_t step = -1;
  ASSERT_TRUE(absl::SimpleAtoi(file->metadata.at("global_step"), &step));
  EXPECT_GE(step, last_done)
      << "a finished save was lost (kill " << kill << ")";
  EXPECT_EQ(file->tensors.at("global_step").scalar<int64_t>(), step);
  for (float x : file->tensors.at("w").flat<float>()) {
    ASSERT_EQ(x, static_cast<float>(step)) << "kill " << kill;
  }
  for (int64_t x : file->tensors.at("b").flat<int64_t>()) {
    ASSERT_EQ(x, step) << "kill " << kill;
  }
}

TEST(CheckpointCrash, LatestCheckpointAlwaysLoadsAfterSigkillAtRandomInstants) {
  std::string templ =
      (fs::temp_directory_path() / "ckpt_crash.XXXXXX").string();
  const std::string dir = ::mkdtemp(templ.data());
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  LineReader reader(fds[0]);
  std::mt19937 rng(20261130);
  constexpr int kKills = 60;
  // Generous: it stops at kKills; under ASan on a loaded 2-core machine a
  // child's start-up alone takes most of a second.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(90);
  int kills = 0;
  int64_t last_done = 0;
  int64_t saves_started = 0;
  int kills_mid_write = 0;
  while (kills < kKills && std::chrono::steady_clock::now() < deadline) {
    pid_t pid = SpawnChild(dir, fds[1]);
    ASSERT_GT(pid, 0);
    // Kill during the (n+1)-th save of this life, `delay` into it.
    const int n = static_cast<int>(rng() % 3);
    const auto delay = std::chrono::microseconds(rng() % 4000);
    int started = 0;
    std::string line;
    bool killed = false;
    while (reader.Next(line, 10'000)) {
      int64_t step = 0;
      ASSERT_TRUE(absl::SimpleAtoi(line.substr(2), &step)) << line;
      if (line[0] == 'D') last_done = std::max(last_done, step);
      if (line[0] == 'S') {
        ++saves_started;
        if (started++ == n) {
          std::this_thread::sleep_for(delay);  // where in the save to crash
          ::kill(pid, SIGKILL);
          killed = true;
          break;
        }
      }
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(killed) << "the child stopped reporting (exit status " << status
                        << ")";
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the child ended on its own: status " << status;
    // Saves the child finished between the report we acted on and the kill.
    while (reader.Next(line, 0)) {
      int64_t step = 0;
      if (line[0] == 'D' && absl::SimpleAtoi(line.substr(2), &step)) {
        last_done = std::max(last_done, step);
      }
    }
    ++kills;
    // Evidence that kills land inside writes: a temporary file left behind.
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (absl::StrContains(entry.path().filename().string(), ".tmp.")) {
        ++kills_mid_write;
        break;
      }
    }
    ExpectLatestCheckpointIsWhole(dir, last_done, kills);
    if (::testing::Test::HasFatalFailure()) break;
  }
  ::close(fds[0]);
  ::close(fds[1]);
  EXPECT_GE(kills, 50) << "too few kills in the time bound";
  EXPECT_GT(last_done, 0);
  RecordProperty("kills", kills);
  RecordProperty("saves_started", static_cast<int>(saves_started));
  RecordProperty("kills_mid_write", kills_mid_write);
  std::printf("CheckpointCrash: %d kills, %d of them mid-write, %lld saves\n",
              kills, kills_mid_write, static_cast<long long>(saves_started));
  // Retention survived the crashes: at most max_to_keep listed, plus
  // checkpoints orphaned by a kill between the state file and a deletion.
  auto state = ReadCheckpointState(dir);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_LE(state->all_model_checkpoint_paths.size(), 3u);
  std::error_code ignored;
  fs::remove_all(dir, ignored);
}

}  // namespace
}  // namespace cosession::checkpoint_crash_test
