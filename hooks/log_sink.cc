#include "cosession/hooks/log_sink.h"

#include "cosession/io/console.h"

namespace cosession {

LogSink StderrLogSink() {
  return
      [](std::string line) { Console::Stdout().Log(line, Console::kStderr); };
}

}  // namespace cosession
