#include "cosession/training/dataset_hook.h"

#include <boost/asio/use_awaitable.hpp>

#include "absl/strings/str_cat.h"

namespace cosession {

absl::StatusOr<std::shared_ptr<DatasetHook>> DatasetHook::Create(
    DatasetHookOptions options) {
  if (absl::Status s = DatasetOfGetNext(options.get_next).status(); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DatasetHook: get_next: ", s.message()));
  }
  if (options.start_at_batch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DatasetHook: start_at_batch must not be negative, got ",
                     options.start_at_batch));
  }
  return std::shared_ptr<DatasetHook>(new DatasetHook(std::move(options)));
}

absl::Status DatasetHook::Begin(Graph& graph) {
  if (&options_.get_next.node()->graph() != &graph) {
    return absl::InvalidArgumentError(
        absl::StrCat("DatasetHook: get_next '", options_.get_next.name(),
                     "' belongs to another graph"));
  }
  if (!options_.resume_from_global_step || options_.resume_from_checkpoint) {
    return absl::OkStatus();
  }
  return step_.Find(graph, "DatasetHook");
}

boost::asio::awaitable<absl::Status> DatasetHook::AfterCreateSession(
    Session& session, Coordinator& coordinator) {
  int64_t start = options_.start_at_batch;
  absl::StatusOr<Dataset> dataset = DatasetOfGetNext(options_.get_next);
  if (!dataset.ok()) co_return dataset.status();
  const bool replayable = dataset->deterministic();
  if (!replayable) {
    start = 0;
  } else if (options_.resume_from_checkpoint) {
    absl::StatusOr<Output> position = IteratorPosition(options_.get_next);
    if (!position.ok()) co_return position.status();
    RunArgs read{.fetches = {*position}};
    auto value = co_await session.Run(read, boost::asio::use_awaitable);
    if (!value.ok()) co_return value.status();
    start = (*value)[0].scalar<int64_t>();
  } else if (options_.resume_from_global_step) {
    if (!step_.found()) {
      co_return absl::FailedPreconditionError(
          "DatasetHook: AfterCreateSession before Begin");
    }
    absl::StatusOr<int64_t> step = co_await step_.Read(session);
    if (!step.ok()) co_return step.status();
    start = *step;
  }
  absl::Status started =
      StartDatasetIterator(session, coordinator, options_.get_next, start);
  if (started.ok()) last_start_batch_ = start;
  co_return started;
}

}  // namespace cosession
