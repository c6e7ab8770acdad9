// Small pieces the standard hooks share: reading the global step through a
// session, turning a fetched scalar into a number, resolving the global step
// in Begin with an error that names the hook. Internal to hooks/.
#ifndef COSESSION_HOOKS_DETAIL_HOOK_UTIL_H_
#define COSESSION_HOOKS_DETAIL_HOOK_UTIL_H_

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "async/session.h"
#include "graph/graph.h"
#include "graph/tensor.h"

namespace cosession::hooks_detail {

// GetGlobalStep(graph), its error prefixed with "<hook> needs a global step
// (create it with GetOrCreateGlobalStep): ". Keeps the error's code.
absl::StatusOr<Output> FindGlobalStepFor(Graph& graph, std::string hook_name);

// The value of a one-element numeric tensor; InvalidArgument naming `what`
// when it has another element count or is a bool.
absl::StatusOr<double> ScalarAsDouble(const Tensor& value, std::string what);
absl::StatusOr<int64_t> ScalarAsInt64(const Tensor& value, std::string what);

// Runs `fetch` alone in `session` and returns its int64 value. Honours the
// awaiting coroutine's cancellation (the session's Run does).
boost::asio::awaitable<absl::StatusOr<int64_t>> ReadInt64(Session& session,
                                                          Output fetch);

// "loss" for "loss:0", "split:1" otherwise: the label hooks print.
std::string DisplayName(const Output& output);

}  // namespace cosession::hooks_detail

#endif  // COSESSION_HOOKS_DETAIL_HOOK_UTIL_H_
