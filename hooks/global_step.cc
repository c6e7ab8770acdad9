#include "cosession/hooks/global_step.h"

#include <boost/asio/use_awaitable.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cosession/graph/ops.h"

namespace cosession {

absl::Status GlobalStep::Find(Graph& graph, absl::string_view hook) {
  hook_ = std::string(hook);
  absl::StatusOr<Output> step = GetGlobalStep(graph);
  if (!step.ok()) {
    return absl::Status(step.status().code(),
                        absl::StrCat(hook,
                                     " needs a global step (create it with "
                                     "GetOrCreateGlobalStep): ",
                                     step.status().message()));
  }
  tensor_ = *step;
  unlearned_fetch_ = false;
  return absl::OkStatus();
}

void GlobalStep::AddFetch(SessionRunArgs& args) const {
  args.fetches.push_back(tensor_);
}

absl::StatusOr<int64_t> GlobalStep::TakeFetched(const SessionRunValues& values,
                                                size_t index) {
  if (index >= values.results.size() ||
      values.results[index].dtype() != DType::kInt64 ||
      values.results[index].NumElements() != 1) {
    return absl::InternalError(
        absl::StrCat(hook_, ": the global step was not fetched"));
  }
  fetched_ = values.results[index].scalar<int64_t>();
  unlearned_fetch_ = true;
  last_known_ = EstimatedAfter();
  return fetched_;
}

std::optional<int64_t> GlobalStep::ExpectedAfterNextStep() const {
  if (!last_known_.has_value()) return std::nullopt;
  return *last_known_ + steps_per_run_;
}

boost::asio::awaitable<absl::StatusOr<int64_t>> GlobalStep::Read(
    Session& session) {
  RunArgs read;
  read.fetches.push_back(tensor_);
  auto values =
      co_await session.Run(std::move(read), boost::asio::use_awaitable);
  if (!values.ok()) co_return values.status();
  const Tensor& value = values->at(0);
  if (value.dtype() != DType::kInt64 || value.NumElements() != 1) {
    co_return absl::InternalError(absl::StrCat(
        hook_, ": the global step is not one int64: ", value.DebugString(4)));
  }
  const int64_t now = value.scalar<int64_t>();
  Observe(now);
  co_return now;
}

void GlobalStep::Observe(int64_t now) {
  if (unlearned_fetch_) {
    lag_ = now - fetched_;
    unlearned_fetch_ = false;
  }
  last_known_ = now;
}

}  // namespace cosession
