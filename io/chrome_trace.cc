#include "cosession/io/chrome_trace.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"

namespace cosession {
namespace {

constexpr int kPid = 0;

double Microseconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

absl::Status WriteError(int error, const std::string& what) {
  std::string message = absl::StrCat(what, ": ", std::strerror(error));
  if (error == ENOSPC || error == EDQUOT) {
    return absl::ResourceExhaustedError(message);
  }
  if (error == EACCES || error == EPERM) {
    return absl::PermissionDeniedError(message);
  }
  if (error == ENOENT) return absl::NotFoundError(message);
  return absl::InternalError(message);
}

}  // namespace

nlohmann::json ChromeTraceFromRunMetadata(const RunMetadata& metadata,
                                          const ChromeTraceOptions& options) {
  std::vector<const NodeExecStats*> nodes;
  nodes.reserve(metadata.step_stats.node_stats.size());
  for (const NodeExecStats& node : metadata.step_stats.node_stats) {
    nodes.push_back(&node);
  }
  std::stable_sort(nodes.begin(), nodes.end(),
                   [](const NodeExecStats* a, const NodeExecStats* b) {
                     return a->start < b->start;
                   });

  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", kPid},
                    {"args", {{"name", options.process_name}}}});
  std::set<uint64_t> threads;
  for (const NodeExecStats* node : nodes) threads.insert(node->thread_id);
  for (uint64_t tid : threads) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", kPid},
                      {"tid", tid},
                      {"args", {{"name", absl::StrCat("thread ", tid)}}}});
  }
  if (!nodes.empty()) {
    const auto origin = nodes.front()->start;
    for (const NodeExecStats* node : nodes) {
      const auto duration = std::max(node->end - node->start,
                                     std::chrono::steady_clock::duration{0});
      const std::string& name = node->op.empty() ? node->node_name : node->op;
      events.push_back(
          {{"name", name},
           {"cat", "Op"},
           {"ph", "X"},
           {"pid", kPid},
           {"tid", node->thread_id},
           {"ts", Microseconds(node->start - origin)},
           {"dur", Microseconds(duration)},
           {"args", {{"name", node->node_name}, {"op", node->op}}}});
    }
  }
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ns"}};
}

absl::Status WriteChromeTrace(const RunMetadata& metadata,
                              const std::string& path,
                              const ChromeTraceOptions& options) {
  std::string text;
  try {
    text = ChromeTraceFromRunMetadata(metadata, options).dump();
  } catch (const std::exception& e) {  // invalid UTF-8 in a node name
    return absl::InvalidArgumentError(
        absl::StrCat("trace for '", path, "': ", e.what()));
  }
  static std::atomic<uint64_t> temp_counter{0};
  const std::string temp =
      absl::StrCat(path, ".tmp.", getpid(), ".", temp_counter.fetch_add(1));
  const int fd =
      open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return WriteError(errno, absl::StrCat("creating '", temp, "'"));
  const char* data = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = write(fd, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : EIO;
      close(fd);
      unlink(temp.c_str());
      return WriteError(error, absl::StrCat("writing '", temp, "'"));
    }
    data += n;
    left -= static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    const int error = errno;
    close(fd);
    unlink(temp.c_str());
    return WriteError(error, absl::StrCat("syncing '", temp, "'"));
  }
  if (close(fd) != 0) {
    const int error = errno;
    unlink(temp.c_str());
    return WriteError(error, absl::StrCat("closing '", temp, "'"));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    unlink(temp.c_str());
    return WriteError(error,
                      absl::StrCat("renaming '", temp, "' to '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace cosession
