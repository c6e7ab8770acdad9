// LogSink: where hooks that log (LoggingTensorHook, NanTensorHook,
// GlobalStepWaiterHook, EarlyStoppingHook) send their lines, so a program can
// route them to its own logger and tests can capture them.
//
// A sink receives one complete line without its trailing newline. It is
// called from the session's step coroutine (any thread of the executor the
// step runs on); a sink shared by several sessions must synchronise itself.
// An empty sink means StderrLogSink().
#ifndef COSESSION_HOOKS_LOG_SINK_H_
#define COSESSION_HOOKS_LOG_SINK_H_

#include <functional>
#include <string>

namespace cosession {

using LogSink = std::function<void(std::string line)>;

// Writes "<line>\n" to stderr through the program's Console
// (io/console.h): above a progress bar, never through it, and whole (lines
// of concurrent sessions do not interleave within a line).
LogSink StderrLogSink();

// `sink` if set, else StderrLogSink().
inline LogSink SinkOrStderr(LogSink sink) {
  return sink ? std::move(sink) : StderrLogSink();
}

}  // namespace cosession

#endif  // COSESSION_HOOKS_LOG_SINK_H_
