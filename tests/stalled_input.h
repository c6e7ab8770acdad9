// StalledInput: a FIFO nobody writes to yet, as an input file whose read
// stays in flight until the test says so -- a reader blocks (on a pool
// thread) in open(), so what awaits the read waits, and a test can stop
// or cancel that wait. Release frees that thread whether or not the read
// started: a writer end opened without blocking (O_RDWR) wakes a reader
// waiting in open(), a regular file renamed over the path serves a reader
// that comes later, and closing the writer end gives the woken reader its
// end of file. The destructor releases too.
// Failures are GoogleTest failures of the calling test.
#ifndef COSESSION_TESTS_STALLED_INPUT_H_
#define COSESSION_TESTS_STALLED_INPUT_H_

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "tests/scratch_dir.h"
#include "tests/test_files.h"

namespace cosession::testing {

class StalledInput {
 public:
  explicit StalledInput(const ScratchDir& dir,
                        const std::string& name = "fifo.csv")
      : path_(dir / name), replacement_(dir / (name + ".replacement")) {
    EXPECT_EQ(::mkfifo(path_.c_str(), 0600), 0);
  }
  ~StalledInput() { Release(); }
  StalledInput(const StalledInput&) = delete;
  StalledInput& operator=(const StalledInput&) = delete;
  const std::string& path() const { return path_; }
  void Release() {
    if (released_) return;
    released_ = true;
    const int fd = ::open(path_.c_str(), O_RDWR | O_NONBLOCK);
    WriteFile(replacement_, "");
    EXPECT_EQ(::rename(replacement_.c_str(), path_.c_str()), 0);
    if (fd >= 0) ::close(fd);
  }

 private:
  std::string path_;
  std::string replacement_;
  bool released_ = false;
};

}  // namespace cosession::testing

#endif  // COSESSION_TESTS_STALLED_INPUT_H_
