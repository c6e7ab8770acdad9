// Console: a status line and log lines on one terminal -- a real pseudo-
// terminal here, read back through a small terminal model -- never garble
// each other, never wrap, and follow a resize.
#include "cosession/io/console.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace cosession::console_test {
namespace {

// What a terminal shows: finished rows and the current one, with a cursor.
// Knows the bytes the Console writes: text, "\r", "\n", ESC[K.
class Screen {
 public:
  void Feed(absl::string_view bytes, int width) {
    for (size_t i = 0; i < bytes.size(); ++i) {
      const char c = bytes[i];
      if (c == '\r') {
        col_ = 0;
      } else if (c == '\n') {
        rows_.push_back(current_);
        current_.clear();
        col_ = 0;
      } else if (c == '\x1b' && bytes.substr(i, 3) == "\x1b[K") {
        current_.resize(std::min(current_.size(), col_));
        i += 2;
      } else {
        if (col_ >= static_cast<size_t>(width)) {  // the terminal wraps
          wrapped_ = true;
          rows_.push_back(current_);
          current_.clear();
          col_ = 0;
        }
        if (col_ < current_.size()) {
          current_[col_] = c;
        } else {
          current_.push_back(c);
        }
        ++col_;
      }
    }
  }
  const std::vector<std::string>& rows() const { return rows_; }
  const std::string& current() const { return current_; }
  bool wrapped() const { return wrapped_; }

 private:
  std::vector<std::string> rows_;
  std::string current_;
  size_t col_ = 0;
  bool wrapped_ = false;
};

class PseudoTerminal {
 public:
  explicit PseudoTerminal(int columns) {
    winsize size{};
    size.ws_row = 24;
    size.ws_col = static_cast<unsigned short>(columns);
    if (::openpty(&master_, &slave_, nullptr, nullptr, &size) != 0) {
      master_ = slave_ = -1;
    }
  }
  ~PseudoTerminal() {
    if (master_ >= 0) ::close(master_);
    if (slave_ >= 0) ::close(slave_);
  }
  bool ok() const { return master_ >= 0; }
  int slave() const { return slave_; }
  int columns() const {
    winsize size{};
    ::ioctl(slave_, TIOCGWINSZ, &size);
    return size.ws_col;
  }
  void Resize(int columns) {
    winsize size{};
    size.ws_row = 24;
    size.ws_col = static_cast<unsigned short>(columns);
    ::ioctl(master_, TIOCSWINSZ, &size);
  }
  // What the slave side has been sent so far (bounded: a second's wait for
  // the first byte, then whatever is there).
  std::string Drain() {
    std::string out;
    pollfd p{master_, POLLIN, 0};
    int timeout_ms = 1000;
    while (::poll(&p, 1, timeout_ms) > 0 && (p.revents & POLLIN)) {
      char buffer[4096];
      const ssize_t n = ::read(master_, buffer, sizeof buffer);
      if (n <= 0) break;
      out.append(buffer, static_cast<size_t>(n));
      timeout_ms = 0;
    }
    return out;
  }

 private:
  int master_ = -1;
  int slave_ = -1;
};

// A Console writing both streams to the pseudo-terminal.
Console OnTerminal(PseudoTerminal& pty) {
  return Console(Console::Options{
      .writer =
          [&pty](Console::Stream, absl::string_view bytes) {
            ASSERT_EQ(::write(pty.slave(), bytes.data(), bytes.size()),
                      static_cast<ssize_t>(bytes.size()));
          },
      .status_on_terminal = true,
      .stdout_on_terminal = true,
      .stderr_on_terminal = true,
      .width = [&pty] { return pty.columns(); }});
}

TEST(Console, LogLinesGoAboveTheStatusLineWhichNeverWraps) {
  PseudoTerminal pty(80);
  ASSERT_TRUE(pty.ok());
  Console console = OnTerminal(pty);
  Screen screen;
  const std::string bar = absl::StrCat("[", std::string(100, '='), "] 1/2");
  console.SetStatus(bar);
  screen.Feed(pty.Drain(), 80);
  console.Log("first log line");
  screen.Feed(pty.Drain(), 80);
  console.SetStatus(bar + " again");
  screen.Feed(pty.Drain(), 80);
  console.Log("second log line", Console::kStdout);
  screen.Feed(pty.Drain(), 80);
  EXPECT_FALSE(screen.wrapped());
  EXPECT_EQ(screen.rows(),
            (std::vector<std::string>{"first log line", "second log line"}));
  // The status is drawn again below the logs, cut to 79 columns.
  EXPECT_EQ(screen.current(), (bar + " again").substr(0, 79));
}

TEST(Console, AResizedTerminalGetsTheStatusRedrawnToItsWidth) {
  PseudoTerminal pty(80);
  ASSERT_TRUE(pty.ok());
  Console console = OnTerminal(pty);
  Screen screen;
  const std::string bar = std::string(70, '#');
  console.SetStatus(bar);
  screen.Feed(pty.Drain(), 80);
  pty.Resize(40);
  console.Redraw();  // what the program's SIGWINCH handler does
  console.Log("a log line at 40 columns");
  console.FinishStatus(bar);
  screen.Feed(pty.Drain(), 40);
  EXPECT_FALSE(screen.wrapped());
  ASSERT_EQ(screen.rows().size(), 2u);
  EXPECT_EQ(screen.rows()[0], "a log line at 40 columns");
  EXPECT_EQ(screen.rows()[1], bar.substr(0, 39));  // the final status stays
  EXPECT_EQ(screen.current(), "");
}

TEST(Console, OffATerminalEveryStatusIsALineAndLogsArePlain) {
  std::string out, err;
  Console console(Console::Options{
      .writer =
          [&](Console::Stream stream, absl::string_view bytes) {
            (stream == Console::kStdout ? out : err)
                .append(bytes.data(), bytes.size());
          },
      .width = [] { return 20; }});
  console.SetStatus("step 1, a status longer than the width");
  console.Log("a log line");
  console.FinishStatus("step 2");
  EXPECT_EQ(out, "step 1, a status longer than the width\nstep 2\n");
  EXPECT_EQ(err, "a log line\n");
}

}  // namespace
}  // namespace cosession::console_test
