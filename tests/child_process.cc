#include "tests/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace cosession::testing {

ChildProcess::ChildProcess(const std::vector<std::string>& argv) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    error_ = absl::StrCat("pipe2: ", std::strerror(errno));
    return;
  }
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!absl::StartsWith(*e, "GTEST_")) env_strings.emplace_back(*e);
  }
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (std::string& s : args) argp.push_back(s.data());
  argp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null",
                                   O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  // The child starts with the default dispositions and an empty signal
  // mask, whatever the test runner set.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &all);
  posix_spawnattr_setflags(&attributes,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  const int spawned = posix_spawn(&pid_, args[0].c_str(), &actions, &attributes,
                                  argp.data(), envp.data());
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (spawned != 0) {
    pid_ = -1;
    ::close(fds[0]);
    error_ =
        absl::StrCat("posix_spawn ", args[0], ": ", std::strerror(spawned));
    return;
  }
  output_fd_ = fds[0];
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  if (output_fd_ >= 0) ::close(output_fd_);
}

bool ChildProcess::ReadSome(std::chrono::milliseconds limit) {
  if (output_closed_) return false;
  pollfd p{output_fd_, POLLIN, 0};
  const int ready = ::poll(&p, 1, static_cast<int>(limit.count()));
  if (ready < 0 && errno == EINTR) return true;
  if (ready <= 0) return true;  // nothing within the limit
  char chunk[4096];
  const ssize_t n = ::read(output_fd_, chunk, sizeof(chunk));
  if (n < 0 && errno == EINTR) return true;
  if (n <= 0) {
    output_closed_ = true;
    return false;
  }
  output_.append(chunk, static_cast<size_t>(n));
  return true;
}

bool ChildProcess::WaitForOutput(const std::string& text,
                                 std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (output_.find(text) == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !ReadSome(left)) {
      return output_.find(text) != std::string::npos;
    }
  }
  return true;
}

void ChildProcess::Signal(int signal) {
  if (pid_ > 0) ::kill(pid_, signal);
}

std::optional<int> ChildProcess::Wait(std::chrono::milliseconds limit) {
  if (pid_ <= 0) return std::nullopt;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  // The output closes when the child (and anything it started) exits.
  while (!output_closed_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    ReadSome(left);
  }
  int status = 0;
  if (!output_closed_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return std::nullopt;
  }
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

int ExitCodeOf(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return -1;
}

}  // namespace cosession::testing
