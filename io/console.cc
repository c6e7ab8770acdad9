#include "cosession/io/console.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cosession {
namespace {

void WriteAll(int fd, absl::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // nowhere to report a broken terminal
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

int TerminalWidth() {
  winsize size{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) {
    return size.ws_col;
  }
  return 80;
}

// The first line of `text`.
absl::string_view FirstLine(absl::string_view text) {
  const size_t newline = text.find_first_of("\r\n");
  return newline == absl::string_view::npos ? text : text.substr(0, newline);
}

}  // namespace

Console::Console(Options options)
    : options_([&] {
        if (!options.writer) {
          options.writer = [](Stream stream, absl::string_view bytes) {
            WriteAll(stream == kStdout ? STDOUT_FILENO : STDERR_FILENO, bytes);
          };
        }
        if (!options.width) options.width = TerminalWidth;
        return std::move(options);
      }()) {}

Console& Console::Stdout() {
  static Console* console = new Console(Options{
      .status_on_terminal = ::isatty(STDOUT_FILENO) == 1,
      .stdout_on_terminal = ::isatty(STDOUT_FILENO) == 1,
      .stderr_on_terminal = ::isatty(STDERR_FILENO) == 1,
  });
  return *console;
}

int Console::StatusWidth() const {
  const int width = options_.width();
  return width > 1 ? width - 1 : 1;
}

void Console::DrawLocked() {
  if (status_.empty()) return;
  absl::string_view text = status_;
  const size_t width = static_cast<size_t>(StatusWidth());
  if (text.size() > width) text = text.substr(0, width);
  options_.writer(kStdout, absl::StrCat("\r", text, "\x1b[K"));
  drawn_ = true;
}

void Console::EraseLocked() {
  if (!drawn_) return;
  options_.writer(kStdout, "\r\x1b[K");
  drawn_ = false;
}

void Console::SetStatus(absl::string_view text) {
  std::lock_guard lock(mu_);
  text = FirstLine(text);
  if (!options_.status_on_terminal) {
    options_.writer(kStdout, absl::StrCat(text, "\n"));
    return;
  }
  status_ = std::string(text);
  DrawLocked();
}

void Console::FinishStatus(absl::string_view text) {
  std::lock_guard lock(mu_);
  text = FirstLine(text);
  if (!options_.status_on_terminal) {
    options_.writer(kStdout, absl::StrCat(text, "\n"));
    return;
  }
  status_ = std::string(text);
  DrawLocked();
  options_.writer(kStdout, "\n");
  status_.clear();
  drawn_ = false;
}

void Console::ClearStatus() {
  std::lock_guard lock(mu_);
  EraseLocked();
  status_.clear();
}

void Console::Redraw() {
  std::lock_guard lock(mu_);
  if (!options_.status_on_terminal) return;
  DrawLocked();
}

void Console::Log(absl::string_view line, Stream stream) {
  std::lock_guard lock(mu_);
  const bool shares_terminal = stream == kStdout ? options_.stdout_on_terminal
                                                 : options_.stderr_on_terminal;
  const bool around_status = options_.status_on_terminal && shares_terminal;
  if (around_status) EraseLocked();
  options_.writer(stream, absl::StrCat(line, "\n"));
  if (around_status) DrawLocked();
}

}  // namespace cosession
