#include "hooks/log_sink.h"

#include <cstdio>

namespace cosession {

LogSink StderrLogSink() {
  return [](std::string line) {
    line.push_back('\n');
    std::fwrite(line.data(), 1, line.size(), stderr);
  };
}

}  // namespace cosession
