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
  auto values =
      co_await session->Run(std::move(read), boost::asio::use_awaitable);
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

// Where a hook's fetched global step stands relative to the step's own
// increment. The fetch and the train op run in the same step in no
// guaranteed order: TensorFlow's hooks assume the fetch reads the value
// before the increment ("stale", so the step's value is stale + 1), but an
// executor may read it after. Each time a hook reads the real value after a
// step it learns the difference, so its estimates are right in either order.
class GlobalStepEstimate {
 public:
  // Until a real read, assume TensorFlow's order: the fetch is
  // `steps_per_run` behind.
  explicit GlobalStepEstimate(int64_t steps_per_run = 1)
      : steps_per_run_(steps_per_run), lag_(steps_per_run) {}
  // The global step after this run, from the fetched value.
  int64_t After(int64_t fetched) const { return fetched + lag_; }
  // The global step before this run.
  int64_t Before(int64_t fetched) const {
    return fetched + lag_ - steps_per_run_;
  }
  void Learn(int64_t fetched, int64_t real_after) {
    lag_ = real_after - fetched;
  }

 private:
  int64_t steps_per_run_;
  int64_t lag_;
};

}  // namespace cosession

#endif  // COSESSION_HOOKS_GLOBAL_STEP_READ_H_
