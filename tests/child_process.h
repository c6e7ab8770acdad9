// ChildProcess: a program run by a test, its stdout and stderr merged into
// one pipe the test reads with deadlines, so that a test waits for what the
// child prints (not for time to pass) and a child that hangs fails the test
// instead of hanging it. The child is killed (SIGKILL) and reaped when the
// object goes away. Not thread-safe: one test thread drives it.
#ifndef COSESSION_TESTS_CHILD_PROCESS_H_
#define COSESSION_TESTS_CHILD_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace cosession::testing {

class ChildProcess {
 public:
  // Starts argv[0] (a path) with the rest as its arguments, stdin from
  // /dev/null, in the test's environment minus GTEST_* (a child that is a
  // test binary must not write the parent's report). started() is false if
  // it could not start; error() says why.
  explicit ChildProcess(const std::vector<std::string>& argv);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool started() const { return pid_ > 0; }
  const std::string& error() const { return error_; }

  // Reads until the output so far contains `text` (true) or the deadline
  // passes or the child closes its output (false).
  bool WaitForOutput(const std::string& text, std::chrono::milliseconds limit);

  // Sends `signal` to the child.
  void Signal(int signal);

  // Reads the rest of the output and reaps the child: its wait status
  // (decode with WIFEXITED and friends), or nullopt if it is still running
  // at the deadline (it is then killed).
  std::optional<int> Wait(std::chrono::milliseconds limit);

  // Everything read so far, stdout and stderr in the order written.
  const std::string& output() const { return output_; }

 private:
  // Reads what is available within `limit`; false at end of output.
  bool ReadSome(std::chrono::milliseconds limit);

  pid_t pid_ = -1;
  int output_fd_ = -1;
  bool output_closed_ = false;
  std::string output_;
  std::string error_;
};

// The exit code of a wait status, or 128 + the signal that ended it (as a
// shell reports it).
int ExitCodeOf(int wait_status);

}  // namespace cosession::testing

#endif  // COSESSION_TESTS_CHILD_PROCESS_H_
