// Small pieces the standard hooks share: turning a fetched scalar into a
// number, the name a hook prints for a tensor, and the event file a hook
// writes to. (The global step has a
// helper of its own: hooks/global_step.h.) Internal to hooks/.
#ifndef COSESSION_HOOKS_DETAIL_HOOK_UTIL_H_
#define COSESSION_HOOKS_DETAIL_HOOK_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cosession/graph/graph.h"
#include "cosession/graph/tensor.h"
#include "cosession/io/summary_writer.h"

namespace cosession::hooks_detail {

// The value of a one-element numeric tensor; InvalidArgument naming `what`
// when it has another element count or is a bool.
absl::StatusOr<double> ScalarAsDouble(const Tensor& value, std::string what);
absl::StatusOr<int64_t> ScalarAsInt64(const Tensor& value, std::string what);

// "loss" for "loss:0", "split:1" otherwise: the label hooks print.
std::string DisplayName(const Output& output);

// The writer a hook's events go to: `given` when set, else the one writer
// SummaryWriterCache shares for `logdir` (its error when it cannot be
// created).
absl::StatusOr<std::shared_ptr<SummaryWriter>> SummaryWriterFor(
    std::shared_ptr<SummaryWriter> given, const std::string& logdir);

}  // namespace cosession::hooks_detail

#endif  // COSESSION_HOOKS_DETAIL_HOOK_UTIL_H_
