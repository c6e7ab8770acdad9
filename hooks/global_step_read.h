// ReadGlobalStep: the global step's current value, read by a run of its own
// on the raw session -- what TensorFlow's periodic hooks do in after_run
// (`run_context.session.run(global_step_tensor)`) to learn the step a
// trigger belongs to. Shared by the step counter, summary saver and
// profiler hooks. `session` must outlive the returned awaitable.
#ifndef COSESSION_HOOKS_GLOBAL_STEP_READ_H_
#define COSESSION_HOOKS_GLOBAL_STEP_READ_H_

#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "async/session.h"
#include "graph/graph.h"

namespace cosession {

inline boost::asio::awaitable<absl::StatusOr<int64_t>> ReadGlobalStep(
    Session* session, Output global_step) {
  RunArgs read;
  read.fetches.push_back(global_step);
  auto values = co_await session->Run(std::move(read), boost::asio::use_awaitable);
  if (!values.ok()) co_return values.status();
  co_return (*values)[0].scalar<int64_t>();
}

// The global step fetched by a hook (its first result).
inline absl::StatusOr<int64_t> FetchedGlobalStep(
    const std::vector<Tensor>& results, const std::string& hook) {
  if (results.empty() || results[0].dtype() != DType::kInt64 ||
      results[0].NumElements() != 1) {
    return absl::InternalError(
        absl::StrCat(hook, ": the global step was not fetched"));
  }
  return results[0].scalar<int64_t>();
}

}  // namespace cosession

#endif  // COSESSION_HOOKS_GLOBAL_STEP_READ_H_
