// Console: the one writer of a program's terminal, so that a status line (a
// progress bar) and log lines never garble each other -- what tqdm's
// `write` and Keras's progress bar do.
//
//   Console& console = Console::Stdout();
//   console.SetStatus("[=====>    ] 450/1000 45%, loss=0.12");
//   console.Log("INFO loss = 0.12", Console::kStderr);
//   console.FinishStatus("[==========] 1000/1000 100%, loss=0.08");
//
// On a terminal the status line is drawn in place ("\r", the text, ESC[K),
// cut to the terminal's width minus one column so that it never wraps (the
// width is asked of the terminal at each draw, so a resized terminal is
// honoured at the next one; Redraw() draws at once, e.g. from a SIGWINCH
// handler on the program's event loop). A log line first clears the status
// line, is printed on a line of its own, and the status is drawn again
// below it. FinishStatus prints the last status as a permanent line and
// removes the status. Off a terminal (a file, a pipe, CI) every SetStatus
// prints its text as a line of its own, and log lines are plain lines.
//
// The status goes to standard output; a log line to the stream it names.
// Both are written with write(2), so nothing waits in a stdio buffer; code
// that prints to stdout or stderr by other means while a status line is
// shown garbles it: print through Log.
//
// Thread safety: thread-safe; a line is written whole.
#ifndef COSESSION_IO_CONSOLE_H_
#define COSESSION_IO_CONSOLE_H_

#include <functional>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"

namespace cosession {

class Console {
 public:
  enum Stream { kStdout = 1, kStderr = 2 };
  // Writes bytes to a stream.
  using Writer = std::function<void(Stream stream, absl::string_view bytes)>;

  struct Options {
    // Default: write(2) to file descriptors 1 and 2.
    Writer writer{};
    // Whether the status line is drawn in place (stdout is a terminal).
    bool status_on_terminal = false;
    // Whether a log line on that stream shares the terminal of the status
    // line (so it must clear it first).
    bool stdout_on_terminal = false;
    bool stderr_on_terminal = false;
    // The terminal's width in columns; default: asked of stdout's terminal
    // (TIOCGWINSZ), 80 when it does not say.
    std::function<int()> width{};
  };

  explicit Console(Options options);
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  // The process's console over stdout and stderr (isatty decides the
  // modes). Never destroyed.
  static Console& Stdout();

  // Shows `text` as the status line (one line; a newline in it is cut).
  void SetStatus(absl::string_view text);
  // Prints `text` as the last status, a permanent line, and removes the
  // status line.
  void FinishStatus(absl::string_view text);
  // Removes the status line without printing anything.
  void ClearStatus();
  // Draws the status line again (after a resize).
  void Redraw();
  // Prints `line` (a newline is added) on `stream`, above the status line.
  void Log(absl::string_view line, Stream stream = kStderr);

  bool status_on_terminal() const { return options_.status_on_terminal; }
  // The width a status line may take: the terminal's minus one column.
  int StatusWidth() const;

 private:
  void DrawLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  std::mutex mu_;
  std::string status_ ABSL_GUARDED_BY(mu_);
  bool drawn_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cosession

#endif  // COSESSION_IO_CONSOLE_H_
