#include "cosession/io/run_metadata_proto.h"

#include <algorithm>
#include <cstdint>
#include <set>

#include "absl/strings/str_cat.h"
#include "cosession/io/proto_wire.h"

namespace cosession {
namespace {

using proto_wire::kVarint;
using proto_wire::PutBytes;
using proto_wire::PutInt64;
using proto_wire::PutKey;
using proto_wire::PutVarint;

// proto3 omits a scalar field holding zero.
void PutNonZero(std::string& out, uint32_t field, int64_t value) {
  if (value != 0) PutInt64(out, field, value);
}

std::string EncodeNodeExecStats(const NodeExecStats& node,
                                std::chrono::nanoseconds steady_to_unix) {
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  using std::chrono::nanoseconds;
  const nanoseconds start_ns =
      duration_cast<nanoseconds>(node.start.time_since_epoch()) +
      steady_to_unix;
  const nanoseconds duration_ns = std::max(
      duration_cast<nanoseconds>(node.end - node.start), nanoseconds{0});
  const int64_t start_us = duration_cast<microseconds>(start_ns).count();
  const int64_t duration_us = duration_cast<microseconds>(duration_ns).count();

  std::string out;
  PutBytes(out, 1, node.node_name);
  PutNonZero(out, 2, start_us);
  PutNonZero(out, 4, duration_us);  // op_end_rel_micros
  PutNonZero(out, 5, duration_us);  // all_end_rel_micros
  const std::string& op = node.op.empty() ? node.node_name : node.op;
  PutBytes(out, 8, absl::StrCat(node.node_name, " = ", op, "()"));
  if (node.thread_id != 0) {
    PutKey(out, 10, kVarint);
    PutVarint(out, static_cast<uint32_t>(node.thread_id));
  }
  PutNonZero(out, 13, start_ns.count());
  PutNonZero(out, 15, duration_ns.count());  // op_end_rel_nanos
  PutNonZero(out, 16, duration_ns.count());  // all_end_rel_nanos
  return out;
}

std::string EncodeThreadName(uint32_t thread_id) {
  std::string entry;  // a map entry: key = 1, value = 2
  if (thread_id != 0) {
    PutKey(entry, 1, kVarint);
    PutVarint(entry, thread_id);
  }
  PutBytes(entry, 2, absl::StrCat("thread ", thread_id));
  return entry;
}

}  // namespace

std::string EncodeRunMetadata(const RunMetadata& metadata,
                              const RunMetadataEncoding& encoding) {
  const std::vector<NodeExecStats>& nodes = metadata.step_stats.node_stats;
  if (nodes.empty()) return {};
  const std::chrono::nanoseconds steady_to_unix =
      encoding.steady_to_unix.value_or(
          std::chrono::duration_cast<std::chrono::nanoseconds>(
              std::chrono::system_clock::now().time_since_epoch() -
              std::chrono::steady_clock::now().time_since_epoch()));
  std::string device;
  PutBytes(device, 1, encoding.device);
  std::set<uint32_t> threads;
  for (const NodeExecStats& node : nodes) {
    PutBytes(device, 2, EncodeNodeExecStats(node, steady_to_unix));
    threads.insert(static_cast<uint32_t>(node.thread_id));
  }
  for (uint32_t thread : threads) PutBytes(device, 3, EncodeThreadName(thread));
  std::string step_stats;
  PutBytes(step_stats, 1, device);
  std::string out;
  PutBytes(out, 1, step_stats);
  return out;
}

}  // namespace cosession
